//! The batch pipeline: a batch or fine-tuning job of one pod, one attempt at a time.
//!
//! | step | module | touches the API |
//! |---|---|---|
//! | observe: the job, its pods, reservations and room, from the caches | [`crate::observe`] | no (reads caches) |
//! | decide: the next status, the pod to create or delete, the events | [`crate::attempts`] | no (pure) |
//! | build: the attempt's pod (called by decide) | [`crate::pod::build`] | no (pure) |
//! | how a pod ended (called by decide) | [`crate::pod::outcome`] | no (pure) |
//! | apply: delete a replaced pod, create or apply the attempt's pod | [`crate::writes::pods`] | yes |
//! | update status: the status patch, events, metrics | [`crate::writes::status`] | yes |
//!
//! No duplicate pods: pod names are `<job>-<attempt>`, deterministic; the controller never
//! runs two reconciles of one job at once; a new attempt number is used only after the status
//! that ends the previous attempt is written (an attempt's outcome is recorded in the same
//! write that records the next attempt, or first on its own when the next cannot start); and
//! a pod that exists under the next attempt's name (created before a crash or a failed status
//! write) is adopted with the plan in its annotation rather than planned again.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use vramfit_api::InferenceJob;
use vramfit_api::checkpoint::ResolvedModel;

use crate::context::Context;
use crate::error::Error;
use crate::hub_models;
use crate::observe;
use crate::writes::{pods as apply, status as update_status};

#[cfg(test)]
pub(crate) mod tests;

/// The batch pipeline's steps in order. `original` is the job as stored (its status is what a
/// write is compared with); `job` has the numbers `model.huggingFace` leaves unset filled in,
/// and `resolved` is what was read.
pub async fn reconcile_batch(
    original: &InferenceJob,
    job: &InferenceJob,
    ctx: &Context,
    resolved: Option<ResolvedModel>,
) -> Result<Action, Error> {
    let mut decision = {
        // Room is read and the chosen pod reserved under one lock, with no await between: a
        // burst of reconciles cannot all take the same last free GPUs.
        let _placing = ctx.reservations.hold_placement();
        // Caches, no writes.
        let snapshot = observe::snapshot(job, ctx)?;
        #[cfg(any(test, feature = "fault-injection"))]
        crate::fault_injection::reconcile_checkpoint(&kube::ResourceExt::name_any(job));
        // Pure.
        let decision = snapshot.decide(Time(Timestamp::now()), &ctx.settings.requeues)?;
        // In memory: pods the GPU watch counts (or that finished) leave the reservation
        // ledger; the chosen pod counts against its class until a store shows it.
        apply::release_settled(&snapshot, ctx);
        apply::reserve(job, &decision, ctx);
        decision
    };
    crate::model_cache::wake_while_waiting(ctx, job, &decision.status);
    // API: delete a replaced pod, create or apply the attempt's pod.
    if let Err(error) = apply::write_pods(job, &decision, ctx).await {
        // API: tell the user in status and an event when the server refused the pod.
        update_status::report_pod_not_written(job, ctx, &error).await;
        // Retried with backoff by `error_policy`: quota may free up, a policy may change,
        // the pod of the same name may go.
        return Err(error.into());
    }
    if let Some(resolved) = resolved {
        let now = Time(Timestamp::now());
        hub_models::record(
            &mut decision.status,
            resolved,
            job.metadata.generation,
            &now,
        );
    }
    // API: the status (compared with the job as stored), then events and metrics.
    update_status::write(original, &decision, ctx).await?;
    Ok(decision.action)
}
