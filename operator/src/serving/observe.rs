//! Observe a served job (reads the caches, writes nothing): the batch snapshot's pod lookups,
//! reservations and room, plus the pods the job controls, its Service and its
//! PodDisruptionBudget.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use vramfit_api::{
    DEFAULT_SCHEDULE_DEADLINE_SECONDS, DEFAULT_START_DEADLINE_SECONDS, InferenceJob, ServeSpec,
};

use super::decide::{ServedDecision, ServedObserved, next_served};
use crate::context::Context;
use crate::reconcile::build::BuildError;
use crate::reconcile::observe::{ObserveError, Snapshot, snapshot};

/// What the caches show of a served job, at one moment.
pub struct ServedSnapshot<'a> {
    /// The batch snapshot: pods by name, reservations, room.
    pub base: Snapshot<'a>,
    job: &'a InferenceJob,
    serve: &'a ServeSpec,
    ctx: &'a Context,
    owned: Vec<String>,
    terminating: usize,
    service: Option<Arc<Service>>,
    pdb: Option<Arc<PodDisruptionBudget>>,
}

/// The served job as the caches show it.
pub fn served_snapshot<'a>(
    job: &'a InferenceJob,
    serve: &'a ServeSpec,
    ctx: &'a Context,
) -> Result<ServedSnapshot<'a>, ObserveError> {
    let base = snapshot(job, ctx)?;
    let namespace = base.namespace().to_string();
    let name = job.name_any();
    let (owned, terminating) = owned_pods(ctx, &namespace, job);
    Ok(ServedSnapshot {
        owned,
        terminating,
        service: ctx.serving.service(&namespace, &name),
        pdb: ctx.serving.pdb(&namespace, &name),
        base,
        job,
        serve,
        ctx,
    })
}

/// The names of the pods of `namespace` that `job` (by uid) controls and that are not being
/// deleted, and how many are being deleted.
fn owned_pods(ctx: &Context, namespace: &str, job: &InferenceJob) -> (Vec<String>, usize) {
    let Some(uid) = job.metadata.uid.as_deref() else {
        return (Vec::new(), 0);
    };
    let pods = ctx.stores.job_pods.state();
    let (leaving, owned): (Vec<_>, Vec<_>) = pods
        .iter()
        .filter(|pod| {
            pod.metadata.namespace.as_deref() == Some(namespace)
                && pod
                    .owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        // Deleted: the store says so, or this process deleted it and the store has not
        // caught up.
        .partition(|pod| {
            pod.metadata.deletion_timestamp.is_some()
                || ctx.serving.deleting.contains(namespace, &pod.name_any())
        });
    (
        owned.iter().map(|pod| pod.name_any()).collect(),
        leaving.len(),
    )
}

impl ServedSnapshot<'_> {
    /// The next state of the job from this snapshot (pure: [`next_served`]).
    pub fn decide(&self, now: Time) -> Result<ServedDecision, BuildError> {
        let pods = |name: &str| self.base.pod(name);
        self.decide_as(now, &pods, &self.owned, &[])
    }

    /// The names of the pods the job controls that are not being deleted.
    pub fn owned(&self) -> &[String] {
        &self.owned
    }

    /// [`Self::decide`] with the pods seen through `pods` and `owned` (a job whose replicas
    /// are groups shows each group as one pod: `group::served`), and the GPUs of the pods
    /// `leaving` (deleted by this decision whatever it decides) counted as free.
    pub fn decide_as(
        &self,
        now: Time,
        pods: &dyn Fn(&str) -> crate::reconcile::decide::PodSeen,
        owned: &[String],
        leaving: &[String],
    ) -> Result<ServedDecision, BuildError> {
        let capacity = || {
            if leaving.is_empty() {
                self.base.capacity()
            } else {
                self.base.capacity_without(leaving)
            }
        };
        let requeues = &self.ctx.settings.requeues;
        let deadline = self
            .job
            .spec
            .start_deadline_seconds
            .unwrap_or(DEFAULT_START_DEADLINE_SECONDS);
        let schedule_deadline = self
            .job
            .spec
            .schedule_deadline_seconds
            .unwrap_or(DEFAULT_SCHEDULE_DEADLINE_SECONDS);
        let cache_view =
            crate::model_cache::view::observe(self.ctx, self.job, self.base.inventory(), &now);
        let observed = ServedObserved {
            job: self.job,
            serve: self.serve,
            input: self.base.input(),
            pods,
            owned,
            terminating: self.terminating,
            inventory: self.base.inventory(),
            capacity: &capacity,
            service: self.service.as_deref(),
            pdb: self.pdb.as_deref(),
            now,
            backoff: &self.ctx.serving.backoff,
            start_deadline: Duration::from_secs(deadline.into()),
            schedule_deadline: Duration::from_secs(schedule_deadline.into()),
            unschedulable_requeue: requeues.unschedulable,
            resync: requeues.resync,
            model_cache: cache_view.as_ref(),
        };
        next_served(&observed)
    }
}
