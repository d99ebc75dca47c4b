//! GPU resources (pure): what a node has allocatable and what a pod requests, per resource
//! (`nvidia.com/gpu`, `nvidia.com/mig-<profile>`, `nvidia.com/gpu.shared`), and whether a node
//! takes pods at all.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use vramfit_api::labels::{MAX_GPUS_PER_NODE, is_gpu_resource};
use vramfit_api::partitions::MigStrategy;

/// GPU resources by name: few per node or pod (one, or one per MIG profile), so a sorted
/// list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GpuResources(Vec<(Box<str>, u32)>);

impl GpuResources {
    /// A node's allocatable GPU resources (none while the device plugin has not reported).
    pub fn allocatable(node: &Node) -> Self {
        Self::from_quantities(
            node.status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .into_iter()
                .flatten(),
        )
    }

    fn from_quantities<'a>(quantities: impl Iterator<Item = (&'a String, &'a Quantity)>) -> Self {
        let mut resources: Vec<(Box<str>, u32)> = quantities
            .filter(|(name, _)| is_gpu_resource(name))
            .map(|(name, q)| (name.as_str().into(), parse_count(&q.0)))
            .filter(|(_, count)| *count > 0)
            .collect();
        resources.sort();
        Self(resources)
    }

    /// The count of `resource` (0 when absent).
    pub fn get(&self, resource: &str) -> u32 {
        self.0
            .iter()
            .find(|(name, _)| &**name == resource)
            .map_or(0, |(_, count)| *count)
    }

    /// Every GPU unit, whatever its resource.
    pub fn total(&self) -> u32 {
        self.0.iter().map(|(_, c)| *c).fold(0, u32::saturating_add)
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn add(&mut self, other: &Self) {
        for (name, count) in &other.0 {
            match self.0.iter_mut().find(|(n, _)| n == name) {
                Some((_, c)) => *c = c.saturating_add(*count),
                None => self.0.push((name.clone(), *count)),
            }
        }
    }

    pub fn subtract(&mut self, other: &Self) {
        for (name, count) in &other.0 {
            if let Some((_, c)) = self.0.iter_mut().find(|(n, _)| n == name) {
                *c = c.saturating_sub(*count);
            }
        }
        self.0.retain(|(_, c)| *c > 0);
    }
}

/// Allocatable whole GPUs (`nvidia.com/gpu`) of a node.
pub fn allocatable_gpus(node: &Node) -> u32 {
    GpuResources::allocatable(node).get(vramfit_api::labels::GPU_RESOURCE)
}

/// The device plugin's MIG strategy as its resources show it, for nodes without GFD's label:
/// a `nvidia.com/mig-<profile>` resource means `mixed`.
pub fn advertised_mig_strategy(node: &Node) -> Option<MigStrategy> {
    let allocatable = GpuResources::allocatable(node);
    allocatable
        .0
        .iter()
        .any(|(name, _)| name.starts_with("nvidia.com/mig-"))
        .then_some(MigStrategy::Mixed)
}

/// Not cordoned, and its Ready condition is True.
pub fn is_schedulable(node: &Node) -> bool {
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    !cordoned && ready
}

/// A GPU count from a quantity; unreadable is 0, and anything above a node's physical bound
/// is that bound (the sums below must not overflow on a pod someone else wrote).
fn parse_count(text: &str) -> u32 {
    text.trim()
        .parse::<u32>()
        .unwrap_or(0)
        .min(MAX_GPUS_PER_NODE)
}

/// GPUs a pod requests, whatever their resource.
pub fn pod_gpu_request(pod: &Pod) -> u32 {
    pod_gpu_requests(pod).total()
}

/// GPU resources a pod requests: for each, the larger of its containers' sum and its largest
/// init container (limits, or requests where no limit is set).
pub fn pod_gpu_requests(pod: &Pod) -> GpuResources {
    let Some(spec) = pod.spec.as_ref() else {
        return GpuResources::default();
    };
    let of = |c: &k8s_openapi::api::core::v1::Container| {
        let resources = c.resources.as_ref();
        let limits = resources.and_then(|r| r.limits.as_ref());
        let requests = resources.and_then(|r| r.requests.as_ref());
        // A limit wins over a request of the same resource.
        let mut merged: BTreeMap<&String, &Quantity> = requests.into_iter().flatten().collect();
        merged.extend(limits.into_iter().flatten());
        GpuResources::from_quantities(merged.into_iter())
    };
    let mut total = GpuResources::default();
    for container in &spec.containers {
        total.add(&of(container));
    }
    for init in spec.init_containers.iter().flatten() {
        for (name, count) in of(init).0 {
            let held = total.get(&name);
            if count > held {
                total.add(&GpuResources(vec![(name, count - held)]));
            }
        }
    }
    total.0.sort();
    total
}
