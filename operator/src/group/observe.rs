//! Observe a group job (reads the caches, writes nothing): the batch snapshot's pod lookups,
//! reservations and room, plus the pods the job controls and its groups' Services and
//! NetworkPolicies.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use vramfit_api::InferenceJob;
use vramfit_api::pod_keys::{GROUP_LABEL, group_pod_name};

use super::decide::{GroupDecision, GroupObserved, OwnedObject, OwnedPod, next_group};
use crate::context::Context;
use crate::observe::{ObserveError, Snapshot, snapshot};
use crate::pod::build::BuildError;
use crate::replicas::service::controlled_by;
use crate::stores::is_finished;

/// What the caches show of a group job, at one moment.
pub struct GroupSnapshot<'a> {
    /// The batch snapshot: pods by name, reservations, room.
    pub base: Snapshot<'a>,
    job: &'a InferenceJob,
    ctx: &'a Context,
    owned: Vec<OwnedPod>,
    services: Vec<OwnedObject>,
    network_policies: Vec<OwnedObject>,
}

/// The group job as the caches show it.
pub fn group_snapshot<'a>(
    job: &'a InferenceJob,
    ctx: &'a Context,
) -> Result<GroupSnapshot<'a>, ObserveError> {
    let base = snapshot(job, ctx)?;
    let namespace = base.namespace().to_string();
    let owned = owned_pods(ctx, &namespace, job);
    let group_objects = |objects: Vec<(String, String, bool)>| {
        objects
            .into_iter()
            .filter(|(_, _, ours)| *ours)
            .map(|(name, uid, _)| OwnedObject { name, uid })
            .collect::<Vec<_>>()
    };
    let services = group_objects(
        ctx.serving
            .stores
            .services
            .state()
            .iter()
            .filter(|s| in_group_of(s.as_ref(), &namespace))
            .map(|s| {
                (
                    s.name_any(),
                    s.uid().unwrap_or_default(),
                    controlled_by(s.owner_references(), job),
                )
            })
            .collect(),
    );
    let network_policies = group_objects(
        ctx.serving
            .stores
            .network_policies
            .state()
            .iter()
            .filter(|p| in_group_of(p.as_ref(), &namespace))
            .map(|p| {
                (
                    p.name_any(),
                    p.uid().unwrap_or_default(),
                    controlled_by(p.owner_references(), job),
                )
            })
            .collect(),
    );
    Ok(GroupSnapshot {
        base,
        job,
        ctx,
        owned,
        services,
        network_policies,
    })
}

/// An object of `namespace` that carries the group label.
fn in_group_of(object: &impl ResourceExt, namespace: &str) -> bool {
    object.namespace().as_deref() == Some(namespace) && object.labels().contains_key(GROUP_LABEL)
}

/// The pods of `namespace` that `job` (by uid) controls, less those being deleted (the store
/// says so, or this process deleted them lately).
fn owned_pods(ctx: &Context, namespace: &str, job: &InferenceJob) -> Vec<OwnedPod> {
    let Some(uid) = job.metadata.uid.as_deref() else {
        return Vec::new();
    };
    let pods = ctx.stores.job_pods.state();
    pods.iter()
        .filter(|pod| {
            pod.metadata.namespace.as_deref() == Some(namespace)
                && pod
                    .owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.uid == uid)
                && pod.metadata.deletion_timestamp.is_none()
                && !ctx.serving.deleting.contains(namespace, &pod.name_any())
        })
        .map(|pod| OwnedPod {
            name: pod.name_any(),
            attempt: attempt_of(&job.name_any(), &pod.name_any()),
            finished: is_finished(pod.status.as_ref().and_then(|s| s.phase.as_deref())),
        })
        .collect()
}

/// The attempt of a group pod of `job_name` named `pod` (`<job>-<attempt>-<rank>`, the job's
/// part shortened with a hash when long), or `None` for a pod of another name.
pub fn attempt_of(job_name: &str, pod: &str) -> Option<u32> {
    let mut parts = pod.rsplitn(3, '-');
    let rank: u32 = parts.next()?.parse().ok()?;
    let attempt: u32 = parts.next()?.parse().ok()?;
    (group_pod_name(job_name, attempt, rank) == pod).then_some(attempt)
}

impl GroupSnapshot<'_> {
    /// The next state of the job from this snapshot (pure: [`next_group`]).
    pub fn decide(&self, now: Time) -> Result<GroupDecision, BuildError> {
        let namespace = self.base.namespace();
        let pods = |name: &str| self.base.pod(name);
        let deleting = |name: &str| self.ctx.serving.deleting.contains(namespace, name);
        // A new group is placed only when the job's current one ends: every pod of the job
        // is deleted in this reconcile, so their GPUs count as free.
        let leaving: Vec<String> = self
            .owned
            .iter()
            .filter(|p| !p.finished)
            .map(|p| p.name.clone())
            .collect();
        let capacity = || self.base.capacity_without(&leaving);
        let service = |name: &str| self.ctx.serving.service(namespace, name);
        let network_policy = |name: &str| self.ctx.serving.network_policy(namespace, name);
        let at = now.clone();
        let model_cache = crate::model_cache::view::LazyView::new(|| self.base.model_cache(&at));
        let observed = GroupObserved {
            job: self.job,
            input: self.base.input(),
            pods: &pods,
            deleting: &deleting,
            owned: &self.owned,
            service: &service,
            network_policy: &network_policy,
            owned_services: &self.services,
            owned_network_policies: &self.network_policies,
            inventory: self.base.inventory(),
            capacity: &capacity,
            now: now.clone(),
            spread: self.ctx.settings.group_spread,
            model_cache: &model_cache,
        };
        next_group(&observed, &self.ctx.settings.requeues)
    }
}

#[cfg(test)]
mod tests {
    use super::attempt_of;

    #[test]
    fn a_group_pod_s_attempt_is_read_from_its_name() {
        assert_eq!(attempt_of("big", "big-3-1"), Some(3));
        assert_eq!(
            attempt_of("big-3", "big-3-1"),
            None,
            "job big-3's pods end in -<a>-<r>"
        );
        assert_eq!(attempt_of("big", "big-3"), None, "a one-pod attempt's name");
        let long = "a".repeat(80);
        let name = vramfit_api::pod_keys::group_pod_name(&long, 12, 5);
        assert_eq!(attempt_of(&long, &name), Some(12));
    }
}
