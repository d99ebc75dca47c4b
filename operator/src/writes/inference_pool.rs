//! A served job's `InferencePool` written (`serve.inferencePool`): server-side applied with the
//! operator's field manager when it differs from what this process applied last (no watch: a
//! pool someone edits is put back at the job's next change or the operator's next start). A
//! cluster without the Gateway API Inference Extension's CRD is told once per generation of
//! the job, by a Warning event, and the replicas serve on.
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use tracing::{info, warn};
use vramfit_api::event_reasons::EventReason;
use vramfit_api::inference_pool::{CRD_NAME, InferencePool};
use vramfit_api::{InferenceJob, ServeSpec};

use crate::context::Context;
use crate::events::JobEvent;
use crate::replicas::inference_pool::desired_pool;

/// Applies `job`'s pool where it asks for one and it changed.
pub async fn apply(job: &InferenceJob, serve: &ServeSpec, ctx: &Context) {
    let (Some(request), Some(uid)) = (&serve.inference_pool, job.metadata.uid.clone()) else {
        return;
    };
    let pool = match desired_pool(job, serve, request) {
        Ok(pool) => pool,
        Err(error) => {
            warn!(%error, "the InferencePool could not be built");
            return;
        }
    };
    let wanted = serde_json::to_string(&pool).unwrap_or_default();
    let applied = |value: String| {
        ctx.serving
            .pools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(uid.clone(), value)
    };
    let last = ctx
        .serving
        .pools
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&uid)
        .cloned();
    // A cluster without the CRD is asked again when the job changes (or after a restart).
    let missing = format!("missing at generation {:?}", job.metadata.generation);
    if last.as_deref() == Some(wanted.as_str()) || last.as_deref() == Some(missing.as_str()) {
        return;
    }
    let namespace = job.namespace().unwrap_or_default();
    let pools: Api<InferencePool> = Api::namespaced(ctx.client.clone(), &namespace);
    let params = PatchParams::apply(crate::FIELD_MANAGER).force();
    match pools
        .patch(&job.name_any(), &params, &Patch::Apply(&pool))
        .await
    {
        Ok(_) => {
            info!(pool = %job.name_any(), "applied the InferencePool");
            applied(wanted);
        }
        Err(kube::Error::Api(status)) if status.code == 404 => {
            // Told once per generation of the job.
            let note = format!(
                "serve.inferencePool: this cluster has no {CRD_NAME} (the Gateway API Inference Extension's CRD); the replicas serve through the Service alone"
            );
            ctx.recorder
                .publish(
                    &job.object_ref(&()),
                    &[JobEvent::warning(
                        EventReason::InferencePoolUnavailable,
                        note,
                    )],
                )
                .await;
            applied(missing);
        }
        Err(error) => {
            warn!(%error, "applying the InferencePool failed; tried again at the job's next reconcile")
        }
    }
}
