//! Observe a served job (reads the caches, writes nothing): the batch snapshot's pod lookups,
//! reservations and room, plus the pods the job controls, its Service and its
//! PodDisruptionBudget.
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use vramfit_api::{InferenceJob, ServeSpec};

use super::{ObserveError, Snapshot, snapshot};
use crate::context::Context;

/// What the caches show of a served job, at one moment.
pub struct ServedSnapshot<'a> {
    /// The batch snapshot: pods by name, reservations, room.
    pub base: Snapshot<'a>,
    pub(crate) job: &'a InferenceJob,
    pub(crate) serve: &'a ServeSpec,
    pub(crate) ctx: &'a Context,
    pub(crate) owned: Vec<String>,
    pub(crate) terminating: usize,
    pub(crate) service: Option<Arc<Service>>,
    pub(crate) pdb: Option<Arc<PodDisruptionBudget>>,
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
    /// The names of the pods the job controls that are not being deleted.
    pub fn owned(&self) -> &[String] {
        &self.owned
    }
}
