//! One reconcile of an InferenceJob, as a pipeline of steps, each in its own module:
//!
//! | step | module | touches the API |
//! |---|---|---|
//! | observe: the job, its pods, reservations and room, from the caches | [`observe`] | no (reads caches) |
//! | decide: the next status, the pod to create or delete, the events | [`decide`] | no (pure) |
//! | build: the attempt's pod (called by decide) | [`build`] | no (pure) |
//! | how a pod ended (called by decide) | [`pod_outcome`] | no (pure) |
//! | apply: delete a replaced pod, create or apply the attempt's pod | [`apply`] | yes |
//! | update status: the status patch, events, metrics, the malformed-object report | [`update_status`] | yes |
//!
//! No duplicate pods: pod names are `<job>-<attempt>`, deterministic; the controller never
//! runs two reconciles of one job at once; a new attempt number is used only after the status
//! that ends the previous attempt is written (an attempt's outcome is recorded in the same
//! write that records the next attempt, or first on its own when the next cannot start); and
//! a pod that exists under the next attempt's name (created before a crash or a failed status
//! write) is adopted with the plan in its annotation rather than planned again.
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::{error, instrument, warn};
use vramfit_api::InferenceJob;

use crate::context::Context;
use crate::error::Error;
use crate::hub_models::{self, HubStep};
use crate::stores::cached_job::CachedJob;

pub mod apply;
pub mod build;
pub mod decide;
pub mod observe;
pub mod pod_outcome;
pub mod update_status;

#[cfg(test)]
pub(crate) mod tests;

/// Reconciles one job. Invalid specs are reported in status and wait for a change; API
/// errors return `Err` and are retried by [`error_policy`]. A panic is contained to this job
/// ([`contain_panics`]).
#[instrument(skip(job, ctx), fields(job = %job_key(&job)))]
pub async fn reconcile(job: Arc<CachedJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    contain_panics(job, ctx, reconcile_uncontained).await
}

/// Runs `reconcile_once` on `job`, catching a panic at this boundary: one job's bug (a
/// planner that overflows on its numbers, say) must not end the controller, which would stop
/// every other job. A panic is logged, reported in that job's status (`ReconcileFailed=True`,
/// reason `InternalError`), a Warning event and `vramfit_reconcile_errors_total{kind="panic"}`,
/// and returned as [`Error::Panicked`]: [`error_policy`] retries the job with its backoff.
pub async fn contain_panics<F, Fut>(
    job: Arc<CachedJob>,
    ctx: Arc<Context>,
    reconcile_once: F,
) -> Result<Action, Error>
where
    F: FnOnce(Arc<CachedJob>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, Error>>,
{
    let started = Instant::now();
    let key = job_key(&job);
    let once = {
        let (job, ctx) = (job.clone(), ctx.clone());
        // Nothing the reconcile shares is left half-written by a panic: the locks it takes
        // recover from poisoning and guard maps that stay consistent.
        AssertUnwindSafe(async move { reconcile_once(job, ctx).await })
    };
    let result = match once.catch_unwind().await {
        Ok(result) => result,
        Err(payload) => {
            let message = panic_message(payload.as_ref());
            error!(job = %key, panic = %message, "the reconcile panicked; only this job is affected, it is retried with backoff");
            update_status::report_internal_error(&job, &ctx, &message).await;
            Err(Error::Panicked(message))
        }
    };
    ctx.metrics.observe_reconcile(started.elapsed());
    match &result {
        Ok(_) => ctx.clear_failures(&key),
        Err(error) => ctx.metrics.count_error(error.metric_label()),
    }
    result
}

/// The reconcile whose panics [`contain_panics`] catches.
async fn reconcile_uncontained(job: Arc<CachedJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    // The cache keeps jobs compact; this reconcile works on the parsed job.
    match job.job() {
        Ok(job) => reconcile_job(&job, &ctx).await,
        Err(invalid) => update_status::report_malformed(&invalid, &ctx).await,
    }
}

/// The text of a panic's payload (what `panic!` was given), one bounded line.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    pod_outcome::trim_message(&text)
}

/// Retries a failed reconcile with an exponential backoff per job (1 s, 2 s, 4 s, … 5 min).
pub fn error_policy(job: Arc<CachedJob>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = job_key(&job);
    let failures = ctx.record_failure(&key);
    let delay = ctx.backoff(failures);
    warn!(job = %key, %error, failures, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// `namespace/name` of a job.
pub fn job_key(job: &CachedJob) -> String {
    format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any())
}

/// The reconcile of a job that deserializes: the steps in order.
pub async fn reconcile_job(job: &InferenceJob, ctx: &Context) -> Result<Action, Error> {
    // Caches: a stale copy of the job, a finished job or one being deleted needs nothing.
    if let Some(action) = observe::nothing_to_do(job, ctx) {
        return Ok(action);
    }
    // `model.huggingFace`: the numbers come from the Hub resolver's cache, never the network.
    let (original, filled, resolved) = match hub_models::prepare(job, &ctx.hub) {
        HubStep::NotNamed => (job, None, None),
        HubStep::Ready(filled, resolved) => (job, Some(filled), Some(resolved)),
        HubStep::Wait {
            reason,
            message,
            retry_in,
        } => return update_status::wait_for_model(job, ctx, reason, message, retry_in).await,
    };
    let job: &InferenceJob = filled.as_deref().unwrap_or(original);
    // A served job (`spec.serve`) has its own pipeline: replicas, Service, rolling updates;
    // its replicas are planned from the same filled numbers.
    if let Some(serve) = &job.spec.serve {
        // Replicas that may span nodes: each replica a group of pods (`group/served.rs`);
        // also once `maxNodes` is back to 1 while groups remain (they roll onto groups of one).
        if crate::group::runs_groups(job) {
            return crate::group::served_reconcile::reconcile_served_group(
                job, serve, ctx, resolved,
            )
            .await;
        }
        return crate::serving::reconcile_served(job, serve, ctx, resolved).await;
    }
    // A job that may span nodes runs each attempt as a group of pods (`group/`): the same
    // attempts, planned and placed as here, each one pod per node with a headless Service.
    if crate::group::runs_groups(job) {
        return crate::group::reconcile_group(job, ctx, resolved).await;
    }
    let mut decision = {
        // Room is read and the chosen pod reserved under one lock, with no await between: a
        // burst of reconciles cannot all take the same last free GPUs.
        let _placing = ctx.reservations.hold_placement();
        // Caches, no writes.
        let snapshot = observe::snapshot(job, ctx)?;
        #[cfg(any(test, feature = "fault-injection"))]
        crate::fault_injection::reconcile_checkpoint(&job.name_any());
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
