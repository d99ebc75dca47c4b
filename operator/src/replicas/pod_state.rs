//! Where a replica's pod stands (pure): starting, serving (Ready or not), or ended and why.
//! The batch reading of a pod ([`classify`]) decides how it ended; a server adds readiness, and
//! a server that exits has failed whatever its exit code.
pub use crate::pod::replica_end::EndKind;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::pod::outcome::{PodState, classify};

/// Where a replica pod stands.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplicaPod {
    /// Not running yet: waiting for a node, an image, a start.
    Starting {
        /// The node it is bound to, once bound.
        node: Option<String>,
        /// Why it waits, when Kubernetes says.
        detail: Option<String>,
    },
    /// Its container runs.
    Running {
        /// The node it runs on.
        node: Option<String>,
        /// Whether its readiness probe passes (it is in the Service's endpoints).
        ready: bool,
        /// When it last became Ready (or not Ready).
        since: Option<Time>,
    },
    /// It ended.
    Ended(Ending),
}

/// How a replica pod ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Ending {
    /// Why, as `status.replicaStatuses[].reason` and the restart metric say it.
    pub kind: EndKind,
    /// What it said, trimmed.
    pub message: String,
}

impl ReplicaPod {
    /// The node the pod is on, if bound.
    pub fn node(&self) -> Option<&str> {
        match self {
            ReplicaPod::Starting { node, .. } | ReplicaPod::Running { node, .. } => node.as_deref(),
            ReplicaPod::Ended(_) => None,
        }
    }

    /// Whether it serves (Ready).
    pub fn is_ready(&self) -> bool {
        matches!(self, ReplicaPod::Running { ready: true, .. })
    }
}

/// Reads a replica pod's state from its status.
pub fn replica_pod(pod: &Pod) -> ReplicaPod {
    let ended = |kind, message: String| ReplicaPod::Ended(Ending { kind, message });
    match classify(pod) {
        PodState::Waiting { node, detail } => ReplicaPod::Starting { node, detail },
        PodState::Running { node } => {
            let condition = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
            ReplicaPod::Running {
                node,
                ready: condition.is_some_and(|c| c.status == "True"),
                since: condition.and_then(|c| c.last_transition_time.clone()),
            }
        }
        PodState::Succeeded { .. } => ended(
            EndKind::Failed,
            "the server exited (exit code 0); a served container must run until it is stopped"
                .to_string(),
        ),
        PodState::BadOutput { check, .. } => ended(
            EndKind::Failed,
            format!(
                "output check {} failed: {} in {}",
                check.check, check.pattern, check.dtype
            ),
        ),
        // A served job is never a tuning job (the CRD refuses both), so a training report
        // here is a server that failed.
        PodState::LossDiverged { check, .. } => ended(
            EndKind::Failed,
            format!(
                "the workload reported a {} loss at step {} in {}",
                check.loss, check.step, check.dtype
            ),
        ),
        PodState::OutOfMemory { message, .. } => ended(EndKind::OutOfMemory, message),
        PodState::HostOutOfMemory { message, .. } => ended(EndKind::HostOutOfMemory, message),
        PodState::Disrupted { message, .. } => ended(EndKind::Disrupted, message),
        PodState::AdmissionRefused { message, .. } => ended(EndKind::AdmissionRefused, message),
        PodState::Failed { message, .. } => ended(EndKind::Failed, message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_kind() {
        // A new kind does not compile here until it is listed in ALL.
        let listed = |kind: EndKind| match kind {
            EndKind::OutOfMemory
            | EndKind::HostOutOfMemory
            | EndKind::Disrupted
            | EndKind::AdmissionRefused
            | EndKind::Failed
            | EndKind::StartTimeout
            | EndKind::ScheduleTimeout
            | EndKind::Deleted => EndKind::ALL.contains(&kind),
        };
        assert!(EndKind::ALL.into_iter().all(listed));
        let words: std::collections::BTreeSet<&str> =
            EndKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(words.len(), EndKind::ALL.len());
    }
    use crate::fixtures;
    use k8s_openapi::api::core::v1::PodCondition;

    pub(crate) fn with_ready(mut pod: Pod, ready: bool) -> Pod {
        let status = pod.status.get_or_insert_default();
        status.conditions = Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..PodCondition::default()
        }]);
        pod
    }

    #[test]
    fn readiness_comes_from_the_ready_condition() {
        let running = fixtures::running_pod("chat-r0-1", "a-1");
        assert_eq!(
            replica_pod(&running),
            ReplicaPod::Running {
                node: Some("a-1".into()),
                ready: false,
                since: None
            },
            "running without a Ready condition is not serving yet"
        );
        assert!(replica_pod(&with_ready(running.clone(), true)).is_ready());
        assert!(!replica_pod(&with_ready(running, false)).is_ready());
        let pending = fixtures::pending_pod("chat-r0-1", Some("a-1"));
        assert_eq!(replica_pod(&pending).node(), Some("a-1"));
    }

    #[test]
    fn a_server_that_ends_has_failed_and_out_of_memory_is_told_apart() {
        let exited = fixtures::succeeded_pod("chat-r0-1", "a-1");
        let ReplicaPod::Ended(ending) = replica_pod(&exited) else {
            panic!()
        };
        assert_eq!(ending.kind, EndKind::Failed);
        let oom = fixtures::failed_pod(
            "chat-r0-1",
            "a-1",
            "Error",
            1,
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
        );
        let ReplicaPod::Ended(ending) = replica_pod(&oom) else {
            panic!()
        };
        assert_eq!(ending.kind, EndKind::OutOfMemory);
        assert!(!ending.kind.backs_off());
        let crash = fixtures::failed_pod("chat-r0-1", "a-1", "Error", 2, "Segmentation fault");
        assert!(matches!(
            replica_pod(&crash),
            ReplicaPod::Ended(Ending {
                kind: EndKind::Failed,
                ..
            })
        ));
        assert!(EndKind::Failed.backs_off());
        assert!(!EndKind::Disrupted.backs_off());
    }

    #[test]
    fn a_pod_refused_at_kubelet_admission_backs_off_and_an_evicted_one_does_not() {
        for reason in [
            "UnexpectedAdmissionError",
            "OutOfnvidia.com/gpu",
            "NodeAffinity",
        ] {
            let refused = fixtures::refused_pod("chat-r0-1", "a-1", reason);
            let ReplicaPod::Ended(ending) = replica_pod(&refused) else {
                panic!("{reason}: {:?}", replica_pod(&refused))
            };
            assert_eq!(ending.kind, EndKind::AdmissionRefused, "{reason}");
            assert!(ending.message.starts_with(reason), "{}", ending.message);
            assert!(ending.kind.backs_off());
        }
        let evicted = fixtures::refused_pod("chat-r0-1", "a-1", "Evicted");
        let ReplicaPod::Ended(ending) = replica_pod(&evicted) else {
            panic!()
        };
        assert_eq!(ending.kind, EndKind::Disrupted);
        assert!(!ending.kind.backs_off());
    }
}
