//! A leader created after its workers (pure): llama.cpp's `llama-server --rpc` fails on an
//! `rpc-server` that does not answer yet, so its group's workers come first and the leader
//! once they are all Ready (`state::group_seen_of` says when), built as the group's rank 0
//! and pointed at the workers' pod addresses.
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use vramfit_api::Plan;
use vramfit_planner::{JobInput, NodeClass};

use super::build::{group_pods_of, leader_with_worker_addresses};
use super::names::GroupOf;
use super::spread::GroupSpread;
use crate::capacity::Inventory;
use crate::reconcile::build::{BuildError, recorded_plan};
use crate::reconcile::decide::PodSeen;

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
