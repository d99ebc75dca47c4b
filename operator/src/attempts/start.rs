//! Starting attempt `attemptCount + 1` (pure), as three rules applied in order:
//!
//! 1. [`Draft::next_fallback`]: why the attempt starts decides the fallback state it runs with
//!    (the same, one out-of-memory step down, or the next garbage-output change) — or that the
//!    job ends here (no attempt or no step left);
//! 2. [`Draft::place`]: a pod already under the attempt's name is adopted with the plan it
//!    carries; otherwise every class is planned and one with room chosen, and its pod built —
//!    or the job waits (`Unschedulable`, or the name is taken);
//! 3. [`Draft::record_attempt`]: the attempt, its step, its events and the status fields.
use vramfit_api::conditions::{ConditionType, Reason};
use vramfit_api::pod_keys::pod_name;
use vramfit_api::{Attempt, ClassRejection, Fallback, Phase, Plan};
use vramfit_planner::fallback::{next_after_bad_output, next_step};
use vramfit_planner::tuning::fallback::{bfloat16_available, next_after_diverged_loss};
use vramfit_planner::{JobInput, NodeClass};

use super::{Draft, PodSeen, Start, step_kind};
use crate::events::JobEvent;
use crate::placement::{Choice, choose, plan_summary};
use crate::pod::build::{BuildError, desired_pod, recorded_plan};
use crate::stores::extended_resources;
use vramfit_api::event_reasons::EventReason;

/// Where the attempt's plan comes from.
struct Placed {
    plan: Plan,
    class: String,
    passed_over: Vec<ClassRejection>,
}

impl Draft<'_> {
    /// Starts attempt `attemptCount + 1`, or records why it cannot start now.
    pub(super) fn start(&mut self, how: Start) -> Result<(), BuildError> {
        let Ok(input) = self.obs.input else {
            self.status.phase = Some(Phase::Pending);
            self.set(
                ConditionType::Scheduled,
                false,
                Reason::InvalidSpec,
                "not planned: the spec is invalid (see InvalidSpec)",
            );
            self.set(
                ConditionType::Ready,
                false,
                Reason::NotRunning,
                "no pod runs",
            );
            return Ok(());
        };
        let current = self.status.fallback.clone().unwrap_or_default();
        let Some((how, fallback, step)) = self.next_fallback(how, input, &current) else {
            return Ok(());
        };
        let number = self.status.attempt_count + 1;
        let Some(placed) = self.place(how, input, &fallback, number, step.as_deref())? else {
            return Ok(());
        };
        self.record_attempt(how, input, placed, (&current, fallback), step, number);
        Ok(())
    }

    /// Rule 1: the fallback state the attempt runs with and the step that led there, with how
    /// the attempt starts (a step down with no failed plan on record starts as a first
    /// attempt); `None` when the job ended here (the failure is recorded).
    fn next_fallback(
        &mut self,
        how: Start,
        input: &JobInput,
        current: &Fallback,
    ) -> Option<(Start, Fallback, Option<String>)> {
        let previous = self.status.attempt_count;
        let max = self.obs.job.spec.max_attempts;
        match how {
            Start::First => Some((how, current.clone(), None)),
            Start::Replacing => {
                let why = self.status.attempts.last().and_then(|a| a.message.clone());
                let why = why.unwrap_or_else(|| "the previous pod was replaced".to_string());
                Some((how, current.clone(), Some(format!("new pod: {why}"))))
            }
            Start::AfterDisruption | Start::AfterStuckPod | Start::AfterUnscheduledPod => {
                let why = self.last_failure_message();
                if previous >= max {
                    let ended = match how {
                        Start::AfterStuckPod => "did not start in time",
                        Start::AfterUnscheduledPod => "was not scheduled in time",
                        _ => "was ended by Kubernetes",
                    };
                    let message = format!(
                        "attempt {previous} {ended} and all {max} attempts are used: {why}"
                    );
                    self.fail(Reason::AttemptsExhausted, message, false);
                    return None;
                }
                let step = if how == Start::AfterUnscheduledPod {
                    format!("another class: {why}")
                } else {
                    format!("same plan again: {why}")
                };
                Some((how, current.clone(), Some(step)))
            }
            Start::AfterAdmissionRefusal => self.after_admission_refusal(how, current),
            Start::AfterOutOfMemory => {
                let failure = self.last_failure_message();
                if previous >= max {
                    let message = format!(
                        "attempt {previous} ran out of memory and all {max} attempts are used: {failure}"
                    );
                    self.fail(Reason::AttemptsExhausted, message, true);
                    return None;
                }
                let Some(plan) = self.status.plan.clone() else {
                    return Some((Start::First, current.clone(), None));
                };
                let class = self.obs.inventory.class(&plan.node_class);
                let max_gpus_per_pod = class.map_or(plan.gpu_count, NodeClass::max_gpus_per_pod);
                let capability = class.map(|c| c.capability);
                match next_step(input, &plan, current, max_gpus_per_pod, capability) {
                    Some((next, step)) => Some((how, next, Some(step))),
                    None => {
                        let message = format!(
                            "attempt {previous} ran out of memory and no step down is left: {failure}"
                        );
                        self.fail(Reason::NoStepLeft, message, true);
                        None
                    }
                }
            }
            Start::AfterBadOutput => {
                let failure = self.last_failure_message();
                if previous >= max {
                    let message = format!(
                        "attempt {previous} answered garbage and all {max} attempts are used: {failure}"
                    );
                    self.fail(Reason::BadOutput, message, false);
                    return None;
                }
                let Some(plan) = self.status.plan.clone() else {
                    return Some((Start::First, current.clone(), None));
                };
                // A fine-tuning run's bad output is a diverged loss: the other 16-bit dtype.
                let step = match plan.tuning {
                    Some(_) => next_after_diverged_loss(
                        input,
                        &plan,
                        current,
                        bfloat16_available(input, &self.obs.inventory.classes),
                    ),
                    None => next_after_bad_output(input, &plan, current),
                };
                match step {
                    Some((next, step)) => Some((how, next, Some(step))),
                    None => {
                        let message = if plan.tuning.is_some() {
                            format!(
                                "attempt {previous} diverged in {} and no other dtype is left to try: {failure}",
                                plan.dtype.as_str()
                            )
                        } else {
                            format!(
                                "attempt {previous} answered garbage in {} without flash attention, and nothing is left to change: {failure}",
                                plan.dtype.as_str()
                            )
                        };
                        self.fail(Reason::BadOutput, message, false);
                        None
                    }
                }
            }
        }
    }

    /// Rule 2: the attempt's plan and class — adopted from a pod already under its name, or
    /// chosen among the classes with room, with its pod built (`None` when it must wait: the
    /// reason is recorded).
    fn place(
        &mut self,
        how: Start,
        input: &JobInput,
        fallback: &Fallback,
        number: u32,
        step: Option<&str>,
    ) -> Result<Option<Placed>, BuildError> {
        let name = pod_name(&self.job_name(), number);
        let adopted = |plan: Plan| Placed {
            class: plan.node_class.clone(),
            plan,
            passed_over: Vec::new(),
        };
        match (self.obs.pods)(&name) {
            PodSeen::Observed(pod) => match recorded_plan(&pod) {
                Some(plan) => Ok(Some(adopted(plan))),
                None => {
                    self.name_taken(&name);
                    Ok(None)
                }
            },
            PodSeen::Foreign => {
                self.name_taken(&name);
                Ok(None)
            }
            PodSeen::Applied(plan) => Ok(Some(adopted((*plan).clone()))),
            PodSeen::Absent => {
                let timed_out = self.unschedulable_classes();
                let wanted = extended_resources::requested(self.obs.job);
                let mut excluded = timed_out.clone();
                for lacking in self.obs.inventory.lacking_resources(&wanted) {
                    if !excluded.iter().any(|e| e.node_class == lacking.node_class) {
                        excluded.push(lacking);
                    }
                }
                let capacity = (self.obs.capacity)();
                let chosen = choose(input, self.obs.inventory, &capacity, fallback, &excluded);
                match chosen.map(|c| self.prefer_cached(input, &capacity, fallback, &excluded, c)) {
                    Ok(Choice {
                        plan,
                        class,
                        passed_over,
                    }) => {
                        let mut pod = desired_pod(self.obs.job, input, &plan, &class, number)?;
                        if !self.attach_cache(&mut pod, &plan, true) {
                            // The attempt waits for a node to download its model (recorded).
                            self.step_pending(how, number - 1, step, "waiting for its model");
                            return Ok(None);
                        }
                        self.apply_pod = Some(pod);
                        self.create_pod = true;
                        self.applied_plan = Some(plan.clone());
                        Ok(Some(Placed {
                            plan,
                            class: class.name,
                            passed_over,
                        }))
                    }
                    // Every class that could run the job was tried and its pod never
                    // scheduled: waiting would change nothing.
                    Err(none) if !timed_out.is_empty() && !none.room_may_free => {
                        let failure = self.last_failure_message();
                        self.status.rejected_classes = none.rejections;
                        self.fail(
                            Reason::ScheduleDeadlineExceeded,
                            format!("{failure}; {}", none.message),
                            false,
                        );
                        Ok(None)
                    }
                    Err(none) => {
                        let previous = number - 1;
                        self.unschedulable(how, previous, step, none.rejections, none.message);
                        Ok(None)
                    }
                }
            }
        }
    }

    /// Rule 3: records the attempt — the step taken (metrics, event, OutOfMemory condition),
    /// the pod-created event, the attempt entry and the status fields of the new plan.
    fn record_attempt(
        &mut self,
        how: Start,
        input: &JobInput,
        placed: Placed,
        (current, fallback): (&Fallback, Fallback),
        step: Option<String>,
        number: u32,
    ) {
        let previous = number - 1;
        let name = pod_name(&self.job_name(), number);
        let Placed {
            plan,
            class: class_name,
            passed_over,
        } = placed;
        let summary = plan_summary(&plan);
        if how == Start::AfterOutOfMemory {
            let step_text = step.clone().unwrap_or_default();
            if let Some(failed_plan) = &self.status.plan {
                self.steps.push(step_kind(failed_plan, current, &fallback));
            }
            self.events.push(
                JobEvent::normal(
                    EventReason::SteppedDown,
                    format!("attempt {number}: {step_text}"),
                )
                .about(&name),
            );
            let failure = self.last_failure_message();
            self.set(
                ConditionType::OutOfMemory,
                true,
                Reason::SteppedDown,
                format!("attempt {previous} ran out of memory ({failure}); attempt {number}: {step_text}"),
            );
        }
        if how == Start::AfterBadOutput {
            let step_text = step.clone().unwrap_or_default();
            let bfloat16 = |f: &Fallback| f.tuning.as_ref().is_some_and(|t| t.bfloat16);
            self.steps.push(if fallback.float16 != current.float16 {
                "float16"
            } else if bfloat16(&fallback) != bfloat16(current) {
                "bfloat16"
            } else {
                "flash_attention"
            });
            self.events.push(
                JobEvent::normal(
                    EventReason::SteppedDown,
                    format!("attempt {number}: {step_text}"),
                )
                .about(&name),
            );
        }
        // One event per placement: the pod, with the plan it runs.
        self.events.push(
            JobEvent::normal(
                EventReason::PodCreated,
                format!("pod {name} (attempt {number}) created: {summary}"),
            )
            .about(&name),
        );
        self.status.attempts.push(Attempt {
            number,
            pod_name: name.clone(),
            node_class: class_name.clone(),
            plan_summary: summary.clone(),
            step,
            outcome: None,
            message: None,
            end_time: None,
            members: Vec::new(),
        });
        self.status.attempt_count = number;
        self.flags_condition(input, &plan);
        self.status.plan = Some(plan);
        self.status.node_class = Some(class_name);
        self.status.pod_name = Some(name.clone());
        self.status.node_name = None;
        self.status.fallback = (!fallback.is_empty()).then_some(fallback);
        self.status.rejected_classes = passed_over;
        let now = self.now().clone();
        self.status.start_time.get_or_insert(now);
        self.status.phase = Some(Phase::Scheduled);
        self.pod_created(
            &name,
            format!("pod {name} (attempt {number}) created: {summary}"),
        );
    }
}
