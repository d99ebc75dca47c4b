//! The reasons of the Events vramfit publishes on InferenceJobs: what alerts and `kubectl get
//! events --field-selector reason=…` match on.
use crate::words::status_words;

status_words! {
    /// An Event's reason.
    EventReason {
        /// The attempt's pod was created (note: the pod, the attempt, the class and the plan
        /// summary). One event per placement: there is no separate "Planned" event.
        PodCreated = "PodCreated",
        /// The pod runs.
        Running = "Running",
        /// The job finished successfully.
        Succeeded = "Succeeded",
        /// An attempt ran out of memory (Warning).
        OutOfMemory = "OutOfMemory",
        /// An attempt was killed at its host memory limit (Warning).
        HostOutOfMemory = "HostOutOfMemory",
        /// An attempt's pod did not start within the job's start deadline (Warning).
        StartDeadlineExceeded = "StartDeadlineExceeded",
        /// An attempt's pod was not scheduled to a node within the job's schedule deadline
        /// (Warning).
        ScheduleDeadlineExceeded = "ScheduleDeadlineExceeded",
        /// An attempt's output check found garbage (Warning).
        BadOutput = "BadOutput",
        /// Kubernetes ended an attempt's pod (eviction, preemption, drain, node shutdown)
        /// (Warning).
        Disrupted = "Disrupted",
        /// The kubelet refused a pod at admission (a device plugin's `Allocate` failed, the
        /// node lacked a resource, its affinity no longer matched): the next pod follows
        /// after a backoff (Warning).
        AdmissionRefused = "AdmissionRefused",
        /// The next attempt steps down (note: the step).
        SteppedDown = "SteppedDown",
        /// The job failed for good (Warning).
        Failed = "Failed",
        /// No node class can run the job now (Warning).
        Unschedulable = "Unschedulable",
        /// The spec cannot be planned (Warning).
        InvalidSpec = "InvalidSpec",
        /// The API server refused the attempt's pod (quota, pod security, an invalid volume…)
        /// (Warning).
        PodRejected = "PodRejected",
        /// A pod of the attempt's name exists and is not this job's (Warning).
        PodNameTaken = "PodNameTaken",
        /// The operator failed on this job — an internal error — and retries it with backoff
        /// (Warning).
        ReconcileFailed = "ReconcileFailed",
        /// Served jobs: a replica's pod ended; it is replaced (after a backoff unless it ran
        /// out of memory or Kubernetes evicted, preempted or deleted it) (Warning).
        ReplicaFailed = "ReplicaFailed",
        /// Served jobs: a rolling update replaces a replica's pod (note: the old pod, the new
        /// one, and whether a surge pod or in place).
        RollingUpdate = "RollingUpdate",
        /// Served jobs: no class has room for a surge pod, so a replica is replaced in place
        /// (Warning: it serves nothing until its new pod is Ready).
        InPlaceUpdate = "InPlaceUpdate",
        /// Served jobs: a replica was removed (scale down: the pod and why it was chosen).
        ScaledDown = "ScaledDown",
        /// Served jobs: the first replica became Ready; the endpoint answers.
        Available = "Available",
        /// Served jobs: no replica is Ready any more, or a replica is down for good (Warning).
        Degraded = "Degraded",
        /// Served jobs: the API server refused the job's Service or PodDisruptionBudget
        /// (Warning; retried with backoff).
        ServiceRejected = "ServiceRejected",
        Autoscaled = "Autoscaled",
        AutoscalerStandsAside = "AutoscalerStandsAside",
        InferencePoolUnavailable = "InferencePoolUnavailable",
        /// Served jobs: an adapter of `serve.adapters` is refused; the replicas keep serving
        /// the last accepted list (Warning).
        AdapterRefused = "AdapterRefused",
        /// Served jobs: the list of adapters was accepted; the replicas roll onto it.
        AdaptersAccepted = "AdaptersAccepted",
    }
}
