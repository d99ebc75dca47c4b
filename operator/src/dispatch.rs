//! Dispatch: one reconcile of an InferenceJob, handed to the pipeline its shape takes.
//!
//! | job | pipeline |
//! |---|---|
//! | `spec.serve`, replicas of one pod | [`crate::served`] |
//! | `spec.serve`, replicas that span nodes (`gpus.maxNodes` above 1, or groups left) | [`crate::group::served_reconcile::reconcile_served_group`] |
//! | a batch or fine-tuning job that spans nodes | [`crate::group::reconcile_group`] |
//! | a batch or fine-tuning job of one pod | [`crate::batch`] |
//!
//! A served job's autoscaler ([`crate::autoscale`]) runs before either served pipeline.
//! Before the hand-off, for every shape: a stale copy, a finished job or one being deleted needs
//! nothing; `model.huggingFace` numbers come from the resolver's cache; a served job's
//! `serve.adapters` from the fine-tuning jobs they name ([`crate::served_adapters`]). A panic in any pipeline
//! is contained to its job ([`contain_panics`]), and a failed reconcile is retried with a
//! per-job backoff ([`error_policy`]).
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::{error, instrument, warn};
use vramfit_api::InferenceJob;

use crate::context::Context;
use crate::error::Error;
use crate::hub_models::{self, HubStep};
use crate::observe;
use crate::served_adapters::AdapterStep;
use crate::stores::cached_job::CachedJob;
use crate::writes::status as update_status;

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
    crate::pod::outcome::trim_message(&text)
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
    // `serve.adapters`: each from the fine-tuning job it names (the job cache). A refused one
    // holds the job: its replicas are left serving the list last accepted.
    let adapted = match crate::served_adapters::prepare(job, &ctx.stores.jobs) {
        AdapterStep::None => None,
        AdapterStep::Ready { filled, changed } => {
            if changed {
                update_status::adapters_accepted(&filled, ctx).await;
            }
            Some(filled)
        }
        AdapterStep::Refused { reason, message } => {
            return update_status::hold_for_adapters(job, ctx, reason, message).await;
        }
    };
    let job: &InferenceJob = adapted.as_deref().unwrap_or(job);
    // A served job (`spec.serve`) has its own pipeline: replicas, Service, rolling updates;
    // its replicas are planned from the same filled numbers.
    if let Some(serve) = &job.spec.serve {
        // `serve.autoscaling`: one pass of the autoscaler for both served pipelines. A pass
        // that wrote the replicas leaves the rest to the job's next version.
        let scaling = match crate::autoscale::step(job, serve, ctx).await? {
            crate::autoscale::Step::Scaled => return Ok(Action::await_change()),
            crate::autoscale::Step::Report(report) => Some(report),
            crate::autoscale::Step::Off => None,
        };
        // Replicas that may span nodes: each replica a group of pods (`group/served.rs`);
        // also once `maxNodes` is back to 1 while groups remain (they roll onto groups of one).
        if crate::pod::runs_groups(job) {
            return crate::group::served_reconcile::reconcile_served_group(
                job, serve, ctx, resolved, scaling,
            )
            .await;
        }
        return crate::served::reconcile_served(job, serve, ctx, resolved, scaling).await;
    }
    // A job that may span nodes runs each attempt as a group of pods (`group/`): the same
    // attempts, planned and placed as here, each one pod per node with a headless Service.
    if crate::pod::runs_groups(job) {
        return crate::group::reconcile_group(job, ctx, resolved).await;
    }
    crate::batch::reconcile_batch(original, job, ctx, resolved).await
}
