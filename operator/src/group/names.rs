//! Which group a set of pods forms, and its names (pure): a batch job's attempt
//! (`<job>-<attempt>`, pods `<job>-<attempt>-<rank>`) or a served job's replica pod
//! (`<job>-r<slot>-<n>`, pods `<job>-r<slot>-<n>-<rank>`). One definition of each name, in
//! `vramfit_api::pod_keys`; the peers' DNS names in `vramfit_planner::group::launch`.
use vramfit_api::pod_keys::{
    group_name, group_pod_name, replica_group_name, replica_group_pod_name,
};
use vramfit_planner::group::launch::RankAddress;

/// A group of pods of one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupOf<'a> {
    /// A batch or tuning job's attempt.
    Attempt {
        /// The job's name.
        job: &'a str,
        /// The attempt.
        attempt: u32,
    },
    /// A served job's replica pod number `incarnation` of `slot`.
    Replica {
        /// The job's name.
        job: &'a str,
        /// The replica's slot.
        slot: u32,
        /// The pod's number.
        incarnation: u32,
    },
}

impl GroupOf<'_> {
    /// The group's name (its headless Service's and NetworkPolicy's).
    pub fn name(&self) -> String {
        match *self {
            GroupOf::Attempt { job, attempt } => group_name(job, attempt),
            GroupOf::Replica {
                job,
                slot,
                incarnation,
            } => replica_group_name(job, slot, incarnation),
        }
    }

    /// The pod of `rank`.
    pub fn member(&self, rank: u32) -> String {
        match *self {
            GroupOf::Attempt { job, attempt } => group_pod_name(job, attempt, rank),
            GroupOf::Replica {
                job,
                slot,
                incarnation,
            } => replica_group_pod_name(job, slot, incarnation, rank),
        }
    }

    /// Where `rank` of a group of `nodes` finds its peers.
    pub fn address(&self, namespace: &str, nodes: u32, rank: u32) -> RankAddress {
        match *self {
            GroupOf::Attempt { job, attempt } => {
                RankAddress::of_batch_group(job, namespace, attempt, nodes, rank)
            }
            GroupOf::Replica {
                job,
                slot,
                incarnation,
            } => RankAddress::of_replica_group(job, namespace, (slot, incarnation), nodes, rank),
        }
    }
}
