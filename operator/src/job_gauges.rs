//! The job gauges' counts (`vramfit_jobs{phase,node_class}`, `vramfit_unschedulable_jobs`),
//! kept up to date event by event as the job reflector takes in its watch events: a scrape
//! reads one count per phase and class, never every job (at 5,000 jobs a scrape walked the
//! whole job cache; anyone who can reach `/metrics` could make the operator do that at will).
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use vramfit_api::Phase;

use crate::stores::cached_job::CachedJob;

/// What a job counts under: its phase (Pending until it has one) and node class.
type Key = (Phase, Option<Arc<str>>);

/// Jobs per phase and class.
#[derive(Debug, Default)]
pub struct JobGauges {
    state: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    /// What each job counts under.
    jobs: HashMap<ObjectRef<CachedJob>, Key>,
    /// Jobs per phase and class (no zero entries).
    totals: HashMap<Key, i64>,
    /// During a relist: what the new list has shown so far.
    relist: Option<HashMap<ObjectRef<CachedJob>, Key>>,
}

fn key_of(job: &CachedJob) -> Key {
    (
        job.phase().unwrap_or(Phase::Pending),
        job.node_class().map(Arc::from),
    )
}

impl Counts {
    fn add(&mut self, key: Key) {
        *self.totals.entry(key).or_default() += 1;
    }

    fn remove(&mut self, key: &Key) {
        if let Some(total) = self.totals.get_mut(key) {
            *total -= 1;
            if *total <= 0 {
                self.totals.remove(key);
            }
        }
    }

    fn forget(&mut self, job: &ObjectRef<CachedJob>) {
        if let Some(old) = self.jobs.remove(job) {
            self.remove(&old);
        }
    }
}

impl JobGauges {
    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one event of the job watch (O(1); a relist's end rebuilds the totals once).
    pub fn apply(&self, event: &watcher::Event<CachedJob>) {
        let mut counts = self.lock();
        match event {
            watcher::Event::Apply(job) => {
                let reference = ObjectRef::from_obj(job);
                counts.forget(&reference);
                let key = key_of(job);
                counts.add(key.clone());
                counts.jobs.insert(reference, key);
            }
            watcher::Event::Delete(job) => counts.forget(&ObjectRef::from_obj(job)),
            watcher::Event::Init => counts.relist = Some(HashMap::new()),
            watcher::Event::InitApply(job) => {
                counts
                    .relist
                    .get_or_insert_default()
                    .insert(ObjectRef::from_obj(job), key_of(job));
            }
            watcher::Event::InitDone => {
                let listed = counts.relist.take().unwrap_or_default();
                counts.totals.clear();
                for key in listed.values() {
                    counts.add(key.clone());
                }
                counts.jobs = listed;
            }
        }
    }

    /// Jobs per `(phase, class)`: one entry per pair that has jobs, however many jobs.
    pub fn totals(&self) -> Vec<(Phase, Option<Arc<str>>, i64)> {
        self.lock()
            .totals
            .iter()
            .map(|((phase, class), total)| (*phase, class.clone(), *total))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use vramfit_api::InferenceJobStatus;

    fn job(name: &str, phase: Option<Phase>, class: Option<&str>) -> CachedJob {
        let mut job = fixtures::job(name, fixtures::vllm_mistral_spec());
        job.status = Some(InferenceJobStatus {
            phase,
            node_class: class.map(str::to_string),
            ..InferenceJobStatus::default()
        });
        CachedJob::of(&job)
    }

    fn sorted(gauges: &JobGauges) -> Vec<(Phase, Option<String>, i64)> {
        let mut totals: Vec<_> = gauges
            .totals()
            .into_iter()
            .map(|(p, c, n)| (p, c.map(|c| c.to_string()), n))
            .collect();
        totals.sort_by(|a, b| (a.0.as_str(), &a.1).cmp(&(b.0.as_str(), &b.1)));
        totals
    }

    #[test]
    fn totals_follow_applies_deletes_and_relists() {
        let gauges = JobGauges::default();
        gauges.apply(&watcher::Event::Init);
        gauges.apply(&watcher::Event::InitApply(job("a", None, None)));
        gauges.apply(&watcher::Event::InitApply(job(
            "b",
            Some(Phase::Running),
            Some("a10g-x4"),
        )));
        assert!(gauges.totals().is_empty(), "nothing before the list is in");
        gauges.apply(&watcher::Event::InitDone);
        assert_eq!(
            sorted(&gauges),
            [
                (Phase::Pending, None, 1),
                (Phase::Running, Some("a10g-x4".into()), 1)
            ]
        );
        // `a` is placed, then `b` finishes and is deleted.
        gauges.apply(&watcher::Event::Apply(job(
            "a",
            Some(Phase::Scheduled),
            Some("a10g-x4"),
        )));
        gauges.apply(&watcher::Event::Apply(job(
            "b",
            Some(Phase::Succeeded),
            Some("a10g-x4"),
        )));
        gauges.apply(&watcher::Event::Delete(job(
            "b",
            Some(Phase::Succeeded),
            Some("a10g-x4"),
        )));
        assert_eq!(
            sorted(&gauges),
            [(Phase::Scheduled, Some("a10g-x4".into()), 1)]
        );
        // A relist that shows only a new job replaces everything.
        gauges.apply(&watcher::Event::Init);
        gauges.apply(&watcher::Event::InitApply(job(
            "c",
            Some(Phase::Unschedulable),
            None,
        )));
        gauges.apply(&watcher::Event::InitDone);
        assert_eq!(sorted(&gauges), [(Phase::Unschedulable, None, 1)]);
    }

    /// A scrape reads one entry per phase and class: 10,000 jobs in two classes are 4
    /// entries, the same as 4 jobs would be.
    #[test]
    fn a_scrape_reads_one_entry_per_phase_and_class_not_per_job() {
        let gauges = JobGauges::default();
        for i in 0..10_000 {
            let (phase, class) = match i % 4 {
                0 => (Phase::Running, "a10g-x4"),
                1 => (Phase::Running, "h100-80gb-hbm3-x8"),
                2 => (Phase::Succeeded, "a10g-x4"),
                _ => (Phase::Succeeded, "h100-80gb-hbm3-x8"),
            };
            gauges.apply(&watcher::Event::Apply(job(
                &format!("job-{i}"),
                Some(phase),
                Some(class),
            )));
        }
        let totals = gauges.totals();
        assert_eq!(totals.len(), 4);
        assert_eq!(totals.iter().map(|(_, _, n)| n).sum::<i64>(), 10_000);
    }
}
