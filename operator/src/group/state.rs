//! Where a group stands, from its pods (pure), told as one pod: the batch state machine
//! (`reconcile::decide`) follows an attempt through one pod, so a group is shown to it as the
//! one pod whose state is the group's:
//!
//! | the group's pods | the one pod shown |
//! |---|---|
//! | none exists | absent (the attempt's group is created, or created again) |
//! | a name is taken by a pod the job does not control | foreign (the job waits for it to go) |
//! | created moments ago, not all in the store yet | applied, with the plan |
//! | the leader (rank 0) Succeeded | the leader: the job succeeds with its result |
//! | a pod failed | that pod: the attempt ends with its outcome (out of memory → one step down) |
//! | a pod is gone or being deleted | a pod ended by Kubernetes: the same plan again, in a new group |
//! | not all bound | the first unbound pod: the schedule deadline counts from its creation |
//! | all bound, one not running yet | that pod: the start deadline counts from its binding |
//! | all running (a worker that ended well waits for the leader) | the leader, running |
//!
//! The pod shown carries the leader's name, labels and annotations (plan, spec hash), under
//! the group's name (`<job>-<attempt>`, the name the batch machine gives the attempt's pod).
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use vramfit_api::group::MAX_GROUP_NODES;
use vramfit_api::pod_keys::{group_name, group_pod_name};

use crate::reconcile::build::recorded_plan;
use crate::reconcile::decide::PodSeen;
use crate::reconcile::pod_outcome::{PodState, classify};

/// The pod of a group that decided how the group stands, when one did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// Its rank.
    pub rank: u32,
    /// Its name.
    pub pod: String,
}

/// A group as one pod, and the pod that decided it (a failed, lost or waiting member).
#[derive(Clone, Debug)]
pub struct GroupSeen {
    /// The group as one pod.
    pub seen: PodSeen,
    /// The member whose state is the group's, when it is not the leader's.
    pub cause: Option<Cause>,
}

/// How `job_name`'s group of `attempt` stands. `pods` looks a pod up by name, `deleting` says
/// whether this process deleted a pod lately (the store may not show it yet).
pub fn group_seen(
    job_name: &str,
    attempt: u32,
    pods: &dyn Fn(&str) -> PodSeen,
    deleting: &dyn Fn(&str) -> bool,
) -> GroupSeen {
    let seen = |seen| GroupSeen { seen, cause: None };
    // Every rank a group may have: a group's size is in its pods' plan, which a missing
    // leader cannot tell.
    let members: Vec<(u32, String, PodSeen)> = (0..MAX_GROUP_NODES)
        .map(|rank| {
            let name = group_pod_name(job_name, attempt, rank);
            let found = pods(&name);
            (rank, name, found)
        })
        .filter(|(_, _, found)| !matches!(found, PodSeen::Absent))
        .collect();
    if members.is_empty() {
        return seen(PodSeen::Absent);
    }
    if members
        .iter()
        .any(|(_, _, found)| matches!(found, PodSeen::Foreign))
    {
        return seen(PodSeen::Foreign);
    }
    let plan = members.iter().find_map(|(_, _, found)| match found {
        PodSeen::Observed(pod) => recorded_plan(pod).map(Arc::new),
        PodSeen::Applied(plan) => Some(plan.clone()),
        _ => None,
    });
    // A pod of the group's name without a plan is not one vramfit made: not adopted.
    let Some(plan) = plan else {
        return seen(PodSeen::Foreign);
    };
    let size = plan.nodes();
    let observed: Vec<(u32, &String, &Arc<Pod>)> = members
        .iter()
        .filter_map(|(rank, name, found)| match found {
            PodSeen::Observed(pod) => Some((*rank, name, pod)),
            _ => None,
        })
        .collect();
    let group = group_name(job_name, attempt);
    let leader = observed.iter().find(|(rank, _, _)| *rank == 0);
    let template = leader
        .or(observed.first())
        .map(|(_, _, pod)| (*pod).clone());
    let Some(template) = template else {
        // Every member was applied moments ago; no store shows one yet.
        return seen(PodSeen::Applied(plan));
    };
    let as_group = |pod: &Pod| shown_as_group(pod, &template, &group);

    // The leader's success ends the job well, whatever the workers do now.
    if let Some((_, _, pod)) = leader
        && matches!(classify(pod), PodState::Succeeded { .. })
    {
        return seen(PodSeen::Observed(Arc::new(as_group(pod))));
    }
    let failed = observed
        .iter()
        .find(|(_, _, pod)| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"));
    if let Some((rank, name, pod)) = failed {
        return GroupSeen {
            seen: PodSeen::Observed(Arc::new(as_group(pod))),
            cause: Some(Cause {
                rank: *rank,
                pod: (*name).clone(),
            }),
        };
    }
    let lost = (0..size).find_map(|rank| {
        let name = group_pod_name(job_name, attempt, rank);
        match members.iter().find(|(r, _, _)| *r == rank) {
            None => Some((rank, name, "is gone")),
            Some((_, _, PodSeen::Observed(pod)))
                if pod.metadata.deletion_timestamp.is_some() || deleting(&name) =>
            {
                Some((rank, name, "is being deleted"))
            }
            _ => None,
        }
    });
    if let Some((rank, name, what)) = lost {
        let message = format!("pod {name} (rank {rank}) of group {group} {what}");
        return GroupSeen {
            seen: PodSeen::Observed(Arc::new(lost_group(&template, &group, message))),
            cause: Some(Cause { rank, pod: name }),
        };
    }
    if members
        .iter()
        .any(|(_, _, found)| matches!(found, PodSeen::Applied(_)))
    {
        return seen(PodSeen::Applied(plan));
    }
    // The member furthest behind: unbound first, then bound and not running.
    let bound = |pod: &Pod| {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    };
    let waiting = |pod: &Pod| matches!(classify(pod), PodState::Waiting { .. });
    let behind = observed
        .iter()
        .find(|(_, _, pod)| waiting(pod) && !bound(pod))
        .or_else(|| observed.iter().find(|(_, _, pod)| waiting(pod)));
    match behind {
        Some((rank, name, pod)) => {
            let mut shown = as_group(pod);
            // Bound: every member is (unbound ones come first); the group's node is the
            // leader's.
            if bound(pod)
                && let Some(spec) = shown.spec.as_mut()
            {
                spec.node_name = template.spec.as_ref().and_then(|s| s.node_name.clone());
            }
            GroupSeen {
                seen: PodSeen::Observed(Arc::new(shown)),
                cause: (*rank != 0).then(|| Cause {
                    rank: *rank,
                    pod: (*name).clone(),
                }),
            }
        }
        None => seen(PodSeen::Observed(Arc::new(as_group(&template)))),
    }
}

/// `member`'s spec and status under the group's name, with the leader's (`template`'s)
/// metadata: its plan and spec hash stand for the group's.
fn shown_as_group(member: &Pod, template: &Pod, group: &str) -> Pod {
    let mut pod = member.clone();
    pod.metadata = template.metadata.clone();
    pod.metadata.name = Some(group.to_string());
    // The member's own times: the deadlines count from its creation.
    pod.metadata.creation_timestamp = member.metadata.creation_timestamp.clone();
    pod.metadata.deletion_timestamp = None;
    pod
}

/// The group as a pod that Kubernetes ended: a member is gone or being deleted.
fn lost_group(template: &Pod, group: &str, message: String) -> Pod {
    let mut pod = shown_as_group(template, template, group);
    pod.status = Some(PodStatus {
        phase: Some("Failed".to_string()),
        conditions: Some(vec![PodCondition {
            type_: "DisruptionTarget".to_string(),
            status: "True".to_string(),
            reason: Some("GroupMemberLost".to_string()),
            message: Some(message),
            ..PodCondition::default()
        }]),
        ..PodStatus::default()
    });
    pod
}
