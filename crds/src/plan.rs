//! The configuration vramfit planned for a job on a node class. Built by the planner,
//! kept in the job's status, turned into the pod's env and arguments.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Compute dtype.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// bfloat16 (compute capability >= 8.0).
    Bfloat16,
    /// float16.
    Float16,
}

impl Dtype {
    /// The name runtimes and `TORCH_DTYPE` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Bfloat16 => "bfloat16",
            Dtype::Float16 => "float16",
        }
    }
}

/// Weight quantization, in the order vramfit steps down.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum Quantization {
    /// Full precision (the dtype's 2 bytes per parameter).
    None,
    /// 8-bit (bitsandbytes LLM.int8).
    Int8,
    /// 4-bit NormalFloat (bitsandbytes nf4).
    Nf4,
}

impl Quantization {
    /// Every level, best first.
    pub const LADDER: [Quantization; 3] =
        [Quantization::None, Quantization::Int8, Quantization::Nf4];

    /// The name in status and manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Quantization::None => "none",
            Quantization::Int8 => "int8",
            Quantization::Nf4 => "nf4",
        }
    }

    /// `QUANTIZATION_BITS`, where quantized.
    pub fn bits(self) -> Option<u32> {
        match self {
            Quantization::None => None,
            Quantization::Int8 => Some(8),
            Quantization::Nf4 => Some(4),
        }
    }
}

/// llama.cpp KV-cache element type, in the order vramfit steps down.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub enum KvCacheType {
    /// 16-bit float.
    #[serde(rename = "f16")]
    F16,
    /// 8-bit blocks (needs flash attention for the V cache).
    #[serde(rename = "q8_0")]
    Q8_0,
    /// 4-bit blocks (needs flash attention for the V cache).
    #[serde(rename = "q4_0")]
    Q4_0,
}

impl KvCacheType {
    /// Every type, best first.
    pub const LADDER: [KvCacheType; 3] = [KvCacheType::F16, KvCacheType::Q8_0, KvCacheType::Q4_0];

    /// The name llama.cpp's `--cache-type-k/v` take.
    pub fn as_str(self) -> &'static str {
        match self {
            KvCacheType::F16 => "f16",
            KvCacheType::Q8_0 => "q8_0",
            KvCacheType::Q4_0 => "q4_0",
        }
    }

    /// Quantized types need flash attention in llama.cpp.
    pub fn is_quantized(self) -> bool {
        self != KvCacheType::F16
    }
}

/// A planned configuration for one job on one node class.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// The node class planned for.
    pub node_class: String,
    /// GPUs of one node the pod takes (`nvidia.com/gpu`).
    pub gpu_count: u32,
    /// Compute dtype.
    pub dtype: Dtype,
    /// Weight quantization.
    pub quantization: Quantization,
    /// Flash Attention 2 (compute capability >= 8.0).
    pub flash_attention: bool,
    /// TF32 matmul (compute capability >= 8.0).
    pub tf32: bool,
    /// PYTORCH_CUDA_ALLOC_CONF.
    pub pytorch_cuda_alloc_conf: String,
    /// Share of each GPU's memory the process may use, in percent.
    pub memory_fraction_percent: u32,
    /// MAX_TILES (vision models only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tiles: Option<u32>,
    /// Context length in tokens the plan was sized for.
    pub context_length: u32,
    /// llama.cpp offload (runtime llamacpp only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llama_cpp: Option<LlamaCppPlan>,
    /// Served jobs: sequences one replica serves at once on this class (`--max-num-seqs`,
    /// `--parallel`), the unit its load is measured in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Memory needed against memory usable, per GPU.
    pub memory: MemoryEstimate,
    /// Hourly price of the GPUs taken, in cents (0 when unknown).
    #[serde(default)]
    pub hourly_price_cents: u32,
    /// Why each decision was taken, one short line each.
    pub reasons: Vec<String>,
    /// Things the user should know (a pinned layer count that cannot fit, say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Fine-tuning jobs: method, micro-batch, accumulation, checkpointing, optimizer and the
    /// training memory part by part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuning: Option<crate::tuning::TuningPlan>,
    /// A plan that spans nodes: the group of pods, one per node, and how the model is split
    /// across them. Absent for a plan on one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<crate::group::GroupPlan>,
    /// Served jobs with `serve.adapters`: the adapters' share of each GPU and the runtime's
    /// LoRA settings on this class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapters: Option<AdaptersPlan>,
}

/// The LoRA adapters of a served replica on a class.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AdaptersPlan {
    /// Adapters the replica serves.
    pub count: u32,
    /// vLLM: adapters one batch runs at once (`--max-loras`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_batch: Option<u32>,
    /// vLLM: the rank its LoRA buffers are sized for (`--max-lora-rank`), the smallest rank
    /// vLLM allows that holds every adapter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rank: Option<u32>,
    /// Memory the adapters take on each GPU (vLLM: its LoRA buffers; llama.cpp: the adapters'
    /// weights), part of `memory.neededPerGpuMib`.
    pub memory_mib: u64,
}

impl Plan {
    /// Nodes the plan spans: its group's size, or 1.
    pub fn nodes(&self) -> u32 {
        self.group.as_ref().map_or(1, |g| g.nodes)
    }

    /// GPUs the plan takes on all its nodes.
    pub fn total_gpus(&self) -> u32 {
        self.gpu_count.saturating_mul(self.nodes())
    }
}

/// llama.cpp offload decisions.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LlamaCppPlan {
    /// Layers offloaded to the GPUs (`--n-gpu-layers`).
    pub gpu_layers: u32,
    /// Layers of the model.
    pub total_layers: u32,
    /// KV-cache type for `--cache-type-k` and `--cache-type-v`.
    pub kv_cache_type: KvCacheType,
}

/// Memory needed and usable, in MiB, per GPU of the plan.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MemoryEstimate {
    /// Weights on each GPU.
    pub weights_mib: u64,
    /// KV cache on each GPU.
    pub kv_cache_mib: u64,
    /// Activations and runtime overhead on each GPU.
    pub overhead_mib: u64,
    /// Served LoRA adapters on each GPU (`plan.adapters`); 0 without.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub adapters_mib: u64,
    /// Total needed on each GPU.
    pub needed_per_gpu_mib: u64,
    /// What NVML reports per GPU.
    pub vram_per_gpu_mib: u64,
    /// Usable per GPU: VRAM less the tier's buffer, capped by the memory fraction.
    pub usable_per_gpu_mib: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}
