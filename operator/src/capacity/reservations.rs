//! Pods this process has applied and the watch has not shown yet, keyed by `namespace/name`.
//!
//! Between a pod apply and the watch event that puts the pod into the stores there is a short
//! window. Within it, the ledger (1) counts the pod's GPUs against its class, so that jobs
//! reconciled in the same burst do not all choose the same last free node, and (2) tells the
//! next reconcile of the job that its pod exists (with its plan), so it neither applies it
//! again nor plans it differently. Entries leave when a store shows the pod, or after a TTL.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vramfit_api::Plan;

use crate::stores::gpu_usage::pod_key;

/// A pod applied by this process.
#[derive(Clone, Debug)]
pub struct Reservation {
    /// The uid of the job it was applied for: a job deleted and created again under the same
    /// name within the TTL must not take its predecessor's pod for its own.
    pub job_uid: String,
    /// The class it was planned for.
    pub class: String,
    /// GPUs it takes.
    pub gpus: u32,
    /// Its plan.
    pub plan: Arc<Plan>,
    /// When it was applied.
    pub applied_at: Instant,
}

/// The ledger, keyed by `(namespace, pod name)`.
#[derive(Debug)]
pub struct Reservations {
    entries: Mutex<HashMap<String, Reservation>>,
    /// Held from reading capacity to recording the chosen pod, so that concurrent reconciles
    /// never both take the last free GPUs of a node.
    placement: Mutex<()>,
    ttl: Duration,
}

impl Reservations {
    /// An empty ledger whose entries expire after `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            placement: Mutex::new(()),
            ttl,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Reservation>> {
        // A panic while holding the lock leaves a map that is still consistent.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Serializes placements: hold the guard from reading capacity until the chosen pod is
    /// recorded (no `.await` in between).
    pub fn hold_placement(&self) -> MutexGuard<'_, ()> {
        self.placement
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a pod about to be applied for the job `job_uid` (forgotten again if the apply
    /// fails).
    pub fn record(&self, namespace: &str, pod: &str, job_uid: &str, plan: &Plan) {
        let entry = Reservation {
            job_uid: job_uid.to_string(),
            class: plan.node_class.clone(),
            gpus: plan.gpu_count,
            plan: Arc::new(plan.clone()),
            applied_at: Instant::now(),
        };
        self.lock().insert(pod_key(namespace, pod), entry);
    }

    /// The unexpired entry of a pod.
    pub fn get(&self, namespace: &str, pod: &str) -> Option<Reservation> {
        let entries = self.lock();
        entries
            .get(&pod_key(namespace, pod))
            .filter(|r| r.applied_at.elapsed() < self.ttl)
            .cloned()
    }

    /// Forgets a pod (a store shows it now, or it was deleted).
    pub fn forget(&self, namespace: &str, pod: &str) {
        self.lock().remove(&pod_key(namespace, pod));
    }

    /// `(class, GPUs)` of every unexpired pod that `seen` (given `namespace/name`) does not
    /// know, dropping expired entries and those `seen` knows.
    pub fn pending(&self, seen: impl Fn(&str) -> bool) -> Vec<(String, u32)> {
        let mut entries = self.lock();
        entries.retain(|key, r| r.applied_at.elapsed() < self.ttl && !seen(key));
        entries
            .values()
            .map(|r| (r.class.clone(), r.gpus))
            .collect()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn entries_leave_when_seen_or_expired() {
        let plan = fixtures::plan_on("a10g", 1);
        let ledger = Reservations::new(Duration::from_secs(60));
        ledger.record("ml", "chat-1", "u-chat", &plan);
        ledger.record("ml", "other-1", "u-other", &plan);
        assert_eq!(
            ledger.get("ml", "chat-1").map(|r| r.gpus),
            Some(plan.gpu_count)
        );
        let pending = ledger.pending(|key| key == "ml/other-1");
        assert_eq!(pending, vec![(plan.node_class.clone(), plan.gpu_count)]);
        assert_eq!(ledger.len(), 1);
        ledger.forget("ml", "chat-1");
        assert!(ledger.is_empty());

        let expired = Reservations::new(Duration::ZERO);
        expired.record("ml", "chat-1", "u-chat", &plan);
        assert!(expired.get("ml", "chat-1").is_none());
        assert!(expired.pending(|_| false).is_empty());
    }
}
