//! The job's next status (pure): from the job, the pods the stores show and the room in the
//! cluster, decide the status to write, the pod to apply or delete, the events and the
//! requeue. The batch pipeline ([`crate::batch`]) only carries the decision out.
//!
//! An attempt's life, as recorded in `status.attempts[attemptCount-1]`:
//!
//! 1. **Start** (no attempt yet, or the last one ended out of memory or was replaced): plan
//!    every class with the job's current `status.fallback` (after an out-of-memory failure,
//!    one `fallback::next_step` further), keep the classes with room, choose; the pod
//!    `<job>-<n>` is applied, then the status records attempt `n`. If a pod of that name
//!    already exists (this process applied it, or a restarted one did before its status write
//!    landed), it is adopted with the plan it carries instead of being planned again.
//! 2. **Observe** (outcome unset): the pod's phase becomes the job's (`Scheduled`,
//!    `Running`); its end sets the attempt's outcome: `Succeeded`, `OutOfMemory` (→ 1 again,
//!    one step down, while `maxAttempts` allows and a step is left; else `Failed`),
//!    `Disrupted` (→ 1 again at once, the same plan), `AdmissionRefused` (→ 1 again after a
//!    backoff, the same plan: `attempts/admission_backoff.rs`), or `Failed`. A missing pod is
//!    applied again under the same name.
//! 3. **Spec change** (generation > observedGeneration, pod not finished): the job is
//!    planned again on its class; a pod whose spec would change is deleted and the next
//!    attempt starts (outcome `Replaced`); a change of labels or annotations only is applied
//!    to the running pod; otherwise nothing happens to the pod.
//!
//! After an out-of-memory failure with no room for the step-down plan, the failure is written
//! and the job waits `Unschedulable`; `status.fallback` and `status.plan` stay those of the
//! failed attempt, so the step is computed again, identically, when room appears.
pub use crate::placement::step_kind;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use vramfit_api::workload_report::JobResult;
use vramfit_api::{
    AttemptOutcome, ClassRejection, DEFAULT_SCHEDULE_DEADLINE_SECONDS,
    DEFAULT_START_DEADLINE_SECONDS, InferenceJob, InferenceJobStatus, Phase, Plan,
};
use vramfit_planner::{JobInput, SpecError, plan_for_class};

use vramfit_api::conditions::{self, ConditionType, ConditionsUpdate, Reason};
use vramfit_api::pod_keys::pod_name;

use crate::capacity::{Capacity, Inventory};
use crate::events::JobEvent;
use crate::model_cache::mount::ModelVolume;
use crate::model_cache::view::LazyView;
use crate::pod::PodSeen;
use crate::pod::build::{BuildError, desired_pod, metadata_matches, recorded_spec_hash};
use crate::pod::outcome::{PodState, classify};
use crate::pod::outcome::{schedule_deadline, start_deadline};
use crate::settings::Requeues;
pub use decision::Decision;
use vramfit_api::event_reasons::EventReason;

/// What the reconcile observed.
pub struct Observed<'a> {
    /// The job.
    pub job: &'a InferenceJob,
    /// The validated spec, or why it is invalid.
    pub input: &'a Result<JobInput, SpecError>,
    /// Looks a pod of the job's namespace up by name.
    pub pods: &'a dyn Fn(&str) -> PodSeen,
    /// Classes and nodes.
    pub inventory: &'a Inventory,
    /// Free GPUs per class for this job (computed only when an attempt starts).
    pub capacity: &'a dyn Fn() -> Capacity,
    /// Now.
    pub now: Time,
    /// The node model caches, when the job uses them (`--model-cache`): read only when a pod
    /// is made (a reconcile that places nothing does not walk the nodes).
    pub model_cache: &'a LazyView<'a>,
}

/// How an attempt is started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    First,
    AfterOutOfMemory,
    /// The output check found garbage: float16, then flash attention off.
    AfterBadOutput,
    /// The pod did not start in time (not for an unfixable reason): the same plan again.
    AfterStuckPod,
    /// The pod was not scheduled in time: the same fallback, on another class.
    AfterUnscheduledPod,
    /// Kubernetes ended the pod: the same plan again, within the attempt limit.
    AfterDisruption,
    /// The kubelet refused the pod at admission: the same plan again after a backoff, within
    /// the attempt limit.
    AfterAdmissionRefusal,
    Replacing,
}

struct Draft<'a> {
    obs: &'a Observed<'a>,
    status: InferenceJobStatus,
    generation: Option<i64>,
    delete_pod: Option<String>,
    apply_pod: Option<Pod>,
    create_pod: bool,
    applied_plan: Option<Plan>,
    volumes: Vec<ModelVolume>,
    events: Vec<JobEvent>,
    steps: Vec<&'static str>,
    bad_outputs: Vec<(String, String)>,
    results: Vec<(String, JobResult, u32)>,
    /// How soon the current pod's start deadline falls, while it waits.
    wake_in: Option<Duration>,
}

/// Decides the job's next status, and the writes that go with it.
pub fn next_status(obs: &Observed<'_>, requeues: &Requeues) -> Result<Decision, BuildError> {
    let old = obs.job.status.clone().unwrap_or_default();
    if old.phase.is_some_and(Phase::is_terminal) {
        // Finished for good: nothing is planned, applied or written any more.
        return Ok(Decision {
            status: old,
            delete_pod: None,
            apply_pod: None,
            create_pod: false,
            applied_plan: None,
            volumes: Vec::new(),
            events: Vec::new(),
            steps: Vec::new(),
            bad_outputs: Vec::new(),
            results: Vec::new(),
            action: Action::await_change(),
        });
    }
    let mut draft = Draft {
        obs,
        generation: obs.job.metadata.generation,
        status: old.clone(),
        delete_pod: None,
        apply_pod: None,
        create_pod: false,
        applied_plan: None,
        volumes: Vec::new(),
        events: Vec::new(),
        steps: Vec::new(),
        bad_outputs: Vec::new(),
        results: Vec::new(),
        wake_in: None,
    };
    draft.status.observed_generation = draft.generation;
    draft.validate(&old);
    draft.clear_internal_error();
    draft.advance(&old)?;
    draft.fill_conditions();
    draft.cache_status();
    draft.phase_events(&old);
    conditions::sort(&mut draft.status.conditions);

    let phase = draft.status.phase.unwrap_or(Phase::Pending);
    let action = if phase.is_terminal() || obs.input.is_err() {
        Action::await_change()
    } else if phase == Phase::Unschedulable {
        Action::requeue(requeues.unschedulable)
    } else {
        // A waiting pod is looked at again just after its start deadline.
        let deadline = draft.wake_in.map(|left| left + Duration::from_secs(1));
        Action::requeue(deadline.map_or(requeues.resync, |d| d.min(requeues.resync)))
    };
    Ok(Decision {
        status: draft.status,
        delete_pod: draft.delete_pod,
        apply_pod: draft.apply_pod,
        create_pod: draft.create_pod,
        applied_plan: draft.applied_plan,
        volumes: draft.volumes,
        events: draft.events,
        steps: draft.steps,
        bad_outputs: draft.bad_outputs,
        results: draft.results,
        action,
    })
}

impl Draft<'_> {
    fn now(&self) -> &Time {
        &self.obs.now
    }

    fn set(
        &mut self,
        type_: ConditionType,
        value: bool,
        reason: Reason,
        message: impl Into<String>,
    ) {
        ConditionsUpdate::new(&mut self.status.conditions, self.generation, &self.obs.now)
            .set(type_, value, reason, message);
    }

    /// FlagsUnreachable from the plan's shell-command warning: True while the command is a
    /// shell and the runtime takes flags; False once it is not (only if it was ever set).
    fn flags_condition(&mut self, input: &JobInput, plan: &Plan) {
        let warning = plan
            .warnings
            .iter()
            .find(|w| w.starts_with("command is a shell"));
        match warning {
            Some(w) if input.shell_command => {
                self.set(
                    ConditionType::FlagsUnreachable,
                    true,
                    Reason::ShellCommand,
                    w.clone(),
                );
            }
            _ if self
                .status
                .conditions
                .iter()
                .any(|c| c.type_ == ConditionType::FlagsUnreachable.as_str()) =>
            {
                self.set(
                    ConditionType::FlagsUnreachable,
                    false,
                    Reason::FlagsAppended,
                    "the planned flags are appended to the container's args",
                );
            }
            _ => {}
        }
    }

    /// A reconcile that gets this far no longer fails: `ReconcileFailed` turns False (only if
    /// it was ever set).
    fn clear_internal_error(&mut self) {
        if conditions::is_true(&self.status.conditions, ConditionType::ReconcileFailed) {
            self.set(
                ConditionType::ReconcileFailed,
                false,
                Reason::Reconciled,
                "the operator reconciles this job again",
            );
        }
    }

    fn job_name(&self) -> String {
        self.obs.job.name_any()
    }

    fn validate(&mut self, old: &InferenceJobStatus) {
        let refusal = self.obs.input.as_ref().err().map(ToString::to_string);
        let (invalid, reason, message, event) = JobEvent::spec_check(refusal, &old.conditions);
        self.events.extend(event);
        self.set(ConditionType::InvalidSpec, invalid, reason, message);
    }

    /// Observes the current attempt and starts the next one when it is due.
    fn advance(&mut self, old: &InferenceJobStatus) -> Result<(), BuildError> {
        // A hand-edited status may count more attempts than it lists.
        let count = (self.status.attempt_count as usize).min(self.status.attempts.len());
        self.status.attempt_count = count as u32;
        self.status.attempts.truncate(count);
        if count == 0 {
            return self.start(Start::First);
        }
        let outcome = self.status.attempts[count - 1].outcome.clone();
        match outcome {
            None => self.observe_current(old),
            Some(AttemptOutcome::OutOfMemory) => self.start(Start::AfterOutOfMemory),
            Some(AttemptOutcome::HostOutOfMemory) => {
                let message = self.status.attempts[count - 1]
                    .message
                    .clone()
                    .unwrap_or_default();
                self.fail_host_out_of_memory(count as u32, &message);
                Ok(())
            }
            Some(AttemptOutcome::Replaced) => self.start(Start::Replacing),
            Some(AttemptOutcome::Disrupted) => self.start(Start::AfterDisruption),
            Some(AttemptOutcome::AdmissionRefused) => self.start(Start::AfterAdmissionRefusal),
            Some(AttemptOutcome::BadOutput) => self.start(Start::AfterBadOutput),
            Some(AttemptOutcome::StartTimeout) => self.start(Start::AfterStuckPod),
            Some(AttemptOutcome::ScheduleTimeout) => self.start(Start::AfterUnscheduledPod),
            Some(AttemptOutcome::Succeeded) => {
                self.succeed();
                Ok(())
            }
            Some(_) => {
                let message = self.status.attempts[count - 1]
                    .message
                    .clone()
                    .unwrap_or_default();
                self.fail(Reason::PodFailed, message, false);
                Ok(())
            }
        }
    }

    fn observe_current(&mut self, old: &InferenceJobStatus) -> Result<(), BuildError> {
        let attempt = self.status.attempt_count;
        let name = self
            .status
            .pod_name
            .clone()
            .unwrap_or_else(|| pod_name(&self.job_name(), attempt));
        match (self.obs.pods)(&name) {
            PodSeen::Applied(_) => {
                // Applied moments ago: the watch has not caught up. A spec change is looked at
                // once the pod shows (the generation stays unobserved until then).
                if self.spec_changed(old) {
                    self.status.observed_generation = old.observed_generation;
                }
                self.status.phase = Some(Phase::Scheduled);
                Ok(())
            }
            PodSeen::Absent => self.recreate(&name, attempt),
            PodSeen::Foreign => {
                self.name_taken(&name);
                Ok(())
            }
            PodSeen::Observed(pod) => {
                let state = classify(&pod);
                if !state.is_finished()
                    && self.spec_changed(old)
                    && self.replace_if_needed(&pod, &name, attempt)?
                {
                    return Ok(());
                }
                let deadline = self
                    .obs
                    .job
                    .spec
                    .start_deadline_seconds
                    .unwrap_or(DEFAULT_START_DEADLINE_SECONDS);
                match start_deadline::check(&pod, self.now(), Duration::from_secs(deadline.into()))
                {
                    Ok(left) => self.wake_in = left,
                    Err(overdue) => return self.start_overdue(&name, attempt, deadline, overdue),
                }
                let deadline = self
                    .obs
                    .job
                    .spec
                    .schedule_deadline_seconds
                    .unwrap_or(DEFAULT_SCHEDULE_DEADLINE_SECONDS);
                match schedule_deadline::check(
                    &pod,
                    self.now(),
                    Duration::from_secs(deadline.into()),
                ) {
                    Ok(left) => self.wake_in = self.wake_in.into_iter().chain(left).min(),
                    Err(unscheduled) => {
                        return self.schedule_overdue(&name, attempt, deadline, unscheduled);
                    }
                }
                self.follow(&name, state)
            }
        }
    }

    /// A bound pod that did not start within the deadline: deleted (its GPUs are free), the
    /// attempt ends, and a new pod follows unless the image or the container's configuration
    /// is what it waits on.
    fn start_overdue(
        &mut self,
        name: &str,
        attempt: u32,
        deadline: u32,
        overdue: start_deadline::Overdue,
    ) -> Result<(), BuildError> {
        let message = format!(
            "pod {name} did not start within {deadline} s on node {}: {}",
            overdue.node, overdue.waiting_on
        );
        self.delete_pod = Some(name.to_string());
        self.end_attempt(AttemptOutcome::StartTimeout, message.clone());
        self.events.push(
            JobEvent::warning(
                EventReason::StartDeadlineExceeded,
                format!("attempt {attempt}: {message}"),
            )
            .about(name),
        );
        if overdue.unfixable {
            self.fail(
                Reason::StartDeadlineExceeded,
                format!("{message}; a new pod would wait on the same (fix the image or the pod's configuration and create the job again)"),
                false,
            );
            return Ok(());
        }
        self.start(Start::AfterStuckPod)
    }

    /// A pod the scheduler did not bind within the schedule deadline: deleted (it no longer
    /// holds its class's GPUs), the attempt ends, and the next one runs on another class.
    fn schedule_overdue(
        &mut self,
        name: &str,
        attempt: u32,
        deadline: u32,
        unscheduled: schedule_deadline::Unscheduled,
    ) -> Result<(), BuildError> {
        let class = self.status.node_class.clone().unwrap_or_default();
        let message = format!(
            "pod {name} was not scheduled to a node of class {class} within {deadline} s: {}",
            unscheduled.why
        );
        self.delete_pod = Some(name.to_string());
        self.end_attempt(AttemptOutcome::ScheduleTimeout, message.clone());
        self.events.push(
            JobEvent::warning(
                EventReason::ScheduleDeadlineExceeded,
                format!("attempt {attempt}: {message}"),
            )
            .about(name),
        );
        self.start(Start::AfterUnscheduledPod)
    }

    /// The classes where a pod of this job was not scheduled in time, with why: the job's
    /// later attempts are not placed there again.
    fn unschedulable_classes(&self) -> Vec<ClassRejection> {
        let mut classes: Vec<ClassRejection> = Vec::new();
        for attempt in &self.status.attempts {
            if attempt.outcome == Some(AttemptOutcome::ScheduleTimeout)
                && !classes.iter().any(|c| c.node_class == attempt.node_class)
            {
                classes.push(ClassRejection {
                    node_class: attempt.node_class.clone(),
                    reason: format!(
                        "the pod of attempt {} was not scheduled here in time",
                        attempt.number
                    ),
                });
            }
        }
        classes
    }

    /// A pod with the attempt's name exists and is not this job's: wait for it to go (its
    /// deletion reconciles the job again) rather than adopt it.
    fn name_taken(&mut self, name: &str) {
        self.status.phase = Some(Phase::Pending);
        self.set(
            ConditionType::Scheduled,
            false,
            Reason::PodNameTaken,
            format!(
                "pod {name} exists but this job does not own it (an earlier job of the same name, or \
                 not vramfit's); waiting for it to be deleted"
            ),
        );
    }

    fn spec_changed(&self, old: &InferenceJobStatus) -> bool {
        self.generation.is_some()
            && old.observed_generation.is_some()
            && self.generation != old.observed_generation
    }

    /// The pod of the current attempt is gone: apply it again, same name, same plan.
    fn recreate(&mut self, name: &str, attempt: u32) -> Result<(), BuildError> {
        let (Ok(input), Some(plan)) = (self.obs.input, self.status.plan.clone()) else {
            self.status.phase = Some(Phase::Pending);
            return Ok(());
        };
        let Some(class) = self.obs.inventory.class(&plan.node_class) else {
            // Its class is gone: this attempt cannot be re-run as planned; plan a new one.
            self.end_attempt(
                AttemptOutcome::Replaced,
                format!(
                    "pod {name} is gone and node class {} no longer exists",
                    plan.node_class
                ),
            );
            return self.start(Start::Replacing);
        };
        let mut pod = desired_pod(self.obs.job, input, &plan, class, attempt)?;
        self.attach_cache(&mut pod, &plan, false);
        self.apply_pod = Some(pod);
        self.create_pod = true;
        self.applied_plan = Some(plan);
        self.status.phase = Some(Phase::Scheduled);
        self.status.node_name = None;
        self.pod_created(
            name,
            format!("pod {name} (attempt {attempt}) created again: it was gone"),
        );
        Ok(())
    }

    /// After a spec change: a new pod only if the pod's spec would change.
    fn replace_if_needed(
        &mut self,
        pod: &Pod,
        name: &str,
        attempt: u32,
    ) -> Result<bool, BuildError> {
        let (Ok(input), Some(plan)) = (self.obs.input, self.status.plan.clone()) else {
            return Ok(false);
        };
        let fallback = self.status.fallback.clone().unwrap_or_default();
        let generation = self.generation.unwrap_or_default();
        let why = match self.obs.inventory.class(&plan.node_class) {
            // Without its class the pod cannot be compared; it keeps running.
            None => return Ok(false),
            Some(class) => match plan_for_class(input, class, &fallback) {
                Err(reason) => format!(
                    "spec changed (generation {generation}): class {} cannot run it any more: {reason}",
                    class.name
                ),
                Ok(new_plan) => {
                    let desired = desired_pod(self.obs.job, input, &new_plan, class, attempt)?;
                    if recorded_spec_hash(pod) == recorded_spec_hash(&desired) {
                        if !metadata_matches(pod, &desired) {
                            self.apply_pod = Some(self.as_running(desired, pod));
                            self.applied_plan = Some(new_plan.clone());
                        }
                        self.flags_condition(input, &new_plan);
                        self.status.plan = Some(new_plan);
                        return Ok(false);
                    }
                    format!("spec changed (generation {generation}): the pod changes")
                }
            },
        };
        self.delete_pod = Some(name.to_string());
        self.end_attempt(AttemptOutcome::Replaced, why);
        self.start(Start::Replacing)?;
        Ok(true)
    }

    fn end_attempt(&mut self, outcome: AttemptOutcome, message: String) {
        let now = self.obs.now.clone();
        if let Some(last) = self.status.attempts.last_mut() {
            last.outcome = Some(outcome);
            last.message = Some(message);
            last.end_time = Some(now);
        }
    }

    /// Conditions of a pod just applied: created, not running yet.
    fn pod_created(&mut self, name: &str, message: String) {
        self.set(ConditionType::Scheduled, true, Reason::PodCreated, message);
        self.set(
            ConditionType::Ready,
            false,
            Reason::PodPending,
            not_started(name),
        );
    }

    /// The job follows its pod.
    fn follow(&mut self, name: &str, state: PodState) -> Result<(), BuildError> {
        let state = match state {
            // The binding alone is not worth a status write (and the events it would wake): the
            // node is recorded with the next thing the pod reports (a reason it waits, running,
            // its end), or kept once recorded.
            PodState::Waiting {
                node: Some(node),
                detail: None,
            } if self.status.node_name.as_deref() != Some(node.as_str()) => PodState::Waiting {
                node: None,
                detail: None,
            },
            state => state,
        };
        if let Some(node) = state.node() {
            self.status.node_name = Some(node.to_string());
        }
        let attempt = self.status.attempt_count;
        match state {
            PodState::Waiting { node, detail } => {
                self.status.phase = Some(Phase::Scheduled);
                match &node {
                    Some(node) => self.set(
                        ConditionType::Scheduled,
                        true,
                        Reason::PodBound,
                        format!("pod {name} (attempt {attempt}) is bound to node {node}"),
                    ),
                    None => {
                        let summary = self
                            .status
                            .attempts
                            .last()
                            .map(|a| a.plan_summary.clone())
                            .unwrap_or_default();
                        self.set(
                            ConditionType::Scheduled,
                            true,
                            Reason::PodCreated,
                            format!("pod {name} (attempt {attempt}) created: {summary}"),
                        );
                    }
                }
                let message = match (detail, node) {
                    (Some(detail), _) => format!("pod {name} waits: {detail}"),
                    (None, Some(node)) => format!("pod {name} starts on node {node}"),
                    (None, None) => not_started(name),
                };
                self.set(ConditionType::Ready, false, Reason::PodPending, message);
            }
            PodState::Running { node } => {
                self.status.phase = Some(Phase::Running);
                let on = node.map(|n| format!(" on node {n}")).unwrap_or_default();
                self.set(
                    ConditionType::Scheduled,
                    true,
                    Reason::PodBound,
                    format!("pod {name} (attempt {attempt}) is bound{on}"),
                );
                self.set(
                    ConditionType::Ready,
                    true,
                    Reason::Running,
                    format!("pod {name} runs{on}"),
                );
            }
            PodState::Succeeded {
                summary, training, ..
            } => {
                if let Some(last) = self.status.attempts.last_mut() {
                    last.outcome = Some(AttemptOutcome::Succeeded);
                }
                let price = self
                    .status
                    .plan
                    .as_ref()
                    .map_or(0, |p| p.hourly_price_cents);
                let result = match (training, summary) {
                    (Some(training), _) => {
                        Some(JobResult::of_training(&training, &training.work(), price))
                    }
                    (None, Some(summary)) => Some(JobResult::of(&summary, price)),
                    (None, None) => None,
                };
                if let Some(result) = result {
                    let class = self.status.node_class.clone().unwrap_or_default();
                    self.results.push((class, result.clone(), price));
                    self.status.result = Some(result);
                }
                self.succeed();
            }
            PodState::BadOutput { check, .. } => {
                let message = format!(
                    "output check {} failed: {} at {:.0}% (garbage above {:.0}%) over {} output(s) in {}",
                    check.check,
                    check.pattern,
                    check.ratio * 100.0,
                    check.threshold * 100.0,
                    check.samples,
                    check.dtype
                );
                self.end_attempt(AttemptOutcome::BadOutput, message.clone());
                self.events.push(
                    JobEvent::warning(
                        EventReason::BadOutput,
                        format!("attempt {attempt} (pod {name}) answered garbage: {message}"),
                    )
                    .about(name),
                );
                let class = self.status.node_class.clone().unwrap_or_default();
                self.bad_outputs.push((class, check.dtype));
                return self.start(Start::AfterBadOutput);
            }
            PodState::LossDiverged { check, .. } => {
                let message = format!(
                    "loss check {} failed: the loss became {} at step {} in {}",
                    check.check, check.loss, check.step, check.dtype
                );
                self.end_attempt(AttemptOutcome::BadOutput, message.clone());
                self.events.push(
                    JobEvent::warning(
                        EventReason::BadOutput,
                        format!("attempt {attempt} (pod {name}) diverged: {message}"),
                    )
                    .about(name),
                );
                let class = self.status.node_class.clone().unwrap_or_default();
                self.bad_outputs.push((class, check.dtype));
                return self.start(Start::AfterBadOutput);
            }
            PodState::OutOfMemory { message, .. } => {
                self.end_attempt(AttemptOutcome::OutOfMemory, message.clone());
                self.events.push(
                    JobEvent::warning(
                        EventReason::OutOfMemory,
                        format!("attempt {attempt} (pod {name}) ran out of memory: {message}"),
                    )
                    .about(name),
                );
                // Steps down at once when it can; otherwise the failure is recorded and waits.
                return self.start(Start::AfterOutOfMemory);
            }
            PodState::HostOutOfMemory { message, .. } => {
                self.end_attempt(AttemptOutcome::HostOutOfMemory, message.clone());
                self.events.push(
                    JobEvent::warning(
                        EventReason::HostOutOfMemory,
                        format!("attempt {attempt} (pod {name}) ran out of host memory: {message}"),
                    )
                    .about(name),
                );
                self.fail_host_out_of_memory(attempt, &message);
            }
            PodState::Disrupted { message, .. } => {
                self.end_attempt(AttemptOutcome::Disrupted, message.clone());
                self.events.push(
                    JobEvent::warning(
                        EventReason::Disrupted,
                        format!(
                            "attempt {attempt} (pod {name}) was ended by Kubernetes: {message}"
                        ),
                    )
                    .about(name),
                );
                return self.start(Start::AfterDisruption);
            }
            PodState::AdmissionRefused { node, message } => {
                self.end_attempt(AttemptOutcome::AdmissionRefused, message.clone());
                let of = node.map(|n| format!(" of node {n}")).unwrap_or_default();
                self.events.push(
                    JobEvent::warning(
                        EventReason::AdmissionRefused,
                        format!(
                            "attempt {attempt} (pod {name}) was refused by the kubelet{of} at admission: {message}"
                        ),
                    )
                    .about(name),
                );
                return self.start(Start::AfterAdmissionRefusal);
            }
            PodState::Failed { message, .. } => {
                self.end_attempt(AttemptOutcome::Failed, message.clone());
                self.fail(
                    Reason::PodFailed,
                    format!("attempt {attempt} (pod {name}) failed: {message}"),
                    false,
                );
            }
        }
        Ok(())
    }

    fn succeed(&mut self) {
        self.status.phase = Some(Phase::Succeeded);
        let now = self.now().clone();
        self.status.completion_time.get_or_insert(now);
        let name = self.status.pod_name.clone().unwrap_or_default();
        self.set(
            ConditionType::Ready,
            false,
            Reason::Succeeded,
            format!("pod {name} completed successfully"),
        );
    }

    /// Failed for good at the host memory limit: a smaller GPU plan would not help (a
    /// llama.cpp plan would even keep more on the CPU), so the job says what to raise.
    fn fail_host_out_of_memory(&mut self, attempt: u32, message: &str) {
        self.fail(
            Reason::HostOutOfMemory,
            format!(
                "attempt {attempt} ran out of host memory ({message}); a GPU step down does not cure that: raise spec.pod.resources memory"
            ),
            true,
        );
    }

    /// Failed for good. `oom`: the failure was out of memory (the OutOfMemory condition says
    /// why no retry follows).
    fn fail(&mut self, reason: Reason, message: String, oom: bool) {
        self.status.phase = Some(Phase::Failed);
        let now = self.now().clone();
        self.status.completion_time.get_or_insert(now);
        if oom {
            self.set(ConditionType::OutOfMemory, true, reason, message.clone());
        }
        self.set(ConditionType::Ready, false, reason, message);
    }

    /// The failure message of the latest attempt, if any.
    fn last_failure_message(&self) -> String {
        self.status
            .attempts
            .last()
            .and_then(|a| a.message.clone())
            .unwrap_or_default()
    }

    fn unschedulable(
        &mut self,
        how: Start,
        previous: u32,
        step: Option<&str>,
        rejections: Vec<vramfit_api::ClassRejection>,
        message: String,
    ) {
        self.status.phase = Some(Phase::Unschedulable);
        self.status.rejected_classes = rejections;
        self.step_pending(how, previous, step, "waiting for a class with room");
        self.set(
            ConditionType::Scheduled,
            false,
            Reason::NoClassFits,
            message,
        );
        self.set(
            ConditionType::Ready,
            false,
            Reason::NotRunning,
            "no pod runs",
        );
    }

    /// After out of memory, the step down taken for an attempt that does not start yet:
    /// `OutOfMemory=True` says the step and what the attempt waits for.
    fn step_pending(&mut self, how: Start, previous: u32, step: Option<&str>, waiting: &str) {
        if how != Start::AfterOutOfMemory {
            return;
        }
        let failure = self.last_failure_message();
        self.set(
            ConditionType::OutOfMemory,
            true,
            Reason::SteppedDown,
            format!(
                "attempt {previous} ran out of memory ({failure}); attempt {}: {}, {waiting}",
                previous + 1,
                step.unwrap_or_default()
            ),
        );
    }

    /// Every condition type is present, so dashboards can rely on them.
    fn fill_conditions(&mut self) {
        let missing =
            |s: &Self, t: ConditionType| conditions::get(&s.status.conditions, t).is_none();
        if missing(self, ConditionType::Scheduled) {
            self.set(
                ConditionType::Scheduled,
                false,
                Reason::NotPlanned,
                "not planned yet",
            );
        }
        if missing(self, ConditionType::Ready) {
            self.set(
                ConditionType::Ready,
                false,
                Reason::NotRunning,
                "no pod runs",
            );
        }
        if missing(self, ConditionType::OutOfMemory) {
            self.set(
                ConditionType::OutOfMemory,
                false,
                Reason::NoOutOfMemory,
                "no attempt ran out of memory",
            );
        }
        if self.status.phase.is_none() {
            self.status.phase = Some(Phase::Pending);
        }
    }

    /// Running, Succeeded, Failed and Unschedulable events on entering the phase.
    fn phase_events(&mut self, old: &InferenceJobStatus) {
        let (before, after) = (old.phase, self.status.phase);
        if before == after {
            return;
        }
        let message = |s: &Self, t: ConditionType| {
            conditions::get(&s.status.conditions, t)
                .map(|c| c.message.clone())
                .unwrap_or_default()
        };
        let pod = self.status.pod_name.clone();
        let about = |event: JobEvent| match &pod {
            Some(pod) => event.about(pod),
            None => event,
        };
        match after {
            Some(Phase::Running) => {
                let note = message(self, ConditionType::Ready);
                self.events
                    .push(about(JobEvent::normal(EventReason::Running, note)));
            }
            Some(Phase::Succeeded) => {
                let note = message(self, ConditionType::Ready);
                self.events
                    .push(about(JobEvent::normal(EventReason::Succeeded, note)));
            }
            Some(Phase::Failed) => {
                let note = message(self, ConditionType::Ready);
                self.events
                    .push(about(JobEvent::warning(EventReason::Failed, note)));
            }
            Some(Phase::Unschedulable) => {
                let note = message(self, ConditionType::Scheduled);
                self.events
                    .push(JobEvent::warning(EventReason::Unschedulable, note));
            }
            _ => {}
        }
    }
}

/// The `Ready` message of a pod created and not running yet, bound or not (the binding alone
/// is not written).
fn not_started(pod: &str) -> String {
    format!("pod {pod} is not running yet")
}

mod admission_backoff;
mod cache_hook;
mod decision;

mod start;

#[cfg(test)]
mod tests;

impl crate::observe::Snapshot<'_> {
    /// The next status of the job from this snapshot (pure: [`next_status`]).
    pub fn decide(&self, now: Time, requeues: &Requeues) -> Result<Decision, BuildError> {
        let pods = |name: &str| self.pod(name);
        let capacity = || self.capacity();
        let at = now.clone();
        let model_cache = crate::model_cache::view::LazyView::new(|| self.model_cache(&at));
        let observed = Observed {
            job: self.job(),
            input: self.input(),
            pods: &pods,
            inventory: self.inventory(),
            capacity: &capacity,
            now,
            model_cache: &model_cache,
        };
        next_status(&observed, requeues)
    }
}
