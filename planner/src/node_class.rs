//! Node classes: nodes grouped by GPU model and count, with the defaults vramfit plans with.
//! Discovered from node labels, overridden or defined by `GpuNodeClass` objects.
use std::collections::BTreeMap;

use vramfit_api::labels::{self, ComputeCapability, GPU_RESOURCE};
use vramfit_api::{GpuNodeClassSpec, Tier};

use crate::error::{ClassDefinitionError, PodGpuLimit};
use crate::gpu_catalog::{self, Architecture};
use crate::memory;

/// A class of GPU nodes as the planner sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeClass {
    /// Class name, e.g. `a10g-x4`.
    pub name: String,
    /// Product name (NVML or label form).
    pub product: String,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Memory per GPU in MiB, as NVML reports it.
    pub memory_mib: u64,
    /// Compute capability.
    pub capability: ComputeCapability,
    /// Tier.
    pub tier: Tier,
    /// PYTORCH_CUDA_ALLOC_CONF.
    pub pytorch_cuda_alloc_conf: String,
    /// Share of each GPU a process may use, in percent.
    pub memory_fraction_percent: u32,
    /// Memory kept free on every GPU, in MiB.
    pub memory_buffer_mib: u64,
    /// MAX_TILES override; from VRAM when unset.
    pub max_tiles: Option<u32>,
    /// Hourly price of one GPU in cents, when known.
    pub hourly_price_cents_per_gpu: Option<u32>,
    /// Whether jobs may be placed here.
    pub allow_jobs: bool,
    /// Labels every node of the class carries (the pod's node affinity).
    pub node_selector: BTreeMap<String, String>,
    /// Label values no node of the class carries (`NotIn` in the pod's node affinity): they
    /// keep mixed, MIG and shared nodes out of a whole-GPU class.
    pub node_exclusions: Vec<(String, Vec<String>)>,
    /// Node selectors of admin-defined classes (a `GpuNodeClass` with `gpu` and
    /// `nodeSelector`): a node that matches one of them belongs to that class only, and obeys
    /// its rules (runtime class, `allowJobs`, allow-lists), so it is no node of this one.
    pub excluded_selectors: Vec<BTreeMap<String, String>>,
    /// What one GPU of the class is to a pod.
    pub unit: GpuUnit,
    /// The extended resource its pods request GPUs with.
    pub resource: String,
    /// Nodes of the class mix GPU models; the class describes the weakest.
    pub mixed: bool,
    /// RuntimeClass of its pods (an admin's GpuNodeClass).
    pub runtime_class_name: Option<String>,
    /// Taint keys a job's own tolerations may name here (`*`: no key); `None`: any.
    pub allowed_toleration_keys: Option<Vec<String>>,
    /// Priority classes a job may ask for here; `None`: any.
    pub allowed_priority_classes: Option<Vec<String>>,
}

/// What a pod gets for each GPU it requests from a class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum GpuUnit {
    /// A whole GPU.
    #[default]
    Whole,
    /// A MIG slice: its memory, the parent's compute capability, no peer-to-peer.
    MigSlice {
        /// Profile, `3g.40gb`.
        profile: String,
    },
    /// One of `replicas` shares of a GPU (time-slicing or MPS).
    Shared {
        /// Pods per GPU.
        replicas: u32,
        /// `time-slicing` or `mps`.
        strategy: String,
    },
}

impl NodeClass {
    /// A class with the catalog's defaults for this GPU.
    pub fn new(
        name: impl Into<String>,
        product: impl Into<String>,
        gpus_per_node: u32,
        memory_mib: u64,
        capability: Option<ComputeCapability>,
    ) -> Self {
        let product = product.into();
        let model = gpu_catalog::identify(&product);
        let tier = model.map_or(Tier::Other, |m| m.tier);
        // Labels without a capability: the catalog's, or the most conservative (no bf16).
        let capability = capability
            .or(model.map(|m| m.capability))
            .unwrap_or(ComputeCapability::new(7, 0));
        let arch = Architecture::from_capability(capability);
        Self {
            name: name.into(),
            gpus_per_node,
            memory_mib,
            capability,
            tier,
            pytorch_cuda_alloc_conf: gpu_catalog::pytorch_cuda_alloc_conf(arch).to_string(),
            memory_fraction_percent: gpu_catalog::memory_fraction_percent(tier),
            memory_buffer_mib: gpu_catalog::memory_buffer_mib(tier, memory_mib),
            max_tiles: None,
            hourly_price_cents_per_gpu: None,
            allow_jobs: true,
            node_selector: BTreeMap::new(),
            node_exclusions: Vec::new(),
            excluded_selectors: Vec::new(),
            unit: GpuUnit::Whole,
            resource: GPU_RESOURCE.to_string(),
            mixed: false,
            runtime_class_name: None,
            allowed_toleration_keys: None,
            allowed_priority_classes: None,
            product,
        }
    }

    /// A class defined entirely by a `GpuNodeClass` (`gpu` and `nodeSelector` set).
    pub fn from_definition(
        name: &str,
        spec: &GpuNodeClassSpec,
    ) -> Result<Self, ClassDefinitionError> {
        let gpu = spec
            .gpu
            .as_ref()
            .ok_or_else(|| ClassDefinitionError::NoGpu {
                name: name.to_string(),
            })?;
        if spec.node_selector.is_empty() {
            return Err(ClassDefinitionError::NoNodeSelector {
                name: name.to_string(),
            });
        }
        let capability = ComputeCapability::parse(&gpu.compute_capability).ok_or_else(|| {
            ClassDefinitionError::BadComputeCapability {
                name: name.to_string(),
                value: gpu.compute_capability.clone(),
            }
        })?;
        let mut class = Self::new(
            name,
            gpu.product.clone(),
            gpu.count,
            gpu.memory_mib,
            Some(capability),
        );
        class.node_selector = spec.node_selector.clone();
        class.apply_overrides(spec);
        Ok(class)
    }

    /// Applies an admin's overrides (a `GpuNodeClass` of the same name).
    pub fn apply_overrides(&mut self, spec: &GpuNodeClassSpec) {
        if let Some(tier) = spec.tier {
            self.tier = tier;
            self.memory_fraction_percent = gpu_catalog::memory_fraction_percent(tier);
            self.memory_buffer_mib = gpu_catalog::memory_buffer_mib(tier, self.memory_mib);
        }
        if let Some(conf) = &spec.pytorch_cuda_alloc_conf {
            self.pytorch_cuda_alloc_conf = conf.clone();
        }
        if let Some(p) = spec.memory_fraction_percent {
            self.memory_fraction_percent = p;
        }
        if let Some(b) = spec.memory_buffer_mib {
            self.memory_buffer_mib = b;
        }
        if spec.max_tiles.is_some() {
            self.max_tiles = spec.max_tiles;
        }
        if spec.hourly_price_cents_per_gpu.is_some() {
            self.hourly_price_cents_per_gpu = spec.hourly_price_cents_per_gpu;
        }
        self.allow_jobs = spec.allow_jobs;
        if spec.runtime_class_name.is_some() {
            self.runtime_class_name = spec.runtime_class_name.clone();
        }
        if spec.allowed_toleration_keys.is_some() {
            self.allowed_toleration_keys = spec.allowed_toleration_keys.clone();
        }
        if spec.allowed_priority_classes.is_some() {
            self.allowed_priority_classes = spec.allowed_priority_classes.clone();
        }
    }

    /// Architecture of the class's GPUs.
    pub fn architecture(&self) -> Architecture {
        Architecture::from_capability(self.capability)
    }

    /// Memory usable per GPU in MiB: VRAM less the buffer, capped by the memory fraction.
    pub fn usable_per_gpu_mib(&self) -> u64 {
        let after_buffer = self.memory_mib.saturating_sub(self.memory_buffer_mib);
        let by_fraction = memory::percent_of(self.memory_mib, self.memory_fraction_percent);
        after_buffer.min(by_fraction)
    }

    /// The usable memory as a whole percent of VRAM, rounded down: what vLLM's
    /// `--gpu-memory-utilization` takes, so that vLLM never claims more than the plan budgets.
    pub fn usable_percent(&self) -> u32 {
        // Usable memory is at most the VRAM: at most 100, computed in 128 bits.
        let percent = (u128::from(self.usable_per_gpu_mib()) * 100)
            .checked_div(u128::from(self.memory_mib))
            .unwrap_or(0);
        u32::try_from(percent).unwrap_or(100)
    }

    /// The model's short name (`A10G`), or the product name for unknown models.
    pub fn describe_model(&self) -> &str {
        gpu_catalog::identify(&self.product).map_or(self.product.as_str(), |m| m.name)
    }

    /// The product and what a pod gets of it: `NVIDIA A10G`, `NVIDIA A100-SXM4-80GB MIG
    /// 3g.40gb`, `NVIDIA A10G 1/4 shared`.
    pub fn describe_product(&self) -> String {
        match &self.unit {
            GpuUnit::Whole => self.product.clone(),
            GpuUnit::MigSlice { profile } => format!("{} MIG {profile}", self.product),
            GpuUnit::Shared { replicas, .. } => format!("{} 1/{replicas} shared", self.product),
        }
    }

    /// What one GPU of the class is, for reasons and tables: `A10G`, `A100 MIG 3g.40gb`,
    /// `A10G 1/4 shared`, `T4 (weakest of mixed)`.
    pub fn describe_gpu(&self) -> String {
        let model = self.describe_model();
        let gpu = match &self.unit {
            GpuUnit::Whole => model.to_string(),
            GpuUnit::MigSlice { profile } => format!("{model} MIG {profile}"),
            GpuUnit::Shared { replicas, .. } => format!("{model} 1/{replicas} shared"),
        };
        if self.mixed {
            format!("{gpu} (weakest of mixed)")
        } else {
            gpu
        }
    }

    /// The most GPUs one pod may take: a pod never spans MIG slices (no peer-to-peer between
    /// them) nor takes several shares of GPUs.
    pub fn max_gpus_per_pod(&self) -> u32 {
        match self.unit {
            GpuUnit::Whole => self.gpus_per_node,
            GpuUnit::MigSlice { .. } | GpuUnit::Shared { .. } => self.gpus_per_node.min(1),
        }
    }

    /// Why a pod gets no more than [`Self::max_gpus_per_pod`] here.
    pub fn pod_gpu_limit(&self) -> PodGpuLimit {
        match &self.unit {
            GpuUnit::Whole => PodGpuLimit::NodeGpus {
                gpus_per_node: self.gpus_per_node,
            },
            GpuUnit::MigSlice { profile } => PodGpuLimit::MigSlice {
                profile: profile.clone(),
            },
            GpuUnit::Shared { replicas, strategy } => PodGpuLimit::SharedGpu {
                replicas: *replicas,
                strategy: strategy.clone(),
            },
        }
    }

    /// Whether a node with `labels` belongs to the class.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self
                .node_exclusions
                .iter()
                .all(|(k, values)| labels.get(k).is_none_or(|v| !values.contains(v)))
            && !self
                .excluded_selectors
                .iter()
                .any(|selector| selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
    }
}

/// The class name of `count` GPUs of `product`: `NVIDIA-A10G` ×4 → `a10g-x4`.
pub fn class_name(product: &str, count: u32) -> String {
    let value = labels::to_label_value(product).to_ascii_lowercase();
    let tokens: Vec<&str> = value
        .split(['-', '_', '.'])
        .filter(|t| !t.is_empty() && !matches!(*t, "nvidia" | "tesla" | "geforce"))
        .collect();
    let stem = if tokens.is_empty() {
        "gpu".to_string()
    } else {
        tokens.join("-")
    };
    // Leave room for the suffix within a 63-character label value.
    let stem: String = stem.chars().take(50).collect();
    format!("{}-x{count}", stem.trim_end_matches('-'))
}

/// The classes `vramfit plan` shows with no cluster: common cloud node shapes, with
/// example on-demand prices (set yours with a GpuNodeClass).
pub fn builtin_classes() -> Vec<NodeClass> {
    let class = |name: &str, product: &str, count, mib, (major, minor), cents| {
        let mut c = NodeClass::new(
            name,
            product,
            count,
            mib,
            Some(ComputeCapability::new(major, minor)),
        );
        c.hourly_price_cents_per_gpu = Some(cents);
        c.node_selector = BTreeMap::from([
            (
                labels::GPU_PRODUCT.to_string(),
                labels::to_label_value(product),
            ),
            (labels::GPU_COUNT.to_string(), count.to_string()),
        ]);
        c
    };
    vec![
        class("t4-x1", "Tesla T4", 1, 15_360, (7, 5), 35),
        class(
            "v100-16gb-x4",
            "Tesla V100-SXM2-16GB",
            4,
            16_160,
            (7, 0),
            120,
        ),
        class("a10g-x1", "NVIDIA A10G", 1, 23_028, (8, 6), 60),
        class("a10g-x4", "NVIDIA A10G", 4, 23_028, (8, 6), 60),
        class("l40s-x1", "NVIDIA L40S", 1, 46_068, (8, 9), 180),
        class(
            "a100-40gb-x1",
            "NVIDIA A100-PCIE-40GB",
            1,
            40_960,
            (8, 0),
            250,
        ),
        class(
            "a100-80gb-x8",
            "NVIDIA A100-SXM4-80GB",
            8,
            81_920,
            (8, 0),
            400,
        ),
        class(
            "h100-80gb-x8",
            "NVIDIA H100 80GB HBM3",
            8,
            81_559,
            (9, 0),
            650,
        ),
        class("h200-x8", "NVIDIA H200", 8, 143_771, (9, 0), 800),
        // MIG slices under the device plugin's mixed strategy, priced as their share of the GPU.
        mig_class(
            "a100-80gb-mig-3g-40gb-x2",
            ("NVIDIA A100-SXM4-80GB", (8, 0)),
            ("3g.40gb", 2, 40_192),
            171,
        ),
        mig_class(
            "h100-80gb-mig-1g-10gb-x7",
            ("NVIDIA H100 80GB HBM3", (9, 0)),
            ("1g.10gb", 7, 9_984),
            93,
        ),
    ]
}

/// A built-in class of MIG slices: `(product, capability)` of the parent GPU, `(profile,
/// slices per node, MiB per slice)`, cents per slice-hour.
fn mig_class(
    name: &str,
    (product, (major, minor)): (&str, (u32, u32)),
    (profile, slices, mib): (&str, u32, u64),
    cents: u32,
) -> NodeClass {
    let mut c = NodeClass::new(
        name,
        product,
        slices,
        mib,
        Some(ComputeCapability::new(major, minor)),
    );
    c.hourly_price_cents_per_gpu = Some(cents);
    c.unit = GpuUnit::MigSlice {
        profile: profile.to_string(),
    };
    c.resource = labels::mig_resource(profile);
    c.node_selector = BTreeMap::from([
        (
            labels::GPU_PRODUCT.to_string(),
            labels::to_label_value(product),
        ),
        (labels::mig_count_key(profile), slices.to_string()),
    ]);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_are_short_and_valid() {
        assert_eq!(class_name("NVIDIA-A10G", 4), "a10g-x4");
        assert_eq!(class_name("Tesla V100-SXM2-16GB", 4), "v100-sxm2-16gb-x4");
        assert_eq!(class_name("NVIDIA-H100-80GB-HBM3", 8), "h100-80gb-hbm3-x8");
        assert_eq!(class_name("NVIDIA", 1), "gpu-x1");
        let long = class_name(&"X".repeat(200), 64);
        assert!(labels::is_valid_label_value(&long), "{long}");
    }

    #[test]
    fn usable_memory_is_vram_less_buffer_capped_by_fraction() {
        let a10g = NodeClass::new("a", "NVIDIA A10G", 1, 23_028, None);
        assert_eq!(
            a10g.capability,
            ComputeCapability::new(8, 6),
            "from the catalog"
        );
        assert_eq!(a10g.usable_per_gpu_mib(), 23_028 - 4_605);
        let mut capped = a10g.clone();
        capped.memory_fraction_percent = 50;
        assert_eq!(capped.usable_per_gpu_mib(), 11_514);
    }

    #[test]
    fn unknown_products_without_capability_are_treated_as_pre_ampere() {
        let c = NodeClass::new("x", "Mystery GPU", 1, 16_000, None);
        assert_eq!(c.tier, Tier::Other);
        assert!(!c.capability.supports_bf16());
    }

    #[test]
    fn overrides_replace_defaults() {
        let mut c = NodeClass::new("a10g-x1", "NVIDIA A10G", 1, 23_028, None);
        c.apply_overrides(&GpuNodeClassSpec {
            tier: Some(Tier::LegacyDatacenter),
            pytorch_cuda_alloc_conf: Some("expandable_segments:True".into()),
            max_tiles: Some(6),
            hourly_price_cents_per_gpu: Some(75),
            allow_jobs: false,
            ..Default::default()
        });
        assert_eq!(c.memory_fraction_percent, 80);
        assert_eq!(c.memory_buffer_mib, 4_096);
        assert_eq!(c.pytorch_cuda_alloc_conf, "expandable_segments:True");
        assert_eq!(c.max_tiles, Some(6));
        assert_eq!(c.hourly_price_cents_per_gpu, Some(75));
        assert!(!c.allow_jobs);
    }
}
