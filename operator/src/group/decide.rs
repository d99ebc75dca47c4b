//! A group job's next state (pure). The batch state machine (`reconcile::decide::next_status`)
//! decides the attempts: it sees each attempt's group as one pod ([`super::state`]) and plans,
//! places (a class with the plan's node count of nodes with room: `placement::choose`), steps
//! down, records and reports as for any batch job. This module turns its decision into the
//! group's writes:
//!
//! - the attempt's one pod to create becomes the group's pods ([`super::build`]), with the
//!   group's headless Service and NetworkPolicy;
//! - all or nothing: every pod of the job that is not a member of the running attempt's group
//!   is deleted (the group of an attempt that ended, whichever member ended it; the workers
//!   once the leader succeeded, whose pod stays with the result), and so are the Services and
//!   NetworkPolicies of groups that no longer run. A finished pod goes once the job's status
//!   records its attempt's end, so that its outcome can always be read again; a job that
//!   fails for good keeps its finished pods (no GPUs) for their logs;
//! - the status names the group's pods: the attempt's `members` (rank, pod, node), the leader
//!   as `podName`, "group `<job>-<n>`" where the batch words say "pod".
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use vramfit_api::group::GroupMember;
use vramfit_api::pod_keys::{group_name, group_pod_name};
use vramfit_api::{InferenceJob, InferenceJobStatus, Phase, Plan};
use vramfit_planner::{JobInput, SpecError};

use super::build::{group_pods, without_awaited_leader};
use super::leader::{Ranks, leader_from_workers};
use super::names::GroupOf;
use super::state::{Cause, LeaderRecord, group_seen};
use super::{network_policy, service};
use crate::attempts::{Decision, Observed, next_status};
use crate::capacity::{Capacity, Inventory};
use crate::ownership::ObjectWrite;
use crate::pod::PodSeen;
use crate::pod::build::BuildError;
use crate::settings::GroupSpread;
use crate::settings::Requeues;

/// One of the job's pods, as the store shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedPod {
    /// Its name.
    pub name: String,
    /// Its attempt (from its name, `<job>-<attempt>-<rank>`).
    pub attempt: Option<u32>,
    /// Whether it ended (takes no GPUs).
    pub finished: bool,
}

/// One of the job's group objects (a Service or NetworkPolicy), as a store shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedObject {
    /// Its name (the group's).
    pub name: String,
    /// Its uid.
    pub uid: String,
}

/// What the reconcile observed of a group job.
pub struct GroupObserved<'a> {
    /// The job.
    pub job: &'a InferenceJob,
    /// The validated spec, or why it is invalid.
    pub input: &'a Result<JobInput, SpecError>,
    /// Looks a pod of the job's namespace up by name.
    pub pods: &'a dyn Fn(&str) -> PodSeen,
    /// Whether this process deleted a pod of that name lately.
    pub deleting: &'a dyn Fn(&str) -> bool,
    /// The job's pods, less those being deleted.
    pub owned: &'a [OwnedPod],
    /// Looks the job's Service of a group up by name (the store's copy, anyone's).
    pub service: &'a dyn Fn(&str) -> Option<Arc<Service>>,
    /// Looks the NetworkPolicy of a group up by name (the store's copy, anyone's).
    pub network_policy: &'a dyn Fn(&str) -> Option<Arc<NetworkPolicy>>,
    /// The job's group Services.
    pub owned_services: &'a [OwnedObject],
    /// The job's group NetworkPolicies.
    pub owned_network_policies: &'a [OwnedObject],
    /// Classes and nodes.
    pub inventory: &'a Inventory,
    /// Free GPUs per class for a new group (the job's own pods count as leaving).
    pub capacity: &'a dyn Fn() -> Capacity,
    /// Now.
    pub now: Time,
    /// Whether a group's pods each need a node of their own.
    pub spread: GroupSpread,
    /// The node model caches, when the job uses them (`--model-cache`): read only when a
    /// group is made.
    pub model_cache: &'a crate::model_cache::view::LazyView<'a>,
}

/// What to do for a group job.
#[derive(Debug)]
pub struct GroupDecision {
    /// The batch decision: status, events, metrics, requeue (its one pod is the group's).
    pub decision: Decision,
    /// Pods to delete, before anything is created.
    pub delete_pods: Vec<String>,
    /// The group's pods to create, leader first, with their plan.
    pub create_pods: Vec<Pod>,
    /// The plan of the created pods (for the reservation ledger).
    pub created_plan: Option<Plan>,
    /// The group's pods whose labels or annotations change (server-side applied).
    pub apply_pods: Vec<Pod>,
    /// The running group's headless Service.
    pub service: ObjectWrite<Service>,
    /// The running group's NetworkPolicy.
    pub network_policy: ObjectWrite<NetworkPolicy>,
    /// Services of groups that no longer run.
    pub delete_services: Vec<ObjectWrite<Service>>,
    /// NetworkPolicies of groups that no longer run.
    pub delete_network_policies: Vec<ObjectWrite<NetworkPolicy>>,
}

/// The attempt whose group runs (or is to run) after `status`, and its size.
pub fn running_group(status: &InferenceJobStatus) -> Option<(u32, u32)> {
    if status.phase.is_some_and(Phase::is_terminal) {
        return None;
    }
    let last = status.attempts.last()?;
    if last.outcome.is_some() || last.number != status.attempt_count {
        return None;
    }
    let nodes = status.plan.as_ref().map_or(1, Plan::nodes);
    Some((last.number, nodes))
}

/// Decides a group job's next state and writes.
pub fn next_group(
    obs: &GroupObserved<'_>,
    requeues: &Requeues,
) -> Result<GroupDecision, BuildError> {
    let job_name = obs.job.name_any();
    let old = obs.job.status.clone().unwrap_or_default();
    let current = old.attempt_count;
    let causes = std::cell::RefCell::new(Vec::<(u32, Cause)>::new());
    let leader_due = std::cell::RefCell::new(Vec::<u32>::new());
    let leader_record = |attempt: u32| {
        let members = old.attempts.iter().find(|a| a.number == attempt);
        LeaderRecord::of(members.map_or(&[][..], |a| &a.members[..]))
    };
    // The batch machine looks an attempt's pod up by the group's name (or, once recorded, the
    // leader's): it sees the group as one pod.
    let as_one_pod = |name: &str| {
        for attempt in [current, current + 1].into_iter().filter(|a| *a > 0) {
            if name == group_name(&job_name, attempt)
                || name == group_pod_name(&job_name, attempt, 0)
            {
                let leader = leader_record(attempt);
                let seen = group_seen(&job_name, attempt, leader, obs.pods, obs.deleting);
                if let Some(cause) = seen.cause {
                    causes.borrow_mut().push((attempt, cause));
                }
                if seen.leader_due {
                    leader_due.borrow_mut().push(attempt);
                }
                return seen.seen;
            }
        }
        (obs.pods)(name)
    };
    let batch = Observed {
        job: obs.job,
        input: obs.input,
        pods: &as_one_pod,
        inventory: obs.inventory,
        capacity: obs.capacity,
        now: obs.now.clone(),
        model_cache: obs.model_cache,
    };
    let mut decision = next_status(&batch, requeues)?;
    let running = running_group(&decision.status);

    let mut create_pods = Vec::new();
    let mut apply_pods = Vec::new();
    if let (Some(base), Some(plan), Ok(input)) =
        (&decision.apply_pod, &decision.applied_plan, obs.input)
    {
        let attempt = decision.status.attempt_count;
        let pods = group_pods(base, input, plan, &job_name, attempt, obs.spread)?;
        if decision.create_pod {
            // A leader that waits for its workers comes once they are Ready.
            create_pods = without_awaited_leader(pods, plan);
        } else {
            apply_pods = super::cache_hook::metadata_applies(obs, pods);
        }
    }
    let mut created_plan = (!create_pods.is_empty())
        .then(|| decision.applied_plan.clone())
        .flatten();
    if let Some((attempt, _)) = running_group(&decision.status)
        && create_pods.is_empty()
        && leader_due.borrow().contains(&attempt)
        && let Some((leader, plan)) = awaited_leader(obs, attempt)?
    {
        create_pods.push(leader);
        created_plan = Some(plan);
    }

    let delete_pods = pods_to_delete(obs, &old, &decision.status, running);
    let (service, network_policy) = match running {
        Some((attempt, _)) => {
            let group = group_name(&job_name, attempt);
            (
                service_write(obs, &group)?,
                network_policy_write(obs, &group)?,
            )
        }
        None => (ObjectWrite::Keep, ObjectWrite::Keep),
    };
    let running_name = running.map(|(attempt, _)| group_name(&job_name, attempt));
    let keep = |name: &str| running_name.as_deref() == Some(name);
    let owned = |objects: &[OwnedObject]| {
        objects
            .iter()
            .map(|o| (o.name.clone(), o.uid.clone()))
            .collect::<Vec<_>>()
    };
    let delete_services = super::stale_deletes(owned(obs.owned_services), keep);
    let delete_network_policies = super::stale_deletes(owned(obs.owned_network_policies), keep);

    let created: Vec<String> = create_pods.iter().map(|p| p.name_any()).collect();
    name_the_group(
        obs,
        &mut decision,
        &old,
        &causes.borrow(),
        running,
        &created,
    );
    decision.delete_pod = None;
    super::cache_hook::leader_weights(obs, &mut decision.status, &create_pods);
    Ok(GroupDecision {
        decision,
        delete_pods,
        create_pods,
        created_plan,
        apply_pods,
        service,
        network_policy,
        delete_services,
        delete_network_policies,
    })
}

/// The leader of `attempt`'s group, whose workers are all Ready: the attempt's one-pod build
/// ([`leader_from_workers`]).
fn awaited_leader(
    obs: &GroupObserved<'_>,
    attempt: u32,
) -> Result<Option<(Pod, Plan)>, BuildError> {
    let job_name = obs.job.name_any();
    let Ok(input) = obs.input else {
        return Ok(None);
    };
    let group = GroupOf::Attempt {
        job: &job_name,
        attempt,
    };
    let ranks = Ranks {
        group: &group,
        pods: obs.pods,
        inventory: obs.inventory,
        input,
        spread: obs.spread,
    };
    leader_from_workers(&ranks, |plan, class| {
        let mut leader = crate::pod::build::desired_pod(obs.job, input, plan, class, attempt)?;
        super::cache_hook::mount_like_workers(obs, &mut leader, attempt);
        Ok(leader)
    })
}

/// Every pod of the job but the running group's members (and a succeeded leader): live ones
/// at once (they hold GPUs), finished ones once the stored status records their attempt's end
/// (or the job succeeds now: a finished job is not reconciled again); a job that fails for
/// good keeps its finished pods.
fn pods_to_delete(
    obs: &GroupObserved<'_>,
    old: &InferenceJobStatus,
    new: &InferenceJobStatus,
    running: Option<(u32, u32)>,
) -> Vec<String> {
    let job_name = obs.job.name_any();
    let members: Vec<String> = running
        .map(|(attempt, nodes)| {
            (0..nodes)
                .map(|rank| group_pod_name(&job_name, attempt, rank))
                .collect()
        })
        .unwrap_or_default();
    let succeeded = new.phase == Some(Phase::Succeeded);
    let result = succeeded.then(|| group_pod_name(&job_name, new.attempt_count, 0));
    // A job failed for good keeps its finished pods (they hold no GPUs) for `kubectl logs`:
    // no group follows that would be confused with them.
    let failed_for_good = new.phase == Some(Phase::Failed);
    let recorded_end = |attempt: Option<u32>| {
        attempt.is_some_and(|a| {
            old.attempts
                .iter()
                .any(|recorded| recorded.number == a && recorded.outcome.is_some())
        })
    };
    let mut names: Vec<String> = obs
        .owned
        .iter()
        .filter(|pod| !members.contains(&pod.name) && Some(&pod.name) != result.as_ref())
        .filter(|pod| {
            !pod.finished || (!failed_for_good && (succeeded || recorded_end(pod.attempt)))
        })
        .map(|pod| pod.name.clone())
        .collect();
    // The store's order is a hash map's: sorted, the same decision makes the same requests.
    names.sort();
    names
}

fn service_write(obs: &GroupObserved<'_>, group: &str) -> Result<ObjectWrite<Service>, BuildError> {
    let desired = service::desired_service(obs.job, group)?;
    Ok(match (obs.service)(group) {
        Some(observed) if service::as_desired(&observed, &desired, obs.job) => ObjectWrite::Keep,
        Some(observed)
            if crate::replicas::service::controlled_by(observed.owner_references(), obs.job) =>
        {
            ObjectWrite::Apply {
                uid: observed.uid().unwrap_or_default(),
                object: Box::new(desired),
            }
        }
        // Absent, or not shown as the job's: a create, which never takes over another's.
        _ => ObjectWrite::Create(Box::new(desired)),
    })
}

fn network_policy_write(
    obs: &GroupObserved<'_>,
    group: &str,
) -> Result<ObjectWrite<NetworkPolicy>, BuildError> {
    let desired = network_policy::desired_network_policy(obs.job, group)?;
    Ok(match (obs.network_policy)(group) {
        Some(observed) if network_policy::as_desired(&observed, &desired, obs.job) => {
            ObjectWrite::Keep
        }
        Some(observed)
            if crate::replicas::service::controlled_by(observed.owner_references(), obs.job) =>
        {
            ObjectWrite::Apply {
                uid: observed.uid().unwrap_or_default(),
                object: Box::new(desired),
            }
        }
        _ => ObjectWrite::Create(Box::new(desired)),
    })
}

/// The status and events in the group's words: the leader's pod where the batch machine
/// names the attempt's one pod, "group `<job>-<n>`" in messages, the member that ended an
/// attempt in its message, and each attempt's members.
fn name_the_group(
    obs: &GroupObserved<'_>,
    decision: &mut Decision,
    old: &InferenceJobStatus,
    causes: &[(u32, Cause)],
    running: Option<(u32, u32)>,
    created: &[String],
) {
    let job_name = obs.job.name_any();
    let node_of = |pod_name: &str| match (obs.pods)(pod_name) {
        PodSeen::Observed(pod) => pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
        _ => None,
    };
    let status = &mut decision.status;
    let recent: Vec<u32> = status
        .attempts
        .iter()
        .rev()
        .take(2)
        .map(|a| a.number)
        .collect();
    for attempt in &recent {
        let group = group_name(&job_name, *attempt);
        let leader = group_pod_name(&job_name, *attempt, 0);
        if status.pod_name.as_deref() == Some(group.as_str()) {
            status.pod_name = Some(leader.clone());
        }
        for condition in &mut status.conditions {
            condition.message = group_words(&condition.message, &group, &leader);
        }
        for event in &mut decision.events {
            event.note = group_words(&event.note, &group, &leader);
            if event.pod.as_deref() == Some(group.as_str()) {
                event.pod = Some(leader.clone());
            }
        }
        let newly_ended = |number: u32| {
            !old.attempts
                .iter()
                .any(|a| a.number == number && a.outcome.is_some())
        };
        if let Some(entry) = status.attempts.iter_mut().find(|a| a.number == *attempt) {
            if entry.pod_name == group {
                entry.pod_name = leader.clone();
            }
            // Said once, as the attempt ends: the member that ended it, named first.
            if let Some(message) = entry.message.as_mut().filter(|_| newly_ended(*attempt)) {
                *message = group_words(message, &group, &leader);
                let cause = causes.iter().find(|(a, _)| a == attempt).map(|(_, c)| c);
                if let Some(cause) = cause
                    && entry.outcome.is_some()
                    && !message.contains(&cause.pod)
                {
                    *message = format!("pod {} (rank {}): {message}", cause.pod, cause.rank);
                }
            }
            // The attempt's record keeps the nodes its members were bound to, also those
            // bound since the last status write (a binding alone is not written).
            if entry.outcome.is_some() && newly_ended(*attempt) {
                for member in &mut entry.members {
                    if member.node_name.is_none() {
                        member.node_name = node_of(&member.pod_name);
                    }
                }
            }
        }
    }
    if let Some((attempt, nodes)) = running {
        // The members that exist or are created now: a leader that waits for its workers is
        // listed once created (`LeaderRecord`).
        let exists = |pod_name: &String| {
            created.contains(pod_name) || !matches!((obs.pods)(pod_name), PodSeen::Absent)
        };
        let members: Vec<GroupMember> = (0..nodes)
            .filter_map(|rank| {
                let pod_name = group_pod_name(&job_name, attempt, rank);
                exists(&pod_name).then(|| GroupMember {
                    rank,
                    node_name: node_of(&pod_name),
                    pod_name,
                })
            })
            .collect();
        let leader_node = members.first().and_then(|m| m.node_name.clone());
        if let Some(entry) = status.attempts.iter_mut().find(|a| a.number == attempt) {
            entry.members = members;
        }
        if status.node_name.is_some() {
            status.node_name = leader_node;
        }
        if let Some(kept) = with_old_members(status, old, attempt) {
            *status = kept;
        }
    }
}

/// `status` with `old`'s members (and leader's node) for `attempt`, when that makes it `old`
/// again: members bound one by one are not a status write each (as a lone pod's binding is
/// not written); their nodes come with the next write that has another cause.
fn with_old_members(
    status: &InferenceJobStatus,
    old: &InferenceJobStatus,
    attempt: u32,
) -> Option<InferenceJobStatus> {
    let old_entry = old.attempts.iter().find(|a| a.number == attempt)?;
    let mut kept = status.clone();
    let entry = kept.attempts.iter_mut().find(|a| a.number == attempt)?;
    // A member created since (a leader after its workers) is written at once.
    let pods = |members: &[GroupMember]| -> Vec<String> {
        members.iter().map(|m| m.pod_name.clone()).collect()
    };
    if pods(&old_entry.members) != pods(&entry.members) {
        return None;
    }
    entry.members = old_entry.members.clone();
    kept.node_name = old.node_name.clone();
    (kept == *old && kept != *status).then_some(kept)
}

/// `text` with "pod `<group>`" and "pod `<leader>`" (the names the batch machine gives the
/// attempt's one pod) said as "group `<group>`"; another member's name is left as it is.
pub fn group_words(text: &str, group: &str, leader: &str) -> String {
    let text = replace_pod(text, leader, group);
    replace_pod(&text, group, group)
}

/// `text` with "pod `<name>`" (not followed by more of a name) said as "group `<group>`".
fn replace_pod(text: &str, name: &str, group: &str) -> String {
    let needle = format!("pod {name}");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&needle) {
        let after = &rest[at + needle.len()..];
        let continues = after
            .chars()
            .next()
            .is_some_and(|c| c == '-' || c.is_ascii_alphanumeric());
        out.push_str(&rest[..at]);
        if continues {
            out.push_str(&needle);
        } else {
            out.push_str("group ");
            out.push_str(group);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_is_named_as_a_group_and_its_members_as_pods() {
        let words = |text: &str| group_words(text, "big-1", "big-1-0");
        assert_eq!(
            words("pod big-1 (attempt 1) created: x; pod big-1-1 failed"),
            "group big-1 (attempt 1) created: x; pod big-1-1 failed"
        );
        assert_eq!(
            words("pod big-1-0 is not running yet"),
            "group big-1 is not running yet"
        );
        assert_eq!(words("pod big-1"), "group big-1");
        assert_eq!(words("pod big-12 runs"), "pod big-12 runs");
        assert_eq!(words("pod big-1-01 runs"), "pod big-1-01 runs");
    }
}
