//! What every reconcile shares: the client, the event recorder, the metrics, the stores, the
//! reservation ledger and the settings.
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use vramfit_api::GpuNodeClass;

use crate::events::EventRecorder;
use crate::metrics::Metrics;
use crate::next_status::Requeues;
use crate::node_classes::{GpuUsage, Inventory, build_inventory};
use crate::reservations::Reservations;
use crate::slim::SlimPod;

/// The caches reconcile reads instead of the API.
#[derive(Clone)]
pub struct Stores {
    /// Every node.
    pub nodes: Store<Node>,
    /// vramfit's pods (label `vramfit.io/job`), in every phase: the attempts' pods, slim.
    pub job_pods: Store<SlimPod>,
    /// GPUs taken by every non-terminal pod of the cluster (field selector on
    /// `status.phase`), summed per node as the watch goes.
    pub gpu_usage: Arc<RwLock<GpuUsage>>,
    /// Every GpuNodeClass (a malformed one is kept as such and reported, not fatal).
    pub node_classes: Store<DeserializeGuard<GpuNodeClass>>,
    /// Bumped whenever a node or GpuNodeClass changes in a way that matters to classes.
    pub inventory_version: Arc<AtomicU64>,
}

impl Stores {
    /// Empty stores and their writers, for tests, benchmarks and the reflectors.
    pub fn writable() -> (Self, StoreWriters) {
        let nodes = Writer::<Node>::default();
        let job_pods = Writer::<SlimPod>::default();
        let gpu_usage = Arc::new(RwLock::new(GpuUsage::default()));
        let node_classes = Writer::<DeserializeGuard<GpuNodeClass>>::default();
        let inventory_version = Arc::new(AtomicU64::new(0));
        let stores = Self {
            nodes: nodes.as_reader(),
            job_pods: job_pods.as_reader(),
            gpu_usage: gpu_usage.clone(),
            node_classes: node_classes.as_reader(),
            inventory_version: inventory_version.clone(),
        };
        let writers = StoreWriters {
            nodes,
            job_pods,
            gpu_usage,
            node_classes,
            inventory_version,
        };
        (stores, writers)
    }

    /// Waits until every store has its first full list.
    pub async fn wait_until_ready(
        &self,
    ) -> Result<(), kube::runtime::reflector::store::WriterDropped> {
        self.nodes.wait_until_ready().await?;
        self.job_pods.wait_until_ready().await?;
        self.node_classes.wait_until_ready().await?;
        while !self.usage().is_listed() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// The GPU usage, for reading.
    pub fn usage(&self) -> RwLockReadGuard<'_, GpuUsage> {
        self.gpu_usage
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A pod of the job pods store (as a `Pod` holding what the store keeps).
    pub fn job_pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.job_pods
            .get(&ObjectRef::new(name).within(namespace))
            .map(|pod| Arc::new(pod.to_pod()))
    }
}

/// The writing side of [`Stores`] (the reflectors own it; tests and benchmarks write directly).
pub struct StoreWriters {
    /// Nodes.
    pub nodes: Writer<Node>,
    /// vramfit's pods.
    pub job_pods: Writer<SlimPod>,
    /// GPU usage of non-terminal pods.
    pub gpu_usage: Arc<RwLock<GpuUsage>>,
    /// GpuNodeClasses.
    pub node_classes: Writer<DeserializeGuard<GpuNodeClass>>,
    /// Shared with [`Stores::inventory_version`].
    pub inventory_version: Arc<AtomicU64>,
}

impl StoreWriters {
    /// Adds or replaces a node.
    pub fn apply_node(&mut self, node: Node) {
        self.nodes.apply_watcher_event(&watcher::Event::Apply(node));
        self.inventory_version.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds or replaces a GpuNodeClass.
    pub fn apply_node_class(&mut self, class: DeserializeGuard<GpuNodeClass>) {
        self.node_classes
            .apply_watcher_event(&watcher::Event::Apply(class));
        self.inventory_version.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds or replaces a pod where the watches would put it: the job pods store (trimmed as
    /// the reflector trims it) when it carries `vramfit.io/job`, the GPU usage while it is not
    /// terminal.
    pub fn apply_pod(&mut self, pod: Pod) {
        let terminal = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        let ours = pod
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(crate::desired_pod::JOB_LABEL));
        if ours {
            self.job_pods
                .apply_watcher_event(&watcher::Event::Apply(SlimPod::of(&pod)));
        }
        let event = if terminal {
            watcher::Event::Delete(pod)
        } else {
            watcher::Event::Apply(pod)
        };
        self.usage_mut().apply_event(&event);
    }

    /// The GPU usage, for writing.
    pub fn usage_mut(&self) -> RwLockWriteGuard<'_, GpuUsage> {
        self.gpu_usage
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Removes a pod from both pod stores.
    pub fn delete_pod(&mut self, pod: Pod) {
        self.job_pods
            .apply_watcher_event(&watcher::Event::Delete(SlimPod::of(&pod)));
        self.usage_mut().apply_event(&watcher::Event::Delete(pod));
    }

    /// Marks every store as listed, keeping what it holds (as a reflector's first full list
    /// would).
    pub fn mark_ready(&mut self) {
        relist(&mut self.nodes);
        relist(&mut self.job_pods);
        self.usage_mut().mark_listed();
        relist(&mut self.node_classes);
    }
}

fn relist<K>(writer: &mut Writer<K>)
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let objects = writer.as_reader().state();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply((*object).clone()));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

/// Tunables (defaults suit production; tests and benchmarks shorten or lengthen them).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Requeue intervals of the decisions.
    pub requeues: Requeues,
    /// How long an applied pod counts against its class before a store shows it.
    pub reservation_ttl: Duration,
    /// First retry delay after a failed reconcile; doubles per consecutive failure.
    pub error_backoff_base: Duration,
    /// Longest retry delay after failed reconciles.
    pub error_backoff_max: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            requeues: Requeues::default(),
            reservation_ttl: Duration::from_secs(120),
            error_backoff_base: Duration::from_secs(1),
            error_backoff_max: Duration::from_secs(300),
        }
    }
}

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
            client,
            metrics,
            stores,
            reservations: Reservations::new(settings.reservation_ttl),
            settings,
            failures: Mutex::new(HashMap::new()),
            reported_malformed: Mutex::new(HashSet::new()),
            inventory: Mutex::new(None),
            written_from: Mutex::new(HashMap::new()),
        }
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

    /// Forgets that a malformed job was reported (its report failed).
    pub fn forget_malformed(&self, uid: &str, generation: Option<i64>) {
        lock(&self.reported_malformed).remove(&(uid.to_string(), generation));
    }
}
