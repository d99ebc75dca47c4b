//! Decisions shared by every runtime: whether a class may run the job at all, dtype,
//! flash attention, TF32, allocator settings, memory fraction, image tiles (docs/planning.md).
use vramfit_api::labels::ComputeCapability;
use vramfit_api::{Dtype, DtypeRequest, Fallback, Runtime};

use crate::error::PlanError;
use crate::job_input::JobInput;
use crate::node_class::{GpuUnit, NodeClass};
use crate::tiles;

/// Settings that do not depend on how the model is sized.
#[derive(Clone, Debug, PartialEq)]
pub struct CommonSettings {
    /// Compute dtype.
    pub dtype: Dtype,
    /// Flash attention.
    pub flash_attention: bool,
    /// TF32 matmul.
    pub tf32: bool,
    /// PYTORCH_CUDA_ALLOC_CONF.
    pub pytorch_cuda_alloc_conf: String,
    /// Memory fraction, percent.
    pub memory_fraction_percent: u32,
    /// MAX_TILES (vision models).
    pub max_tiles: Option<u32>,
    /// Why, one line each.
    pub reasons: Vec<String>,
}

/// Why a class may not take the job at all, before any sizing.
pub fn admission(job: &JobInput, class: &NodeClass) -> Result<(), PlanError> {
    if !class.allow_jobs {
        return Err(PlanError::JobsNotAllowed);
    }
    if job.classes.denied.iter().any(|c| c == &class.name) {
        return Err(PlanError::DeniedByJob);
    }
    if !job.classes.allowed.is_empty() && !job.classes.allowed.iter().any(|c| c == &class.name) {
        return Err(PlanError::NotAllowedByJob);
    }
    if let Some(allowed) = &class.allowed_toleration_keys
        && let Some(key) = job.toleration_keys.iter().find(|k| !allowed.contains(k))
    {
        return Err(PlanError::TolerationNotAllowed {
            key: key.clone(),
            allowed: allowed.clone(),
        });
    }
    if let (Some(allowed), Some(priority)) = (&class.allowed_priority_classes, &job.priority_class)
        && !allowed.contains(priority)
    {
        return Err(PlanError::PriorityClassNotAllowed {
            priority_class: priority.clone(),
            allowed: allowed.clone(),
        });
    }
    let cc = class.capability;
    if job.dtype == DtypeRequest::Bfloat16 && !cc.supports_bf16() {
        return Err(PlanError::Bfloat16Unsupported { capability: cc });
    }
    if job.min_gpus > class.max_gpus_per_pod() {
        return Err(PlanError::TooFewGpus {
            needed: job.min_gpus,
            limit: class.pod_gpu_limit(),
        });
    }
    Ok(())
}

/// What a pod really gets on a class that is not whole GPUs of one model, one line, and the
/// warning a shared GPU's plan carries.
pub fn partition_notes(class: &NodeClass) -> (Option<String>, Option<String>) {
    let model = class.describe_model();
    let cc = class.capability;
    let memory = gib(class.memory_mib);
    let reason = match &class.unit {
        GpuUnit::Whole if class.mixed => Some(format!(
            "mixed node: planned by its weakest GPU ({model}, compute capability {cc}, {memory})"
        )),
        GpuUnit::Whole => None,
        GpuUnit::MigSlice { profile } => Some(format!(
            "MIG slice {profile} of an {model}: {memory} per slice, the parent's compute capability {cc}; one slice per pod"
        )),
        GpuUnit::Shared { replicas, strategy } => Some(format!(
            "shared GPU: memory is shared, {memory} is one of {replicas} {strategy} replicas of an {model}"
        )),
    };
    let warning = match &class.unit {
        GpuUnit::Shared { strategy, .. } if strategy != "mps" => Some(format!(
            "{strategy} does not isolate GPU memory: another pod on the same GPU can take more than its share and run this one out of memory"
        )),
        _ => None,
    };
    (reason, warning)
}

/// Dtype, attention, allocator, fraction and tiles for a job on a class.
pub fn common_settings(job: &JobInput, class: &NodeClass, fallback: &Fallback) -> CommonSettings {
    let cc = class.capability;
    let mut reasons = job.notes.clone();
    // dtype, the allocator and the process memory fraction are PyTorch's: a llama.cpp server
    // reads none of them, so its plan does not explain them as if it did.
    let pytorch = crate::workload::reads_pytorch_settings(job.runtime);
    if !pytorch {
        reasons.push(
            "dtype, quantization, PYTORCH_CUDA_ALLOC_CONF and memory fraction: not used by llama.cpp (weights keep the GGUF file's formats; its budget is a share of VRAM, below)"
                .to_string(),
        );
    }
    let torch_reason = |reasons: &mut Vec<String>, reason: String| {
        if pytorch {
            reasons.push(reason);
        }
    };
    let dtype = match job.dtype {
        DtypeRequest::Bfloat16 => {
            torch_reason(
                &mut reasons,
                format!("bfloat16: pinned by the job (compute capability {cc} ≥ 8.0)"),
            );
            Dtype::Bfloat16
        }
        DtypeRequest::Float16 => {
            torch_reason(&mut reasons, "float16: pinned by the job".to_string());
            Dtype::Float16
        }
        DtypeRequest::Auto if cc.supports_bf16() && fallback.float16 => {
            torch_reason(
                &mut reasons,
                "float16: bfloat16 answered garbage here (the workload's output check)".to_string(),
            );
            Dtype::Float16
        }
        DtypeRequest::Auto if cc.supports_bf16() => {
            torch_reason(
                &mut reasons,
                format!("bfloat16: compute capability {cc} ≥ 8.0"),
            );
            Dtype::Bfloat16
        }
        DtypeRequest::Auto => {
            torch_reason(
                &mut reasons,
                format!("float16: compute capability {cc} < 8.0 (bfloat16 would be emulated)"),
            );
            Dtype::Float16
        }
    };

    let flash_attention = if !flash_attention_kernels(job.runtime, cc) {
        reasons.push(format!(
            "flash attention off: compute capability {cc} < {}{}",
            flash_attention_min_capability(job.runtime),
            if job.runtime == Runtime::Llamacpp {
                " (llama.cpp's CUDA kernels)"
            } else {
                " (flash-attn kernels)"
            }
        ));
        false
    } else if job.overrides.flash_attention == Some(false) {
        reasons.push("flash attention off: turned off by the job".to_string());
        false
    } else if fallback.flash_attention_off {
        reasons.push("flash attention off: a step down after a failed attempt".to_string());
        false
    } else {
        reasons.push(format!(
            "flash attention on: compute capability {cc} ≥ {}{}",
            flash_attention_min_capability(job.runtime),
            if job.runtime == Runtime::Llamacpp {
                " (llama.cpp's own kernels)"
            } else {
                ""
            }
        ));
        true
    };
    let tf32 = cc.supports_bf16();

    let pytorch_cuda_alloc_conf = match &job.overrides.pytorch_cuda_alloc_conf {
        Some(conf) => {
            torch_reason(
                &mut reasons,
                format!("PYTORCH_CUDA_ALLOC_CONF {conf}: set by the job"),
            );
            conf.clone()
        }
        None => {
            torch_reason(
                &mut reasons,
                format!(
                    "PYTORCH_CUDA_ALLOC_CONF {}: {} GPUs",
                    class.pytorch_cuda_alloc_conf,
                    class.architecture().as_str()
                ),
            );
            class.pytorch_cuda_alloc_conf.clone()
        }
    };
    // vLLM takes one share of VRAM for weights, activations and its KV cache: the share the
    // plan budgets (VRAM less the tier's buffer), not the PyTorch process fraction.
    let memory_fraction_percent = if job.runtime == Runtime::Vllm {
        let percent = class.usable_percent();
        torch_reason(
            &mut reasons,
            format!(
                "memory fraction {:.2} (--gpu-memory-utilization): the share of VRAM the plan budgets, {}",
                f64::from(percent) / 100.0,
                kept_free(class, crate::memory::percent_of(class.memory_mib, percent))
            ),
        );
        percent
    } else {
        torch_reason(
            &mut reasons,
            format!(
                "memory fraction {:.2}: tier {}",
                f64::from(class.memory_fraction_percent) / 100.0,
                class.tier.as_str()
            ),
        );
        class.memory_fraction_percent
    };

    let max_tiles = job.model.vision.then(|| {
        let (base, why) = match (job.overrides.max_tiles, class.max_tiles) {
            (Some(t), _) => (t, "set by the job".to_string()),
            (None, Some(t)) => (t, "set by the node class".to_string()),
            (None, None) => (
                tiles::max_tiles_for_vram(class.memory_mib),
                format!("{} per GPU", gib(class.memory_mib)),
            ),
        };
        let tiles = tiles::rolled_back(base, fallback.tile_steps);
        if tiles < base {
            reasons.push(format!(
                "MAX_TILES {tiles}: rolled back from {base} after out-of-memory (the conservative setting)"
            ));
        } else {
            reasons.push(format!("MAX_TILES {tiles}: {why}"));
        }
        tiles
    });

    CommonSettings {
        dtype,
        flash_attention,
        tf32,
        pytorch_cuda_alloc_conf,
        memory_fraction_percent,
        max_tiles,
        reasons,
    }
}

/// Lowest compute capability with flash-attention kernels for `runtime`: the flash-attn
/// kernels of transformers and vLLM need Ampere; llama.cpp ships its own (an FP32 vector
/// kernel among them) for every CUDA GPU it supports, Pascal included (docs/planning.md).
pub fn flash_attention_min_capability(runtime: Runtime) -> ComputeCapability {
    match runtime {
        Runtime::Llamacpp => ComputeCapability::new(6, 0),
        Runtime::Transformers | Runtime::Vllm | Runtime::Custom => ComputeCapability::new(8, 0),
    }
}

fn flash_attention_kernels(runtime: Runtime, cc: ComputeCapability) -> bool {
    cc >= flash_attention_min_capability(runtime)
}

/// MiB as `12.3 GiB`.
/// What a plan keeps free on each GPU of `class` when it budgets `usable_mib` per GPU, in
/// words: one figure, VRAM less the usable memory, wherever a plan names it. Where that is
/// more than the class's buffer, the words say why (vLLM's `--gpu-memory-utilization` takes a
/// whole percent, rounded down; a process memory fraction below VRAM less the buffer).
pub fn kept_free(class: &NodeClass, usable_mib: u64) -> String {
    let kept = class.memory_mib.saturating_sub(usable_mib);
    let buffer = class.memory_buffer_mib;
    // Within the figures' rounding (0.1 GiB) the buffer is what stays free.
    if kept <= buffer || gib(kept) == gib(buffer) {
        return format!("{} kept free: the buffer", gib(kept));
    }
    let whole_percent =
        crate::memory::percent_of(class.memory_mib, class.usable_percent()) == usable_mib;
    let why = if whole_percent && class.usable_per_gpu_mib() != usable_mib {
        "rounded to a whole percent of VRAM"
    } else {
        "and the memory fraction's share"
    };
    format!("{} kept free: the {} buffer, {why}", gib(kept), gib(buffer))
}

pub fn gib(mib: u64) -> String {
    format!("{:.1} GiB", mib as f64 / 1024.0)
}
