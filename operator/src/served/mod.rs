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
use kube::runtime::controller::Action;
use vramfit_api::checkpoint::ResolvedModel;
use vramfit_api::{InferenceJob, ServeSpec};

use crate::autoscaling::Report;
use crate::context::Context;
use crate::error::Error;
use crate::observe::served as observe;
use crate::writes::served as apply;
use crate::writes::status as update_status;

#[cfg(test)]
pub(crate) mod tests;

/// The reconcile of a served job: the steps in order.
/// `job` comes with the numbers `model.huggingFace` leaves unset filled in, and `resolved` is
/// what was read (recorded in status as for a batch job); `scaling` is the autoscaler's pass
/// (`serve.autoscaling`), recorded with the status.
pub async fn reconcile_served(
    job: &InferenceJob,
    serve: &ServeSpec,
    ctx: &Context,
    resolved: Option<ResolvedModel>,
    scaling: Option<Report>,
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
    apply::mark_waiting(job, &namespace, &decision, ctx);
    // API: pods (deletions first), then the Service and the PDB.
    if let Err(error) = apply::write_pods(job, &decision, ctx).await {
        update_status::report_pod_not_written(job, ctx, &error).await;
        return Err(error.into());
    }
    // API: the Service and the PDB, then the status, events and metrics.
    apply::write_objects_and_status(job, decision, resolved, scaling, ctx).await
}
