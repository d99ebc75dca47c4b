//! `vramfit_serving_ready_replicas{node_class}`, kept up to date as the job reflector takes in
//! its watch events (as the job gauges are): each served job's Ready replicas by class, from
//! its status; a scrape reads the totals, never a job or a pod.
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::stores::cached_job::CachedJob;

/// One served job's Ready replicas, by class.
type Ready = BTreeMap<String, i64>;

/// Ready replicas of served jobs, by class.
#[derive(Debug, Default)]
pub struct ServingGauges {
    state: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    jobs: HashMap<ObjectRef<CachedJob>, JobCounts>,
    /// During a relist: what the new list has shown so far.
    relist: Option<HashMap<ObjectRef<CachedJob>, JobCounts>>,
}

/// One served job's counts, from its status.
#[derive(Debug, Default)]
struct JobCounts {
    /// Ready replicas by class.
    ready: Ready,
    /// Replicas waiting for a node to download their model.
    waiting_for_model: i64,
}

impl JobCounts {
    fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.waiting_for_model == 0
    }
}

/// The Ready replicas of `job` by class and its replicas waiting for their model (a batch
/// job's next attempt that waits counts 1; nothing for an unreadable job).
fn counts_of(job: &CachedJob) -> JobCounts {
    let mut counts = JobCounts::default();
    let Ok(job) = job.job() else {
        return counts;
    };
    counts.waiting_for_model = job
        .status
        .as_ref()
        .and_then(|s| s.replicas_waiting_for_model)
        .map_or(0, i64::from);
    if job.spec.serve.is_none() {
        return counts;
    }
    for line in job.status.iter().flat_map(|s| &s.replica_statuses) {
        *counts.ready.entry(line.node_class.clone()).or_default() += i64::from(line.ready);
    }
    counts
}

impl ServingGauges {
    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one event of the job watch.
    pub fn apply(&self, event: &watcher::Event<CachedJob>) {
        let mut counts = self.lock();
        match event {
            watcher::Event::Apply(job) => {
                let job_counts = counts_of(job);
                let key = ObjectRef::from_obj(job);
                if job_counts.is_empty() {
                    counts.jobs.remove(&key);
                } else {
                    counts.jobs.insert(key, job_counts);
                }
            }
            watcher::Event::Delete(job) => {
                counts.jobs.remove(&ObjectRef::from_obj(job));
            }
            watcher::Event::Init => counts.relist = Some(HashMap::new()),
            watcher::Event::InitApply(job) => {
                let job_counts = counts_of(job);
                if !job_counts.is_empty() {
                    counts
                        .relist
                        .get_or_insert_default()
                        .insert(ObjectRef::from_obj(job), job_counts);
                }
            }
            watcher::Event::InitDone => {
                counts.jobs = counts.relist.take().unwrap_or_default();
            }
        }
    }

    /// Ready replicas per class, over every served job.
    pub fn totals(&self) -> Ready {
        let counts = self.lock();
        let mut totals = Ready::new();
        for job in counts.jobs.values() {
            for (class, n) in &job.ready {
                *totals.entry(class.clone()).or_default() += n;
            }
        }
        totals
    }

    /// Replicas waiting for a node to download their model, over every job (a batch job's
    /// waiting attempt counts 1).
    pub fn waiting_for_model(&self) -> i64 {
        let counts = self.lock();
        counts.jobs.values().map(|job| job.waiting_for_model).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use vramfit_api::{InferenceJobStatus, ReplicaStatus, ServeSpec};

    fn served(name: &str, lines: &[(&str, bool)]) -> CachedJob {
        let mut spec = fixtures::vllm_mistral_spec();
        spec.serve = Some(ServeSpec::default());
        let mut job = fixtures::job(name, spec);
        job.status = Some(InferenceJobStatus {
            replica_statuses: lines
                .iter()
                .enumerate()
                .map(|(slot, (class, ready))| ReplicaStatus {
                    slot: slot as u32,
                    pod_name: format!("{name}-r{slot}-1"),
                    incarnation: 1,
                    node_class: class.to_string(),
                    plan_summary: String::new(),
                    ready: *ready,
                    node_name: None,
                    updated: true,
                    fallback: None,
                    restarts: 0,
                    failures: 0,
                    retry_after: None,
                    reason: None,
                    message: None,
                    surge: None,
                    members: Vec::new(),
                    weights: None,
                    adapters: Vec::new(),
                })
                .collect(),
            ..Default::default()
        });
        CachedJob::of(&job)
    }

    #[test]
    fn a_batch_job_waiting_for_its_model_counts_one_waiting_replica() {
        let gauges = ServingGauges::default();
        let mut waiting = fixtures::job("batch", fixtures::vllm_mistral_spec());
        waiting.status = Some(vramfit_api::InferenceJobStatus {
            replicas_waiting_for_model: Some(1),
            ..Default::default()
        });
        gauges.apply(&watcher::Event::Apply(CachedJob::of(&waiting)));
        assert_eq!(gauges.waiting_for_model(), 1);
        assert!(
            gauges.totals().is_empty(),
            "no Ready replica of a batch job"
        );
        waiting.status = Some(vramfit_api::InferenceJobStatus::default());
        gauges.apply(&watcher::Event::Apply(CachedJob::of(&waiting)));
        assert_eq!(gauges.waiting_for_model(), 0);
    }

    #[test]
    fn ready_replicas_by_class_follow_the_job_events() {
        let gauges = ServingGauges::default();
        let a = served(
            "a",
            &[("a10g-x1", true), ("l40s-x1", true), ("l40s-x1", false)],
        );
        let b = served("b", &[("l40s-x1", true)]);
        let batch = CachedJob::of(&fixtures::job("batch", fixtures::vllm_mistral_spec()));
        for job in [&a, &b, &batch] {
            gauges.apply(&watcher::Event::Apply(job.clone()));
        }
        let totals = gauges.totals();
        assert_eq!(totals.get("a10g-x1"), Some(&1));
        assert_eq!(totals.get("l40s-x1"), Some(&2));
        assert_eq!(totals.len(), 2, "a batch job counts nowhere: {totals:?}");
        gauges.apply(&watcher::Event::Delete(b));
        assert_eq!(gauges.totals().get("l40s-x1"), Some(&1));
        // A relist replaces everything once it is complete.
        gauges.apply(&watcher::Event::Init);
        gauges.apply(&watcher::Event::InitApply(served(
            "c",
            &[("h100-x8", true)],
        )));
        assert_eq!(
            gauges.totals().get("a10g-x1"),
            Some(&1),
            "the old list until InitDone"
        );
        gauges.apply(&watcher::Event::InitDone);
        assert_eq!(gauges.totals(), Ready::from([("h100-x8".to_string(), 1)]));
    }
}
