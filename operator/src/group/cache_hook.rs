//! The node model cache's hook into a group job's decision (`--model-cache`; the logic is in
//! [`crate::model_cache::group_placement`]). The batch machine decides the group's mount, wait
//! or fetch on the group's one pod, which every rank is built from; here, what only a group
//! has: a leader created after its workers mounts as they do, a metadata-only apply of
//! members that mount the model leaves their spec alone, and `status.weights` is the
//! leader's.
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use vramfit_api::InferenceJobStatus;
use vramfit_api::pod_keys::group_pod_name;

use super::decide::{GroupObserved, running_group};
use crate::model_cache::group_placement::mount_like;
use crate::model_cache::weights;
use crate::pod::PodSeen;

/// The leader of `attempt`'s group, built after its workers, takes their mount (or their
/// fetch and its note).
pub(super) fn mount_like_workers(obs: &GroupObserved<'_>, leader: &mut Pod, attempt: u32) {
    let Some(model) = crate::model_cache::job_model::job_model(obs.job) else {
        return;
    };
    let worker = group_pod_name(&obs.job.name_any(), attempt, 1);
    if let PodSeen::Observed(worker) = (obs.pods)(&worker) {
        mount_like(leader, &worker, &model);
    }
}

/// `status.weights` from the running group's leader: the one created now, or the one the
/// store shows (its load time is the group's: the leader serves once the group is up).
pub(super) fn leader_weights(
    obs: &GroupObserved<'_>,
    status: &mut InferenceJobStatus,
    created: &[Pod],
) {
    let Some((attempt, _)) = running_group(status) else {
        return;
    };
    let leader = group_pod_name(&obs.job.name_any(), attempt, 0);
    if let Some(pod) = created.iter().find(|p| p.name_any() == leader) {
        status.weights = weights::of_marked_pod(pod);
    } else if let PodSeen::Observed(pod) = (obs.pods)(&leader) {
        status.weights = weights::of_marked_pod(&pod);
    }
}

/// The metadata-only applies of the group's members, each without its spec when the member
/// as the store shows it mounts a cached model ([`crate::model_cache::mount::metadata_apply`]).
pub(super) fn metadata_applies(obs: &GroupObserved<'_>, pods: Vec<Pod>) -> Vec<Pod> {
    pods.into_iter()
        .map(|pod| match (obs.pods)(&pod.name_any()) {
            PodSeen::Observed(running) => crate::model_cache::mount::metadata_apply(pod, &running),
            _ => pod,
        })
        .collect()
}
