//! Node classes and free GPUs (pure), from what the stores hold.
//!
//! * Classes: every node whose labels carry GPU facts (the vramfit agent's, or GPU Feature
//!   Discovery's) belongs to the class `<product>-x<count>`; a `GpuNodeClass` of the same name
//!   overrides its defaults, and one with `gpu` and `nodeSelector` defines a class of its own.
//! * A node may form several classes (one per MIG profile), and each class names the resource
//!   its pods request (`nvidia.com/gpu`, `nvidia.com/mig-<profile>`, `nvidia.com/gpu.shared`):
//!   see `vramfit_planner::class_from_facts`.
//! * Free GPUs of a node, per class: its allocatable of the class's resource less what the
//!   non-terminal pods bound to it request of that resource. Pods an InferenceJob controls that are not bound yet (and
//!   pods vramfit has just created, see [`crate::reservations`]) are subtracted from their
//!   class, best fit, so that a burst of jobs does not pile onto the last free node. The
//!   `vramfit.io/node-class` label of any other unbound pod is ignored: anyone may set it, and
//!   a tenant's pods could otherwise make every class look full.
//! * A node counts only while it is schedulable (not cordoned, Ready), its taints are tolerated
//!   by the job's pod, and it matches the job's own node selector.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use vramfit_api::GpuNodeClass;
use vramfit_api::labels::{MAX_GPUS_PER_NODE, gpu_facts, is_gpu_resource};
use vramfit_api::partitions::MigStrategy;
use vramfit_planner::{NodeClass, classes_from_facts};

use crate::desired_pod::{NODE_CLASS_LABEL, label_value};

/// A GPU node as placement sees it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// The node's name.
    pub name: String,
    /// The node.
    pub node: Arc<Node>,
    /// Allocatable GPU resources (whole, shared, MIG slices), by name.
    pub allocatable: GpuResources,
    /// Not cordoned, and Ready.
    pub schedulable: bool,
    /// Indices of the classes it belongs to in [`Inventory::classes`].
    pub classes: Vec<usize>,
}

/// The classes of the cluster and their nodes.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    /// Every class, sorted by name.
    pub classes: Vec<NodeClass>,
    /// Nodes that belong to at least one class.
    pub nodes: Vec<NodeInfo>,
    /// GpuNodeClass objects that could not be used, one line each.
    pub problems: Vec<String>,
}

impl Inventory {
    /// A class by name.
    pub fn class(&self, name: &str) -> Option<&NodeClass> {
        self.classes.iter().find(|c| c.name == name)
    }

    /// GPUs per class: `(class, product, allocatable GPUs summed over its nodes)`.
    pub fn gpu_inventory(&self) -> Vec<(String, String, u64)> {
        self.classes
            .iter()
            .enumerate()
            .map(|(index, class)| {
                let gpus = self
                    .nodes
                    .iter()
                    .filter(|n| n.classes.contains(&index))
                    .map(|n| u64::from(n.allocatable.get(&class.resource)))
                    .sum();
                (class.name.clone(), class.product.clone(), gpus)
            })
            .collect()
    }
}

/// Builds the classes from node labels and GpuNodeClass objects.
pub fn build_inventory(
    nodes: &[Arc<Node>],
    definitions: &[Arc<DeserializeGuard<GpuNodeClass>>],
) -> Inventory {
    let mut classes: BTreeMap<String, NodeClass> = BTreeMap::new();
    for node in nodes {
        let Some(facts) = gpu_facts(node.labels()) else {
            continue;
        };
        for class in classes_from_facts(&facts, advertised_mig_strategy(node)) {
            match classes.get(&class.name) {
                // Nodes of one class may report slightly different memory: plan for the smallest.
                Some(existing) if existing.memory_mib <= class.memory_mib => {}
                _ => {
                    classes.insert(class.name.clone(), class);
                }
            }
        }
    }

    let mut problems = Vec::new();
    let mut sorted: Vec<&Arc<DeserializeGuard<GpuNodeClass>>> = definitions.iter().collect();
    sorted.sort_by_key(|d| d.name_any());
    for definition in sorted {
        let name = definition.name_any();
        match &definition.0 {
            Err(invalid) => problems.push(format!(
                "GpuNodeClass {name} cannot be read: {}",
                invalid.error
            )),
            Ok(object) if object.spec.gpu.is_some() => {
                match NodeClass::from_definition(&name, &object.spec) {
                    Ok(class) => {
                        classes.insert(name, class);
                    }
                    Err(problem) => problems.push(problem.to_string()),
                }
            }
            Ok(object) => {
                if let Some(class) = classes.get_mut(&name) {
                    class.apply_overrides(&object.spec);
                }
            }
        }
    }
    let classes: Vec<NodeClass> = classes
        .into_values()
        .filter(|c| !c.node_selector.is_empty())
        .collect();

    let nodes = nodes
        .iter()
        .filter_map(|node| {
            let labels = node.labels();
            let member: Vec<usize> = classes
                .iter()
                .enumerate()
                .filter(|(_, class)| class.selects(labels))
                .map(|(index, _)| index)
                .collect();
            (!member.is_empty()).then(|| NodeInfo {
                name: node.name_any(),
                allocatable: GpuResources::allocatable(node),
                schedulable: is_schedulable(node),
                node: node.clone(),
                classes: member,
            })
        })
        .collect();
    Inventory {
        classes,
        nodes,
        problems,
    }
}

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

    fn add(&mut self, other: &Self) {
        for (name, count) in &other.0 {
            match self.0.iter_mut().find(|(n, _)| n == name) {
                Some((_, c)) => *c = c.saturating_add(*count),
                None => self.0.push((name.clone(), *count)),
            }
        }
    }

    fn subtract(&mut self, other: &Self) {
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
fn advertised_mig_strategy(node: &Node) -> Option<MigStrategy> {
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

/// `namespace/name`: the key of a pod in [`GpuUsage`] and the reservation ledger.
pub fn pod_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// GPUs one non-terminal pod takes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PodGpus {
    node: Option<String>,
    class: Option<String>,
    gpus: GpuResources,
}

/// GPUs taken by the non-terminal pods of the cluster, kept up to date event by event by the
/// pod watch (so a reconcile reads sums, not every pod).
#[derive(Clone, Debug, Default)]
pub struct GpuUsage {
    pods: HashMap<String, PodGpus>,
    by_node: HashMap<String, GpuResources>,
    /// vramfit pods not bound yet, by node-class label value: pod key → GPUs.
    unbound: HashMap<String, HashMap<String, u32>>,
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
        if matches!(phase, Some("Succeeded" | "Failed")) || gpus.is_empty() {
            return None;
        }
        Some(PodGpus {
            node: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            // Only a job's own pod holds room in its class before it binds (see the module docs).
            class: pod
                .labels()
                .get(NODE_CLASS_LABEL)
                .filter(|_| crate::controller::owning_job(pod).is_some())
                .cloned(),
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
            (None, Some(class)) => {
                self.unbound
                    .entry(class.clone())
                    .or_default()
                    .insert(key.clone(), entry.gpus.total());
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
            (None, Some(class)) => {
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

    /// GPUs of each vramfit pod of a class (by label value) that is not bound yet.
    pub fn unbound_in(&self, class_label: &str) -> impl Iterator<Item = u32> + '_ {
        self.unbound
            .get(class_label)
            .into_iter()
            .flat_map(|pods| pods.values().copied())
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

/// What a job's pod asks of a node beyond its class: tolerations and a node selector.
#[derive(Clone, Debug, Default)]
pub struct PodConstraints {
    /// The pod's tolerations (vramfit's GPU toleration included).
    pub tolerations: Vec<Toleration>,
    /// The job's own node selector.
    pub node_selector: BTreeMap<String, String>,
}

impl PodConstraints {
    /// The constraints of a job's pods.
    pub fn of_job(job: &vramfit_api::InferenceJob) -> Self {
        let template = job.spec.pod.clone().unwrap_or_default();
        Self {
            // What the pod will carry, so that room is counted where it can really go.
            tolerations: crate::tolerations::pod_tolerations(
                crate::desired_pod::gpu_toleration(),
                &template.tolerations,
            ),
            node_selector: template.node_selector,
        }
    }

    /// Whether a pod with these constraints may run on `node`.
    pub fn admit(&self, node: &Node) -> bool {
        let labels = node.labels();
        self.node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_none_or(|taints| taints.iter().all(|t| tolerates(&self.tolerations, t)))
    }
}

/// Whether `tolerations` let a pod schedule onto a node with `taint`.
pub fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    if taint.effect == "PreferNoSchedule" {
        return true;
    }
    tolerations.iter().any(|t| {
        let effect = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let exists = t.operator.as_deref() == Some("Exists");
        let key = match t.key.as_deref() {
            None | Some("") => exists,
            Some(k) => k == taint.key,
        };
        let value = exists
            || t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default();
        effect && key && value
    })
}

/// Free GPUs per class for one job, after every reservation.
#[derive(Clone, Debug, Default)]
pub struct Capacity {
    rooms: HashMap<String, ClassRoom>,
}

/// The room in one class.
#[derive(Clone, Debug, Default)]
pub struct ClassRoom {
    /// Free GPUs → how many admitted nodes have that many free.
    free: BTreeMap<u32, usize>,
    /// Nodes of the class.
    nodes: usize,
    /// Nodes of the class the job's pod may use (schedulable, tolerated, selected).
    admitted: usize,
}

impl Capacity {
    /// The free GPUs of every class for a pod with `constraints`. `reserved` lists
    /// `(class, GPUs)` of pods vramfit created that no store shows yet.
    pub fn compute(
        inventory: &Inventory,
        usage: &GpuUsage,
        reserved: &[(String, u32)],
        constraints: &PodConstraints,
    ) -> Self {
        let mut reserved_by_class: HashMap<&str, Vec<u32>> = HashMap::new();
        for (class, gpus) in reserved {
            reserved_by_class
                .entry(class.as_str())
                .or_default()
                .push(*gpus);
        }
        let mut rooms: HashMap<String, ClassRoom> = inventory
            .classes
            .iter()
            .map(|c| (c.name.clone(), ClassRoom::default()))
            .collect();
        for info in &inventory.nodes {
            let admitted = info.schedulable && constraints.admit(&info.node);
            for &index in &info.classes {
                let Some(class) = inventory.classes.get(index) else {
                    continue;
                };
                let Some(room) = rooms.get_mut(&class.name) else {
                    continue;
                };
                let free = info
                    .allocatable
                    .get(&class.resource)
                    .saturating_sub(usage.used_on(&info.name, &class.resource));
                room.nodes += 1;
                if admitted {
                    room.admitted += 1;
                    *room.free.entry(free).or_default() += 1;
                }
            }
        }
        for class in &inventory.classes {
            let mut pending: Vec<u32> = usage.unbound_in(&label_value(&class.name)).collect();
            if let Some(gpus) = reserved_by_class.get(class.name.as_str()) {
                pending.extend(gpus);
            }
            pending.sort_unstable_by(|a, b| b.cmp(a));
            if let Some(room) = rooms.get_mut(&class.name) {
                for gpus in pending {
                    room.take(gpus);
                }
            }
        }
        Self { rooms }
    }

    /// Whether some admitted node of `class` has `gpus` free.
    pub fn has_room(&self, class: &str, gpus: u32) -> bool {
        self.rooms
            .get(class)
            .is_some_and(|room| room.free.range(gpus..).any(|(_, count)| *count > 0))
    }

    /// Why `class` has no node with `gpus` free, in one line.
    pub fn shortage(&self, class: &str, gpus: u32) -> String {
        let Some(room) = self.rooms.get(class) else {
            return "no nodes".to_string();
        };
        let plural = if gpus == 1 { "GPU" } else { "GPUs" };
        if room.nodes == 0 {
            return "no nodes".to_string();
        }
        if room.admitted == 0 {
            return format!(
                "no usable node for {gpus} {plural}: all {} node(s) cordoned, not Ready, tainted or not matching the job's nodeSelector",
                room.nodes
            );
        }
        // No free-GPU counts here: they change with every pod, and the message goes to status.
        format!(
            "no free GPUs: no usable node has {gpus} {plural} free ({} usable node(s))",
            room.admitted
        )
    }
}

impl ClassRoom {
    /// Best fit: the node with the fewest free GPUs that still has `gpus` gives them up.
    fn take(&mut self, gpus: u32) {
        let Some(free) = self
            .free
            .range(gpus..)
            .find(|(_, count)| **count > 0)
            .map(|(f, _)| *f)
        else {
            return;
        };
        if let Some(count) = self.free.get_mut(&free) {
            *count -= 1;
            if *count == 0 {
                self.free.remove(&free);
            }
        }
        *self.free.entry(free - gpus).or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use vramfit_api::labels::GPU_RESOURCE;

    #[test]
    fn classes_come_from_labels_and_definitions() {
        let nodes = vec![
            Arc::new(fixtures::gpu_node("a-1", "a10g", 4, 4)),
            Arc::new(fixtures::gpu_node("a-2", "a10g", 4, 4)),
            Arc::new(fixtures::gpu_node("v-1", "v100", 4, 4)),
            Arc::new(fixtures::cpu_node("cpu-1")),
        ];
        let custom = fixtures::labelled_node("x-1", &[("pool", "mystery")], 2);
        let mut with_custom = nodes.clone();
        with_custom.push(Arc::new(custom));
        let definitions = vec![
            fixtures::gpu_node_class_override("a10g-x4", 75),
            fixtures::gpu_node_class_definition(
                "mystery-x2",
                &[("pool", "mystery")],
                "Mystery GPU",
                2,
                32_000,
                "8.9",
            ),
            fixtures::malformed_gpu_node_class("broken"),
        ];
        let inventory = build_inventory(&with_custom, &definitions);
        let names: Vec<_> = inventory.classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a10g-x4", "mystery-x2", "v100-sxm2-16gb-x4"]);
        assert_eq!(
            inventory
                .class("a10g-x4")
                .unwrap()
                .hourly_price_cents_per_gpu,
            Some(75)
        );
        assert_eq!(inventory.nodes.len(), 4, "the CPU node belongs to no class");
        assert_eq!(inventory.problems.len(), 1, "{:?}", inventory.problems);
        assert!(inventory.problems[0].contains("broken"));
        let gpus: HashMap<_, _> = inventory
            .gpu_inventory()
            .into_iter()
            .map(|(c, _, g)| (c, g))
            .collect();
        assert_eq!(gpus["a10g-x4"], 8);
        assert_eq!(gpus["mystery-x2"], 2);
    }

    #[test]
    fn nodes_labelled_only_by_nvidia_gfd_form_classes_selected_by_gfd_labels() {
        let gfd = fixtures::labelled_node(
            "h-1",
            &[
                ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
                ("nvidia.com/gpu.count", "8"),
                ("nvidia.com/gpu.memory", "81559"),
                ("nvidia.com/gpu.compute.major", "9"),
                ("nvidia.com/gpu.compute.minor", "0"),
                ("nvidia.com/gpu.family", "hopper"),
            ],
            8,
        );
        let inventory = build_inventory(&[Arc::new(gfd)], &[]);
        let class = inventory
            .class("h100-80gb-hbm3-x8")
            .expect("a class from GFD labels");
        assert_eq!(
            class.capability,
            vramfit_api::labels::ComputeCapability::new(9, 0)
        );
        assert_eq!(class.pytorch_cuda_alloc_conf, "max_split_size_mb:256");
        assert_eq!(
            class
                .node_selector
                .get("nvidia.com/gpu.product")
                .map(String::as_str),
            Some("NVIDIA-H100-80GB-HBM3"),
            "pods are pinned with GFD's own labels"
        );
        assert_eq!(inventory.nodes.len(), 1);
    }

    #[test]
    fn free_gpus_subtract_bound_unbound_and_reserved_pods() {
        let nodes = vec![
            Arc::new(fixtures::gpu_node("a-1", "a10g", 4, 4)),
            Arc::new(fixtures::gpu_node("a-2", "a10g", 4, 4)),
        ];
        let inventory = build_inventory(&nodes, &[]);
        let pods = vec![
            Arc::new(fixtures::gpu_pod("other", "train-1", Some("a-1"), 3)),
            Arc::new(fixtures::gpu_pod("other", "train-2", Some("a-2"), 1)),
            Arc::new(fixtures::succeeded_gpu_pod("other", "done", "a-2", 3)),
        ];
        let usage = gpu_usage(&pods);
        assert_eq!(usage.used_on("a-1", GPU_RESOURCE), 3);
        assert_eq!(usage.used_on("a-2", GPU_RESOURCE), 1);
        assert_eq!(usage.len(), 2, "the finished pod takes nothing");
        let constraints =
            PodConstraints::of_job(&fixtures::job("j", fixtures::vllm_mistral_spec()));
        let capacity = Capacity::compute(&inventory, &usage, &[], &constraints);
        assert!(capacity.has_room("a10g-x4", 3));
        assert!(!capacity.has_room("a10g-x4", 4));
        // A reservation of 2 takes the best fit (a-2, 3 free → 1), leaving a-1's 1 and a-2's 1.
        let capacity =
            Capacity::compute(&inventory, &usage, &[("a10g-x4".into(), 2)], &constraints);
        assert!(capacity.has_room("a10g-x4", 1));
        assert!(!capacity.has_room("a10g-x4", 2));
        assert_eq!(
            capacity.shortage("a10g-x4", 2),
            "no free GPUs: no usable node has 2 GPUs free (2 usable node(s))"
        );
    }

    /// `pod` as an InferenceJob's own pod: labelled with `class` and controlled by `job`.
    fn job_pod_of_class(mut pod: Pod, job: &str, class: &str) -> Pod {
        pod.metadata.labels = Some(BTreeMap::from([(
            NODE_CLASS_LABEL.to_string(),
            class.to_string(),
        )]));
        pod.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "vramfit.io/v1alpha1".into(),
                kind: "InferenceJob".into(),
                name: job.into(),
                uid: fixtures::uid(job),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
        ]);
        pod
    }

    #[test]
    fn a_tenants_labelled_pod_does_not_make_a_class_look_full() {
        let nodes = vec![Arc::new(fixtures::gpu_node("a-1", "a10g", 4, 4))];
        let inventory = build_inventory(&nodes, &[]);
        let constraints =
            PodConstraints::of_job(&fixtures::job("j", fixtures::vllm_mistral_spec()));
        let room_for_4 = |pods: Vec<Pod>| {
            let usage = gpu_usage(&pods.into_iter().map(Arc::new).collect::<Vec<_>>());
            Capacity::compute(&inventory, &usage, &[], &constraints).has_room("a10g-x4", 4)
        };
        // A pending pod that asks for every GPU of the class and carries the class label,
        // created by someone else: it may never bind, and holds no room.
        let forged = job_pod_of_class(
            fixtures::gpu_pod("tenant", "squat", None, 4),
            "chat",
            "a10g-x4",
        );
        let mut unowned = forged.clone();
        unowned.metadata.owner_references = None;
        assert!(room_for_4(vec![unowned.clone()]));
        let mut not_controller = forged.clone();
        if let Some(owner) = not_controller.metadata.owner_references.as_mut() {
            owner[0].controller = Some(false);
        }
        assert!(room_for_4(vec![not_controller]));
        let mut other_kind = forged.clone();
        if let Some(owner) = other_kind.metadata.owner_references.as_mut() {
            owner[0].kind = "Job".into();
            owner[0].api_version = "batch/v1".into();
        }
        assert!(room_for_4(vec![other_kind]));
        // A job's own unbound pod holds its room; any pod bound to the node takes its real
        // request, whoever made it.
        assert!(!room_for_4(vec![forged]));
        assert!(!room_for_4(vec![fixtures::as_running(unowned, "a-1")]));
    }

    #[test]
    fn usage_follows_watch_events_and_relists() {
        let mut usage = GpuUsage::default();
        let bound = fixtures::gpu_pod("other", "train", Some("a-1"), 2);
        usage.apply_event(&watcher::Event::Apply(bound.clone()));
        let ours = fixtures::gpu_pod(fixtures::NAMESPACE, "chat-1", None, 1);
        let mut ours = job_pod_of_class(ours, "chat", "a10g-x4");
        usage.apply_event(&watcher::Event::Apply(ours.clone()));
        assert_eq!(usage.used_on("a-1", GPU_RESOURCE), 2);
        assert_eq!(usage.unbound_in("a10g-x4").collect::<Vec<_>>(), [1]);
        // Bound by the scheduler: it moves from the class to the node.
        ours.spec.get_or_insert_default().node_name = Some("a-1".into());
        usage.apply_event(&watcher::Event::Apply(ours.clone()));
        assert_eq!(usage.used_on("a-1", GPU_RESOURCE), 3);
        assert_eq!(usage.unbound_in("a10g-x4").count(), 0);
        usage.apply_event(&watcher::Event::Delete(bound.clone()));
        assert_eq!(usage.used_on("a-1", GPU_RESOURCE), 1);
        assert!(usage.contains(&pod_key(fixtures::NAMESPACE, "chat-1")));
        // A re-list replaces everything at its end.
        assert!(!usage.is_listed());
        usage.apply_event(&watcher::Event::Init);
        usage.apply_event(&watcher::Event::InitApply(bound));
        assert_eq!(
            usage.used_on("a-1", GPU_RESOURCE),
            1,
            "unchanged until the list is complete"
        );
        usage.apply_event(&watcher::Event::InitDone);
        assert_eq!(usage.used_on("a-1", GPU_RESOURCE), 2);
        assert!(!usage.contains(&pod_key(fixtures::NAMESPACE, "chat-1")));
        assert!(usage.is_listed());
    }

    #[test]
    fn cordoned_not_ready_and_tainted_nodes_do_not_count() {
        let mut cordoned = fixtures::gpu_node("a-1", "a10g", 1, 1);
        cordoned.spec.get_or_insert_default().unschedulable = Some(true);
        let mut tainted = fixtures::gpu_node("a-2", "a10g", 1, 1);
        tainted.spec.get_or_insert_default().taints = Some(vec![Taint {
            key: "dedicated".into(),
            value: Some("training".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }]);
        let mut gpu_tainted = fixtures::gpu_node("a-3", "a10g", 1, 1);
        gpu_tainted.spec.get_or_insert_default().taints = Some(vec![Taint {
            key: GPU_RESOURCE.into(),
            value: Some("present".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }]);
        let nodes = vec![Arc::new(cordoned), Arc::new(tainted), Arc::new(gpu_tainted)];
        let inventory = build_inventory(&nodes, &[]);
        let constraints =
            PodConstraints::of_job(&fixtures::job("j", fixtures::vllm_mistral_spec()));
        let capacity = Capacity::compute(&inventory, &GpuUsage::default(), &[], &constraints);
        assert!(
            capacity.has_room("a10g-x1", 1),
            "the GPU taint is tolerated"
        );
        let only_tainted = build_inventory(&nodes[..2], &[]);
        let capacity = Capacity::compute(&only_tainted, &GpuUsage::default(), &[], &constraints);
        assert!(!capacity.has_room("a10g-x1", 1));
        assert!(
            capacity
                .shortage("a10g-x1", 1)
                .starts_with("no usable node"),
            "{}",
            capacity.shortage("a10g-x1", 1)
        );
    }
}
