//! Update status (API): the job's status (server-side apply on the `status` subresource,
//! field manager `vramfit-operator`, forced, with `apiVersion`, `kind` and the whole status, so
//! fields vramfit no longer sets are removed; only when it differs from the job's), then the
//! decision's events and metrics; the report of a pod the API server refused; the report of
//! a job that does not deserialize.
pub use crate::error::StatusError;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, warn};
use vramfit_api::{InferenceJob, InferenceJobStatus, Phase};

use super::pods::ApplyError;
use crate::attempts::Decision;
use crate::context::Context;
use crate::error::Error;
use crate::events::JobEvent;
use crate::observe::ObserveError;
use crate::stores::cached_job::CachedJob;
use vramfit_api::conditions::{self, ConditionType, ConditionsUpdate, Reason};
use vramfit_api::event_reasons::EventReason;

/// Writes a decision's status (when it changed), then counts its metrics and publishes its
/// events.
pub async fn write(
    job: &InferenceJob,
    decision: &Decision,
    ctx: &Context,
) -> Result<(), StatusError> {
    let namespace = job.namespace().unwrap_or_default();
    let name = job.name_any();
    if decision.status_changed(job) {
        let written = patch_status(ctx, &namespace, &name, &decision.status).await?;
        // Only a write that moved the job to a new resourceVersion can leave the cache behind.
        if let (Some(uid), Some(from), Some(to)) =
            (&job.metadata.uid, &job.metadata.resource_version, &written)
            && to != from
        {
            ctx.remember_status_write(uid, from);
        }
        debug!(phase = ?decision.status.phase, "wrote the status");
    }

    if let Some(plan) = &decision.status.plan {
        ctx.metrics.expect_results(
            &plan.node_class,
            plan.hourly_price_cents > 0,
            plan.tuning.is_some(),
        );
    }
    for step in &decision.steps {
        ctx.metrics.count_fallback(step);
    }
    if let Some(tuning) = decision
        .applied_plan
        .as_ref()
        .filter(|_| decision.create_pod)
        .and_then(|plan| Some((plan, plan.tuning.as_ref()?)))
    {
        ctx.metrics
            .count_tuning_pod(&tuning.0.node_class, tuning.1.method.as_str());
    }
    for (class, dtype) in &decision.bad_outputs {
        ctx.metrics.count_bad_output(class, dtype);
    }
    for (class, result, price) in &decision.results {
        // A fine-tuning run's items are tokens: counted apart from inference items.
        if result.steps.is_some() {
            ctx.metrics
                .count_training(class, result.items, result.seconds, *price);
        } else {
            ctx.metrics
                .count_result(class, result.items, result.seconds, *price);
        }
    }
    if !decision.events.is_empty() {
        ctx.recorder
            .publish(&job.object_ref(&()), &decision.events)
            .await;
    }
    Ok(())
}

/// A job whose `model.huggingFace` is not read yet (or failed): `ModelResolved=False` with the
/// reason in status (written only when it changed), and a look again after `retry_in` (a job
/// whose repository id is invalid waits for a change).
pub async fn wait_for_model(
    job: &InferenceJob,
    ctx: &Context,
    reason: Reason,
    message: String,
    retry_in: Option<std::time::Duration>,
) -> Result<Action, Error> {
    let now = Time(Timestamp::now());
    let status = crate::hub_models::wait(job, reason, message, &now);
    if job.status.as_ref() != Some(&status) {
        let namespace = job.namespace().unwrap_or_default();
        patch_status(ctx, &namespace, &job.name_any(), &status).await?;
    }
    Ok(retry_in.map_or_else(Action::await_change, Action::requeue))
}

/// A served job held for a refused adapter (`serve.adapters`): `AdaptersReady=False` with the
/// reason (written, with a Warning event, only when it changed), no pod touched, and a look
/// again after [`crate::served_adapters::RECHECK`].
pub async fn hold_for_adapters(
    job: &InferenceJob,
    ctx: &Context,
    reason: Reason,
    message: String,
) -> Result<Action, Error> {
    let now = Time(Timestamp::now());
    let status = crate::served_adapters::hold(job, reason, message.clone(), &now);
    if job.status.as_ref() != Some(&status) {
        let namespace = job.namespace().unwrap_or_default();
        patch_status(ctx, &namespace, &job.name_any(), &status).await?;
        let was = job
            .status
            .as_ref()
            .and_then(|s| conditions::get(&s.conditions, ConditionType::AdaptersReady))
            .map(|c| (c.status.clone(), c.message.clone()));
        if was != Some(("False".to_string(), message.clone())) {
            let event = JobEvent::warning(EventReason::AdapterRefused, message);
            ctx.recorder.publish(&job.object_ref(&()), &[event]).await;
        }
    }
    Ok(Action::requeue(crate::served_adapters::RECHECK))
}

/// The event of a served job whose adapters were accepted, or changed: the replicas roll onto
/// them.
pub async fn adapters_accepted(job: &InferenceJob, ctx: &Context) {
    let accepted = job.status.as_ref().map_or(&[][..], |s| &s.adapters[..]);
    let note = format!(
        "{}; replicas roll onto them",
        crate::served_adapters::accepted_message(accepted)
    );
    let event = JobEvent::normal(EventReason::AdaptersAccepted, note);
    ctx.recorder.publish(&job.object_ref(&()), &[event]).await;
}

/// Tells the user why the attempt's pod was not written, when the reason is theirs to act on:
/// the API server refused it for good, or its name is taken by a pod the job does not own.
pub async fn report_pod_not_written(job: &InferenceJob, ctx: &Context, error: &ApplyError) {
    let rejection = match error {
        ApplyError::PodNameTaken { pod } => Some((
            pod,
            Reason::PodNameTaken,
            EventReason::PodNameTaken,
            format!(
                "pod {pod} exists but this job does not own it (an earlier job of the same name, or not vramfit's); waiting for it to be deleted"
            ),
        )),
        ApplyError::PodApply { pod, .. } => error.pod_rejection().map(|why| {
            (
                pod,
                Reason::PodRejected,
                EventReason::PodRejected,
                format!("the API server refused pod {pod}: {why}"),
            )
        }),
        ApplyError::PodDelete { .. } => None,
        // A cached model's claim or volume (`--model-cache`): the replica's pod is not created.
        ApplyError::ModelClaimTaken { claim } => Some((
            claim,
            Reason::PodRejected,
            EventReason::PodRejected,
            format!(
                "PersistentVolumeClaim {claim} exists but this job does not own it; the pod that would mount the cached model through it is not created"
            ),
        )),
        ApplyError::ModelVolume {
            object,
            source: kube::Error::Api(status),
        } if !error.is_transient() => Some((
            object,
            Reason::PodRejected,
            EventReason::PodRejected,
            format!(
                "the API server refused {object} ({} {}); the pod that would mount the cached model through it is not created",
                status.message, status.code
            ),
        )),
        ApplyError::ModelVolume { .. } => None,
    };
    if let Some((pod, condition_reason, event_reason, message)) = rejection {
        report_rejection(job, ctx, pod, (condition_reason, event_reason), message).await;
    }
}

/// Tells the user, in the job's status (condition Scheduled=False) and a Warning event with
/// `reasons` (condition's, event's), why its pod could not be written; the status is
/// otherwise left as it was (no attempt is recorded for a pod that never existed).
async fn report_rejection(
    job: &InferenceJob,
    ctx: &Context,
    pod: &str,
    (reason, event_reason): (Reason, EventReason),
    message: String,
) {
    let (Some(namespace), name) = (job.namespace(), job.name_any()) else {
        return;
    };
    warn!(job = %format!("{namespace}/{name}"), %message, "pod not written");
    let mut status = job.status.clone().unwrap_or_default();
    status.phase.get_or_insert(Phase::Pending);
    let now = Time(Timestamp::now());
    let generation = job.metadata.generation;
    ConditionsUpdate::new(&mut status.conditions, generation, &now).set(
        ConditionType::Scheduled,
        false,
        reason,
        message.clone(),
    );
    if job.status.as_ref() != Some(&status)
        && let Err(error) = patch_status(ctx, &namespace, &name, &status).await
    {
        warn!(%error, "could not report the rejected pod in status");
    }
    let event = JobEvent::warning(event_reason, message).about(pod);
    ctx.recorder.publish(&job.object_ref(&()), &[event]).await;
}

/// Tells the user that the operator failed on the job (its reconcile panicked: a bug):
/// `ReconcileFailed=True` with reason `InternalError` and the error in status (the rest of the
/// status as it was), and a Warning event. Best effort: a failed write is logged; the job is
/// retried with backoff anyway.
pub async fn report_internal_error(job: &CachedJob, ctx: &Context, error: &str) {
    let message = format!(
        "the operator failed on this job ({error}); it is retried with backoff, other jobs are not affected"
    );
    match job.job() {
        Ok(job) => {
            let (Some(namespace), name) = (job.namespace(), job.name_any()) else {
                return;
            };
            let mut status = job.status.clone().unwrap_or_default();
            status.phase.get_or_insert(Phase::Pending);
            let now = Time(Timestamp::now());
            ConditionsUpdate::new(&mut status.conditions, job.metadata.generation, &now).set(
                ConditionType::ReconcileFailed,
                true,
                Reason::InternalError,
                message.clone(),
            );
            conditions::sort(&mut status.conditions);
            if job.status.as_ref() != Some(&status)
                && let Err(error) = patch_status(ctx, &namespace, &name, &status).await
            {
                warn!(%error, "could not report the failed reconcile in status");
            }
            let event = JobEvent::warning(EventReason::ReconcileFailed, message);
            ctx.recorder.publish(&job.object_ref(&()), &[event]).await;
        }
        // A job that does not parse has no status to keep: only the event.
        Err(invalid) => {
            let reference = malformed_reference(&invalid.metadata);
            let event = JobEvent::warning(EventReason::ReconcileFailed, message);
            ctx.recorder.publish(&reference, &[event]).await;
        }
    }
}

/// Server-side applies the whole status of a job; returns the job's new resourceVersion.
pub async fn patch_status(
    ctx: &Context,
    namespace: &str,
    name: &str,
    status: &InferenceJobStatus,
) -> Result<Option<String>, StatusError> {
    let jobs: Api<DeserializeGuard<InferenceJob>> = Api::namespaced(ctx.client.clone(), namespace);
    let body = json!({
        "apiVersion": InferenceJob::api_version(&()),
        "kind": InferenceJob::kind(&()),
        "status": status,
    });
    let params = PatchParams::apply(crate::FIELD_MANAGER).force();
    let written = jobs
        .patch_status(name, &params, &Patch::Apply(&body))
        .await
        .map_err(|source| StatusError::StatusPatch {
            job: format!("{namespace}/{name}"),
            source,
        })?;
    Ok(written.resource_version())
}

/// A job that does not deserialize (it passed the CRD schema but not vramfit's types): report
/// it once per generation, with a merge patch of the conditions so that its attempts stay.
pub async fn report_malformed(invalid: &InvalidObject, ctx: &Context) -> Result<Action, Error> {
    let meta = &invalid.metadata;
    let (Some(namespace), Some(name)) = (meta.namespace.clone(), meta.name.clone()) else {
        return Err(ObserveError::MissingObjectKey("metadata.name").into());
    };
    let uid = meta.uid.clone().unwrap_or_default();
    if !ctx.first_report_of_malformed(&uid, meta.generation) {
        return Ok(Action::await_change());
    }
    let message = format!("the InferenceJob cannot be read: {}", invalid.error);
    warn!(job = %format!("{namespace}/{name}"), %message, "malformed job");
    let now = Time(Timestamp::now());
    let mut list = Vec::new();
    let generation = meta.generation;
    ConditionsUpdate::new(&mut list, generation, &now)
        .set(
            ConditionType::Scheduled,
            false,
            Reason::InvalidSpec,
            "not planned: the spec is invalid (see InvalidSpec)",
        )
        .set(
            ConditionType::Ready,
            false,
            Reason::NotRunning,
            "no pod runs",
        )
        .set(
            ConditionType::InvalidSpec,
            true,
            Reason::InvalidSpec,
            message.clone(),
        )
        .set(
            ConditionType::OutOfMemory,
            false,
            Reason::NoOutOfMemory,
            "no attempt ran out of memory",
        );
    let jobs: Api<DeserializeGuard<InferenceJob>> = Api::namespaced(ctx.client.clone(), &namespace);
    let body = json!({ "status": { "observedGeneration": generation, "conditions": list } });
    if let Err(source) = jobs
        .patch_status(&name, &merge_params(), &Patch::Merge(&body))
        .await
    {
        // Report again on the retry.
        ctx.forget_malformed(&uid, generation);
        return Err(StatusError::StatusPatch {
            job: format!("{namespace}/{name}"),
            source,
        }
        .into());
    }
    let reference = malformed_reference(meta);
    ctx.recorder
        .publish(
            &reference,
            &[JobEvent::warning(EventReason::InvalidSpec, message)],
        )
        .await;
    Ok(Action::await_change())
}

/// The event reference of a job known only by its metadata.
fn malformed_reference(meta: &ObjectMeta) -> ObjectReference {
    ObjectReference {
        api_version: Some(InferenceJob::api_version(&()).to_string()),
        kind: Some(InferenceJob::kind(&()).to_string()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..ObjectReference::default()
    }
}

fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(crate::FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}
