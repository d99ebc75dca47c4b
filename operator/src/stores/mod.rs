//! The caches reconcile reads instead of the API, and the reflectors that fill them.
//!
//! * [`cached_job`]: what the job cache holds of each InferenceJob.
//! * [`reflectors`]: the four watches and what each keeps of its objects; [`slim`]: the pod
//!   and job shapes the watches parse; [`relist`]: triggers that survive a relist;
//!   [`watch_retry`]: how a failed watch resumes; [`namespaces`]: the job and job-pod watches
//!   of `--watch-namespaces`, one per namespace, merged into one store each.
//! * [`gpu_resources`]: GPU resources of nodes and pods; [`gpu_usage`]: GPUs taken per node,
//!   summed as the pod watch goes.
//! * [`model_caches`]: every node's ModelCache, watched only with `--model-cache`.
//! * [`listed`]: which stores have their first full list, read without waiting.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::core::DeserializeGuard;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use vramfit_api::{GpuNodeClass, InferenceJob, ModelCache};

pub mod cached_job;
pub mod deflate;
pub mod extended_resources;
pub mod gpu_resources;
pub mod gpu_usage;
pub mod listed;
pub mod model_caches;
pub mod namespaces;
pub mod reflectors;
pub mod relist;
pub mod slim;
pub mod watch_retry;

use cached_job::CachedJob;
use gpu_usage::GpuUsage;
pub use listed::{Listed, Listing};
pub use relist::PodChange;
use slim::SlimPod;

/// A job whose pod changed, to reconcile.
pub type JobRef = ObjectRef<cached_job::CachedJob>;

/// Whether a pod in `phase` has finished (and so takes no GPUs).
pub fn is_finished(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// The InferenceJob a pod's controller owner reference names, and the uid it names. Anyone who
/// may create pods can write such a reference: the pod is the job's only when
/// [`Stores::is_job_of`] finds that very job (by uid) in the job store.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodOwner {
    /// The job, by namespace (the pod's) and name.
    pub job: JobRef,
    /// The uid the reference names.
    pub uid: String,
}

/// The InferenceJob whose controller owner reference `pod` (a `Pod` or a [`SlimPod`]) carries,
/// if any.
pub fn pod_owner(pod: &impl ResourceExt) -> Option<PodOwner> {
    let namespace = pod.namespace()?;
    pod.owner_references()
        .iter()
        .find(|owner| {
            owner.controller == Some(true)
                && owner.kind == InferenceJob::kind(&())
                && owner.api_version == InferenceJob::api_version(&())
        })
        .map(|owner| PodOwner {
            job: JobRef::new(&owner.name).within(&namespace),
            uid: owner.uid.clone(),
        })
}

/// The InferenceJob `pod`'s controller owner reference names, if any (not checked against the
/// job store: see [`pod_owner`]).
pub fn owning_job(pod: &impl ResourceExt) -> Option<JobRef> {
    pod_owner(pod).map(|owner| owner.job)
}

/// Whether `jobs` holds the job `owner` names, with the uid it names.
pub fn holds_job(jobs: &Store<CachedJob>, owner: &PodOwner) -> bool {
    jobs.get(&owner.job)
        .is_some_and(|job| job.meta().uid.as_deref() == Some(owner.uid.as_str()))
}

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
    /// Every InferenceJob (the controller's own store): whose pod a pod is.
    pub jobs: Store<CachedJob>,
    /// Every node's ModelCache (filled only with `--model-cache`).
    pub model_caches: Store<ModelCache>,
    /// Which of these have their first full list.
    pub listed: Listed,
}

impl Stores {
    /// Empty stores and their writers, for tests, benchmarks and the reflectors.
    pub fn writable() -> (Self, StoreWriters) {
        let nodes = Writer::<Node>::default();
        let job_pods = Writer::<SlimPod>::default();
        let gpu_usage = Arc::new(RwLock::new(GpuUsage::default()));
        let node_classes = Writer::<DeserializeGuard<GpuNodeClass>>::default();
        let inventory_version = Arc::new(AtomicU64::new(0));
        let jobs = Writer::<CachedJob>::default();
        let model_caches = Writer::<ModelCache>::default();
        let listed = Listed::default();
        let stores = Self {
            nodes: nodes.as_reader(),
            job_pods: job_pods.as_reader(),
            gpu_usage: gpu_usage.clone(),
            node_classes: node_classes.as_reader(),
            inventory_version: inventory_version.clone(),
            jobs: jobs.as_reader(),
            model_caches: model_caches.as_reader(),
            listed: listed.clone(),
        };
        let writers = StoreWriters {
            nodes,
            job_pods,
            gpu_usage,
            node_classes,
            inventory_version,
            jobs,
            model_caches,
            listed,
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

    /// Whether the job pods store shows pod `key` (`namespace/name`) finished.
    pub fn job_pod_finished(&self, key: &str) -> bool {
        let Some((namespace, name)) = key.split_once('/') else {
            return false;
        };
        self.job_pods
            .get(&ObjectRef::new(name).within(namespace))
            .is_some_and(|pod| is_finished(pod.status.as_ref().and_then(|s| s.phase.as_deref())))
    }

    /// Whether the job `owner` names is in the job store with the uid it names: only then is
    /// a pod carrying that reference the job's.
    pub fn is_job_of(&self, owner: &PodOwner) -> bool {
        holds_job(&self.jobs, owner)
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
    /// InferenceJobs: the controller's reflector writes them (tests write directly).
    pub jobs: Writer<CachedJob>,
    /// ModelCaches: their reflector runs only with `--model-cache` (tests write directly).
    pub model_caches: Writer<ModelCache>,
    /// Shared with [`Stores::listed`]: the reflectors mark each store at its first full list.
    pub listed: Listed,
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
        let terminal = is_finished(pod.status.as_ref().and_then(|s| s.phase.as_deref()));
        let ours = pod
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(vramfit_api::pod_keys::JOB_LABEL));
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

    /// Adds or replaces a job.
    pub fn apply_job(&mut self, job: &InferenceJob) {
        self.jobs
            .apply_watcher_event(&watcher::Event::Apply(CachedJob::of(job)));
    }

    /// Adds or replaces a node's ModelCache.
    pub fn apply_model_cache(&mut self, cache: ModelCache) {
        self.model_caches
            .apply_watcher_event(&watcher::Event::Apply(cache));
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
        relist(&mut self.jobs);
        relist(&mut self.model_caches);
        for which in Listing::ALL {
            self.listed.mark(which);
        }
    }
}

/// Applies a relist of what `writer`'s store holds (a first full list, in tests).
pub(crate) fn relist<K>(writer: &mut Writer<K>)
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
