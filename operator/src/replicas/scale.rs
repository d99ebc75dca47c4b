//! Which replicas a scale-down removes and which slots a scale-up fills (pure).
//!
//! Scale-down removes first the replicas that serve nothing (not Ready: loading, backing
//! off, waiting); for an autoscaled job (`serve.autoscaling`) then those planned for the
//! least concurrency (the autoscaler counts on it); then those the job's preference ranks
//! worst — economy: the most expensive plan first; quality: the most quantized (then the less
//! capable) first — and, among equals, the highest slot. Scale-up fills the lowest free slots.
use std::cmp::Ordering;

use vramfit_api::event_reasons::EventReason;
use vramfit_api::{Fallback, Plan, Preference, ReplicaStatus};
use vramfit_planner::{JobInput, ranking};

use super::decide::Draft;
use super::placement::{Where, place};
use crate::events::JobEvent;
use crate::placement::plan_summary;
use crate::pod::build::BuildError;

impl Draft<'_> {
    /// Rule 2: removes the replicas over `serve.replicas`, worst first (their pods, surge
    /// pods included, are deleted).
    pub(super) fn scale_down(&mut self, input: &JobInput) {
        let keep = self.obs.serve.replicas as usize;
        if self.lines.len() <= keep {
            return;
        }
        let candidates = self
            .lines
            .iter()
            .map(|l| Candidate {
                slot: l.slot,
                ready: l.ready,
                plan: self.plan_of(&l.pod_name),
            })
            .collect();
        let preference = input.preference;
        let order = Removal {
            preference,
            least_capacity_first: self.obs.serve.autoscaling.is_some(),
        };
        for slot in to_remove(order, candidates, keep) {
            let Some(index) = self.lines.iter().position(|l| l.slot == slot) else {
                continue;
            };
            let line = self.lines.remove(index);
            self.delete_pods.push(line.pod_name.clone());
            if let Some(surge) = &line.surge {
                self.delete_pods.push(surge.pod_name.clone());
            }
            let why = if line.ready {
                match preference {
                    Preference::Economy => "the most expensive plan (preference economy)",
                    Preference::Quality => "the lowest-quality plan (preference quality)",
                }
            } else {
                "it served nothing"
            };
            self.events.push(
                JobEvent::normal(
                    EventReason::ScaledDown,
                    format!(
                        "replica {slot} removed (pod {}, {}): {why}",
                        line.pod_name, line.plan_summary
                    ),
                )
                .about(&line.pod_name),
            );
            self.scaled_down = true;
        }
    }

    /// Rule 4: new replicas in the lowest free slots up to `serve.replicas`, each placed where
    /// the planner would place it (the next class when the first is full); those with no room
    /// wait (`waits for a class with room`).
    pub(super) fn scale_up(&mut self, input: &JobInput) -> Result<(), BuildError> {
        let want = self.obs.serve.replicas as usize;
        let taken: Vec<u32> = self.lines.iter().map(|l| l.slot).collect();
        for slot in free_slots(&taken, want.saturating_sub(self.lines.len())) {
            let only = self.single_class();
            let at = Where {
                preferred: None,
                only: only.as_deref(),
                cache: self.cache_ask(),
            };
            let inventory = self.obs.inventory;
            let obtained = self.obtain(input, slot, |draft| {
                place(input, inventory, draft.capacity(), &Fallback::default(), at)
            })?;
            let Some(pod) = obtained else {
                if let Some((pod_name, wait)) = self.wait_line(slot) {
                    self.lines
                        .push(super::cache_hook::waiting_line(slot, pod_name, wait));
                    continue;
                }
                break;
            };
            let summary = plan_summary(&pod.plan);
            self.lines.push(ReplicaStatus {
                slot,
                message: Some(format!("pod {} created: {summary}", pod.name)),
                pod_name: pod.name,
                incarnation: pod.number,
                node_class: pod.plan.node_class.clone(),
                plan_summary: summary,
                ready: false,
                node_name: None,
                updated: true,
                fallback: None,
                restarts: 0,
                failures: 0,
                retry_after: None,
                reason: None,
                surge: None,
                members: Vec::new(),
                weights: None,
                adapters: Vec::new(),
            });
        }
        self.lines.sort_by_key(|l| l.slot);
        Ok(())
    }
}

/// A replica as a scale-down sees it.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Its slot.
    pub slot: u32,
    /// Whether it serves.
    pub ready: bool,
    /// Its pod's plan, when known.
    pub plan: Option<Plan>,
}

/// Which replicas go first.
#[derive(Clone, Copy, Debug)]
pub struct Removal {
    /// The job's preference.
    pub preference: Preference,
    /// An autoscaled job: the least planned concurrency goes first, after what serves nothing.
    pub least_capacity_first: bool,
}

impl From<Preference> for Removal {
    fn from(preference: Preference) -> Self {
        Removal {
            preference,
            least_capacity_first: false,
        }
    }
}

/// The slots to remove so that `keep` replicas remain, the first removed first.
pub fn to_remove(order: impl Into<Removal>, mut replicas: Vec<Candidate>, keep: usize) -> Vec<u32> {
    let order = order.into();
    let remove = replicas.len().saturating_sub(keep);
    replicas.sort_by(|a, b| worst_first(order, a, b));
    replicas.into_iter().take(remove).map(|c| c.slot).collect()
}

/// Orders replicas worst first: not Ready, then (autoscaled) the least concurrency, then the
/// worse plan, then the higher slot.
fn worst_first(order: Removal, a: &Candidate, b: &Candidate) -> Ordering {
    let preference = order.preference;
    let capacity = |c: &Candidate| c.plan.as_ref().and_then(|p| p.concurrency).unwrap_or(0);
    let capacities = if order.least_capacity_first {
        capacity(a).cmp(&capacity(b))
    } else {
        Ordering::Equal
    };
    let plans = match (&a.plan, &b.plan) {
        // `compare` orders best first: the worse plan is the greater one.
        (Some(pa), Some(pb)) => ranking::compare(preference, pb, pa),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    a.ready
        .cmp(&b.ready)
        .then(capacities)
        .then(plans)
        .then(b.slot.cmp(&a.slot))
}

/// The `count` lowest slots not in `taken`.
pub fn free_slots(taken: &[u32], count: usize) -> Vec<u32> {
    (0u32..)
        .filter(|slot| !taken.contains(slot))
        .take(count)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use vramfit_api::{Fallback, Quantization};
    use vramfit_planner::{plan_for_class, resolve_job};

    fn plan(kind: &str, count: u32, price_cents: u32, quantization: Quantization) -> Plan {
        let mut plan = fixtures::plan_on(kind, count);
        plan.hourly_price_cents = price_cents;
        plan.quantization = quantization;
        plan
    }

    #[test]
    fn an_autoscaled_job_removes_the_least_concurrency_first_whatever_its_quality() {
        let mut small = plan("a10g", 1, 60, Quantization::None);
        small.concurrency = Some(4);
        let mut large = plan("a10g", 1, 60, Quantization::Int8);
        large.concurrency = Some(16);
        let replicas = vec![candidate(0, true, large), candidate(1, true, small)];
        // Quality alone would remove the quantized replica; by capacity the small one goes.
        assert_eq!(to_remove(Preference::Quality, replicas.clone(), 1), [0]);
        let autoscaled = Removal {
            preference: Preference::Quality,
            least_capacity_first: true,
        };
        assert_eq!(to_remove(autoscaled, replicas, 1), [1]);
    }

    fn candidate(slot: u32, ready: bool, plan: Plan) -> Candidate {
        Candidate {
            slot,
            ready,
            plan: Some(plan),
        }
    }

    #[test]
    fn economy_removes_the_most_expensive_and_quality_the_most_quantized() {
        let cheap_quantized = plan("a10g", 1, 60, Quantization::Int8);
        let dear_full = plan("l40s", 1, 180, Quantization::None);
        let mid_full = plan("a100", 8, 250, Quantization::None);
        let replicas = vec![
            candidate(0, true, dear_full.clone()),
            candidate(1, true, cheap_quantized.clone()),
            candidate(2, true, mid_full.clone()),
        ];
        assert_eq!(
            to_remove(Preference::Economy, replicas.clone(), 1),
            [2, 0],
            "most expensive first (2.50 $/h, then 1.80 $/h)"
        );
        assert_eq!(
            to_remove(Preference::Quality, replicas.clone(), 2),
            [1],
            "the 8-bit replica goes first"
        );
        assert!(to_remove(Preference::Quality, replicas, 3).is_empty());
    }

    #[test]
    fn replicas_that_serve_nothing_go_before_any_ready_one() {
        let good = plan("l40s", 1, 180, Quantization::None);
        let replicas = vec![
            candidate(0, true, good.clone()),
            candidate(1, false, good.clone()),
            candidate(2, true, good.clone()),
        ];
        assert_eq!(to_remove(Preference::Quality, replicas.clone(), 2), [1]);
        // Among equals, the highest slot.
        assert_eq!(to_remove(Preference::Quality, replicas, 1), [1, 2]);
    }

    #[test]
    fn a_replica_whose_plan_is_unknown_goes_first_among_the_ready() {
        let job = resolve_job(&fixtures::vllm_mistral_spec()).unwrap();
        let known =
            plan_for_class(&job, &fixtures::class("a10g", 4), &Fallback::default()).unwrap();
        let replicas = vec![
            candidate(0, true, known),
            Candidate {
                slot: 1,
                ready: true,
                plan: None,
            },
        ];
        assert_eq!(to_remove(Preference::Economy, replicas, 1), [1]);
    }

    #[test]
    fn scale_up_fills_the_lowest_free_slots() {
        assert_eq!(free_slots(&[0, 2], 3), [1, 3, 4]);
        assert!(free_slots(&[], 0).is_empty());
    }
}
