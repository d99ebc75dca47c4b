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
//!   pods vramfit has just created, see [`crate::capacity::reservations`]) are subtracted from their
//!   class, best fit, so that a burst of jobs does not pile onto the last free node. The
//!   `vramfit.io/node-class` label of any other unbound pod is ignored: anyone may set it, and
//!   a tenant's pods could otherwise make every class look full.
//! * A node counts only while it is schedulable (not cordoned, Ready), its taints are tolerated
//!   by the job's pod, and it matches the job's own node selector.
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::core::DeserializeGuard;
use vramfit_api::labels::gpu_facts;
use vramfit_api::{ClassRejection, GpuNodeClass};
use vramfit_planner::{NodeClass, classes_from_facts};

use super::extended_resources;
use crate::stores::gpu_resources::{GpuResources, advertised_mig_strategy, is_schedulable};

/// The most node-selector terms a discovered class's pods may carry to stay off the nodes of
/// admin-defined classes (each term excludes one label of every such class's selector).
pub const MAX_AFFINITY_TERMS: usize = 16;

/// Whether `labels` carry every label of `selector`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The admin classes' selectors a discovered `class` must exclude, reduced to what can tell
/// its nodes apart: a selector that no node of the class can match (another value of a label
/// the class pins or excludes) is dropped, and so are the labels every node of the class
/// carries anyway. `None` when excluding them would take more than [`MAX_AFFINITY_TERMS`]
/// node-affinity terms (one per choice of a label from each selector), or when every node of
/// the class would match one of them.
pub fn admin_exclusions(
    class: &NodeClass,
    defined: &[&BTreeMap<String, String>],
) -> Option<Vec<BTreeMap<String, String>>> {
    let mut excluded = Vec::new();
    let mut terms: usize = 1;
    for selector in defined {
        let disjoint = selector.iter().any(|(k, v)| {
            class.node_selector.get(k).is_some_and(|own| own != v)
                || class
                    .node_exclusions
                    .iter()
                    .any(|(key, values)| key == k && values.contains(v))
        });
        if disjoint {
            continue;
        }
        let telling: BTreeMap<String, String> = selector
            .iter()
            .filter(|(k, v)| class.node_selector.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if telling.is_empty() {
            return None;
        }
        terms = terms.saturating_mul(telling.len());
        if terms > MAX_AFFINITY_TERMS {
            return None;
        }
        excluded.push(telling);
    }
    Some(excluded)
}

/// A GPU node as placement sees it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// The node's name.
    pub name: String,
    /// The node.
    pub node: Arc<Node>,
    /// Allocatable GPU resources (whole, shared, MIG slices), by name.
    pub allocatable: GpuResources,
    /// Allocatable extended resources other than GPUs, by name (what a job's
    /// `spec.pod.resources` may ask for: [`super::extended_resources`]).
    pub extended: BTreeMap<String, u64>,
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
    /// GPUs per class, counted once when the inventory is built (what `/metrics` shows).
    gpu_totals: Vec<(String, String, u64)>,
}

impl Inventory {
    /// A class by name.
    pub fn class(&self, name: &str) -> Option<&NodeClass> {
        self.classes.iter().find(|c| c.name == name)
    }

    /// The classes none of whose nodes offers one of the extended resources in `wanted` (as
    /// many as wanted), each with the first such resource named: the job's pod could never be
    /// scheduled there.
    pub fn lacking_resources(&self, wanted: &BTreeMap<String, u64>) -> Vec<ClassRejection> {
        if wanted.is_empty() {
            return Vec::new();
        }
        let offers = |index: usize, name: &str, count: u64| {
            self.nodes
                .iter()
                .filter(|n| n.classes.contains(&index))
                .any(|n| n.extended.get(name).is_some_and(|has| *has >= count))
        };
        self.classes
            .iter()
            .enumerate()
            .filter_map(|(index, class)| {
                let (name, count) = wanted
                    .iter()
                    .find(|(name, count)| !offers(index, name, **count))?;
                Some(ClassRejection {
                    node_class: class.name.clone(),
                    reason: format!(
                        "spec.pod.resources asks for {count} {name}, which no node of the class offers"
                    ),
                })
            })
            .collect()
    }

    /// GPUs per class: `(class, product, allocatable GPUs summed over its nodes)`, as counted
    /// when the inventory was built (one entry per class: no node is read).
    pub fn gpu_inventory(&self) -> Vec<(String, String, u64)> {
        self.gpu_totals.clone()
    }

    fn count_gpus(&self) -> Vec<(String, String, u64)> {
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
    let mut problems = Vec::new();
    let mut defined: BTreeMap<String, NodeClass> = BTreeMap::new();
    let mut overrides = Vec::new();
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
                        defined.insert(name, class);
                    }
                    Err(problem) => problems.push(problem.to_string()),
                }
            }
            Ok(object) => overrides.push((name, &object.spec)),
        }
    }
    let defined_selectors: Vec<&BTreeMap<String, String>> =
        defined.values().map(|c| &c.node_selector).collect();

    // A node an admin's class selects obeys that class's rules (runtime class, allowJobs,
    // allow-lists) whichever class a job chose: it forms no discovered class.
    let mut classes: BTreeMap<String, NodeClass> = BTreeMap::new();
    for node in nodes {
        if defined_selectors
            .iter()
            .any(|selector| selects(selector, node.labels()))
        {
            continue;
        }
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
    for (name, spec) in overrides {
        if let Some(class) = classes.get_mut(&name) {
            class.apply_overrides(spec);
        }
    }
    // And a discovered class's pods stay off those nodes: their node affinity excludes every
    // admin class's selector (see `pod::build`).
    classes.retain(|name, class| match admin_exclusions(class, &defined_selectors) {
        Some(excluded) => {
            class.excluded_selectors = excluded;
            true
        }
        None => {
            problems.push(format!(
                "node class {name} is left out: keeping its pods off the nodes of the GpuNodeClasses that define classes would take more than {MAX_AFFINITY_TERMS} node-affinity terms (give those classes fewer selector labels)"
            ));
            false
        }
    });
    // A defined class replaces a discovered class of the same name.
    classes.extend(defined);

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
                extended: extended_resources::allocatable(node),
                schedulable: is_schedulable(node),
                node: node.clone(),
                classes: member,
            })
        })
        .collect();
    let mut inventory = Inventory {
        classes,
        nodes,
        problems,
        gpu_totals: Vec::new(),
    };
    inventory.gpu_totals = inventory.count_gpus();
    inventory
}
