//! How long a pod bound to a node may take to start (pure). A pod that waits on an image it
//! cannot pull holds its GPUs for as long as it exists; past the job's start deadline the
//! attempt ends and the GPUs are freed.
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Container waiting reasons that no new pod cures: the image or the container's
/// configuration is wrong, and the user has to change it.
const UNFIXABLE: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// A bound pod past its start deadline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overdue {
    /// The node it is bound to.
    pub node: String,
    /// What the pod waits on, one line (the container's waiting reason and message).
    pub waiting_on: String,
    /// Whether a new pod would wait on the same thing (the image or the container's
    /// configuration).
    pub unfixable: bool,
}

/// Where a bound, not yet running pod stands against `deadline` at `now`: `Ok(Some(left))`
/// while it may still start, `Err` once it is overdue. `Ok(None)` for a pod that is not bound
/// and waiting (the deadline does not apply), or whose times are unknown.
pub fn check(pod: &Pod, now: &Time, deadline: Duration) -> Result<Option<Duration>, Overdue> {
    let status = pod.status.as_ref();
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty());
    let waiting = status.and_then(|s| s.phase.as_deref()) == Some("Pending");
    let (Some(node), true) = (node, waiting) else {
        return Ok(None);
    };
    let Some(since) = bound_since(pod) else {
        return Ok(None);
    };
    let waited = now.0.duration_since(since.0);
    let waited = Duration::try_from(waited).unwrap_or_default();
    if waited < deadline {
        return Ok(Some(deadline - waited));
    }
    let (reason, message) = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
        .map(|w| (w.reason.clone().unwrap_or_default(), w.message.clone()))
        .next()
        .unwrap_or_default();
    let waiting_on = match (reason.as_str(), message) {
        ("", _) => "the pod was not started by its node".to_string(),
        (reason, Some(message)) => format!("{reason}: {message}"),
        (reason, None) => reason.to_string(),
    };
    Err(Overdue {
        node: node.to_string(),
        waiting_on: crate::pod::outcome::trim_message(&waiting_on),
        unfixable: UNFIXABLE.contains(&reason.as_str()),
    })
}

/// When the pod was bound: its `PodScheduled` condition's transition, else its creation.
fn bound_since(pod: &Pod) -> Option<Time> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "True")
        })
        .and_then(|c| c.last_transition_time.clone())
        .or_else(|| pod.metadata.creation_timestamp.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    const DEADLINE: Duration = Duration::from_secs(900);

    fn at(seconds: i64) -> Time {
        Time(Timestamp::UNIX_EPOCH + SignedDuration::from_secs(seconds))
    }

    fn bound_at(seconds: i64, waiting: Option<&str>) -> Pod {
        let mut pod = fixtures::pending_pod("chat-1", Some("a-1"));
        pod.metadata.creation_timestamp = Some(at(seconds));
        if let Some(reason) = waiting {
            pod = fixtures::with_waiting_container(pod, reason);
        }
        pod
    }

    #[test]
    fn a_bound_pod_may_wait_until_its_deadline() {
        let pod = bound_at(1_000, Some("ContainerCreating"));
        assert_eq!(
            check(&pod, &at(1_100), DEADLINE),
            Ok(Some(Duration::from_secs(800)))
        );
    }

    #[test]
    fn an_image_that_cannot_be_pulled_is_overdue_and_unfixable() {
        let pod = bound_at(1_000, Some("ImagePullBackOff"));
        let overdue = check(&pod, &at(1_900), DEADLINE).unwrap_err();
        assert!(overdue.unfixable);
        assert!(
            overdue.waiting_on.starts_with("ImagePullBackOff"),
            "{overdue:?}"
        );
    }

    #[test]
    fn a_pod_stuck_otherwise_is_overdue_and_may_be_tried_again() {
        let pod = bound_at(1_000, Some("ContainerCreating"));
        let overdue = check(&pod, &at(5_000), DEADLINE).unwrap_err();
        assert!(!overdue.unfixable);
        let silent = bound_at(1_000, None);
        let overdue = check(&silent, &at(5_000), DEADLINE).unwrap_err();
        assert_eq!(overdue.waiting_on, "the pod was not started by its node");
    }

    #[test]
    fn unbound_running_or_finished_pods_have_no_start_deadline() {
        let mut unbound = fixtures::pending_pod("chat-1", None);
        unbound.metadata.creation_timestamp = Some(at(0));
        assert_eq!(check(&unbound, &at(99_999), DEADLINE), Ok(None));
        let mut running = fixtures::running_pod("chat-1", "a-1");
        running.metadata.creation_timestamp = Some(at(0));
        assert_eq!(check(&running, &at(99_999), DEADLINE), Ok(None));
    }
}
