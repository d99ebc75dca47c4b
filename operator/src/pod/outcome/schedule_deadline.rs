//! How long a pod may wait to be scheduled to a node (pure). An attempt's pod that is not
//! bound yet counts against its class's free GPUs (so that a burst of jobs does not pile onto
//! the last free node); one the scheduler can never place (a resource, an affinity or a taint
//! no node of the class satisfies) would hold them forever. Past the job's schedule deadline
//! the attempt ends and the pod is deleted.
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A pod past its schedule deadline, not bound to any node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unscheduled {
    /// Why, one line: the scheduler's `PodScheduled=False` message, or that it said nothing.
    pub why: String,
}

/// Where a pod that is not bound to a node stands against `deadline` at `now`, from its
/// creation: `Ok(Some(left))` while it may still be scheduled, `Err` once it is overdue.
/// `Ok(None)` for a pod that is bound or finished (the deadline does not apply), or whose
/// creation time is unknown.
pub fn check(pod: &Pod, now: &Time, deadline: Duration) -> Result<Option<Duration>, Unscheduled> {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let status = pod.status.as_ref();
    let pending = matches!(
        status.and_then(|s| s.phase.as_deref()),
        None | Some("Pending")
    );
    if bound || !pending {
        return Ok(None);
    }
    let Some(created) = pod.metadata.creation_timestamp.as_ref() else {
        return Ok(None);
    };
    let waited = Duration::try_from(now.0.duration_since(created.0)).unwrap_or_default();
    if waited < deadline {
        return Ok(Some(deadline - waited));
    }
    let scheduler = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False");
    let why = match scheduler {
        Some(condition) => {
            let reason = condition.reason.as_deref().unwrap_or("Unschedulable");
            match condition.message.as_deref() {
                Some(message) if !message.is_empty() => format!("{reason}: {message}"),
                _ => reason.to_string(),
            }
        }
        None => "no scheduler bound it to a node".to_string(),
    };
    Err(Unscheduled {
        why: crate::pod::outcome::trim_message(&why),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    const DEADLINE: Duration = Duration::from_secs(600);

    fn at(seconds: i64) -> Time {
        Time(Timestamp::UNIX_EPOCH + SignedDuration::from_secs(seconds))
    }

    fn unbound_since(seconds: i64) -> Pod {
        let mut pod = fixtures::pending_pod("chat-1", None);
        pod.metadata.creation_timestamp = Some(at(seconds));
        pod
    }

    #[test]
    fn an_unbound_pod_may_wait_until_its_deadline() {
        let pod = unbound_since(1_000);
        assert_eq!(
            check(&pod, &at(1_100), DEADLINE),
            Ok(Some(Duration::from_secs(500)))
        );
    }

    #[test]
    fn past_the_deadline_the_schedulers_reason_is_given() {
        let pod = fixtures::with_unschedulable_condition(
            unbound_since(1_000),
            "0/3 nodes are available: 3 Insufficient example.com/never.",
        );
        assert_eq!(
            check(&pod, &at(1_600), DEADLINE),
            Err(Unscheduled {
                why: "Unschedulable: 0/3 nodes are available: 3 Insufficient example.com/never."
                    .into()
            })
        );
        let silent = unbound_since(1_000);
        assert_eq!(
            check(&silent, &at(1_600), DEADLINE).map_err(|u| u.why),
            Err("no scheduler bound it to a node".to_string())
        );
    }

    #[test]
    fn bound_or_finished_pods_have_no_schedule_deadline() {
        let mut bound = fixtures::pending_pod("chat-1", Some("a-1"));
        bound.metadata.creation_timestamp = Some(at(0));
        assert_eq!(check(&bound, &at(99_999), DEADLINE), Ok(None));
        let mut failed = fixtures::failed_pod("chat-1", "a-1", "Error", 1, "boom");
        failed.spec.get_or_insert_default().node_name = None;
        failed.metadata.creation_timestamp = Some(at(0));
        assert_eq!(check(&failed, &at(99_999), DEADLINE), Ok(None));
    }
}
