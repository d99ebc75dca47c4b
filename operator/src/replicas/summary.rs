//! The status of a served job (pure), once its replicas are decided (rule 6): counts and
//! `ready` (`2/3`), endpoint and selector, the classes and the first replica's plan, the
//! conditions and phase, the events of their transitions, the Service and PDB to write and
//! when to look again.
//!
//! | condition | True | False |
//! |---|---|---|
//! | `Ready`, `Available` | `Serving`: a replica is Ready, the endpoint answers | `NoReplicaReady`, `ScaledToZero` |
//! | `Progressing` | `RollingUpdate`, `ScalingUp`, `ScalingDown`, `ReplicasStarting` | `UpToDate` |
//! | `Degraded` | `CrashLoop`, `NoStepLeft`, `HostOutOfMemory`, `NoClassFits`, `ServiceNameTaken`, `PodDisruptionBudgetNameTaken`, `ServiceRejected` | `AsExpected` |
//! | `Scheduled` | `PodCreated`: every replica has a pod | `NoClassFits`, `InvalidSpec` |
//! | `OutOfMemory` | `SteppedDown`: a replica runs a step down | `NoOutOfMemory` |
//!
//! Phase: `Running` while a replica is Ready, `Scheduled` while replicas exist and none is,
//! `Unschedulable` when none could be placed for lack of room, `Pending` otherwise (invalid
//! spec, scaled to zero). Never `Succeeded` nor `Failed`: a server is replaced, not finished.
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use vramfit_api::conditions::{self, ConditionType, Reason};
use vramfit_api::event_reasons::EventReason;
use vramfit_api::{InferenceJobStatus, Phase};

use super::decide::{Draft, ServedDecision};
use super::pdb::{PdbWrite, desired_pdb, pdb_write};
use super::pod_state::{ReplicaPod, replica_pod as read_pod};
use super::service::{
    ServiceSeen, compare, desired_service, endpoint, selector_string, serving_selector,
};
use crate::backoff::CRASH_LOOP_FAILURES;
pub use crate::error::TakenObject;
use crate::events::JobEvent;
use crate::ownership::ObjectWrite;
use crate::pod::PodSeen;

impl Draft<'_> {
    /// Rule 6: the status, events, objects and requeue of the decision.
    pub(super) fn finish(mut self) -> ServedDecision {
        let service = self.service_write();
        let pdb = match desired_pdb(self.obs.job, self.live_replicas()) {
            Ok(desired) => pdb_write(self.obs.pdb, desired, self.obs.job),
            Err(_) => PdbWrite::Keep,
        };
        self.counts();
        self.conditions();
        self.phase();
        conditions::sort(&mut self.status.conditions);
        self.transition_events();
        let action = self.action();
        ServedDecision {
            status: self.status,
            // Only pods that are there and not being deleted: a stale status (the job cache
            // behind this process's last write, under load) would otherwise delete a replaced
            // pod again, a 404 each time.
            delete_pods: dedup(self.delete_pods)
                .into_iter()
                .filter(|name| self.obs.owned.contains(name))
                .collect(),
            create_pods: self.create_pods,
            volumes: self.volumes,
            apply_pods: self.apply_pods,
            service,
            pdb,
            events: self.events,
            steps: self.steps,
            restarts: self.restarts,
            waits_for_room: self.no_room.is_some(),
            action,
        }
    }

    /// The Service write: the job's own (as the store shows it) applied when it drifted;
    /// anything else created, never applied (the apply step reports a name someone else holds).
    fn service_write(&self) -> ObjectWrite<Service> {
        let Ok(desired) = desired_service(self.obs.job, self.obs.serve) else {
            return ObjectWrite::Keep;
        };
        match (
            compare(self.obs.service, &desired, self.obs.job),
            self.obs.service,
        ) {
            (ServiceSeen::AsDesired, _) => ObjectWrite::Keep,
            (ServiceSeen::Drifted, Some(ours)) => ObjectWrite::Apply {
                object: Box::new(desired),
                uid: ours.uid().unwrap_or_default(),
            },
            (ServiceSeen::Absent | ServiceSeen::Foreign | ServiceSeen::Drifted, _) => {
                ObjectWrite::Create(Box::new(desired))
            }
        }
    }

    /// The replicas whose pod is live once the decision is carried out: created by it, or
    /// starting or running and not deleted by it. A replica that waits for room or for its
    /// backoff, or whose pod name another object holds, has none.
    fn live_replicas(&self) -> u32 {
        let live = |name: &str| {
            if self.delete_pods.iter().any(|d| d == name) {
                return false;
            }
            if self.create_pods.iter().any(|(p, _)| p.name_any() == name) {
                return true;
            }
            match (self.obs.pods)(name) {
                PodSeen::Observed(pod) => !matches!(read_pod(&pod), ReplicaPod::Ended(_)),
                PodSeen::Applied(_) => true,
                PodSeen::Absent | PodSeen::Foreign => false,
            }
        };
        let count = self.lines.iter().filter(|l| live(&l.pod_name)).count();
        u32::try_from(count).unwrap_or(u32::MAX)
    }

    /// Replica counts, `ready`, endpoint, selector, classes, the first replica's plan.
    fn counts(&mut self) {
        let desired = self.obs.serve.replicas;
        let ready = self.lines.iter().filter(|l| l.ready).count() as u32;
        let status = &mut self.status;
        status.replicas = Some(self.lines.len() as u32);
        status.ready_replicas = Some(ready);
        status.ready = Some(format!("{ready}/{desired}"));
        status.endpoint = Some(endpoint(self.obs.job, self.obs.serve));
        status.selector = serving_selector(self.obs.job)
            .ok()
            .map(|s| selector_string(&s));
        let mut classes: Vec<&str> = self.lines.iter().map(|l| l.node_class.as_str()).collect();
        classes.sort_unstable();
        classes.dedup();
        status.node_class = (!classes.is_empty()).then(|| classes.join(","));
        status.pod_name = None;
        status.node_name = None;
        if let Some(first) = self.lines.first().map(|l| l.pod_name.clone()) {
            let plan = self.plan_of(&first);
            if plan.is_some() {
                self.status.plan = plan;
            }
        } else {
            self.status.plan = None;
        }
        self.status.replica_statuses = self.lines.clone();
        self.status.rejected_classes.clear();
    }

    fn conditions(&mut self) {
        let desired = self.obs.serve.replicas;
        let have = self.lines.len() as u32;
        let ready = self.lines.iter().filter(|l| l.ready).count() as u32;
        let endpoint = self.status.endpoint.clone().unwrap_or_default();
        let invalid = self.obs.input.is_err();

        let (serving, reason, message) = if ready > 0 {
            (
                true,
                Reason::Serving,
                format!("{ready}/{desired} replicas ready at {endpoint}"),
            )
        } else if desired == 0 {
            (
                false,
                Reason::ScaledToZero,
                "serve.replicas is 0".to_string(),
            )
        } else {
            (
                false,
                Reason::NoReplicaReady,
                format!("0/{desired} replicas ready"),
            )
        };
        self.set(ConditionType::Ready, serving, reason, message.clone());
        self.set(ConditionType::Available, serving, reason, message);

        let rolling = self.lines.iter().any(|l| l.surge.is_some() || !l.updated);
        let starting = self.lines.iter().any(|l| !l.ready);
        let progress = if invalid {
            None
        } else if rolling {
            Some((
                Reason::RollingUpdate,
                "replicas are replaced one at a time with the new spec".to_string(),
            ))
        } else if have < desired && self.no_room.is_none() {
            Some((
                Reason::ScalingUp,
                format!("{have}/{desired} replicas have a pod"),
            ))
        } else if self.scaled_down {
            Some((
                Reason::ScalingDown,
                format!("scaled down to {desired} replicas"),
            ))
        } else if starting {
            Some((
                Reason::ReplicasStarting,
                format!(
                    "{ready}/{have} replicas ready; the others start or come back after a failure"
                ),
            ))
        } else {
            None
        };
        match progress {
            Some((reason, message)) => self.set(ConditionType::Progressing, true, reason, message),
            None if invalid => self.set(
                ConditionType::Progressing,
                false,
                Reason::InvalidSpec,
                "the spec is invalid (see InvalidSpec): replicas are left as they are",
            ),
            None => self.set(
                ConditionType::Progressing,
                false,
                Reason::UpToDate,
                format!("{ready}/{desired} replicas ready, all on the current spec"),
            ),
        }

        let degraded = self.degraded();
        match degraded {
            Some((reason, message)) => self.set(ConditionType::Degraded, true, reason, message),
            None => self.set(
                ConditionType::Degraded,
                false,
                Reason::AsExpected,
                "every replica is up or on its way",
            ),
        }

        match (&self.no_room, invalid) {
            (_, true) => self.set(
                ConditionType::Scheduled,
                false,
                Reason::InvalidSpec,
                "not planned: the spec is invalid (see InvalidSpec)",
            ),
            (Some(why), false) => {
                let message =
                    format!("{have}/{desired} replicas have a pod; the others wait: {why}");
                self.set(
                    ConditionType::Scheduled,
                    false,
                    Reason::NoClassFits,
                    message,
                );
            }
            (None, false) => {
                // Replicas waiting for a node to download their model have no pod yet.
                let waiting = self.status.replicas_waiting_for_model.unwrap_or(0);
                let message = if waiting > 0 {
                    format!(
                        "{}/{desired} replicas have a pod; {waiting} wait for a node to download the model",
                        have.saturating_sub(waiting)
                    )
                } else {
                    format!("{have}/{desired} replicas have a pod")
                };
                self.set(ConditionType::Scheduled, true, Reason::PodCreated, message);
            }
        }

        let stepped: Vec<String> = self
            .lines
            .iter()
            .filter(|l| l.fallback.as_ref().is_some_and(|f| !f.is_empty()))
            .map(|l| format!("replica {} ({})", l.slot, l.plan_summary))
            .collect();
        if stepped.is_empty() {
            self.set(
                ConditionType::OutOfMemory,
                false,
                Reason::NoOutOfMemory,
                "no replica runs a step down",
            );
        } else {
            self.set(
                ConditionType::OutOfMemory,
                true,
                Reason::SteppedDown,
                format!(
                    "stepped down after running out of memory: {}",
                    stepped.join("; ")
                ),
            );
        }
    }

    /// Why the job is degraded, if it is: the worst replica's reason first. (A Service or
    /// budget name someone else holds is learnt by the apply step: [`names_taken`].)
    fn degraded(&self) -> Option<(Reason, String)> {
        let with = |reason: &str| {
            self.lines
                .iter()
                .find(|l| l.reason.as_deref() == Some(reason))
                .map(|l| {
                    format!(
                        "replica {}: {}",
                        l.slot,
                        l.message.clone().unwrap_or_default()
                    )
                })
        };
        if let Some(message) = with("NoStepLeft") {
            return Some((Reason::NoStepLeft, message));
        }
        if let Some(message) = with("HostOutOfMemory") {
            return Some((
                Reason::HostOutOfMemory,
                format!("{message}; raise spec.pod.resources memory"),
            ));
        }
        if let Some(line) = self
            .lines
            .iter()
            .find(|l| l.failures >= CRASH_LOOP_FAILURES)
        {
            return Some((
                Reason::CrashLoop,
                format!(
                    "replica {} failed {} times in a row: {}",
                    line.slot,
                    line.failures,
                    line.message.clone().unwrap_or_default()
                ),
            ));
        }
        self.no_room.as_ref().map(|why| {
            (
                Reason::NoClassFits,
                format!("a replica waits for a class with room: {why}"),
            )
        })
    }

    fn phase(&mut self) {
        let ready = self.lines.iter().any(|l| l.ready);
        self.status.phase = Some(if ready {
            Phase::Running
        } else if !self.lines.is_empty() {
            Phase::Scheduled
        } else if self.no_room.is_some() {
            Phase::Unschedulable
        } else {
            Phase::Pending
        });
        if self.status.start_time.is_none() && !self.create_pods.is_empty() {
            self.status.start_time = Some(self.now().clone());
        }
    }

    /// `Available` when the first replica turns Ready; `Degraded` and `Unschedulable` when
    /// they start.
    fn transition_events(&mut self) {
        let was =
            |t: ConditionType, old: &InferenceJobStatus| conditions::is_true(&old.conditions, t);
        let message = |s: &Self, t: ConditionType| {
            conditions::get(&s.status.conditions, t)
                .map(|c| c.message.clone())
                .unwrap_or_default()
        };
        let now_available = conditions::is_true(&self.status.conditions, ConditionType::Available);
        if now_available && !was(ConditionType::Available, &self.old) {
            let note = message(self, ConditionType::Available);
            self.events
                .push(JobEvent::normal(EventReason::Available, note));
        }
        let now_degraded = conditions::get(&self.status.conditions, ConditionType::Degraded)
            .filter(|c| c.status == "True")
            .map(|c| c.reason.clone());
        let before = conditions::get(&self.old.conditions, ConditionType::Degraded)
            .filter(|c| c.status == "True")
            .map(|c| c.reason.clone());
        if now_degraded.is_some() && now_degraded != before {
            let note = message(self, ConditionType::Degraded);
            self.events
                .push(JobEvent::warning(EventReason::Degraded, note));
        }
        if self.status.phase == Some(Phase::Unschedulable)
            && self.old.phase != Some(Phase::Unschedulable)
        {
            let note = message(self, ConditionType::Scheduled);
            self.events
                .push(JobEvent::warning(EventReason::Unschedulable, note));
        }
    }

    fn action(&self) -> Action {
        let mut next = self.obs.resync;
        if self.no_room.is_some() {
            next = next.min(self.obs.unschedulable_requeue);
        }
        if let Some(wake) = self.wake_in {
            next = next.min(wake.max(Duration::from_secs(1)));
        }
        Action::requeue(next)
    }
}

/// Records in `decision` that the API server refused the job's Service or PodDisruptionBudget
/// (`Degraded`, reason `ServiceRejected`, and a Warning event): the status is still written,
/// with the replicas it describes, and the reconcile is retried with backoff.
pub fn objects_refused(
    decision: &mut ServedDecision,
    old: &InferenceJobStatus,
    generation: Option<i64>,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    message: &str,
) {
    let message = crate::pod::outcome::trim_message(message);
    // Refused again: the condition keeps the time it turned True.
    let before = conditions::get(&old.conditions, ConditionType::Degraded)
        .filter(|c| c.status == "True" && c.reason == Reason::ServiceRejected.as_str())
        .cloned();
    let list = &mut decision.status.conditions;
    if let Some(before) = before {
        list.retain(|c| c.type_ != ConditionType::Degraded.as_str());
        list.push(before);
        conditions::sort(list);
    }
    vramfit_api::conditions::ConditionsUpdate::new(list, generation, now).set(
        ConditionType::Degraded,
        true,
        Reason::ServiceRejected,
        message.clone(),
    );
    decision
        .events
        .push(JobEvent::warning(EventReason::ServiceRejected, message));
}

/// Records in `decision` that the job's `object`, `name`, exists and is someone else's (left
/// untouched): `Degraded` with `ServiceNameTaken` or `PodDisruptionBudgetNameTaken` in place of
/// the replicas' own reason, and a Warning event when it starts. Said again, the condition is
/// the one already written, so nothing is written again.
pub fn name_taken(
    decision: &mut ServedDecision,
    old: &InferenceJobStatus,
    generation: Option<i64>,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    (object, name): (TakenObject, &str),
) {
    let reason = object.reason();
    let message = match object {
        TakenObject::Service => format!(
            "a Service named {name} exists and is not this job's: it is left as it is, and the endpoint is not vramfit's until it is deleted"
        ),
        TakenObject::PodDisruptionBudget => format!(
            "a PodDisruptionBudget named {name} exists and is not this job's: it is left as it is, and the replicas have no budget of vramfit's until it is deleted"
        ),
    };
    let before = conditions::get(&old.conditions, ConditionType::Degraded)
        .filter(|c| c.status == "True" && c.reason == reason.as_str() && c.message == message)
        .cloned();
    // The decision's own Degraded reason, if any, is not what the job says now.
    decision
        .events
        .retain(|e| e.reason != EventReason::Degraded);
    let list = &mut decision.status.conditions;
    if let Some(before) = &before {
        list.retain(|c| c.type_ != ConditionType::Degraded.as_str());
        list.push(before.clone());
        conditions::sort(list);
    }
    vramfit_api::conditions::ConditionsUpdate::new(list, generation, now).set(
        ConditionType::Degraded,
        true,
        reason,
        message.clone(),
    );
    if before.is_none() {
        decision
            .events
            .push(JobEvent::warning(EventReason::Degraded, message));
    }
}

/// The names once each, first occurrence first.
fn dedup(names: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for name in names {
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}
