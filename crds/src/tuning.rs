//! Fine-tuning (`spec.tuning` of an InferenceJob): what a team asks for, the plan vramfit
//! makes for it on a class (`status.plan.tuning`), and the step-down state after a failed
//! attempt (`status.fallback.tuning`). A tuning job is a batch job: one pod per attempt, run
//! to its end, on the same pipeline as inference (docs/tuning.md).
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Sequence length when the job sets none.
pub const DEFAULT_SEQUENCE_LENGTH: u32 = 2048;
/// Effective batch (sequences per optimizer step) when the job sets none.
pub const DEFAULT_EFFECTIVE_BATCH: u32 = 16;
/// LoRA rank when the job sets none.
pub const DEFAULT_LORA_RANK: u32 = 16;
/// LoRA dropout when the job sets none, in percent.
pub const DEFAULT_LORA_DROPOUT_PERCENT: u32 = 5;
/// `targetModules` value that adapts every linear layer of the decoder blocks (peft's own
/// spelling; the output layer is left out).
pub const ALL_LINEAR: &str = "all-linear";
/// Where the data volume is mounted, read-only (`VRAMFIT_DATA_DIR`).
pub const DATA_MOUNT_PATH: &str = "/vramfit/data";
/// Where the output volume is mounted (`VRAMFIT_OUTPUT_DIR`).
pub const OUTPUT_MOUNT_PATH: &str = "/vramfit/output";

/// Fine-tune the model instead of running it: vramfit plans the method, micro-batch,
/// gradient checkpointing, accumulation, optimizer, dtype and GPU count for each class.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("self.method != 'full' || !has(self.lora)").message("tuning.lora is for methods lora, qlora and auto, not full"))]
#[x_kube(validation = Rule::new("!has(self.dataVolume) || !has(self.outputVolume) || self.dataVolume != self.outputVolume").message("tuning.dataVolume and tuning.outputVolume must differ: the data is mounted read-only"))]
#[serde(rename_all = "camelCase")]
pub struct TuningSpec {
    /// `auto` (default): the first method that fits, full → lora → qlora under preference
    /// `quality`, qlora → lora → full under `economy`. `qlora`: LoRA adapters on a 4-bit NF4
    /// base (double quantization). `lora`: LoRA adapters on a 16-bit base. `full`: every
    /// parameter trained (AdamW, fp32 master weights).
    #[serde(default)]
    pub method: TuningMethodRequest,
    /// Tokens per training sequence, 64 to 131,072 (default 2048, capped at the model's
    /// context limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 64, max = 131072))]
    pub sequence_length: Option<u32>,
    /// Sequences per optimizer step over all GPUs (micro-batch × gradient accumulation ×
    /// data-parallel GPUs), 1 to 65,536 (default 16). The plan keeps at least this many:
    /// accumulation is rounded up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65536))]
    pub effective_batch: Option<u32>,
    /// LoRA adapters (methods `lora`, `qlora` and `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraSpec>,
    /// Name of a volume of `spec.pod.volumes` with the training data, mounted read-only at
    /// `/vramfit/data` (`VRAMFIT_DATA_DIR`). The volume itself is the pod's: the same
    /// admission rules apply to it as to any other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub data_volume: Option<String>,
    /// Name of a volume of `spec.pod.volumes` for the adapters or checkpoints, mounted at
    /// `/vramfit/output` (`VRAMFIT_OUTPUT_DIR`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub output_volume: Option<String>,
}

/// The method a job asks for.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TuningMethodRequest {
    /// The first that fits, in the job's preference order.
    #[default]
    Auto,
    /// Every parameter trained.
    Full,
    /// LoRA adapters on a 16-bit base.
    Lora,
    /// LoRA adapters on a 4-bit NF4 base.
    Qlora,
}

/// A fine-tuning method, in quality order (the order vramfit steps down in).
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum TuningMethod {
    /// Every parameter trained: 16-bit weights and gradients, fp32 master weights, AdamW
    /// states.
    Full,
    /// LoRA adapters on a 16-bit base.
    Lora,
    /// LoRA adapters on a 4-bit NF4 base with double quantization.
    Qlora,
}

impl TuningMethod {
    /// Every method, best quality first.
    pub const LADDER: [TuningMethod; 3] =
        [TuningMethod::Full, TuningMethod::Lora, TuningMethod::Qlora];

    /// The name in status, env and manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            TuningMethod::Full => "full",
            TuningMethod::Lora => "lora",
            TuningMethod::Qlora => "qlora",
        }
    }

    /// Whether the method trains LoRA adapters.
    pub fn is_lora(self) -> bool {
        self != TuningMethod::Full
    }
}

/// LoRA adapter settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LoraSpec {
    /// Adapter rank, 1 to 1024 (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub rank: Option<u32>,
    /// LoRA alpha (scaling = alpha / rank), 1 to 4096 (default 2 × rank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub alpha: Option<u32>,
    /// Dropout on the adapters' input, in percent, 0 to 50 (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 50))]
    pub dropout_percent: Option<u32>,
    /// Modules to adapt, by name as the model's code names them (`q_proj`, `v_proj`,
    /// `gate_proj`, …), or `all-linear` (default): every linear layer of the decoder blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), inner(length(min = 1, max = 64)))]
    pub target_modules: Option<Vec<String>>,
}

/// The optimizer a plan trains with (the value of `TrainingArguments.optim`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Optimizer {
    /// PyTorch's AdamW: two fp32 states, 8 bytes per trained parameter.
    #[serde(rename = "adamw_torch")]
    AdamW,
    /// bitsandbytes' paged 8-bit AdamW: about 2 bytes per trained parameter, paged to host
    /// memory under pressure.
    #[serde(rename = "paged_adamw_8bit")]
    PagedAdamW8bit,
}

impl Optimizer {
    /// `TrainingArguments.optim`.
    pub fn as_str(self) -> &'static str {
        match self {
            Optimizer::AdamW => "adamw_torch",
            Optimizer::PagedAdamW8bit => "paged_adamw_8bit",
        }
    }
}

/// How the plan's GPUs share the work.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Parallelism {
    /// One GPU.
    Single,
    /// Data parallel (DDP): every GPU holds the whole model and takes its own micro-batches.
    Ddp,
    /// Fully sharded data parallel (FSDP): weights, gradients and optimizer states sharded
    /// across the GPUs.
    Fsdp,
}

impl Parallelism {
    /// The name in status and env.
    pub fn as_str(self) -> &'static str {
        match self {
            Parallelism::Single => "single",
            Parallelism::Ddp => "ddp",
            Parallelism::Fsdp => "fsdp",
        }
    }
}

/// The fine-tuning part of a plan.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TuningPlan {
    /// The method.
    pub method: TuningMethod,
    /// Sequences per GPU per forward/backward pass.
    pub micro_batch: u32,
    /// Micro-batches per optimizer step on each GPU.
    pub gradient_accumulation: u32,
    /// `micro-batch×accumulation`, as `kubectl get` shows it (`7×5`).
    pub batch: String,
    /// Sequences per optimizer step over all GPUs: micro-batch × accumulation × GPUs (at
    /// least what the job asked for).
    pub effective_batch: u32,
    /// Gradient checkpointing (activations recomputed in the backward pass).
    pub gradient_checkpointing: bool,
    /// `TrainingArguments.optim`.
    pub optimizer: Optimizer,
    /// How the GPUs share the work.
    pub parallelism: Parallelism,
    /// Tokens per sequence.
    pub sequence_length: u32,
    /// The adapters (lora and qlora).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraPlan>,
    /// Parameters the optimizer updates.
    pub trainable_parameters: u64,
    /// Memory per GPU, part by part.
    pub memory: TrainingMemory,
}

/// LoRA settings of a plan.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LoraPlan {
    /// Rank.
    pub rank: u32,
    /// Alpha.
    pub alpha: u32,
    /// Dropout, percent.
    pub dropout_percent: u32,
    /// Target modules (`all-linear` or names).
    pub target_modules: Vec<String>,
}

/// Memory of a training plan per GPU, in MiB, part by part (docs/planning.md).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TrainingMemory {
    /// The base weights at the method's precision (sharded under FSDP).
    pub weights_mib: u64,
    /// LoRA adapters with their gradients; full: the gradients and fp32 master weights.
    pub trainable_mib: u64,
    /// Optimizer states.
    pub optimizer_mib: u64,
    /// Activations kept for the backward pass (micro-batch × sequence).
    pub activations_mib: u64,
    /// The logits at the loss (micro-batch × sequence × vocabulary).
    pub logits_mib: u64,
    /// CUDA context, cuBLAS workspaces, allocator slack.
    pub runtime_mib: u64,
    /// The sum of the parts above.
    pub needed_mib: u64,
    /// The tier's buffer kept free.
    pub buffer_mib: u64,
    /// Usable: VRAM less the buffer, capped by the memory fraction.
    pub usable_mib: u64,
}

/// Steps a tuning job took down after failed attempts; the planner applies them.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TuningFallback {
    /// Micro-batch at most this (halved after each out-of-memory failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_micro_batch: Option<u32>,
    /// Gradient checkpointing kept on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gradient_checkpointing: bool,
    /// No method better than this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_method: Option<TuningMethod>,
    /// bfloat16 required: the loss diverged in float16 on a card without bfloat16.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bfloat16: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_order_by_quality_and_spell_as_in_manifests() {
        assert!(TuningMethod::Full < TuningMethod::Lora);
        assert!(TuningMethod::Lora < TuningMethod::Qlora);
        for method in TuningMethod::LADDER {
            assert_eq!(
                serde_json::to_string(&method).unwrap(),
                format!("\"{}\"", method.as_str())
            );
        }
        assert_eq!(
            serde_json::to_string(&Optimizer::PagedAdamW8bit).unwrap(),
            "\"paged_adamw_8bit\""
        );
    }

    #[test]
    fn an_empty_tuning_section_takes_the_defaults() {
        let spec: TuningSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(spec.method, TuningMethodRequest::Auto);
        assert_eq!(spec.sequence_length, None);
        assert_eq!(
            serde_json::to_value(TuningFallback::default()).unwrap(),
            serde_json::json!({})
        );
    }
}
