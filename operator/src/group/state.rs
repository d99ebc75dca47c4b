//! Where a group stands, from its pods (pure), told as one pod: the batch state machine
//! (`reconcile::decide`) follows an attempt through one pod, so a group is shown to it as the
//! one pod whose state is the group's:
//!
//! | the group's pods | the one pod shown |
//! |---|---|
//! | none exists | absent (the attempt's group is created, or created again) |
//! | a name is taken by a pod the job does not control | foreign (the job waits for it to go) |
//! | created moments ago, not all in the store yet | applied, with the plan |
//! | llama.cpp: the workers, the leader not created yet (the status lists no rank 0) | the worker furthest behind; once every worker is Ready, applied, and the leader is due |
//! | the leader (rank 0) Succeeded | the leader: the job succeeds with its result |
//! | a pod failed | that pod: the attempt ends with its outcome (out of memory → one step down) |
//! | a pod is gone or being deleted | a pod ended by Kubernetes: the same plan again, in a new group |
//! | llama.cpp: a worker's address is no longer the one the leader's host aliases name (the worker made again, or its sandbox) | as a pod gone |
//! | not all bound | the first unbound pod: the schedule deadline counts from its creation |
//! | all bound, one not running yet | that pod: the start deadline counts from its binding |
//! | all running (a worker that ended well waits for the leader) | the leader, running |
//!
//! The pod shown carries the leader's name, labels and annotations (plan, spec hash), under
//! the group's name (`<job>-<attempt>`, the name the batch machine gives the attempt's pod).
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use vramfit_api::group::MAX_GROUP_NODES;

use super::names::GroupOf;
use crate::pod::PodSeen;
use crate::pod::build::recorded_plan;
use crate::pod::outcome::{PodState, classify};

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
    /// The leader is to be created now: its engine starts it after the workers
    /// (`GroupEngine::leader_waits_for_workers`), and every worker is Ready.
    pub leader_due: bool,
}

/// Whether the group's leader was created: the job's status lists rank 0 among the group's
/// members (a leader that waits for its workers is listed once created). A leader missing
/// that was never created is awaited; one that was is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaderRecord {
    /// The status lists the leader.
    Listed,
    /// It does not (yet).
    NotListed,
}

impl LeaderRecord {
    /// Whether `members` lists rank 0.
    pub fn of(members: &[vramfit_api::group::GroupMember]) -> Self {
        if members.iter().any(|m| m.rank == 0) {
            LeaderRecord::Listed
        } else {
            LeaderRecord::NotListed
        }
    }
}

/// How `job_name`'s group of `attempt` stands. `pods` looks a pod up by name, `deleting` says
/// whether this process deleted a pod lately (the store may not show it yet).
pub fn group_seen(
    job_name: &str,
    attempt: u32,
    leader: LeaderRecord,
    pods: &dyn Fn(&str) -> PodSeen,
    deleting: &dyn Fn(&str) -> bool,
) -> GroupSeen {
    let group = GroupOf::Attempt {
        job: job_name,
        attempt,
    };
    group_seen_of(&group, Ends::WithTheLeader, leader, pods, deleting)
}

/// When a member that exited well ends its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ends {
    /// A batch run: a worker done before the leader waits for it; the leader's success ends
    /// the group well.
    WithTheLeader,
    /// A server: any member that exits, even well, ends the group (it serves no more).
    WithAnyMember,
}

/// How `group` stands, as [`group_seen`] says, with `ends` saying what a member's exit means.
pub fn group_seen_of(
    group_of: &GroupOf<'_>,
    ends: Ends,
    leader: LeaderRecord,
    pods: &dyn Fn(&str) -> PodSeen,
    deleting: &dyn Fn(&str) -> bool,
) -> GroupSeen {
    let seen = |seen| GroupSeen {
        seen,
        cause: None,
        leader_due: false,
    };
    // Every rank a group may have: a group's size is in its pods' plan, which a missing
    // leader cannot tell.
    let members: Vec<(u32, String, PodSeen)> = (0..MAX_GROUP_NODES)
        .map(|rank| {
            let name = group_of.member(rank);
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
    // A leader that starts after its workers and was never created is awaited, not lost.
    let awaited_leader = leader == LeaderRecord::NotListed
        && plan
            .group
            .as_ref()
            .is_some_and(|g| g.engine.leader_waits_for_workers())
        && !members.iter().any(|(rank, _, _)| *rank == 0);
    let first_rank = u32::from(awaited_leader);
    let observed: Vec<(u32, &String, &Arc<Pod>)> = members
        .iter()
        .filter_map(|(rank, name, found)| match found {
            PodSeen::Observed(pod) => Some((*rank, name, pod)),
            _ => None,
        })
        .collect();
    let group = group_of.name();
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
    let ended = |pod: &Pod| match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Failed") => true,
        Some("Succeeded") => ends == Ends::WithAnyMember,
        _ => false,
    };
    let failed = observed.iter().find(|(_, _, pod)| ended(pod));
    if let Some((rank, name, pod)) = failed {
        return GroupSeen {
            seen: PodSeen::Observed(Arc::new(as_group(pod))),
            cause: Some(Cause {
                rank: *rank,
                pod: (*name).clone(),
            }),
            leader_due: false,
        };
    }
    let lost = (first_rank..size).find_map(|rank| {
        let name = group_of.member(rank);
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
        // The leader by its role: the batch words say "group" for "pod <leader>".
        let message = if rank == 0 {
            format!("the leader {name} of group {group} {what}")
        } else {
            format!("pod {name} (rank {rank}) of group {group} {what}")
        };
        return GroupSeen {
            seen: PodSeen::Observed(Arc::new(lost_group(&template, &group, message))),
            cause: Some(Cause { rank, pod: name }),
            leader_due: false,
        };
    }
    // A leader pointed at a worker's old address (llama.cpp's host aliases) reaches it no
    // more, and its aliases cannot change: the group is lost, replaced whole.
    if let Some((_, _, leader)) = leader
        && let Some(rank) = super::leader::moved_worker(group_of, leader, &plan, pods)
    {
        let name = group_of.member(rank);
        let message = format!(
            "pod {name} (rank {rank}) of group {group} has a new address its leader is not pointed at"
        );
        return GroupSeen {
            seen: PodSeen::Observed(Arc::new(lost_group(&template, &group, message))),
            cause: Some(Cause { rank, pod: name }),
            leader_due: false,
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
    if awaited_leader && behind.is_none() {
        return workers_before_their_leader(&observed, &template, &group, plan);
    }
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
                leader_due: false,
            }
        }
        None => seen(PodSeen::Observed(Arc::new(as_group(&template)))),
    }
}

/// A group whose workers all run and whose leader is not created yet: a worker not Ready
/// yet (its server does not listen) is shown as not running, so that the start deadline
/// counts on; once every worker is Ready, the group is the leader about to be created.
fn workers_before_their_leader(
    observed: &[(u32, &String, &Arc<Pod>)],
    template: &Pod,
    group: &str,
    plan: Arc<vramfit_api::Plan>,
) -> GroupSeen {
    let not_ready = observed.iter().find(|(_, _, pod)| !ready_with_address(pod));
    match not_ready {
        Some((rank, name, pod)) => {
            let mut shown = shown_as_group(pod, template, group);
            if let Some(status) = shown.status.as_mut() {
                status.phase = Some("Pending".to_string());
            }
            GroupSeen {
                seen: PodSeen::Observed(Arc::new(shown)),
                cause: Some(Cause {
                    rank: *rank,
                    pod: (*name).clone(),
                }),
                leader_due: false,
            }
        }
        None => GroupSeen {
            seen: PodSeen::Applied(plan),
            cause: None,
            leader_due: true,
        },
    }
}

/// Whether `pod` is Ready and has an address (the leader is pointed at it).
pub fn ready_with_address(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let ready = status
        .conditions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ready && status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::group::build::group_pods;
    use crate::group::testing::{group_job, two_node_plan};
    use crate::pod::build::desired_pod;
    use crate::settings::GroupSpread;
    use vramfit_planner::resolve_job;

    /// The two pods of `big`'s group for attempt 1, created.
    fn pods() -> Vec<Pod> {
        let job = group_job("big", 2);
        let input = resolve_job(&job.spec).unwrap();
        let class = fixtures::class("a10g", 4);
        let plan = two_node_plan(&input, &class);
        let base = desired_pod(&job, &input, &plan, &class, 1).unwrap();
        group_pods(&base, &input, &plan, "big", 1, GroupSpread::Node)
            .unwrap()
            .into_iter()
            .map(fixtures::created)
            .collect()
    }

    fn seen(pods: &[Pod]) -> GroupSeen {
        let lookup = |name: &str| match pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
        {
            Some(pod) => PodSeen::Observed(Arc::new(pod.clone())),
            None => PodSeen::Absent,
        };
        group_seen("big", 1, LeaderRecord::Listed, &lookup, &|_| false)
    }

    fn state(seen: &GroupSeen) -> PodState {
        match &seen.seen {
            PodSeen::Observed(pod) => {
                assert_eq!(
                    pod.metadata.name.as_deref(),
                    Some("big-1"),
                    "the group's name"
                );
                classify(pod)
            }
            other => panic!("not observed: {other:?}"),
        }
    }

    #[test]
    fn a_member_gone_ends_the_group_as_kubernetes_ended_it() {
        let pods = pods();
        let running = fixtures::as_running(pods[0].clone(), "a-1");
        let seen = seen(&[running]);
        match state(&seen) {
            PodState::Disrupted { message, .. } => {
                assert_eq!(message, "pod big-1-1 (rank 1) of group big-1 is gone");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(seen.cause.map(|c| c.rank), Some(1));
    }

    #[test]
    fn a_worker_done_before_the_leader_is_no_failure_and_the_leader_decides() {
        let pods = pods();
        let leader = fixtures::as_running(pods[0].clone(), "a-1");
        let worker = fixtures::as_succeeded(pods[1].clone(), "a-2");
        assert!(matches!(
            state(&seen(&[leader.clone(), worker.clone()])),
            PodState::Running { .. }
        ));
        let done = fixtures::as_succeeded(leader, "a-1");
        assert!(matches!(
            state(&seen(&[done, worker])),
            PodState::Succeeded { .. }
        ));
    }

    #[test]
    fn a_group_waits_as_its_first_unbound_member_and_runs_once_all_run() {
        let pods = pods();
        let leader = fixtures::as_running(pods[0].clone(), "a-1");
        let unbound = fixtures::as_pending(pods[1].clone(), None);
        let waiting = seen(&[leader.clone(), unbound]);
        assert_eq!(
            state(&waiting),
            PodState::Waiting {
                node: None,
                detail: None
            },
            "not bound while one member is not"
        );
        assert_eq!(waiting.cause.map(|c| c.pod), Some("big-1-1".to_string()));
        let worker = fixtures::as_running(pods[1].clone(), "a-2");
        assert_eq!(
            state(&seen(&[leader, worker])),
            PodState::Running {
                node: Some("a-1".into())
            },
            "the leader's node"
        );
    }

    #[test]
    fn no_pod_is_absent_and_a_pod_the_job_does_not_control_is_foreign() {
        assert!(matches!(seen(&[]).seen, PodSeen::Absent));
        let lookup = |name: &str| {
            if name == "big-1-1" {
                PodSeen::Foreign
            } else {
                PodSeen::Absent
            }
        };
        assert!(matches!(
            group_seen("big", 1, LeaderRecord::Listed, &lookup, &|_| false).seen,
            PodSeen::Foreign
        ));
    }

    /// A llama.cpp group's leader that was never created is awaited while its worker's
    /// server is not Ready, due once it is; one the status lists is lost when missing.
    #[test]
    fn a_leader_not_listed_is_awaited_and_one_listed_is_lost() {
        let job = group_job("big", 2);
        let input = resolve_job(&job.spec).unwrap();
        let class = fixtures::class("a10g", 4);
        let plan = crate::group::testing::rpc_plan(&input, &class);
        let base = desired_pod(&job, &input, &plan, &class, 1).unwrap();
        let worker = fixtures::created(
            group_pods(&base, &input, &plan, "big", 1, GroupSpread::Node).unwrap()[1].clone(),
        );
        let seen_with = |worker: &Pod, leader: LeaderRecord| {
            let lookup = |name: &str| {
                if name == "big-1-1" {
                    PodSeen::Observed(Arc::new(worker.clone()))
                } else {
                    PodSeen::Absent
                }
            };
            group_seen("big", 1, leader, &lookup, &|_| false)
        };
        let running = fixtures::as_running(worker.clone(), "a-2");
        let waiting = seen_with(&running, LeaderRecord::NotListed);
        assert!(!waiting.leader_due);
        assert_eq!(
            state(&waiting),
            PodState::Waiting {
                node: Some("a-2".into()),
                detail: None
            },
            "its server does not listen yet: not running"
        );
        let ready = crate::group::testing::ready_at(worker, "a-2", "10.0.0.9");
        let due = seen_with(&ready, LeaderRecord::NotListed);
        assert!(due.leader_due);
        assert!(matches!(due.seen, PodSeen::Applied(_)));
        let lost = seen_with(&ready, LeaderRecord::Listed);
        assert!(!lost.leader_due);
        match state(&lost) {
            PodState::Disrupted { message, .. } => {
                assert_eq!(message, "the leader big-1-0 of group big-1 is gone");
            }
            other => panic!("{other:?}"),
        }
    }
}
