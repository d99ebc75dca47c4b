//! Rolling updates of a served job (pure): after a spec change, one replica at a time gets a
//! pod of the new spec (planned again for its class, with its own fallback).
//!
//! * A replica whose pod differs only in labels or annotations keeps its pod: they are applied.
//! * A replica that serves nothing (starting) is replaced in place at once: nothing is lost.
//! * A Ready replica gets a **surge** pod, placed where the planner would place a new replica;
//!   once the surge pod is Ready it takes the slot and the old pod is deleted. So the Service
//!   always keeps the old pod's endpoint until the new one is in.
//! * With no class room for a surge pod, the replica is replaced **in place** (old pod deleted,
//!   new one created on its class), said in its line and in an `InPlaceUpdate` event — but only
//!   while another replica is Ready, so a job with two replicas or more never loses all its
//!   endpoints; a job with one replica has no other, and is replaced in place with a warning.
//! * A surge pod that ends counts as a failure of its replica (backoff; one step down after out
//!   of memory); a surge pod that is gone is started again.
use vramfit_api::SurgePod;
use vramfit_api::event_reasons::EventReason;
use vramfit_planner::{JobInput, plan_for_class};

use super::decide::Draft;
use super::placement::{Where, place};
use super::pod::replica_pod;
use super::pod_state::{ReplicaPod, replica_pod as read_pod};
use crate::events::JobEvent;
use crate::placement::plan_summary;
use crate::pod::PodSeen;
use crate::pod::build::{BuildError, metadata_matches, recorded_spec_hash};
use kube::ResourceExt;

/// What a surge with no class room for its pod does.
#[derive(Clone, Copy)]
enum NoRoom {
    /// Replaces the replica in place.
    InPlace,
    /// Nothing yet: a pod on its way out frees its GPUs soon.
    Wait,
}

/// Whether a replica's pod runs the current spec.
enum Fit {
    /// Same spec and metadata.
    Current,
    /// Same spec; labels or annotations to apply (the desired pod, under the pod's name).
    Metadata(Box<k8s_openapi::api::core::v1::Pod>),
    /// The pod must be replaced.
    Outdated,
    /// Cannot tell (the pod is not observed yet): left alone.
    Unknown,
}

impl Draft<'_> {
    /// Rule 1 (surge part): a Ready surge pod takes its slot; an ended one is a failure of
    /// its replica; a vanished one is forgotten (rule 3 starts another).
    pub(super) fn follow_surge(&mut self, index: usize) -> Result<(), BuildError> {
        let Some(surge) = self.lines[index].surge.clone() else {
            return Ok(());
        };
        match (self.obs.pods)(&surge.pod_name) {
            PodSeen::Observed(pod) => match read_pod(&pod) {
                ReplicaPod::Running {
                    ready: true, node, ..
                } => {
                    let old = self.lines[index].pod_name.clone();
                    self.delete_pods.push(old.clone());
                    let slot = self.lines[index].slot;
                    let line = &mut self.lines[index];
                    line.pod_name = surge.pod_name.clone();
                    line.incarnation = surge.incarnation;
                    line.node_class = surge.node_class.clone();
                    line.plan_summary = surge.plan_summary.clone();
                    line.node_name = node;
                    line.surge = None;
                    line.updated = true;
                    self.events.push(
                        JobEvent::normal(
                            EventReason::RollingUpdate,
                            format!(
                                "replica {slot}: pod {} is Ready and replaces pod {old}",
                                surge.pod_name
                            ),
                        )
                        .about(&surge.pod_name),
                    );
                }
                ReplicaPod::Ended(ending) => {
                    self.delete_pods.push(surge.pod_name.clone());
                    self.surge_failed(index, &surge, ending, &pod);
                }
                _ => {}
            },
            PodSeen::Applied(_) => {}
            PodSeen::Absent | PodSeen::Foreign => self.lines[index].surge = None,
        }
        Ok(())
    }

    /// A surge pod ended: the replica keeps serving with its old pod, and the rolling update
    /// tries again after the replica's backoff (one step down after out of memory).
    fn surge_failed(
        &mut self,
        index: usize,
        surge: &SurgePod,
        ending: super::pod_state::Ending,
        pod: &k8s_openapi::api::core::v1::Pod,
    ) {
        let plan = crate::pod::build::recorded_plan(pod);
        let where_ = (surge.pod_name.as_str(), surge.node_class.as_str());
        self.record_failure(index, where_, ending, plan);
        let line = &mut self.lines[index];
        // The old pod still serves: its line says so; the retry waits for `retryAfter`.
        line.reason = None;
        line.surge = None;
    }

    /// Rule 3: one replica at a time onto the current spec.
    pub(super) fn roll(&mut self, input: &JobInput) -> Result<(), BuildError> {
        let mut outdated = Vec::new();
        for index in 0..self.lines.len() {
            match self.fit(input, index)? {
                Fit::Current => self.lines[index].updated = true,
                Fit::Metadata(pod) => {
                    self.lines[index].updated = true;
                    self.apply_pods.push(*pod);
                }
                Fit::Outdated => {
                    self.lines[index].updated = false;
                    outdated.push(index);
                }
                Fit::Unknown => {}
            }
        }
        if self.lines.iter().any(|l| l.surge.is_some()) {
            return Ok(());
        }
        // A pod on its way out still holds its GPUs: the next Ready replica surges now only
        // where room is left beside it (the step does not wait for the deletion to be seen);
        // otherwise the step waits until the pod is gone (its deletion reconciles the job), so
        // that it can surge rather than replace in place.
        let leaving = !self.delete_pods.is_empty() || self.obs.terminating > 0;
        // One at a time: a replica that serves nothing first (replacing it loses nothing).
        let Some(&index) = outdated
            .iter()
            .find(|&&i| !self.lines[i].ready)
            .or_else(|| outdated.first())
        else {
            return Ok(());
        };
        if let Some(at) = self.lines[index].retry_after.clone()
            && crate::backoff::is_before(self.now(), &at)
        {
            // Backing off after a failed surge pod.
            let left = crate::backoff::until(self.now(), &at);
            self.wake(Some(left + std::time::Duration::from_secs(1)));
            return Ok(());
        }
        match (self.lines[index].ready, leaving) {
            (true, false) => self.surge(input, index, NoRoom::InPlace),
            (true, true) => self.surge(input, index, NoRoom::Wait),
            (false, false) => self.in_place(input, index, false),
            (false, true) => Ok(()),
        }
    }

    /// Whether slot `index`'s live pod runs the current spec.
    fn fit(&mut self, input: &JobInput, index: usize) -> Result<Fit, BuildError> {
        let line = &self.lines[index];
        // A replica that waits for its next pod gets the current spec then.
        if line.reason.is_some()
            || self
                .create_pods
                .iter()
                .any(|(p, _)| p.name_any() == line.pod_name)
        {
            return Ok(Fit::Current);
        }
        let PodSeen::Observed(pod) = (self.obs.pods)(&line.pod_name) else {
            return Ok(Fit::Unknown);
        };
        let Some(class) = self.obs.inventory.class(&line.node_class) else {
            return Ok(Fit::Outdated);
        };
        let fallback = line.fallback.clone().unwrap_or_default();
        let Ok(plan) = plan_for_class(input, class, &fallback) else {
            return Ok(Fit::Outdated);
        };
        let desired = replica_pod(
            self.obs.job,
            input,
            self.obs.serve,
            &plan,
            class,
            (line.slot, line.incarnation),
        )?;
        if recorded_spec_hash(&pod) != recorded_spec_hash(&desired) {
            return Ok(Fit::Outdated);
        }
        if metadata_matches(&pod, &desired) || desired.name_any() != pod.name_any() {
            return Ok(Fit::Current);
        }
        // A pod that mounts a cached model keeps its spec as created: the metadata alone.
        let desired = crate::model_cache::mount::metadata_apply(desired, &pod);
        Ok(Fit::Metadata(Box::new(desired)))
    }

    /// A surge pod for the Ready replica `index`, where a class has room; else in place, or
    /// nothing yet (`NoRoom::Wait`).
    fn surge(&mut self, input: &JobInput, index: usize, no_room: NoRoom) -> Result<(), BuildError> {
        let fallback = self.lines[index].fallback.clone().unwrap_or_default();
        let only = self.single_class();
        let at = Where {
            preferred: None,
            only: only.as_deref(),
            cache: self.cache_ask(),
        };
        let inventory = self.obs.inventory;
        let slot = self.lines[index].slot;
        let room = self.no_room.take();
        let obtained = self.obtain(input, slot, |draft| {
            place(input, inventory, draft.capacity(), &fallback, at)
        })?;
        // No room for a surge pod is not a replica waiting for room.
        self.no_room = room;
        let Some(pod) = obtained else {
            return match no_room {
                NoRoom::InPlace => self.in_place(input, index, true),
                NoRoom::Wait => Ok(()),
            };
        };
        let old = self.lines[index].pod_name.clone();
        let summary = plan_summary(&pod.plan);
        let line = &mut self.lines[index];
        line.retry_after = None;
        line.surge = Some(SurgePod {
            pod_name: pod.name.clone(),
            incarnation: pod.number,
            node_class: pod.plan.node_class.clone(),
            plan_summary: summary.clone(),
        });
        // Its `PodCreated` event names it; `RollingUpdate` follows when it takes the slot.
        line.message = Some(format!(
            "rolling update: pod {} ({summary}) replaces pod {old} once Ready",
            pod.name
        ));
        Ok(())
    }

    /// Replaces replica `index`'s pod in place (its class, the current spec): at once when it
    /// serves nothing; for a Ready replica with no room for a surge pod, only while another
    /// replica serves (or the job has only this one).
    fn in_place(
        &mut self,
        input: &JobInput,
        index: usize,
        no_room: bool,
    ) -> Result<(), BuildError> {
        let others_ready = self
            .lines
            .iter()
            .enumerate()
            .any(|(i, l)| i != index && l.ready);
        let slot = self.lines[index].slot;
        let alone = self.obs.serve.replicas <= 1 && self.lines.len() <= 1;
        if no_room && !others_ready && !alone {
            self.lines[index].message = Some(format!(
                "rolling update waits: no class has room for a surge pod, and replica {slot} is the only Ready one"
            ));
            return Ok(());
        }
        let old = self.lines[index].pod_name.clone();
        let fallback = self.lines[index].fallback.clone().unwrap_or_default();
        let own = self
            .obs
            .inventory
            .class(&self.lines[index].node_class)
            .and_then(|class| {
                plan_for_class(input, class, &fallback)
                    .ok()
                    .map(|plan| (plan, class.clone()))
            });
        let only = self.single_class();
        let inventory = self.obs.inventory;
        let room = self.no_room.take();
        let cache = self.cache_ask();
        // Its own class, whose GPUs the old pod gives back; elsewhere only if it cannot run the
        // new spec there.
        let obtained = self.obtain(input, slot, |draft| match own {
            Some(placed) => Ok(placed),
            None => {
                let at = Where {
                    preferred: None,
                    only: only.as_deref(),
                    cache,
                };
                place(input, inventory, draft.capacity(), &fallback, at)
            }
        })?;
        self.no_room = room;
        let Some(pod) = obtained else {
            self.lines[index].message = Some(format!(
                "rolling update waits: no class can run the new spec for replica {slot} now"
            ));
            return Ok(());
        };
        self.delete_pods.push(old.clone());
        let name = pod.name.clone();
        let summary = plan_summary(&pod.plan);
        let line = &mut self.lines[index];
        line.pod_name = name.clone();
        line.incarnation = pod.number;
        line.node_class = pod.plan.node_class.clone();
        line.plan_summary = summary.clone();
        line.node_name = None;
        line.ready = false;
        line.updated = true;
        if no_room {
            let downtime = if others_ready {
                "the other replicas serve meanwhile"
            } else {
                "the endpoint has no Ready replica until it is Ready"
            };
            line.message = Some(format!(
                "rolling update in place: no class has room for a surge pod; pod {name} replaces pod {old} ({downtime})"
            ));
            self.events.push(
                JobEvent::warning(
                    EventReason::InPlaceUpdate,
                    format!("replica {slot}: no class has room for a surge pod: pod {old} is replaced in place by pod {name} ({summary}); {downtime}"),
                )
                .about(&name),
            );
        } else {
            // Its `PodCreated` event says what runs now.
            line.message = Some(format!(
                "rolling update: pod {name} replaces pod {old}, which served nothing"
            ));
        }
        Ok(())
    }
}
