//! What the autoscaler keeps between passes, shared by the reconciles and the load reader:
//! the replicas whose metrics to read (registered by each autoscaled job's reconcile), the
//! last reading of each, each job's recommendation history, and the HorizontalPodAutoscalers
//! that target a job (an HPA or KEDA ScaledObject keeps vramfit's autoscaler out).
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vramfit_api::Runtime;
use vramfit_api::autoscaling::CustomMetric;

use crate::autoscaling::{History, Reading};

/// A job's replicas to read.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadTargets {
    /// The runtime (which gauges to read).
    pub runtime: Runtime,
    /// The custom runtime's gauge.
    pub metric: Option<CustomMetric>,
    /// The serving port.
    pub port: u16,
    /// Each Ready serving pod: its uid and IP.
    pub pods: Vec<(String, String)>,
}

/// A pod's last reading, or why there is none.
#[derive(Clone, Debug, PartialEq)]
pub struct PodReading {
    /// When it was read.
    pub at: Instant,
    /// What it said.
    pub result: Result<Reading, String>,
}

/// The autoscaler's shared state.
#[derive(Debug, Default)]
pub struct ScalingState {
    targets: Mutex<HashMap<String, ReadTargets>>,
    readings: Mutex<HashMap<String, PodReading>>,
    histories: Mutex<HashMap<String, History>>,
    external: Mutex<HashMap<(String, String), String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ScalingState {
    /// Registers (or replaces) the replicas of job `key` (`namespace/name`) to read.
    pub fn register(&self, key: String, targets: ReadTargets) {
        lock(&self.targets).insert(key, targets);
    }

    /// Stops reading job `key`'s replicas (autoscaling off, or the job gone) and forgets its
    /// history (by `uid`).
    pub fn forget(&self, key: &str, uid: Option<&str>) {
        let removed = lock(&self.targets).remove(key);
        if let Some(targets) = removed {
            let mut readings = lock(&self.readings);
            for (pod, _) in &targets.pods {
                readings.remove(pod);
            }
        }
        if let Some(uid) = uid {
            lock(&self.histories).remove(uid);
        }
    }

    /// Whether job `key` is registered.
    pub fn is_registered(&self, key: &str) -> bool {
        lock(&self.targets).contains_key(key)
    }

    /// Keeps only the jobs `exists` says still exist (by uid and `namespace/name`).
    pub fn keep_jobs(&self, exists: impl Fn(&str) -> bool, exists_key: impl Fn(&str) -> bool) {
        lock(&self.targets).retain(|key, _| exists_key(key));
        lock(&self.histories).retain(|uid, _| exists(uid));
        self.drop_unlisted();
    }

    /// Every registered job (`namespace/name`) and its replicas.
    pub fn targets(&self) -> Vec<(String, ReadTargets)> {
        lock(&self.targets)
            .iter()
            .map(|(job, targets)| (job.clone(), targets.clone()))
            .collect()
    }

    /// Records a pod's reading; readings of pods no job registers any more are dropped.
    pub fn record(&self, pod_uid: String, reading: PodReading) {
        lock(&self.readings).insert(pod_uid, reading);
    }

    /// Whether pod `pod_uid` was read (or its read failed) by this process, however long ago.
    pub fn has_reading(&self, pod_uid: &str) -> bool {
        lock(&self.readings).contains_key(pod_uid)
    }

    /// Drops readings of pods that no registered job lists.
    pub fn drop_unlisted(&self) {
        let listed: std::collections::HashSet<String> = lock(&self.targets)
            .values()
            .flat_map(|t| t.pods.iter().map(|(uid, _)| uid.clone()))
            .collect();
        lock(&self.readings).retain(|uid, _| listed.contains(uid));
    }

    /// A pod's reading, if one was taken within `fresh`.
    pub fn reading(&self, pod_uid: &str, now: Instant, fresh: Duration) -> Option<PodReading> {
        lock(&self.readings)
            .get(pod_uid)
            .filter(|r| now.saturating_duration_since(r.at) <= fresh)
            .cloned()
    }

    /// Runs `f` on the job's history (by uid), created empty on first use.
    pub fn with_history<T>(&self, job_uid: &str, f: impl FnOnce(&mut History) -> T) -> T {
        f(lock(&self.histories)
            .entry(job_uid.to_string())
            .or_default())
    }

    /// Replaces the HPAs that target jobs of `namespace`: job name → HPA name.
    pub fn set_external(&self, namespace: &str, hpas: HashMap<String, String>) {
        let mut external = lock(&self.external);
        external.retain(|(ns, _), _| ns != namespace);
        external.extend(
            hpas.into_iter()
                .map(|(job, hpa)| ((namespace.to_string(), job), hpa)),
        );
    }

    /// The HPA that targets `namespace/job`, if one does.
    pub fn external(&self, namespace: &str, job: &str) -> Option<String> {
        lock(&self.external)
            .get(&(namespace.to_string(), job.to_string()))
            .cloned()
    }
}
