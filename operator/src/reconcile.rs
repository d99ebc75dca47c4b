//! One reconcile of an InferenceJob, as a pipeline:
//!
//! read (job, stores) → validate (`resolve_job`) → build classes and room (pure) → decide
//! (`next_status`, pure) → delete a replaced pod → apply the attempt's pod → write the status
//! → publish events.
//!
//! Only the last four touch the API. Writes:
//! * pods: server-side apply, field manager `vramfit-operator`, forced (the pod is ours);
//! * status: server-side apply on the `status` subresource, same field manager, forced, with
//!   `apiVersion` and `kind` and the whole status (so fields vramfit no longer sets are
//!   removed), and only when it differs from the job's.
//!
//! No duplicate pods: pod names are `<job>-<attempt>`, deterministic; the controller never
//! runs two reconciles of one job at once; a new attempt number is used only after the status
//! that ends the previous attempt is written (an attempt's outcome is recorded in the same
//! write that records the next attempt, or first on its own when the next cannot start); and
//! a pod that exists under the next attempt's name (applied before a crash or a failed status
//! write) is adopted with the plan in its annotation rather than planned again.
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, instrument, warn};
use vramfit_api::{InferenceJob, InferenceJobStatus, Phase};
use vramfit_planner::resolve_job;

use crate::conditions::{self, INVALID_SPEC, OUT_OF_MEMORY, READY, SCHEDULED, reasons as cr};
use crate::context::Context;
use crate::error::Error;
use crate::events::{JobEvent, reasons as er};
use crate::next_status::{Decision, Observed, PodSeen, next_status};
use crate::node_classes::{Capacity, PodConstraints};

/// How soon a job read from a cache that lags behind vramfit's own status write is looked at
/// again (its watch event normally triggers the reconcile first).
const STALE_CACHE_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// Reconciles one job. Invalid specs are reported in status and wait for a change; API
/// errors return `Err` and are retried by [`error_policy`].
#[instrument(skip(job, ctx), fields(job = %job_key(&job)))]
pub async fn reconcile(
    job: Arc<DeserializeGuard<InferenceJob>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let started = Instant::now();
    let key = job_key(&job);
    let result = match &job.0 {
        Ok(job) => reconcile_job(job, &ctx).await,
        Err(invalid) => reconcile_malformed(invalid, &ctx).await,
    };
    ctx.metrics.observe_reconcile(started.elapsed());
    match &result {
        Ok(_) => ctx.clear_failures(&key),
        Err(error) => ctx.metrics.count_error(error.metric_label()),
    }
    result
}

/// Retries a failed reconcile with an exponential backoff per job (1 s, 2 s, 4 s, … 5 min).
pub fn error_policy(
    job: Arc<DeserializeGuard<InferenceJob>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let key = job_key(&job);
    let failures = ctx.record_failure(&key);
    let delay = ctx.backoff(failures);
    warn!(job = %key, %error, failures, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// `namespace/name` of a job.
pub fn job_key(job: &DeserializeGuard<InferenceJob>) -> String {
    format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any())
}

/// The reconcile of a job that deserializes.
pub async fn reconcile_job(job: &InferenceJob, ctx: &Context) -> Result<Action, Error> {
    // A cached job older than our own last status write would repeat that decision (its
    // events, its fallback count): wait for the watch to deliver the write.
    if let (Some(uid), Some(version)) = (&job.metadata.uid, &job.metadata.resource_version)
        && ctx.is_stale(uid, version)
    {
        debug!("the cache has not caught up with the last status write yet");
        return Ok(Action::requeue(STALE_CACHE_RETRY));
    }
    // Finished jobs are final: nothing to read, nothing to write.
    if job
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(Phase::is_terminal)
    {
        return Ok(Action::await_change());
    }
    if job.metadata.deletion_timestamp.is_some() {
        // Its pods are owned: the garbage collector removes them.
        return Ok(Action::await_change());
    }
    let decision = {
        // Capacity is read and the chosen pod reserved under one lock, with no await between:
        // a burst of reconciles cannot all take the same last free GPUs.
        let _placing = ctx.reservations.hold_placement();
        let decision = decide(job, ctx, Time(Timestamp::now()))?;
        reserve(job, &decision, ctx);
        decision
    };
    carry_out(job, &decision, ctx).await?;
    Ok(decision.action)
}

/// Read, validate, build and decide, without writing anything.
pub fn decide(job: &InferenceJob, ctx: &Context, now: Time) -> Result<Decision, Error> {
    let namespace = job
        .namespace()
        .ok_or(Error::MissingObjectKey("metadata.namespace"))?;
    let input = resolve_job(&job.spec);
    let inventory = ctx.inventory();

    let stores = &ctx.stores;
    let pods = |name: &str| -> PodSeen {
        if let Some(pod) = stores.job_pod(&namespace, name) {
            if !controlled_by(&pod, job) {
                return PodSeen::Foreign;
            }
            if is_terminal(&pod) {
                // A finished pod takes no GPUs: its reservation (if any) ends.
                ctx.reservations.forget(&namespace, name);
            }
            return PodSeen::Observed(pod);
        }
        match ctx.reservations.get(&namespace, name) {
            Some(reservation) => PodSeen::Applied(reservation.plan),
            None => PodSeen::Absent,
        }
    };
    let capacity = || {
        let usage = stores.usage();
        // Pods the GPU watch counts already are no longer reservations.
        let reserved = ctx.reservations.pending(|key| usage.contains(key));
        Capacity::compute(&inventory, &usage, &reserved, &PodConstraints::of_job(job))
    };
    let observed = Observed {
        job,
        input: &input,
        pods: &pods,
        inventory: &inventory,
        capacity: &capacity,
        now,
    };
    next_status(&observed, &ctx.settings.requeues)
}

/// Records the pod a decision applies, before the apply, so it counts against its class.
pub fn reserve(job: &InferenceJob, decision: &Decision, ctx: &Context) {
    if let (Some(pod), Some(plan), Some(namespace)) =
        (&decision.apply_pod, &decision.applied_plan, job.namespace())
    {
        ctx.reservations.record(&namespace, &pod.name_any(), plan);
    }
}

/// Whether `job` (this very object, by uid) is the pod's controller: a job deleted and
/// created again under the same name must not adopt its predecessor's pods.
fn controlled_by(pod: &Pod, job: &InferenceJob) -> bool {
    pod.owner_references().iter().any(|owner| {
        owner.controller == Some(true) && Some(&owner.uid) == job.metadata.uid.as_ref()
    })
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The writes of a decision, in order: delete, apply, status; then events and metrics.
pub async fn carry_out(
    job: &InferenceJob,
    decision: &Decision,
    ctx: &Context,
) -> Result<(), Error> {
    let namespace = job
        .namespace()
        .ok_or(Error::MissingObjectKey("metadata.namespace"))?;
    let name = job.name_any();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);

    if let Some(old) = &decision.delete_pod {
        match pods.delete(old, &DeleteParams::background()).await {
            Ok(_) => info!(pod = %old, "deleted the pod of a replaced attempt"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(Error::PodDelete {
                    pod: old.clone(),
                    source,
                });
            }
        }
        ctx.reservations.forget(&namespace, old);
    }

    if let Some(pod) = &decision.apply_pod {
        let pod_name = pod.name_any();
        let written = if decision.create_pod {
            create_pod(&pods, pod, job).await
        } else {
            let params = PatchParams::apply(crate::FIELD_MANAGER).force();
            pods.patch(&pod_name, &params, &Patch::Apply(pod))
                .await
                .map(drop)
                .map_err(|source| Error::PodApply {
                    pod: pod_name.clone(),
                    source,
                })
        };
        if let Err(error) = written {
            // Not written: its GPUs are free again.
            ctx.reservations.forget(&namespace, &pod_name);
            let rejection = match &error {
                Error::PodNameTaken { .. } => Some((
                    cr::POD_NAME_TAKEN,
                    er::POD_NAME_TAKEN,
                    format!(
                        "pod {pod_name} exists but this job does not own it (an earlier job of the same name, or not vramfit's); waiting for it to be deleted"
                    ),
                )),
                _ => error.pod_rejection().map(|why| {
                    (
                        cr::POD_REJECTED,
                        er::POD_REJECTED,
                        format!("the API server refused pod {pod_name}: {why}"),
                    )
                }),
            };
            if let Some((condition_reason, event_reason, message)) = rejection {
                report_rejection(
                    job,
                    ctx,
                    &pod_name,
                    (condition_reason, event_reason),
                    message,
                )
                .await;
            }
            // Retried with backoff by `error_policy`: quota may free up, a policy may change,
            // the pod of the same name may go.
            return Err(error);
        }
        info!(pod = %pod_name, "wrote the pod");
    }

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

    for step in &decision.steps {
        ctx.metrics.count_fallback(step);
    }
    for (class, dtype) in &decision.bad_outputs {
        ctx.metrics.count_bad_output(class, dtype);
    }
    for (class, result, price) in &decision.results {
        ctx.metrics
            .count_result(class, result.items, result.seconds, *price);
    }
    if !decision.events.is_empty() {
        ctx.recorder
            .publish(&job.object_ref(&()), &decision.events)
            .await;
    }
    Ok(())
}

/// Creates a new pod. A pod of that name already there is fine when this job controls it (it
/// was created before a restart the stores have not caught up with); anyone else's is
/// [`Error::PodNameTaken`], never taken over.
async fn create_pod(pods: &Api<Pod>, pod: &Pod, job: &InferenceJob) -> Result<(), Error> {
    let name = pod.name_any();
    let params = PostParams {
        field_manager: Some(crate::FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    let pod_error = |source| Error::PodApply {
        pod: name.clone(),
        source,
    };
    match pods.create(&params, pod).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            match pods.get_opt(&name).await.map_err(pod_error)? {
                Some(existing) if controlled_by(&existing, job) => Ok(()),
                // Gone again since: the next reconcile creates it.
                None => Ok(()),
                Some(_) => Err(Error::PodNameTaken { pod: name }),
            }
        }
        Err(source) => Err(pod_error(source)),
    }
}

/// Tells the user, in the job's status (condition Scheduled=False) and a Warning event with
/// `reasons` (condition's, event's), why its pod could not be written; the status is
/// otherwise left as it was (no attempt is recorded for a pod that never existed).
async fn report_rejection(
    job: &InferenceJob,
    ctx: &Context,
    pod: &str,
    (reason, event_reason): (&'static str, &'static str),
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
    conditions::set(
        &mut status.conditions,
        SCHEDULED,
        false,
        reason,
        message.clone(),
        generation,
        &now,
    );
    if job.status.as_ref() != Some(&status)
        && let Err(error) = patch_status(ctx, &namespace, &name, &status).await
    {
        warn!(%error, "could not report the rejected pod in status");
    }
    let event = JobEvent::warning(event_reason, message).about(pod);
    ctx.recorder.publish(&job.object_ref(&()), &[event]).await;
}

/// Server-side applies the whole status of a job; returns the job's new resourceVersion.
pub async fn patch_status(
    ctx: &Context,
    namespace: &str,
    name: &str,
    status: &InferenceJobStatus,
) -> Result<Option<String>, Error> {
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
        .map_err(|source| Error::StatusPatch {
            job: format!("{namespace}/{name}"),
            source,
        })?;
    Ok(written.resource_version())
}

/// A job that does not deserialize (it passed the CRD schema but not vramfit's types): report
/// it once per generation, with a merge patch of the conditions so that its attempts stay.
async fn reconcile_malformed(invalid: &InvalidObject, ctx: &Context) -> Result<Action, Error> {
    let meta = &invalid.metadata;
    let (Some(namespace), Some(name)) = (meta.namespace.clone(), meta.name.clone()) else {
        return Err(Error::MissingObjectKey("metadata.name"));
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
    conditions::set(
        &mut list,
        SCHEDULED,
        false,
        cr::INVALID_SPEC,
        "not planned: the spec is invalid (see InvalidSpec)",
        generation,
        &now,
    );
    conditions::set(
        &mut list,
        READY,
        false,
        cr::NOT_RUNNING,
        "no pod runs",
        generation,
        &now,
    );
    conditions::set(
        &mut list,
        INVALID_SPEC,
        true,
        cr::INVALID_SPEC,
        message.clone(),
        generation,
        &now,
    );
    conditions::set(
        &mut list,
        OUT_OF_MEMORY,
        false,
        cr::NO_OUT_OF_MEMORY,
        "no attempt ran out of memory",
        generation,
        &now,
    );
    let jobs: Api<DeserializeGuard<InferenceJob>> = Api::namespaced(ctx.client.clone(), &namespace);
    let body = json!({ "status": { "observedGeneration": generation, "conditions": list } });
    if let Err(source) = jobs
        .patch_status(&name, &merge_params(), &Patch::Merge(&body))
        .await
    {
        // Report again on the retry.
        ctx.forget_malformed(&uid, generation);
        return Err(Error::StatusPatch {
            job: format!("{namespace}/{name}"),
            source,
        });
    }
    let reference = ObjectReference {
        api_version: Some(InferenceJob::api_version(&()).to_string()),
        kind: Some(InferenceJob::kind(&()).to_string()),
        name: Some(name),
        namespace: Some(namespace),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..ObjectReference::default()
    };
    ctx.recorder
        .publish(&reference, &[JobEvent::warning(er::INVALID_SPEC, message)])
        .await;
    Ok(Action::await_change())
}

fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(crate::FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}
