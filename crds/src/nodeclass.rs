//! `GpuNodeClass`: an admin's definition or override of a class of GPU nodes.
use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A class of GPU nodes. Classes are discovered from node labels (the vramfit agent's, or
/// NVIDIA GFD's); a GpuNodeClass whose name matches a discovered class overrides its
/// defaults, and one with `nodeSelector` and `gpu` defines a class of its own.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "vramfit.io",
    version = "v1alpha1",
    kind = "GpuNodeClass",
    shortname = "gnc",
    category = "vramfit",
    doc = "A class of GPU nodes and the defaults vramfit plans with on it.",
    printcolumn(name = "Tier", type_ = "string", json_path = ".spec.tier"),
    printcolumn(name = "Product", type_ = "string", json_path = ".spec.gpu.product"),
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".spec.gpu.count"),
    printcolumn(name = "Jobs", type_ = "boolean", json_path = ".spec.allowJobs"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GpuNodeClassSpec {
    /// Nodes of this class carry all of these labels. Unset for an override of a discovered
    /// class (its own labels are used then).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// The GPUs of this class's nodes, for classes defined without agent or GFD labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuDescription>,
    /// Tier that drives the defaults; from the GPU model when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// PYTORCH_CUDA_ALLOC_CONF; from the architecture when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub pytorch_cuda_alloc_conf: Option<String>,
    /// Share of each GPU's memory a process may use, in percent (10 to 100); from the tier
    /// when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 100))]
    pub memory_fraction_percent: Option<u32>,
    /// Memory kept free on every GPU, in MiB; from the tier when unset. At most 1 TiB
    /// (1,048,576 MiB), more than any GPU has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1048576))]
    pub memory_buffer_mib: Option<u64>,
    /// MAX_TILES for vision models (1 to 64; the tile ladder tops out at 32); from VRAM per
    /// GPU when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub max_tiles: Option<u32>,
    /// Hourly price of one GPU of this class, in US cents (for economy jobs and reports). At
    /// most 1,000,000 ($10,000 an hour, a hundred times the dearest cloud GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1000000))]
    pub hourly_price_cents_per_gpu: Option<u32>,
    /// Whether jobs may be placed here (default true).
    #[serde(default = "default_true")]
    pub allow_jobs: bool,
    /// RuntimeClass of the pods placed here (e.g. `nvidia` where the NVIDIA container runtime
    /// is not the node's default). Only an admin sets it; a job cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub runtime_class_name: Option<String>,
    /// Taint keys a job's own tolerations may name on this class (`*`: a toleration without
    /// a key, which tolerates every taint). Unset: any. A job with another toleration cannot
    /// run here, and its status says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub allowed_toleration_keys: Option<Vec<String>>,
    /// Priority classes a job may ask for on this class. Unset: any. A job with another
    /// priority class cannot run here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub allowed_priority_classes: Option<Vec<String>>,
}

fn default_true() -> bool {
    true
}

/// The GPUs of a node class.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("self.computeCapability.matches('^[0-9]+\\\\.[0-9]+$')").message("computeCapability must look like 8.6"))]
#[serde(rename_all = "camelCase")]
pub struct GpuDescription {
    /// Product name as NVML reports it, e.g. `NVIDIA A10G`.
    #[schemars(length(min = 1, max = 128))]
    pub product: String,
    /// GPUs per node, 1 to 64 (the largest nodes have 8 to 16).
    #[schemars(range(min = 1, max = 64))]
    pub count: u32,
    /// Memory per GPU in MiB, as NVML reports it: 1 GiB to 4 TiB (4,194,304 MiB; the largest
    /// GPU has 288 GB).
    #[schemars(range(min = 1024, max = 4194304))]
    pub memory_mib: u64,
    /// CUDA compute capability, `major.minor`.
    #[schemars(length(min = 3, max = 7))]
    pub compute_capability: String,
}

/// The tier of a GPU class: it drives memory buffer, memory fraction and defaults.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// H200, H100, A100, B200.
    DatacenterHighMemory,
    /// L40S, L40, RTX A6000.
    WorkstationHighMemory,
    /// A10G, A10, A30, L4.
    DatacenterMidMemory,
    /// RTX 3090, 4090, 5090.
    ConsumerHighEnd,
    /// V100, P100.
    LegacyDatacenter,
    /// Any other model.
    Other,
}

impl Tier {
    /// The name used in labels and status.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::DatacenterHighMemory => "datacenter_high_memory",
            Tier::WorkstationHighMemory => "workstation_high_memory",
            Tier::DatacenterMidMemory => "datacenter_mid_memory",
            Tier::ConsumerHighEnd => "consumer_high_end",
            Tier::LegacyDatacenter => "legacy_datacenter",
            Tier::Other => "other",
        }
    }

    /// Parses the name used in labels and status.
    pub fn parse(s: &str) -> Option<Tier> {
        [
            Tier::DatacenterHighMemory,
            Tier::WorkstationHighMemory,
            Tier::DatacenterMidMemory,
            Tier::ConsumerHighEnd,
            Tier::LegacyDatacenter,
            Tier::Other,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }
}
