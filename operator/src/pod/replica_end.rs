//! Why a served replica's pod ended: the word in status, events and
//! `vramfit_serving_replica_restarts_total{reason}`, and whether its replacement backs off.

/// Why a replica pod ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndKind {
    /// Out of GPU memory: replaced one step down.
    OutOfMemory,
    /// Killed at its host memory limit: replaced with the same plan after a backoff (the spec
    /// must raise its memory).
    HostOutOfMemory,
    /// Ended by Kubernetes (eviction, preemption, drain, node lost): replaced at once.
    Disrupted,
    /// Refused by the kubelet at admission (a device plugin's `Allocate` failed, the node
    /// lacked a resource, its affinity no longer matched): replaced after a backoff, as a
    /// failure of the replica — a node that refuses every pod must not get a new one at once,
    /// forever.
    AdmissionRefused,
    /// Any other failure, or the server exited: replaced after a backoff.
    Failed,
    /// Did not start within the start deadline: deleted and replaced after a backoff.
    StartTimeout,
    /// Not bound to a node within the schedule deadline (a resource, affinity or taint no
    /// node of its class satisfies): deleted, so that it no longer holds its class's GPUs, and
    /// replaced after a backoff.
    ScheduleTimeout,
    /// Gone without vramfit deleting it: replaced at once.
    Deleted,
}

impl EndKind {
    /// Every kind (the restart counter has a series for each from the start).
    pub const ALL: [EndKind; 8] = [
        EndKind::OutOfMemory,
        EndKind::HostOutOfMemory,
        EndKind::Disrupted,
        EndKind::AdmissionRefused,
        EndKind::Failed,
        EndKind::StartTimeout,
        EndKind::ScheduleTimeout,
        EndKind::Deleted,
    ];

    /// The word in status, events and `vramfit_serving_replica_restarts_total{reason}`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndKind::OutOfMemory => "OutOfMemory",
            EndKind::HostOutOfMemory => "HostOutOfMemory",
            EndKind::Disrupted => "Disrupted",
            EndKind::AdmissionRefused => "AdmissionRefused",
            EndKind::Failed => "Failed",
            EndKind::StartTimeout => "StartTimeout",
            EndKind::ScheduleTimeout => "ScheduleTimeout",
            EndKind::Deleted => "Deleted",
        }
    }

    /// Whether the replacement waits for the replica's backoff: not when Kubernetes took a
    /// running pod away (evicted, preempted, drained, deleted) nor when a step down changes
    /// what runs (out of memory).
    pub fn backs_off(self) -> bool {
        matches!(
            self,
            EndKind::HostOutOfMemory
                | EndKind::AdmissionRefused
                | EndKind::Failed
                | EndKind::StartTimeout
                | EndKind::ScheduleTimeout
        )
    }
}
