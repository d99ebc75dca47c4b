//! Groups: a batch or fine-tuning job with `spec.gpus.maxNodes` above 1 runs each attempt as a
//! group of pods, one per node of the planned class, rank 0 the leader, joined by the
//! runtime's distributed engine (docs/planning.md). [`crate::dispatch::reconcile_job`] hands
//! such a job to [`reconcile_group`]; a plan of one node is a group of one.
//!
//! | step | module | touches the API |
//! |---|---|---|
//! | observe: the job's pods, its groups' Services and NetworkPolicies, room | [`observe`] | no (caches) |
//! | decide: the batch state machine on the group seen as one pod ([`state`]), turned into the group's writes | [`decide`] | no (pure) |
//! | build: the group's pods, its headless Service, its NetworkPolicy | [`build`], [`service`], [`network_policy`] | no (pure) |
//! | the node model cache: the awaited leader mounts as its workers, the leader's `weights` (a served replica's group: [`served`]) | `cache_hook` | no (pure) |
//! | apply: ended groups' pods deleted, the Service and NetworkPolicy, the model volume, then the pods | [`apply`] | yes |
//! | update status: the batch step (status patch, events, metrics) | `reconcile::update_status` | yes |
//!
//! Why pods and not a StatefulSet per group: an attempt is the unit vramfit plans, records and
//! replaces, with deterministic names per attempt (`<job>-<attempt>-<rank>`) that make a
//! restarted operator adopt what it created instead of planning again; a group must end whole
//! (a StatefulSet would recreate one failed pod alone, into a group whose other ranks have
//! lost their peer), and the next attempt may run another plan on another class.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::warn;
use vramfit_api::InferenceJob;
use vramfit_api::checkpoint::ResolvedModel;
use vramfit_api::conditions::{self, ConditionType, ConditionsUpdate, Reason};
use vramfit_api::event_reasons::EventReason;

use crate::context::Context;
use crate::error::Error;
use crate::events::JobEvent;
use crate::writes::{pods as batch_apply, status as update_status};

pub mod apply;
pub mod build;
mod cache_hook;
pub mod decide;
pub mod leader;
pub mod names;
pub mod network_policy;
pub mod observe;
pub mod served;
pub mod served_reconcile;
pub mod service;
pub mod state;

#[cfg(test)]
mod served_tests;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

/// The reconcile of a group job: the steps in order. `job` comes with the numbers
/// `model.huggingFace` leaves unset filled in, and `resolved` is what was read.
pub async fn reconcile_group(
    job: &InferenceJob,
    ctx: &Context,
    resolved: Option<ResolvedModel>,
) -> Result<Action, Error> {
    let (mut decision, namespace) = {
        // Room is read and the chosen pods reserved under one lock, with no await between.
        let _placing = ctx.reservations.hold_placement();
        // Caches, no writes.
        let snapshot = observe::group_snapshot(job, ctx)?;
        // Pure.
        let decision = snapshot.decide(Time(Timestamp::now()))?;
        // In memory: settled pods leave the ledger; the new group's pods count against their
        // class until a store shows them.
        batch_apply::release_settled(&snapshot.base, ctx);
        let namespace = snapshot.base.namespace().to_string();
        apply::reserve(job, &namespace, &decision, ctx);
        (decision, namespace)
    };
    crate::model_cache::wake_while_waiting(ctx, job, &decision.decision.status);
    // API: the pods of ended groups go first (their GPUs free), then the running group.
    apply::delete_pods(job, &decision, ctx).await?;
    if let Err(error) = apply::write_group(job, &decision, ctx).await {
        match &error {
            crate::error::GroupApplyError::Pod(pod_error) => {
                update_status::report_pod_not_written(job, ctx, pod_error).await;
            }
            crate::error::GroupApplyError::NameTaken { kind, name } => {
                report_name_taken(job, ctx, kind, name).await;
            }
            crate::error::GroupApplyError::Object { .. } => {}
        }
        warn!(job = %format!("{namespace}/{}", job.name_any()), %error, "the group was not written");
        // Retried with backoff by `error_policy`; no attempt is recorded for a group that
        // was not created.
        return Err(error.into());
    }
    clear_name_taken(job, &mut decision.decision.status);
    if let Some(resolved) = resolved {
        let now = Time(Timestamp::now());
        crate::hub_models::record(
            &mut decision.decision.status,
            resolved,
            job.metadata.generation,
            &now,
        );
    }
    // API: the status, then events and metrics (the batch step).
    update_status::write(job, &decision.decision, ctx).await?;
    // API: the objects of groups that no longer run.
    apply::delete_stale_objects(job, &decision, ctx).await?;
    Ok(decision.decision.action)
}

/// Tells the user that the group's Service or NetworkPolicy name is someone else's:
/// `Degraded=True` (the status otherwise as it was: no attempt is recorded for a group that
/// was not created) and a Warning event.
pub(crate) async fn report_name_taken(job: &InferenceJob, ctx: &Context, kind: &str, name: &str) {
    let (Some(namespace), job_name) = (job.namespace(), job.name_any()) else {
        return;
    };
    let reason = if kind == "Service" {
        Reason::ServiceNameTaken
    } else {
        Reason::NetworkPolicyNameTaken
    };
    let message = format!(
        "a {kind} named {name} exists and is not this job's: it is left as it is, and the group's pods are not created until it is deleted"
    );
    let mut status = job.status.clone().unwrap_or_default();
    let already = conditions::get(&status.conditions, ConditionType::Degraded)
        .is_some_and(|c| c.status == "True" && c.message == message);
    let now = Time(Timestamp::now());
    ConditionsUpdate::new(&mut status.conditions, job.metadata.generation, &now).set(
        ConditionType::Degraded,
        true,
        reason,
        message.clone(),
    );
    conditions::sort(&mut status.conditions);
    if job.status.as_ref() != Some(&status)
        && let Err(error) = update_status::patch_status(ctx, &namespace, &job_name, &status).await
    {
        warn!(%error, "could not report the taken name in status");
    }
    if !already {
        let event = JobEvent::warning(EventReason::Degraded, message);
        ctx.recorder.publish(&job.object_ref(&()), &[event]).await;
    }
}

/// `Degraded` turns False once the group's objects are written (only if it was ever set).
fn clear_name_taken(job: &InferenceJob, status: &mut vramfit_api::InferenceJobStatus) {
    let taken = conditions::get(&status.conditions, ConditionType::Degraded).is_some_and(|c| {
        c.status == "True"
            && (c.reason == Reason::ServiceNameTaken.as_str()
                || c.reason == Reason::NetworkPolicyNameTaken.as_str())
    });
    if taken {
        let now = Time(Timestamp::now());
        ConditionsUpdate::new(&mut status.conditions, job.metadata.generation, &now).set(
            ConditionType::Degraded,
            false,
            Reason::AsExpected,
            "the group's Service and NetworkPolicy are the job's",
        );
    }
}

/// Deletes, each on its uid, of the job's group objects (name, uid) that `keep` does not
/// name, sorted by name: the same decision makes the same requests.
pub(crate) fn stale_deletes<K>(
    objects: Vec<(String, String)>,
    keep: impl Fn(&str) -> bool,
) -> Vec<crate::ownership::ObjectWrite<K>> {
    let mut stale: Vec<(String, String)> = objects
        .into_iter()
        .filter(|(name, _)| !keep(name))
        .collect();
    stale.sort();
    stale
        .into_iter()
        .map(|(name, uid)| crate::ownership::ObjectWrite::Delete { name, uid })
        .collect()
}
