//! GPUs taken by the cluster's non-terminal pods, kept up to date event by event by the GPU
//! accounting pod watch.
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::watcher;
use vramfit_api::pod_keys::NODE_CLASS_LABEL;

use super::gpu_resources::{GpuResources, pod_gpu_requests};
use super::{PodOwner, pod_owner};

/// `namespace/name`: the key of a pod in [`GpuUsage`] and the reservation ledger.
pub fn pod_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// GPUs one non-terminal pod takes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PodGpus {
    node: Option<String>,
    /// While unbound: the class its label names and the job its owner reference names.
    class: Option<(String, PodOwner)>,
    gpus: GpuResources,
}

/// GPUs taken by the non-terminal pods of the cluster, kept up to date event by event by the
/// pod watch (so a reconcile reads sums, not every pod).
#[derive(Clone, Debug, Default)]
pub struct GpuUsage {
    pods: HashMap<String, PodGpus>,
    by_node: HashMap<String, GpuResources>,
    /// Pods not bound yet that name an InferenceJob as their controller, by node-class label
    /// value: pod key → (GPUs, the job named).
    unbound: HashMap<String, HashMap<String, (u32, PodOwner)>>,
    relist: Option<HashMap<String, PodGpus>>,
    listed: bool,
}

impl GpuUsage {
    /// Adds or updates a pod (a terminal one is removed).
    pub fn apply(&mut self, pod: &Pod) {
        let key = pod_key(&pod.namespace().unwrap_or_default(), &pod.name_any());
        self.remove(&key);
        if let Some(entry) = Self::entry(pod) {
            self.insert(key, entry);
        }
    }

    fn entry(pod: &Pod) -> Option<PodGpus> {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let gpus = pod_gpu_requests(pod);
        if super::is_finished(phase) || gpus.is_empty() {
            return None;
        }
        Some(PodGpus {
            node: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            // Only a job's own pod holds room in its class before it binds (see the module docs):
            // whether the job it names is really its owner is checked against the job store
            // when room is counted.
            class: pod
                .labels()
                .get(NODE_CLASS_LABEL)
                .cloned()
                .zip(pod_owner(pod)),
            gpus,
        })
    }

    fn insert(&mut self, key: String, entry: PodGpus) {
        match (&entry.node, &entry.class) {
            (Some(node), _) => {
                self.by_node
                    .entry(node.clone())
                    .or_default()
                    .add(&entry.gpus);
            }
            (None, Some((class, owner))) => {
                self.unbound
                    .entry(class.clone())
                    .or_default()
                    .insert(key.clone(), (entry.gpus.total(), owner.clone()));
            }
            (None, None) => {}
        }
        self.pods.insert(key, entry);
    }

    /// Removes a pod by `namespace/name`.
    pub fn remove(&mut self, key: &str) {
        let Some(old) = self.pods.remove(key) else {
            return;
        };
        match (&old.node, &old.class) {
            (Some(node), _) => {
                if let Some(used) = self.by_node.get_mut(node) {
                    used.subtract(&old.gpus);
                    if used.is_empty() {
                        self.by_node.remove(node);
                    }
                }
            }
            (None, Some((class, _))) => {
                if let Some(pods) = self.unbound.get_mut(class) {
                    pods.remove(key);
                    if pods.is_empty() {
                        self.unbound.remove(class);
                    }
                }
            }
            (None, None) => {}
        }
    }

    /// Follows one event of the non-terminal pod watch (re-lists replace everything at once).
    pub fn apply_event(&mut self, event: &watcher::Event<Pod>) {
        match event {
            watcher::Event::Apply(pod) => self.apply(pod),
            watcher::Event::Delete(pod) => {
                self.remove(&pod_key(
                    &pod.namespace().unwrap_or_default(),
                    &pod.name_any(),
                ));
            }
            watcher::Event::Init => self.relist = Some(HashMap::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(entry) = Self::entry(pod) {
                    let key = pod_key(&pod.namespace().unwrap_or_default(), &pod.name_any());
                    self.relist.get_or_insert_default().insert(key, entry);
                }
            }
            watcher::Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                self.pods.clear();
                self.by_node.clear();
                self.unbound.clear();
                for (key, entry) in listed {
                    self.insert(key, entry);
                }
                self.listed = true;
            }
        }
    }

    /// Whether the first full list has been applied.
    pub fn is_listed(&self) -> bool {
        self.listed
    }

    /// Marks the usage as listed (tests and benchmarks that fill it by hand).
    pub fn mark_listed(&mut self) {
        self.listed = true;
    }

    /// GPUs of `resource` requested by pods bound to `node`.
    pub fn used_on(&self, node: &str, resource: &str) -> u32 {
        self.by_node.get(node).map_or(0, |used| used.get(resource))
    }

    /// Whether a pod (`namespace/name`) is counted.
    pub fn contains(&self, key: &str) -> bool {
        self.pods.contains_key(key)
    }

    /// GPUs of each pod labelled with a class (by label value) that is not bound yet and names
    /// an InferenceJob as its controller, with the job it names.
    pub fn unbound_in(&self, class_label: &str) -> impl Iterator<Item = (u32, &PodOwner)> + '_ {
        self.unbound
            .get(class_label)
            .into_iter()
            .flat_map(|pods| pods.values().map(|(gpus, owner)| (*gpus, owner)))
    }

    /// Non-terminal GPU pods counted.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether no GPU pod is counted.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

/// The GPU usage of `pods` (tests).
pub fn gpu_usage(pods: &[Arc<Pod>]) -> GpuUsage {
    let mut usage = GpuUsage::default();
    for pod in pods {
        usage.apply(pod);
    }
    usage.mark_listed();
    usage
}
