//! A pod of a job, pure: built from a plan ([`build`]), and read back: how it ended
//! ([`outcome`], with its start and scheduling deadlines) and what a reconcile sees of it
//! ([`PodSeen`]). Every pipeline builds and reads its pods through here.
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use vramfit_api::Plan;

pub mod build;
pub mod outcome;
pub mod replica_end;

/// What the stores say of a pod name.
#[derive(Clone, Debug)]
pub enum PodSeen {
    /// The pod store holds it.
    Observed(Arc<Pod>),
    /// This process applied it moments ago; the store does not show it yet.
    Applied(Arc<Plan>),
    /// A pod of that name exists but this job does not control it (an earlier job of the same
    /// name whose pods the garbage collector has not removed yet, or someone else's pod).
    Foreign,
    /// No such pod.
    Absent,
}

/// Whether `job` runs its pods as groups: `gpus.maxNodes` above 1, or a status that lists
/// group members still (an attempt's or a replica's), after `maxNodes` went back to 1 while
/// groups ran. Such a job stays on the group pipeline, whose groups roll onto groups of one
/// (the one-pod pipeline would delete them all at once and leave their Services and
/// NetworkPolicies), and a served job's Service keeps selecting leaders only. Read from the
/// job alone: no store is scanned on the reconcile of every job.
pub fn runs_groups(job: &vramfit_api::InferenceJob) -> bool {
    job.spec.gpus.max_nodes > 1
        || job.status.as_ref().is_some_and(|s| {
            s.attempts.iter().any(|a| !a.members.is_empty())
                || s.replica_statuses
                    .iter()
                    .any(|line| !line.members.is_empty())
        })
}
