//! Served jobs (`spec.serve`): a model server behind one Service, each replica a pod planned
//! for the class it lands on (docs/serving.md); [`crate::dispatch`] hands a served job whose
//! replicas are one pod each to [`reconcile_served`]. The replicas' decisions are
//! [`crate::replicas`] (pure), shared with served groups ([`crate::group`]).
//!
//! | step | module | touches the API |
//! |---|---|---|
//! | observe: the job's pods, Service, PDB, reservations, room | [`crate::observe::served`] | no (caches) |
//! | decide: the replicas' pods, the Service and PDB, status, events | [`crate::replicas`] | no (pure) |
//! | apply: pod deletions and creations, Service, PDB (created, applied only onto the job's own) | [`crate::writes::served`] | yes |
//! | update status: the shared step (status patch, events, metrics) | [`crate::writes::status`] | yes |
//!
//! The Service and PDB caches are [`crate::serving_state`], filled by the controller's
//! watches ([`crate::controller::served_watches`]).
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use vramfit_api::checkpoint::ResolvedModel;
use vramfit_api::{InferenceJob, ServeSpec};

use crate::attempts::Decision;
use crate::context::Context;
use crate::error::Error;
use crate::observe::served as observe;
use crate::replicas::summary;
use crate::writes::served as apply;
use crate::writes::status as update_status;

#[cfg(test)]
pub(crate) mod tests;

/// The reconcile of a served job: the steps in order.
/// `job` comes with the numbers `model.huggingFace` leaves unset filled in, and `resolved` is
/// what was read (recorded in status as for a batch job).
pub async fn reconcile_served(
    job: &InferenceJob,
    serve: &ServeSpec,
    ctx: &Context,
    resolved: Option<ResolvedModel>,
) -> Result<Action, Error> {
    let (decision, namespace) = {
        // Room is read and the chosen pods reserved under one lock, with no await between.
        let _placing = ctx.reservations.hold_placement();
        // Caches, no writes.
        let snapshot = observe::served_snapshot(job, serve, ctx)?;
        // Pure.
        let decision = snapshot.decide(Time(Timestamp::now()))?;
        // In memory: finished pods release their GPUs; new pods count against their class.
        for pod in snapshot.base.settled_pods() {
            ctx.reservations.forget(snapshot.base.namespace(), &pod);
        }
        apply::reserve(job, snapshot.base.namespace(), &decision, ctx);
        (decision, snapshot.base.namespace().to_string())
    };
    // Woken when GPUs free up, and when a node's cache changes (a model it downloads is
    // Ready): a replica waiting for its model is placed within a second of it, not at its
    // next look.
    ctx.serving.waiting().set(
        ObjectRef::new(&job.name_any()).within(&namespace),
        decision.waits_for_room || decision.status.replicas_waiting_for_model.is_some(),
    );
    // API: pods (deletions first), then the Service and the PDB.
    if let Err(error) = apply::write_pods(job, &decision, ctx).await {
        update_status::report_pod_not_written(job, ctx, &error).await;
        return Err(error.into());
    }
    let objects = apply::write_objects(job, &decision, ctx).await;
    let mut decision = decision;
    if let Err(error) = &objects {
        // The replicas exist: the status still says so, and why the Service is missing.
        let now = Time(Timestamp::now());
        let old = job.status.clone().unwrap_or_default();
        let generation = job.metadata.generation;
        match error {
            crate::error::ServingApplyError::NameTaken { object, name } => {
                summary::name_taken(&mut decision, &old, generation, &now, (*object, name));
            }
            _ => {
                summary::objects_refused(&mut decision, &old, generation, &now, &error.to_string())
            }
        }
    }
    // API: the status, then events and metrics (the batch step).
    for reason in &decision.restarts {
        ctx.metrics.serving().count_restart(reason);
    }
    if let Some(resolved) = resolved {
        let now = Time(Timestamp::now());
        crate::hub_models::record(
            &mut decision.status,
            resolved,
            job.metadata.generation,
            &now,
        );
    }
    let written = Decision {
        status: decision.status.clone(),
        delete_pod: None,
        apply_pod: None,
        create_pod: false,
        applied_plan: None,
        volumes: Vec::new(),
        events: decision.events.clone(),
        steps: decision.steps.clone(),
        bad_outputs: Vec::new(),
        results: Vec::new(),
        action: decision.action.clone(),
    };
    update_status::write(job, &written, ctx).await?;
    objects?;
    Ok(decision.action)
}
