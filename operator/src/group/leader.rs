//! A leader created after its workers (pure): llama.cpp's `llama-server --rpc` fails on an
//! `rpc-server` that does not answer yet, so its group's workers come first and the leader
//! once they are all Ready (`state::group_seen_of` says when), built as the group's rank 0
//! and pointed at the workers' pod addresses ([`moved_worker`] tells when one of them is no
//! longer where the leader was pointed).
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use vramfit_api::Plan;
use vramfit_api::pod_keys::WORKER_ADDRESSES_ANNOTATION;
use vramfit_planner::{JobInput, NodeClass};

use super::build::{group_pods_of, leader_with_worker_addresses};
use super::names::GroupOf;
use crate::capacity::Inventory;
use crate::pod::PodSeen;
use crate::pod::build::{BuildError, recorded_plan};
use crate::settings::GroupSpread;

/// What building a group's leader reads.
pub struct Ranks<'a> {
    /// The group.
    pub group: &'a GroupOf<'a>,
    /// Looks a pod of the job's namespace up by name.
    pub pods: &'a dyn Fn(&str) -> PodSeen,
    /// Classes and nodes.
    pub inventory: &'a Inventory,
    /// The validated spec.
    pub input: &'a JobInput,
    /// Whether a group's pods each need a node of their own.
    pub spread: GroupSpread,
}

/// The leader of `ranks.group`, from its workers: `one_pod` (the attempt's or the replica's
/// one-pod build) for the plan and class the workers carry, as rank 0, with the workers'
/// annotations (plan, spec hash) and their addresses. None where a worker is not observed or
/// its class is no longer known (the group then waits out its start deadline).
pub fn leader_from_workers(
    ranks: &Ranks<'_>,
    one_pod: impl FnOnce(&Plan, &NodeClass) -> Result<Pod, BuildError>,
) -> Result<Option<(Pod, Plan)>, BuildError> {
    let Some(workers) = observed_workers(ranks.group, ranks.pods) else {
        return Ok(None);
    };
    let Some((plan, class)) = workers.first().and_then(|worker| {
        let plan = recorded_plan(worker)?;
        let class = ranks.inventory.class(&plan.node_class)?.clone();
        Some((plan, class))
    }) else {
        return Ok(None);
    };
    let base = one_pod(&plan, &class)?;
    let pods = group_pods_of(&base, ranks.input, &plan, ranks.group, ranks.spread)?;
    let Some(leader) = pods.into_iter().next() else {
        return Ok(None);
    };
    let leader = leader_with_worker_addresses(leader, ranks.group, &workers, &plan)?;
    Ok(Some((leader, plan)))
}

/// The rank of a worker that the leader's host aliases name at an address the worker no longer
/// has, if any: its pod was made again under its name, or its sandbox was (a node's restart),
/// with a new IP. A pod's host aliases cannot change, so such a leader reaches a worker no
/// more: the group is replaced whole (`state::group_seen_of` shows it lost). Read from the
/// leader's [`WORKER_ADDRESSES_ANNOTATION`] (the pod cache keeps no `hostAliases`); a leader
/// without it, or a worker with no address yet, is not judged.
pub fn moved_worker(
    group: &GroupOf<'_>,
    leader: &Pod,
    plan: &Plan,
    pods: &dyn Fn(&str) -> PodSeen,
) -> Option<u32> {
    let pinned = leader
        .metadata
        .annotations
        .as_ref()?
        .get(WORKER_ADDRESSES_ANNOTATION)?;
    let pinned: Vec<(&str, &str)> = pinned
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .collect();
    let namespace = leader.metadata.namespace.as_deref()?;
    let names = group.address(namespace, plan.nodes(), 0).worker_addresses;
    names.iter().zip(1..).find_map(|(name, rank)| {
        let (_, ip) = pinned.iter().find(|(pinned, _)| pinned == name)?;
        let PodSeen::Observed(worker) = pods(&group.member(rank)) else {
            return None;
        };
        let now = worker.status.as_ref()?.pod_ip.as_deref()?;
        (!now.is_empty() && now != *ip).then_some(rank)
    })
}

/// The workers of `group` (ranks 1 and up) as the store shows them, or None if one is not
/// observed.
fn observed_workers(group: &GroupOf<'_>, pods: &dyn Fn(&str) -> PodSeen) -> Option<Vec<Arc<Pod>>> {
    let first = match pods(&group.member(1)) {
        PodSeen::Observed(pod) => pod,
        _ => return None,
    };
    let size = recorded_plan(&first)?.nodes();
    (1..size)
        .map(|rank| match pods(&group.member(rank)) {
            PodSeen::Observed(pod) => Some(pod),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::group::testing::{group_job, ready_at, rpc_plan};
    use crate::pod::build::desired_pod;
    use vramfit_planner::resolve_job;

    /// A llama.cpp group of two built, its worker Ready at `ip`, its leader pointed at it.
    fn pointed_at(ip: &str) -> (Pod, Pod, Plan) {
        let job = group_job("big", 2);
        let input = resolve_job(&job.spec).unwrap();
        let class = fixtures::class("a10g", 4);
        let plan = rpc_plan(&input, &class);
        let base = desired_pod(&job, &input, &plan, &class, 1).unwrap();
        let group = GroupOf::Attempt {
            job: "big",
            attempt: 1,
        };
        let pods = group_pods_of(&base, &input, &plan, &group, GroupSpread::Node).unwrap();
        let worker = ready_at(pods[1].clone(), "a-2", ip);
        let leader = leader_with_worker_addresses(
            pods[0].clone(),
            &group,
            &[Arc::new(worker.clone())],
            &plan,
        )
        .unwrap();
        (leader, worker, plan)
    }

    #[test]
    fn a_worker_is_moved_once_its_address_is_not_the_one_pinned() {
        let group = GroupOf::Attempt {
            job: "big",
            attempt: 1,
        };
        let (leader, worker, plan) = pointed_at("10.244.0.7");
        let seen = |pod: Pod| move |_: &str| PodSeen::Observed(Arc::new(pod.clone()));
        assert_eq!(
            moved_worker(&group, &leader, &plan, &seen(worker.clone())),
            None
        );
        let moved = ready_at(worker.clone(), "a-2", "10.244.0.8");
        assert_eq!(moved_worker(&group, &leader, &plan, &seen(moved)), Some(1));
        let mut no_address = worker.clone();
        no_address.status.as_mut().unwrap().pod_ip = None;
        assert_eq!(
            moved_worker(&group, &leader, &plan, &seen(no_address)),
            None,
            "not judged before it has an address"
        );
        let mut unpinned = leader;
        unpinned.metadata.annotations = None;
        let moved = ready_at(worker, "a-2", "10.244.0.8");
        assert_eq!(
            moved_worker(&group, &unpinned, &plan, &seen(moved)),
            None,
            "a leader that pins nothing is not judged"
        );
    }
}
