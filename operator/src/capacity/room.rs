//! Free GPUs per class for one job (pure): the class's nodes the job's pod may use, less what
//! bound pods, unbound InferenceJob pods and reservations take.
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Node, Taint, Toleration};
use kube::ResourceExt;
use vramfit_api::pod_keys::label_value;

use super::inventory::Inventory;
use crate::settings::GroupSpread;
use crate::stores::PodOwner;
use crate::stores::gpu_usage::GpuUsage;

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
                crate::tolerations::gpu_toleration(),
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

/// One node of one class: the class's GPUs its bound pods leave free, and whether a pod with
/// the job's constraints may use the node (schedulable, tolerated, selected).
#[derive(Clone, Copy, Debug)]
pub struct NodeFree<'i> {
    /// The node's name.
    pub node: &'i str,
    /// The class.
    pub class: &'i vramfit_planner::NodeClass,
    /// Its GPUs (of the class's resource) that bound pods leave free.
    pub free: u32,
    /// A pod with the constraints may go there.
    pub admitted: bool,
}

/// Every node of every class with its free GPUs, for a pod with `constraints` (what both the
/// class room and the model cache's choice of nodes start from).
pub fn free_per_node<'i>(
    inventory: &'i Inventory,
    usage: &'i GpuUsage,
    constraints: &'i PodConstraints,
) -> impl Iterator<Item = NodeFree<'i>> + 'i {
    inventory.nodes.iter().flat_map(move |info| {
        let admitted = info.schedulable && constraints.admit(&info.node);
        info.classes
            .iter()
            .filter_map(|&index| inventory.classes.get(index))
            .map(move |class| NodeFree {
                node: &info.name,
                class,
                free: info
                    .allocatable
                    .get(&class.resource)
                    .saturating_sub(usage.used_on(&info.name, &class.resource)),
                admitted,
            })
    })
}

/// Free GPUs per class for one job, after every reservation.
#[derive(Clone, Debug, Default)]
pub struct Capacity {
    rooms: HashMap<String, ClassRoom>,
    /// Whether a group needs distinct nodes or may share one.
    spread: GroupSpread,
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
    /// `(class, GPUs)` of pods vramfit created that no store shows yet; an unbound pod holds
    /// room in its class only when `is_job_of` says the job its owner reference names is
    /// its owner (that very job, by uid, is in the job store).
    pub fn compute(
        inventory: &Inventory,
        usage: &GpuUsage,
        reserved: &[(String, u32)],
        constraints: &PodConstraints,
        is_job_of: &dyn Fn(&PodOwner) -> bool,
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
        for node in free_per_node(inventory, usage, constraints) {
            let Some(room) = rooms.get_mut(&node.class.name) else {
                continue;
            };
            room.nodes += 1;
            if node.admitted {
                room.admitted += 1;
                *room.free.entry(node.free).or_default() += 1;
            }
        }
        for class in &inventory.classes {
            let mut pending: Vec<u32> = usage
                .unbound_in(&label_value(&class.name))
                .filter(|(_, owner)| is_job_of(owner))
                .map(|(gpus, _)| gpus)
                .collect();
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
        Self {
            rooms,
            spread: GroupSpread::Node,
        }
    }

    /// The same room, counted for groups that spread as `spread` says.
    pub fn with_group_spread(mut self, spread: GroupSpread) -> Self {
        self.spread = spread;
        self
    }

    /// Whether some admitted node of `class` has `gpus` free.
    pub fn has_room(&self, class: &str, gpus: u32) -> bool {
        self.nodes_with_room(class, gpus) > 0
    }

    /// How many distinct admitted nodes of `class` each have `gpus` free: a group of N pods
    /// (one per node, each with `gpus`) fits only where this is N or more.
    pub fn nodes_with_room(&self, class: &str, gpus: u32) -> usize {
        self.rooms.get(class).map_or(0, |room| {
            room.free.range(gpus..).map(|(_, count)| *count).sum()
        })
    }

    /// How many pods of `gpus` each the admitted nodes of `class` have room for, a node
    /// holding as many as its free GPUs allow (a group whose ranks may share a node).
    fn pods_with_room(&self, class: &str, gpus: u32) -> usize {
        self.rooms.get(class).map_or(0, |room| {
            room.free
                .range(gpus.max(1)..)
                .map(|(free, count)| count * (free / gpus.max(1)) as usize)
                .sum()
        })
    }

    /// How many pods of a group (each with `gpus`) `class` has room for: one per node with
    /// `gpus` free, or, where ranks may share a node, as many as each node's GPUs allow.
    fn group_room(&self, class: &str, gpus: u32) -> usize {
        if self.spread.one_pod_per_node() {
            self.nodes_with_room(class, gpus)
        } else {
            self.pods_with_room(class, gpus)
        }
    }

    /// Whether `nodes` distinct admitted nodes of `class` each have `gpus` free (1: a plain
    /// pod's test, [`Capacity::has_room`]); pods' room where ranks may share a node.
    pub fn has_room_on(&self, class: &str, gpus: u32, nodes: u32) -> bool {
        if nodes <= 1 {
            return self.has_room(class, gpus);
        }
        self.group_room(class, gpus) >= nodes as usize
    }

    /// Takes `gpus` from the node of `class` that fits them best, as a pod placed there would
    /// (a served job placing several replicas in one reconcile).
    pub fn take(&mut self, class: &str, gpus: u32) {
        if let Some(room) = self.rooms.get_mut(class) {
            room.take(gpus);
        }
    }

    /// Takes `gpus` from each of `nodes` distinct nodes of `class` (a group, one pod per
    /// node), the best-fitting first; [`Capacity::take`] for one node.
    pub fn take_on(&mut self, class: &str, gpus: u32, nodes: u32) {
        let one_per_node = self.spread.one_pod_per_node();
        if let Some(room) = self.rooms.get_mut(class) {
            if one_per_node {
                room.take_distinct(gpus, nodes.max(1));
            } else {
                for _ in 0..nodes.max(1) {
                    room.take(gpus);
                }
            }
        }
    }

    /// Why `class` lacks `nodes` nodes with `gpus` free each, in one line ([`Capacity::shortage`]
    /// for one node).
    pub fn shortage_on(&self, class: &str, gpus: u32, nodes: u32) -> String {
        if nodes <= 1 {
            return self.shortage(class, gpus);
        }
        let Some(room) = self.rooms.get(class).filter(|room| room.nodes > 0) else {
            return "no nodes".to_string();
        };
        let plural = if gpus == 1 { "GPU" } else { "GPUs" };
        if !self.spread.one_pod_per_node() {
            return format!(
                "no room for a group of {nodes}: the {} usable node(s) have room for {} pod(s) of {gpus} {plural}",
                room.admitted,
                self.pods_with_room(class, gpus)
            );
        }
        format!(
            "no room for a group of {nodes}: {} of {} usable node(s) have {gpus} {plural} free",
            self.nodes_with_room(class, gpus),
            room.admitted
        )
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

    /// Best fit on `nodes` distinct nodes: the nodes are chosen before any gives its GPUs up,
    /// so that one node's remainder is never taken twice.
    fn take_distinct(&mut self, gpus: u32, nodes: u32) {
        let mut chosen = Vec::new();
        for (free, count) in self.free.range(gpus..) {
            let wanted = (nodes as usize).saturating_sub(chosen.len());
            chosen.extend(std::iter::repeat_n(*free, (*count).min(wanted)));
        }
        for free in chosen {
            if let Some(count) = self.free.get_mut(&free) {
                *count -= 1;
                if *count == 0 {
                    self.free.remove(&free);
                }
            }
            *self.free.entry(free - gpus).or_default() += 1;
        }
    }
}
