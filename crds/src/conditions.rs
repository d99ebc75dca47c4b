//! The InferenceJob's status conditions: their types and reasons as Rust types, and the one way
//! vramfit sets them ([`ConditionsUpdate`]). The status keeps plain strings (Kubernetes'
//! condition shape), so conditions another writer added are kept as they are.
//!
//! `lastTransitionTime` changes only when a condition's status changes, so that a reconcile
//! that learns nothing new writes nothing.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::Condition;
use crate::words::status_words;

status_words! {
    /// The condition types vramfit sets, in the order it writes them.
    ConditionType {
        /// A pod exists for the current attempt (True), or why not (False: `NoClassFits`, ...).
        Scheduled = "Scheduled",
        /// The workload runs (True), or why not (False: `PodPending`, `Succeeded`, ...).
        Ready = "Ready",
        /// The spec cannot be planned (True, with the message); False once it can.
        InvalidSpec = "InvalidSpec",
        /// An attempt ran out of memory (True, with the step taken or why none is left).
        OutOfMemory = "OutOfMemory",
        /// The container's command is a shell, which never sees the flags vramfit appends to
        /// its args (True, `ShellCommand`); False once it is not. Unset for jobs that never had
        /// one.
        FlagsUnreachable = "FlagsUnreachable",
        /// The operator failed on this job — an internal error, a bug — (True, `InternalError`,
        /// with the error); the job is retried with backoff and no other job is affected.
        /// False (`Reconciled`) once a reconcile of it succeeds. Unset for jobs that never had
        /// one.
        ReconcileFailed = "ReconcileFailed",
        /// `model.huggingFace` was read (True, `ModelRead`), is being read (False,
        /// `ModelResolving`), or could not be read (False, `Hub…`, retried with backoff).
        /// Unset for jobs without `model.huggingFace`.
        ModelResolved = "ModelResolved",
        /// Served jobs: at least one replica is Ready, so the endpoint answers (True,
        /// `Serving`); False with `NoReplicaReady` or `ScaledToZero`.
        Available = "Available",
        /// Served jobs: replicas are being created, replaced or rolled (True: `ScalingUp`,
        /// `ScalingDown`, `RollingUpdate`, `ReplicasStarting`); False (`UpToDate`) once every
        /// replica runs the current spec and is Ready.
        Progressing = "Progressing",
        /// Served jobs: a replica is down for a reason waiting does not cure (True:
        /// `CrashLoop`, `NoClassFits`, `NoStepLeft`, `HostOutOfMemory`, `ServiceNameTaken`,
        /// `PodDisruptionBudgetNameTaken`, `ServiceRejected`); False
        /// (`AsExpected`) otherwise.
        Degraded = "Degraded",
        Autoscaling = "Autoscaling",
        /// Served jobs with `serve.adapters`: every adapter is accepted and in
        /// `status.adapters` (True, `AdaptersAccepted`), or one is refused (False, with the
        /// reason): the replicas are then left as they are, serving the last accepted list.
        /// Unset for jobs without adapters.
        AdaptersReady = "AdaptersReady",
    }
}

status_words! {
    /// Condition reasons.
    Reason {
        /// Scheduled=False before a plan exists.
        NotPlanned = "NotPlanned",
        /// Scheduled=True: the attempt's pod was created.
        PodCreated = "PodCreated",
        /// Scheduled=True: the attempt's pod is bound to a node.
        PodBound = "PodBound",
        /// Scheduled=False: no node class can run the job now.
        NoClassFits = "NoClassFits",
        /// Scheduled=False: the API server refused the attempt's pod.
        PodRejected = "PodRejected",
        /// Scheduled=False: a pod with the attempt's name exists and is not the job's.
        PodNameTaken = "PodNameTaken",
        /// Scheduled=False: the kubelet refused the last attempt's pod at admission; the
        /// next attempt waits for its backoff (the message says until when).
        AdmissionRefused = "AdmissionRefused",
        /// Scheduled=False: the next attempt waits for a node to download its model into the
        /// node cache (the message names the node and says since when).
        WaitingForModel = "WaitingForModel",
        /// Ready=True: the pod runs.
        Running = "Running",
        /// Ready=False: the pod waits for a node, an image, a start.
        PodPending = "PodPending",
        /// Ready=False: no pod runs (nothing planned yet, or between attempts).
        NotRunning = "NotRunning",
        /// Ready=False: the job finished successfully.
        Succeeded = "Succeeded",
        /// Ready=False: the pod failed with an error other than out of memory.
        PodFailed = "PodFailed",
        /// Ready=False, OutOfMemory=True: out of memory with no attempt left.
        AttemptsExhausted = "AttemptsExhausted",
        /// Ready=False, OutOfMemory=True: out of memory with no step left to take.
        NoStepLeft = "NoStepLeft",
        /// InvalidSpec=True (and Scheduled=False while it is).
        InvalidSpec = "InvalidSpec",
        /// InvalidSpec=False.
        SpecValid = "SpecValid",
        /// Ready=False, OutOfMemory=True: killed at the host memory limit, which no GPU step
        /// down cures.
        HostOutOfMemory = "HostOutOfMemory",
        /// Ready=False: the output check found garbage and nothing is left to change (already
        /// float16 without flash attention) or no attempt is left.
        BadOutput = "BadOutput",
        /// Ready=False: the pod could not start (its image or container configuration) within
        /// the start deadline.
        StartDeadlineExceeded = "StartDeadlineExceeded",
        /// Ready=False: the attempt's pod was not scheduled to a node within the schedule
        /// deadline, and no other class is left to try (or no attempt is left).
        ScheduleDeadlineExceeded = "ScheduleDeadlineExceeded",
        /// OutOfMemory=False.
        NoOutOfMemory = "NoOutOfMemory",
        /// FlagsUnreachable=True: the command is a shell (`sh -c …`).
        ShellCommand = "ShellCommand",
        /// FlagsUnreachable=False.
        FlagsAppended = "FlagsAppended",
        /// OutOfMemory=True: a step down was taken (or waits for room to be taken).
        SteppedDown = "SteppedDown",
        /// ReconcileFailed=True: the operator failed on this job (an internal error).
        InternalError = "InternalError",
        /// ReconcileFailed=False: the last reconcile of the job succeeded.
        Reconciled = "Reconciled",
        /// ModelResolved=True: the Hub repository's numbers are in `status.resolvedModel`.
        ModelRead = "ModelRead",
        /// AdaptersReady=True: every adapter of `serve.adapters` is accepted.
        AdaptersAccepted = "AdaptersAccepted",
        /// AdaptersReady=False: no InferenceJob of that name in the namespace.
        AdapterJobNotFound = "AdapterJobNotFound",
        /// AdaptersReady=False: the job named is not a fine-tuning job.
        AdapterNotTuning = "AdapterNotTuning",
        /// AdaptersReady=False: the fine-tuning job trains every parameter (`full`): it writes
        /// a model, not an adapter.
        AdapterNotLora = "AdapterNotLora",
        /// AdaptersReady=False: the adapter was trained on another model than the served one.
        AdapterBaseMismatch = "AdapterBaseMismatch",
        /// AdaptersReady=False: the fine-tuning job has not succeeded (yet).
        AdapterJobNotSucceeded = "AdapterJobNotSucceeded",
        /// AdaptersReady=False: the fine-tuning run reported no adapter (or a malformed one).
        AdapterNotReported = "AdapterNotReported",
        /// AdaptersReady=False: the run wrote no file the served runtime loads (a GGUF for
        /// llama.cpp, `adapter_config.json` and weights for vLLM).
        AdapterFileMissing = "AdapterFileMissing",
        /// AdaptersReady=False: the adapter's rank is above what the runtime allows.
        AdapterRankTooHigh = "AdapterRankTooHigh",
        /// AdaptersReady=False: the fine-tuning job's output volume is gone with its pod
        /// (`emptyDir`, ephemeral) or unset.
        AdapterNoOutputVolume = "AdapterNoOutputVolume",
        /// AdaptersReady=False: the job has a volume of the name vramfit gives an adapter's.
        AdapterVolumeNameTaken = "AdapterVolumeNameTaken",
        /// ModelResolved=False: the operator is reading the Hub repository.
        ModelResolving = "ModelResolving",
        /// ModelResolved=False: the repository, revision or its config.json does not exist.
        HubNotFound = "HubNotFound",
        /// ModelResolved=False: the Hub refused the token (401) or the model is gated (403).
        HubUnauthorized = "HubUnauthorized",
        /// ModelResolved=False: the Hub did not answer in time.
        HubTimeout = "HubTimeout",
        /// ModelResolved=False: the Hub could not be reached or failed (5xx, network).
        HubUnavailable = "HubUnavailable",
        /// ModelResolved=False: a file is malformed, too large, or not a Hugging Face model.
        HubInvalid = "HubInvalid",
        /// Served jobs, Ready/Available=True: at least one replica answers on the endpoint.
        Serving = "Serving",
        /// Served jobs, Ready/Available=False: replicas exist or wait, none is Ready.
        NoReplicaReady = "NoReplicaReady",
        /// Served jobs, Ready/Available=False: `serve.replicas` is 0.
        ScaledToZero = "ScaledToZero",
        /// Served jobs, Progressing=True: replicas are being added.
        ScalingUp = "ScalingUp",
        /// Served jobs, Progressing=True: replicas are being removed.
        ScalingDown = "ScalingDown",
        /// Served jobs, Progressing=True: replicas are replaced one at a time after a spec
        /// change.
        RollingUpdate = "RollingUpdate",
        /// Served jobs, Progressing=True: replicas start (load their model) or come back after
        /// a failure.
        ReplicasStarting = "ReplicasStarting",
        /// Served jobs, Progressing=False: every replica runs the current spec and is Ready.
        UpToDate = "UpToDate",
        /// Served jobs, Degraded=True: a replica failed again and again; its pod comes back
        /// after an exponential backoff.
        CrashLoop = "CrashLoop",
        /// Served jobs, Degraded=True: a Service of the job's name exists and is not this
        /// job's (vramfit leaves it alone).
        ServiceNameTaken = "ServiceNameTaken",
        /// Served jobs, Degraded=True: a PodDisruptionBudget of the job's name exists and is
        /// not this job's (vramfit leaves it alone).
        PodDisruptionBudgetNameTaken = "PodDisruptionBudgetNameTaken",
        /// Groups, Degraded=True: a NetworkPolicy of the group's name exists and is not this
        /// job's (vramfit leaves it alone and creates no pod of the group unguarded).
        NetworkPolicyNameTaken = "NetworkPolicyNameTaken",
        /// Served jobs, Degraded=True: the API server refused the job's Service or
        /// PodDisruptionBudget (retried with backoff).
        ServiceRejected = "ServiceRejected",
        /// Served jobs, Degraded=False.
        AsExpected = "AsExpected",
        ScaledUp = "ScaledUp",
        ScaledDown = "ScaledDown",
        WithinTarget = "WithinTarget",
        Stabilizing = "Stabilizing",
        AtMaxReplicas = "AtMaxReplicas",
        ManualChange = "ManualChange",
        MetricsUnavailable = "MetricsUnavailable",
        ExternalAutoscaler = "ExternalAutoscaler",
    }
}

/// `True` or `False`.
pub fn status_word(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

/// Sets conditions on a list, all for one generation at one moment:
///
/// ```
/// # use vramfit_api::conditions::{ConditionType, ConditionsUpdate, Reason};
/// # use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
/// # let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
/// let mut list = Vec::new();
/// ConditionsUpdate::new(&mut list, Some(3), &now)
///     .set(ConditionType::Ready, false, Reason::PodPending, "pulling the image")
///     .set(ConditionType::Scheduled, true, Reason::PodBound, "on node a-1");
/// assert_eq!(list.len(), 2);
/// ```
pub struct ConditionsUpdate<'a> {
    list: &'a mut Vec<Condition>,
    generation: Option<i64>,
    now: &'a Time,
}

impl<'a> ConditionsUpdate<'a> {
    /// Updates `list` for spec `generation` at `now`.
    pub fn new(list: &'a mut Vec<Condition>, generation: Option<i64>, now: &'a Time) -> Self {
        Self {
            list,
            generation,
            now,
        }
    }

    /// Sets condition `type_`, keeping its transition time when its status does not change.
    pub fn set(
        &mut self,
        type_: ConditionType,
        status: bool,
        reason: Reason,
        message: impl Into<String>,
    ) -> &mut Self {
        let status = status_word(status);
        let message = message.into();
        match self.list.iter_mut().find(|c| c.type_ == type_.as_str()) {
            Some(existing) => {
                if existing.status != status {
                    existing.last_transition_time = self.now.clone();
                }
                existing.status = status.to_string();
                existing.reason = reason.as_str().to_string();
                existing.message = message;
                existing.observed_generation = self.generation;
            }
            None => self.list.push(Condition {
                type_: type_.as_str().to_string(),
                status: status.to_string(),
                reason: reason.as_str().to_string(),
                message,
                observed_generation: self.generation,
                last_transition_time: self.now.clone(),
            }),
        }
        self
    }
}

/// The condition of a type, if set.
pub fn get(conditions: &[Condition], type_: ConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == type_.as_str())
}

/// Whether the condition of a type is set and True.
pub fn is_true(conditions: &[Condition], type_: ConditionType) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Puts the conditions in [`ConditionType::ALL`]'s order, others after (stable output,
/// stable diffs).
pub fn sort(conditions: &mut [Condition]) {
    let all = ConditionType::ALL;
    let rank = |c: &Condition| {
        all.iter()
            .position(|t| t.as_str() == c.type_)
            .unwrap_or(all.len())
    };
    conditions.sort_by_key(rank);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn transition_time_moves_only_with_status() {
        let mut conditions = Vec::new();
        let ready = ConditionType::Ready;
        ConditionsUpdate::new(&mut conditions, Some(1), &at(10)).set(
            ready,
            false,
            Reason::PodPending,
            "waiting",
        );
        ConditionsUpdate::new(&mut conditions, Some(2), &at(20)).set(
            ready,
            false,
            Reason::PodPending,
            "pulling",
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, at(10));
        assert_eq!(conditions[0].message, "pulling");
        assert_eq!(conditions[0].observed_generation, Some(2));
        ConditionsUpdate::new(&mut conditions, Some(2), &at(30))
            .set(ready, true, Reason::Running, "runs")
            .set(ConditionType::Scheduled, true, Reason::PodCreated, "");
        assert_eq!(conditions[0].last_transition_time, at(30));
        assert!(is_true(&conditions, ready));
        sort(&mut conditions);
        assert_eq!(conditions[0].type_, "Scheduled");
    }

    #[test]
    fn words_are_the_status_strings_and_parse_back() {
        assert_eq!(ConditionType::OutOfMemory.as_str(), "OutOfMemory");
        assert_eq!(
            Reason::StartDeadlineExceeded.to_string(),
            "StartDeadlineExceeded"
        );
        for reason in Reason::ALL {
            assert_eq!(Reason::parse(reason.as_str()), Some(*reason));
        }
        assert_eq!(ConditionType::parse("SomeoneElses"), None);
    }
}
