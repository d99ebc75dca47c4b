//! A served job's next state (pure): from the job, its replica pods, its Service and PDB and
//! the room in the cluster, the pods to delete and create, the objects to apply, the status,
//! the events and the requeue. The rules, each in its own module, applied in this order:
//!
//! 1. **follow** ([`Draft::follow`], this module): each replica's pod — starting, serving,
//!    or ended. An ended pod is recorded once (restart count, reason, bounded history,
//!    event) and replaced: at once one step down after out of memory ([`super::failure`]),
//!    at once with the same plan after a disruption or deletion, after an exponential
//!    backoff after any other failure ([`crate::backoff`]). A rolling update's surge pod
//!    that is Ready replaces its replica's old pod.
//! 2. **scale down** ([`super::scale`]): the replicas over `serve.replicas`, worst first.
//! 3. **roll** ([`super::rollout`]): one replica at a time whose pod no longer matches the
//!    spec: a surge pod where a class has room, else in place (said in status and an event).
//! 4. **scale up**: new replicas in the lowest free slots, placed as the planner would
//!    ([`super::placement`]).
//! 5. **tidy**: pods the job controls that no replica holds (left by a crash between a pod
//!    write and the status write) are deleted.
//! 6. **status** ([`super::summary`]): counts, `2/3`, endpoint, selector, conditions
//!    (Available, Progressing, Degraded, Ready, Scheduled, OutOfMemory), phase, events, requeue;
//!    the Service and PDB to apply.
//!
//! A new pod's name is `<job>-r<slot>-<n>`, `n` one more than `status.attemptCount` (the pods
//! created for the job so far): a pod created before a crash, whose status write did not
//! land, is found under the same name and adopted, not created twice.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use vramfit_api::conditions::{ConditionType, ConditionsUpdate, Reason};
use vramfit_api::event_reasons::EventReason;
use vramfit_api::pod_keys::replica_pod_name;
use vramfit_api::{
    InferenceJob, InferenceJobStatus, Plan, ReplicaClasses, ReplicaStatus, ServeSpec,
};
use vramfit_planner::{JobInput, SpecError};

use super::cache_hook::ModelWait;
use super::pdb::PdbWrite;
use super::placement::{Where, place};
use super::pod::replica_pod;
use super::pod_state::{EndKind, Ending, ReplicaPod, replica_pod as read_pod};
use crate::backoff::Backoff;
use crate::capacity::{Capacity, Inventory};
use crate::events::JobEvent;
use crate::model_cache::placement::CachePlacement;
use crate::ownership::ObjectWrite;
use crate::placement::{NoClassFits, plan_summary};
use crate::pod::PodSeen;
use crate::pod::build::{BuildError, recorded_plan};
use crate::pod::outcome::{schedule_deadline, start_deadline, trim_message};

/// A replica's next pod, created or adopted.
pub(super) struct Obtained {
    /// Its name.
    pub(super) name: String,
    /// Its number (`<n>` of `<job>-r<slot>-<n>`).
    pub(super) number: u32,
    /// Its plan.
    pub(super) plan: Plan,
}

/// What the reconcile observed of a served job.
pub struct ServedObserved<'a> {
    /// The job.
    pub job: &'a InferenceJob,
    /// Its `serve` section.
    pub serve: &'a ServeSpec,
    /// The validated spec, or why it is invalid.
    pub input: &'a Result<JobInput, SpecError>,
    /// Looks a pod of the job's namespace up by name.
    pub pods: &'a dyn Fn(&str) -> PodSeen,
    /// The names of the pods the job controls that the stores show (not being deleted).
    pub owned: &'a [String],
    /// How many of the job's pods are being deleted (their GPUs are not free yet).
    pub terminating: usize,
    /// Classes and nodes.
    pub inventory: &'a Inventory,
    /// Free GPUs per class for the job's pods (computed when a pod is placed).
    pub capacity: &'a dyn Fn() -> Capacity,
    /// The Service of the job's name, as the store shows it.
    pub service: Option<&'a Service>,
    /// The PodDisruptionBudget of the job's name, as the store shows it.
    pub pdb: Option<&'a PodDisruptionBudget>,
    /// Now.
    pub now: Time,
    /// Backoff of failed replicas.
    pub backoff: &'a Backoff,
    /// How long a bound pod may take to start.
    pub start_deadline: Duration,
    /// How long a pod may wait to be bound to a node.
    pub schedule_deadline: Duration,
    /// How soon a job waiting for room is looked at again without a change.
    pub unschedulable_requeue: Duration,
    /// How soon a job is looked at again without a change.
    pub resync: Duration,
    /// The node model caches, when the job uses them (`--model-cache`).
    pub model_cache: Option<&'a crate::model_cache::view::CacheView>,
}

/// What to do for a served job.
#[derive(Clone, Debug)]
pub struct ServedDecision {
    /// The status to hold (written when it differs from the job's).
    pub status: InferenceJobStatus,
    /// Pods to delete, first.
    pub delete_pods: Vec<String>,
    /// Pods to create, with their plans (for the reservation ledger).
    pub create_pods: Vec<(Pod, Plan)>,
    /// The model volumes and claims the created pods mount, created before them.
    pub volumes: Vec<crate::model_cache::mount::ModelVolume>,
    /// Pods whose labels or annotations only changed: applied in place.
    pub apply_pods: Vec<Pod>,
    /// What to do with the Service.
    pub service: ObjectWrite<Service>,
    /// What to do with the PodDisruptionBudget.
    pub pdb: PdbWrite,
    /// Events to publish once the writes succeeded.
    pub events: Vec<JobEvent>,
    /// Kinds of step taken down (`vramfit_fallbacks_total{reason}`).
    pub steps: Vec<&'static str>,
    /// Why each replaced pod ended (`vramfit_serving_replica_restarts_total{reason}`).
    pub restarts: Vec<&'static str>,
    /// A replica waits for a class with room (the job is woken when GPUs free up).
    pub waits_for_room: bool,
    /// When to look again.
    pub action: Action,
}

pub(super) struct Draft<'a> {
    pub(super) obs: &'a ServedObserved<'a>,
    pub(super) old: InferenceJobStatus,
    pub(super) status: InferenceJobStatus,
    pub(super) generation: Option<i64>,
    pub(super) lines: Vec<ReplicaStatus>,
    capacity: Option<Capacity>,
    pub(super) delete_pods: Vec<String>,
    pub(super) create_pods: Vec<(Pod, Plan)>,
    pub(super) apply_pods: Vec<Pod>,
    pub(super) events: Vec<JobEvent>,
    pub(super) steps: Vec<&'static str>,
    pub(super) restarts: Vec<&'static str>,
    /// Why replicas wait for room (the no-fit message), if any does.
    pub(super) no_room: Option<String>,
    /// Replicas removed by this decision.
    pub(super) scaled_down: bool,
    /// How soon the next due thing falls (a backoff ending, a start deadline).
    pub(super) wake_in: Option<Duration>,
    /// The model volumes the created pods mount.
    pub(super) volumes: Vec<crate::model_cache::mount::ModelVolume>,
    /// The last placement that waits for a node to download the model.
    pub(super) model_wait: Option<super::cache_hook::ModelWait>,
}

/// Decides a served job's next state.
pub fn next_served(obs: &ServedObserved<'_>) -> Result<ServedDecision, BuildError> {
    let old = obs.job.status.clone().unwrap_or_default();
    let mut lines = old.replica_statuses.clone();
    lines.sort_by_key(|l| l.slot);
    lines.dedup_by_key(|l| l.slot);
    let mut draft = Draft {
        obs,
        status: old.clone(),
        old,
        generation: obs.job.metadata.generation,
        lines,
        capacity: None,
        delete_pods: Vec::new(),
        create_pods: Vec::new(),
        apply_pods: Vec::new(),
        events: Vec::new(),
        steps: Vec::new(),
        restarts: Vec::new(),
        no_room: None,
        scaled_down: false,
        wake_in: None,
        volumes: Vec::new(),
        model_wait: None,
    };
    draft.status.observed_generation = draft.generation;
    draft.validate();
    for index in 0..draft.lines.len() {
        draft.follow(index)?;
    }
    if let Ok(input) = obs.input {
        draft.scale_down(input);
        draft.roll(input)?;
        draft.scale_up(input)?;
    }
    draft.tidy();
    draft.cache_status();
    draft.adapter_lines();
    Ok(draft.finish())
}

impl<'a> Draft<'a> {
    pub(super) fn now(&self) -> &Time {
        &self.obs.now
    }

    pub(super) fn set(
        &mut self,
        type_: ConditionType,
        value: bool,
        reason: Reason,
        message: impl Into<String>,
    ) {
        ConditionsUpdate::new(&mut self.status.conditions, self.generation, &self.obs.now)
            .set(type_, value, reason, message);
    }

    pub(super) fn job_name(&self) -> String {
        self.obs.job.name_any()
    }

    /// InvalidSpec from the spec check (an event once per message).
    fn validate(&mut self) {
        let refusal = self.obs.input.as_ref().err().map(ToString::to_string);
        let (invalid, reason, message, event) = JobEvent::spec_check(refusal, &self.old.conditions);
        self.events.extend(event);
        self.set(ConditionType::InvalidSpec, invalid, reason, message);
    }

    /// The capacity, computed on first use and taken from as pods are placed.
    pub(super) fn capacity(&mut self) -> &mut Capacity {
        let compute = self.obs.capacity;
        self.capacity.get_or_insert_with(compute)
    }

    /// Rule 1: follows slot `index`'s surge pod and current pod.
    fn follow(&mut self, index: usize) -> Result<(), BuildError> {
        self.follow_surge(index)?;
        let name = self.lines[index].pod_name.clone();
        match (self.obs.pods)(&name) {
            PodSeen::Observed(pod) => {
                let state = read_pod(&pod);
                if let Some(ending) = self.start_overdue(&pod, &state) {
                    // A pod stuck before it starts holds its GPUs: it goes now.
                    self.delete_pods.push(name.clone());
                    return self.ended(index, ending, Some(&pod));
                }
                match state {
                    ReplicaPod::Ended(ending) => self.ended(index, ending, Some(&pod))?,
                    live => self.alive(index, &live),
                }
            }
            PodSeen::Applied(_) => self.alive(
                index,
                &ReplicaPod::Starting {
                    node: None,
                    detail: None,
                },
            ),
            PodSeen::Absent => {
                let gone = Ending {
                    kind: EndKind::Deleted,
                    message: format!("pod {name} is gone (deleted, or its node was removed)"),
                };
                self.ended(index, gone, None)?;
            }
            PodSeen::Foreign => {
                let line = &mut self.lines[index];
                line.ready = false;
                line.message = Some(format!(
                    "pod {name} exists and is not this job's; waiting for it to be deleted"
                ));
            }
        }
        Ok(())
    }

    /// A pod that starts or runs: the line follows it; a replica that has served long enough
    /// forgets its failures.
    fn alive(&mut self, index: usize, state: &ReplicaPod) {
        let (backoff, now) = (self.obs.backoff, self.obs.now.clone());
        let line = &mut self.lines[index];
        line.reason = None;
        let bound_only = matches!(state, ReplicaPod::Starting { detail: None, .. });
        if let Some(node) = state.node().filter(|_| !bound_only) {
            line.node_name = Some(node.to_string());
        }
        line.ready = state.is_ready();
        let pod = &line.pod_name;
        line.message = Some(match state {
            ReplicaPod::Starting {
                detail: Some(detail),
                ..
            } => format!("pod {pod} waits: {detail}"),
            // Created, or only bound: not worth a status write of its own (as for batch jobs,
            // the node comes with the next thing the pod reports).
            ReplicaPod::Starting { .. } => format!("pod {pod} created: {}", line.plan_summary),
            ReplicaPod::Running { ready: true, .. } => format!("pod {pod} serves"),
            ReplicaPod::Running { .. } => {
                format!(
                    "pod {pod} runs and is not Ready yet (loading the model, or its health route fails)"
                )
            }
            ReplicaPod::Ended(_) => format!("pod {pod} ended"),
        });
        if let ReplicaPod::Running {
            ready: true, since, ..
        } = state
            && line.failures > 0
            && backoff.is_stable(since.as_ref(), &now)
        {
            line.failures = 0;
        }
    }

    /// A pod stuck before it starts, as an ending: bound and past its start deadline, or
    /// still unbound past its schedule deadline (an unbound pod counts against its class's
    /// free GPUs, so one the scheduler can never place would hold them forever).
    fn start_overdue(&mut self, pod: &Pod, state: &ReplicaPod) -> Option<Ending> {
        if !matches!(state, ReplicaPod::Starting { .. }) {
            return None;
        }
        let (start, schedule) = (self.obs.start_deadline, self.obs.schedule_deadline);
        match start_deadline::check(pod, &self.obs.now, start) {
            Ok(left) => self.wake(left),
            Err(overdue) => {
                return Some(Ending {
                    kind: EndKind::StartTimeout,
                    message: format!(
                        "pod {} did not start within {} s on node {}: {}",
                        pod.name_any(),
                        start.as_secs(),
                        overdue.node,
                        overdue.waiting_on
                    ),
                });
            }
        }
        match schedule_deadline::check(pod, &self.obs.now, schedule) {
            Ok(left) => {
                self.wake(left);
                None
            }
            Err(unscheduled) => Some(Ending {
                kind: EndKind::ScheduleTimeout,
                message: format!(
                    "pod {} was not scheduled to a node within {} s: {}",
                    pod.name_any(),
                    schedule.as_secs(),
                    unscheduled.why
                ),
            }),
        }
    }

    /// Looks again within `left`, if that is sooner.
    pub(super) fn wake(&mut self, left: Option<Duration>) {
        if let Some(left) = left {
            self.wake_in = Some(self.wake_in.map_or(left, |w| w.min(left)));
        }
    }

    /// Slot `index`'s pod ended (or is gone): recorded once, then replaced now or once its
    /// backoff is over.
    fn ended(&mut self, index: usize, ending: Ending, pod: Option<&Pod>) -> Result<(), BuildError> {
        self.lines[index].ready = false;
        if self.lines[index].reason.is_none() {
            let (name, class) = (
                self.lines[index].pod_name.clone(),
                self.lines[index].node_class.clone(),
            );
            self.record_failure(index, (&name, &class), ending, pod.and_then(recorded_plan));
        }
        if let Some(at) = self.lines[index].retry_after.clone()
            && crate::backoff::is_before(self.now(), &at)
        {
            let left = crate::backoff::until(self.now(), &at);
            self.wake(Some(left + Duration::from_secs(1)));
            return Ok(());
        }
        let Ok(input) = self.obs.input else {
            return Ok(());
        };
        let failed = self.lines[index].pod_name.clone();
        if pod.is_some() {
            // Kept until now for `kubectl logs`; its replacement is placed next.
            self.delete_pods.push(failed.clone());
        }
        self.replace(index, input)
    }

    /// Records the end of slot `index`'s pod `pod` (planned for `class`, running `plan`):
    /// restart count, failures in a row and backoff, the step down after out of memory, the
    /// history entry, the event.
    pub(super) fn record_failure(
        &mut self,
        index: usize,
        (pod, class): (&str, &str),
        ending: Ending,
        plan: Option<Plan>,
    ) {
        let now = self.now().clone();
        let backoff = self.obs.backoff.clone();
        let slot = self.lines[index].slot;
        let pod = pod.to_string();
        let message = trim_message(&ending.message);
        let mut kind = ending.kind;
        let mut step = None;
        if kind == EndKind::OutOfMemory {
            match super::failure::step_down(self, index, class, plan.as_ref()) {
                Some((fallback, text, step_kind)) => {
                    self.steps.push(step_kind);
                    self.lines[index].fallback = (!fallback.is_empty()).then_some(fallback);
                    step = Some(text);
                }
                None => kind = EndKind::Failed,
            }
        }
        let no_step_left = ending.kind == EndKind::OutOfMemory && step.is_none();
        let line = &mut self.lines[index];
        line.restarts = line.restarts.saturating_add(1);
        let reason = if no_step_left {
            "NoStepLeft"
        } else {
            ending.kind.as_str()
        };
        line.reason = Some(reason.to_string());
        let next = if kind.backs_off() {
            line.failures = line.failures.saturating_add(1);
            let at = backoff.retry_at(&now, line.failures);
            let wait = backoff.delay(line.failures).as_secs();
            line.retry_after = Some(at);
            format!("next pod in {wait} s (failure {} in a row)", line.failures)
        } else if let Some(step) = &step {
            format!("next pod one step down: {step}")
        } else {
            "replaced now with the same plan".to_string()
        };
        line.message = Some(trim_message(&format!(
            "pod {pod} ended ({reason}): {message}; {next}"
        )));
        self.restarts.push(ending.kind.as_str());
        self.status
            .recent_restarts
            .push(vramfit_api::ReplicaRestart {
                time: now,
                slot,
                pod_name: pod.clone(),
                reason: reason.to_string(),
                message: message.clone(),
                step: step.clone(),
            });
        let keep = vramfit_api::serve::RECENT_RESTARTS_KEPT;
        let excess = self.status.recent_restarts.len().saturating_sub(keep);
        self.status.recent_restarts.drain(..excess);
        let note = format!("replica {slot}: pod {pod} ended ({reason}): {message}; {next}");
        let event = match ending.kind {
            EndKind::OutOfMemory => EventReason::OutOfMemory,
            EndKind::HostOutOfMemory => EventReason::HostOutOfMemory,
            EndKind::Disrupted => EventReason::Disrupted,
            EndKind::AdmissionRefused => EventReason::AdmissionRefused,
            EndKind::StartTimeout => EventReason::StartDeadlineExceeded,
            EndKind::ScheduleTimeout => EventReason::ScheduleDeadlineExceeded,
            _ => EventReason::ReplicaFailed,
        };
        self.events.push(JobEvent::warning(event, note).about(&pod));
        if let Some(step) = step {
            self.events.push(
                JobEvent::normal(EventReason::SteppedDown, format!("replica {slot}: {step}"))
                    .about(&pod),
            );
        }
    }

    /// Places slot `index`'s next pod (its class first, with its fallback) and creates it; or
    /// records that it waits for room.
    fn replace(&mut self, index: usize, input: &JobInput) -> Result<(), BuildError> {
        let fallback = self.lines[index].fallback.clone().unwrap_or_default();
        let class = self.lines[index].node_class.clone();
        let slot = self.lines[index].slot;
        let only = self.single_class();
        let at = Where {
            preferred: Some(&class),
            only: only.as_deref(),
            cache: self.cache_ask(),
        };
        let inventory = self.obs.inventory;
        let obtained = self.obtain(input, slot, |draft| {
            place(input, inventory, draft.capacity(), &fallback, at)
        })?;
        let wait = self.wait_line(slot);
        let line = &mut self.lines[index];
        match obtained {
            Some(pod) => {
                line.pod_name = pod.name.clone();
                line.incarnation = pod.number;
                line.node_class = pod.plan.node_class.clone();
                line.plan_summary = plan_summary(&pod.plan);
                line.node_name = None;
                line.ready = false;
                line.updated = true;
                line.reason = None;
                line.retry_after = None;
                line.message = Some(format!("pod {} created: {}", pod.name, line.plan_summary));
            }
            None => {
                if let Some((name, wait)) = wait {
                    super::cache_hook::mark_waiting(line, name, wait);
                    return Ok(());
                }
                let why = self.no_room.clone().unwrap_or_default();
                line.message = Some(trim_message(&format!("waits for a class with room: {why}")));
            }
        }
        Ok(())
    }

    /// The next pod of `slot`: the pod of the next number when it exists already and no
    /// replica holds it (created before a crash whose status write did not land: adopted with
    /// its plan), else one `placed` and created. `None` when there is no room (recorded).
    pub(super) fn obtain(
        &mut self,
        input: &JobInput,
        slot: u32,
        placed: impl FnOnce(&mut Self) -> Result<(Plan, vramfit_planner::NodeClass), NoClassFits>,
    ) -> Result<Option<Obtained>, BuildError> {
        let number = self.status.attempt_count.saturating_add(1);
        let name = replica_pod_name(&self.job_name(), slot, number);
        if !self.held(&name) {
            let adopted = match (self.obs.pods)(&name) {
                PodSeen::Observed(pod) => recorded_plan(&pod),
                PodSeen::Applied(plan) => Some(Arc::unwrap_or_clone(plan)),
                PodSeen::Absent | PodSeen::Foreign => None,
            };
            if let Some(plan) = adopted {
                self.status.attempt_count = number;
                return Ok(Some(Obtained { name, number, plan }));
            }
        }
        self.model_wait = None;
        match placed(self) {
            Ok((plan, class)) => {
                let cache = self.cache_placement(slot, &plan, &class);
                if let Some(CachePlacement::Wait { message }) = cache {
                    let class = class.name.clone();
                    self.model_wait = Some(ModelWait { class, message });
                    return Ok(None);
                }
                let (mut pod, number) = self.new_pod(input, &plan, &class, slot)?;
                self.attach_cache(&mut pod, cache);
                let name = pod.name_any();
                self.created(pod, plan.clone(), slot);
                Ok(Some(Obtained { name, number, plan }))
            }
            Err(none) => {
                self.no_room.get_or_insert(trim_message(&none.message));
                Ok(None)
            }
        }
    }

    /// Whether a replica line already holds pod `name` (as its pod or its surge pod).
    fn held(&self, name: &str) -> bool {
        self.lines
            .iter()
            .any(|l| l.pod_name == name || l.surge.as_ref().is_some_and(|s| s.pod_name == name))
    }

    /// The class every replica must use (`replicaClasses: Single`, once one has a class).
    pub(super) fn single_class(&self) -> Option<String> {
        (self.obs.serve.replica_classes == ReplicaClasses::Single)
            .then(|| self.lines.first().map(|l| l.node_class.clone()))
            .flatten()
    }

    /// Builds the next pod of `slot`: its number is one past the pods created so far, skipping
    /// names a pod already holds (a pod adopted after a crash keeps its own).
    pub(super) fn new_pod(
        &mut self,
        input: &JobInput,
        plan: &Plan,
        class: &vramfit_planner::NodeClass,
        slot: u32,
    ) -> Result<(Pod, u32), BuildError> {
        let job = self.job_name();
        let mut number = self.status.attempt_count.saturating_add(1);
        while self.name_held(&replica_pod_name(&job, slot, number)) {
            number = number.saturating_add(1);
        }
        self.status.attempt_count = number;
        let pod = replica_pod(
            self.obs.job,
            input,
            self.obs.serve,
            plan,
            class,
            (slot, number),
        )?;
        Ok((pod, number))
    }

    /// Whether a pod of that name exists already, or this decision creates one.
    fn name_held(&self, name: &str) -> bool {
        !matches!((self.obs.pods)(name), PodSeen::Absent)
            || self.create_pods.iter().any(|(p, _)| p.name_any() == name)
    }

    /// Records a pod to create and its `PodCreated` event.
    pub(super) fn created(&mut self, pod: Pod, plan: Plan, slot: u32) {
        let name = pod.name_any();
        self.events.push(
            JobEvent::normal(
                EventReason::PodCreated,
                format!(
                    "replica {slot}: pod {name} created: {}",
                    plan_summary(&plan)
                ),
            )
            .about(&name),
        );
        self.create_pods.push((pod, plan));
    }

    /// The plan of the pod named `name`, when known.
    pub(super) fn plan_of(&self, name: &str) -> Option<Plan> {
        if let Some((_, plan)) = self.create_pods.iter().find(|(p, _)| p.name_any() == name) {
            return Some(plan.clone());
        }
        match (self.obs.pods)(name) {
            PodSeen::Observed(pod) => recorded_plan(&pod),
            PodSeen::Applied(plan) => Some(Arc::unwrap_or_clone(plan)),
            PodSeen::Absent | PodSeen::Foreign => None,
        }
    }

    /// Rule 5: pods the job controls that no replica holds (nor this decision creates or
    /// deletes) are deleted.
    fn tidy(&mut self) {
        let held: Vec<&str> = self
            .lines
            .iter()
            .flat_map(|l| {
                std::iter::once(l.pod_name.as_str())
                    .chain(l.surge.as_ref().map(|s| s.pod_name.as_str()))
            })
            .collect();
        let strays: Vec<String> = self
            .obs
            .owned
            .iter()
            .filter(|name| !held.contains(&name.as_str()) && !self.delete_pods.contains(name))
            .cloned()
            .collect();
        self.delete_pods.extend(strays);
    }
}

impl crate::observe::served::ServedSnapshot<'_> {
    /// The next state of the job from this snapshot (pure: [`next_served`]).
    pub fn decide(&self, now: Time) -> Result<ServedDecision, BuildError> {
        let pods = |name: &str| self.base.pod(name);
        self.decide_as(now, &pods, &self.owned, &[])
    }

    /// [`Self::decide`] with the pods seen through `pods` and `owned` (a job whose replicas
    /// are groups shows each group as one pod: `group::served`), and the GPUs of the pods
    /// `leaving` (deleted by this decision whatever it decides) counted as free.
    pub fn decide_as(
        &self,
        now: Time,
        pods: &dyn Fn(&str) -> crate::pod::PodSeen,
        owned: &[String],
        leaving: &[String],
    ) -> Result<ServedDecision, BuildError> {
        let capacity = || {
            if leaving.is_empty() {
                self.base.capacity()
            } else {
                self.base.capacity_without(leaving)
            }
        };
        let requeues = &self.ctx.settings.requeues;
        let deadline = self
            .job
            .spec
            .start_deadline_seconds
            .unwrap_or(vramfit_api::DEFAULT_START_DEADLINE_SECONDS);
        let schedule_deadline = self
            .job
            .spec
            .schedule_deadline_seconds
            .unwrap_or(vramfit_api::DEFAULT_SCHEDULE_DEADLINE_SECONDS);
        let cache_view =
            crate::model_cache::view::observe(self.ctx, self.job, self.base.inventory(), &now);
        let observed = ServedObserved {
            job: self.job,
            serve: self.serve,
            input: self.base.input(),
            pods,
            owned,
            terminating: self.terminating,
            inventory: self.base.inventory(),
            capacity: &capacity,
            service: self.service.as_deref(),
            pdb: self.pdb.as_deref(),
            now,
            backoff: &self.ctx.serving.backoff,
            start_deadline: Duration::from_secs(deadline.into()),
            schedule_deadline: Duration::from_secs(schedule_deadline.into()),
            unschedulable_requeue: requeues.unschedulable,
            resync: requeues.resync,
            model_cache: cache_view.as_ref(),
        };
        next_served(&observed)
    }
}
