//! What every reconcile shares: the client, the event recorder, the metrics, the stores, the
//! reservation ledger and the settings.
use crate::hub_models::resolver::HubResolver;
use crate::settings::Settings;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kube::Client;

use crate::capacity::{Inventory, Reservations, build_inventory};
use crate::events::EventRecorder;
use crate::metrics::Metrics;
use crate::stores::Stores;

/// Shared by every reconcile.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Publishes events on jobs.
    pub recorder: EventRecorder,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// The caches.
    pub stores: Stores,
    /// Pods applied and not shown by the stores yet.
    pub reservations: Reservations,
    /// Tunables.
    pub settings: Settings,
    /// `model.huggingFace` repositories read from the Hub, cached per repo@revision.
    pub hub: Arc<HubResolver>,
    /// Served jobs: their Services' and PDBs' caches, who waits for room, the backoff.
    pub serving: crate::serving_state::ServingState,
    /// Autoscaled jobs: their replicas to read, the readings, the histories, the HPAs.
    pub scaling: Arc<crate::scaling_state::ScalingState>,
    failures: Mutex<HashMap<String, u32>>,
    reported_malformed: Mutex<HashSet<(String, Option<i64>)>>,
    inventory: Mutex<Option<(u64, Arc<Inventory>)>>,
    /// Per job uid: the resourceVersion a status write was decided from, and when.
    written_from: Mutex<HashMap<String, (String, Instant)>>,
}

/// How long a job read from the cache may lag behind vramfit's own status write before it is
/// decided on anyway (the watch should deliver the write within milliseconds).
const STALE_CACHE_GRACE: Duration = Duration::from_secs(10);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Context {
    /// A context; events are reported as `vramfit-operator` with `instance` (the pod name).
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        stores: Stores,
        settings: Settings,
        instance: Option<String>,
    ) -> Self {
        Self {
            recorder: EventRecorder::new(client.clone(), crate::FIELD_MANAGER, instance),
            hub: HubResolver::new(settings.hub.clone(), Some(client.clone())),
            client,
            metrics,
            stores,
            reservations: Reservations::new(settings.reservation_ttl),
            settings,
            serving: crate::serving_state::ServingState::writable().0,
            scaling: Arc::default(),
            failures: Mutex::new(HashMap::new()),
            reported_malformed: Mutex::new(HashSet::new()),
            inventory: Mutex::new(None),
            written_from: Mutex::new(HashMap::new()),
        }
    }

    /// The same context with `serving`'s caches (the controller's, filled by its watches).
    pub fn with_serving(mut self, serving: crate::serving_state::ServingState) -> Self {
        self.serving = serving;
        self
    }

    /// The classes and nodes, rebuilt only when a node or GpuNodeClass changed.
    pub fn inventory(&self) -> Arc<Inventory> {
        let version = self.stores.inventory_version.load(Ordering::Acquire);
        if let Some((cached, inventory)) = lock(&self.inventory).as_ref()
            && *cached == version
        {
            return inventory.clone();
        }
        let inventory = Arc::new(build_inventory(
            &self.stores.nodes.state(),
            &self.stores.node_classes.state(),
        ));
        *lock(&self.inventory) = Some((version, inventory.clone()));
        inventory
    }

    /// Remembers that a status write changed job `uid`, decided from `resource_version`.
    pub fn remember_status_write(&self, uid: &str, resource_version: &str) {
        lock(&self.written_from).insert(
            uid.to_string(),
            (resource_version.to_string(), Instant::now()),
        );
    }

    /// Whether the cached job (`uid` at `resource_version`) predates vramfit's own last status
    /// write: deciding on it again would repeat that decision's events and metrics.
    pub fn is_stale(&self, uid: &str, resource_version: &str) -> bool {
        let mut written = lock(&self.written_from);
        match written.get(uid) {
            Some((from, at)) if from == resource_version && at.elapsed() < STALE_CACHE_GRACE => {
                true
            }
            Some(_) => {
                written.remove(uid);
                false
            }
            None => false,
        }
    }

    /// Counts a failed reconcile of `key` and returns how many in a row failed.
    pub fn record_failure(&self, key: &str) -> u32 {
        let mut failures = lock(&self.failures);
        let count = failures.entry(key.to_string()).or_default();
        *count = count.saturating_add(1);
        *count
    }

    /// Forgets the failures of `key` after a successful reconcile.
    pub fn clear_failures(&self, key: &str) {
        lock(&self.failures).remove(key);
    }

    /// The retry delay after `failures` failures in a row: base × 2^(failures-1), capped.
    pub fn backoff(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
        self.settings
            .error_backoff_base
            .saturating_mul(factor)
            .min(self.settings.error_backoff_max)
    }

    /// Whether a malformed job (uid, generation) was reported already; marks it reported.
    pub fn first_report_of_malformed(&self, uid: &str, generation: Option<i64>) -> bool {
        lock(&self.reported_malformed).insert((uid.to_string(), generation))
    }

    /// Forgets what this process keeps about job `uid` (`namespace/name` `key`): its failure
    /// count, its malformed reports, its last status write. Called when the job is deleted:
    /// without it these maps grew with every job ever created, and a tenant creating and
    /// deleting jobs could grow them without bound.
    pub fn forget_job(&self, uid: Option<&str>, key: &str) {
        lock(&self.failures).remove(key);
        self.scaling.forget(key, uid);
        self.metrics.autoscaler().forget_job(key);
        if let Some(uid) = uid {
            lock(&self.reported_malformed).retain(|(reported, _)| reported != uid);
            lock(&self.written_from).remove(uid);
        }
    }

    /// Keeps only what is kept about the jobs `exists` says still exist (by uid and
    /// `namespace/name`): after a relist, whose deletions no event announced.
    pub fn keep_jobs(&self, exists: impl Fn(&str) -> bool, exists_key: impl Fn(&str) -> bool) {
        lock(&self.failures).retain(|key, _| exists_key(key));
        lock(&self.reported_malformed).retain(|(uid, _)| exists(uid));
        lock(&self.written_from).retain(|uid, _| exists(uid));
        self.scaling.keep_jobs(&exists, &exists_key);
        self.metrics.autoscaler().keep_jobs(&exists_key);
    }

    /// Entries kept per job, summed over the maps (tests).
    #[cfg(test)]
    pub fn per_job_entries(&self) -> usize {
        lock(&self.failures).len()
            + lock(&self.reported_malformed).len()
            + lock(&self.written_from).len()
    }

    /// Forgets that a malformed job was reported (its report failed).
    pub fn forget_malformed(&self, uid: &str, generation: Option<i64>) {
        lock(&self.reported_malformed).remove(&(uid.to_string(), generation));
    }
}
