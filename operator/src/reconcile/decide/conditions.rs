//! Status conditions (pure). Types: `Scheduled`, `Ready`, `InvalidSpec`, `OutOfMemory`,
//! `FlagsUnreachable`.
//! `lastTransitionTime` changes only when a condition's status changes, so that a reconcile
//! that learns nothing new writes nothing.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use vramfit_api::Condition;

/// A pod exists for the current attempt (True), or why not (False: `NoClassFits`, ...).
pub const SCHEDULED: &str = "Scheduled";
/// The workload runs (True), or why not (False: `PodPending`, `Succeeded`, `PodFailed`, ...).
pub const READY: &str = "Ready";
/// The spec cannot be planned (True, with the message); False once it can.
pub const INVALID_SPEC: &str = "InvalidSpec";
/// An attempt ran out of memory (True, with the step taken or why none is left).
pub const OUT_OF_MEMORY: &str = "OutOfMemory";
/// The container's command is a shell, which never sees the flags vramfit appends to its
/// args (True, `ShellCommand`); False once it is not. Unset for jobs that never had one.
pub const FLAGS_UNREACHABLE: &str = "FlagsUnreachable";

/// Every condition type vramfit sets, in the order it writes them.
pub const ALL: [&str; 5] = [
    SCHEDULED,
    READY,
    INVALID_SPEC,
    OUT_OF_MEMORY,
    FLAGS_UNREACHABLE,
];

/// Condition reasons.
pub mod reasons {
    /// Scheduled=False before a plan exists.
    pub const NOT_PLANNED: &str = "NotPlanned";
    /// Scheduled=True: the attempt's pod was created.
    pub const POD_CREATED: &str = "PodCreated";
    /// Scheduled=True: the attempt's pod is bound to a node.
    pub const POD_BOUND: &str = "PodBound";
    /// Scheduled=False: no node class can run the job now.
    pub const NO_CLASS_FITS: &str = "NoClassFits";
    /// Scheduled=False: the API server refused the attempt's pod.
    pub const POD_REJECTED: &str = "PodRejected";
    /// Scheduled=False: a pod with the attempt's name exists and is not the job's.
    pub const POD_NAME_TAKEN: &str = "PodNameTaken";
    /// Ready=True: the pod runs.
    pub const RUNNING: &str = "Running";
    /// Ready=False: the pod waits for a node, an image, a start.
    pub const POD_PENDING: &str = "PodPending";
    /// Ready=False: no pod runs (nothing planned yet, or between attempts).
    pub const NOT_RUNNING: &str = "NotRunning";
    /// Ready=False: the job finished successfully.
    pub const SUCCEEDED: &str = "Succeeded";
    /// Ready=False: the pod failed with an error other than out of memory.
    pub const POD_FAILED: &str = "PodFailed";
    /// Ready=False, OutOfMemory=True: out of memory with no attempt left.
    pub const ATTEMPTS_EXHAUSTED: &str = "AttemptsExhausted";
    /// Ready=False, OutOfMemory=True: out of memory with no step left to take.
    pub const NO_STEP_LEFT: &str = "NoStepLeft";
    /// InvalidSpec=True.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// InvalidSpec=False.
    pub const SPEC_VALID: &str = "SpecValid";
    /// Ready=False, OutOfMemory=True: killed at the host memory limit, which no GPU step
    /// down cures.
    pub const HOST_OUT_OF_MEMORY: &str = "HostOutOfMemory";
    /// Ready=False: the output check found garbage and nothing is left to change (already
    /// float16 without flash attention) or no attempt is left.
    pub const BAD_OUTPUT: &str = "BadOutput";
    /// Ready=False: the pod could not start (its image or container configuration) within
    /// the start deadline.
    pub const START_DEADLINE_EXCEEDED: &str = "StartDeadlineExceeded";
    /// OutOfMemory=False.
    pub const NO_OUT_OF_MEMORY: &str = "NoOutOfMemory";
    /// FlagsUnreachable=True: the command is a shell (`sh -c …`).
    pub const SHELL_COMMAND: &str = "ShellCommand";
    /// FlagsUnreachable=False.
    pub const FLAGS_APPENDED: &str = "FlagsAppended";
    /// OutOfMemory=True: a step down was taken (or waits for room to be taken).
    pub const STEPPED_DOWN: &str = "SteppedDown";
}

/// `True` or `False`.
pub fn status_str(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

/// Sets condition `type_`, keeping its transition time when its status does not change.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: &Time,
) {
    let status = status_str(status).to_string();
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = now.clone();
            }
            existing.status = status;
            existing.reason = reason.to_string();
            existing.message = message;
            existing.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message,
            observed_generation: generation,
            last_transition_time: now.clone(),
        }),
    }
}

/// The condition of a type, if set.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of a type is set and True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Puts the conditions in the [`ALL`] order, others after (stable output, stable diffs).
pub fn sort(conditions: &mut [Condition]) {
    let rank = |c: &Condition| ALL.iter().position(|t| *t == c.type_).unwrap_or(ALL.len());
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
        set(
            &mut conditions,
            READY,
            false,
            reasons::POD_PENDING,
            "waiting",
            Some(1),
            &at(10),
        );
        set(
            &mut conditions,
            READY,
            false,
            reasons::POD_PENDING,
            "pulling",
            Some(2),
            &at(20),
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, at(10));
        assert_eq!(conditions[0].message, "pulling");
        assert_eq!(conditions[0].observed_generation, Some(2));
        set(
            &mut conditions,
            READY,
            true,
            reasons::RUNNING,
            "runs",
            Some(2),
            &at(30),
        );
        assert_eq!(conditions[0].last_transition_time, at(30));
        assert!(is_true(&conditions, READY));
        set(
            &mut conditions,
            SCHEDULED,
            true,
            reasons::POD_CREATED,
            "",
            Some(2),
            &at(30),
        );
        sort(&mut conditions);
        assert_eq!(conditions[0].type_, SCHEDULED);
    }
}
