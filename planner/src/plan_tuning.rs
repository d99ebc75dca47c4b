//! A fine-tuning job on a class → a [`Plan`] whose `tuning` part holds the training choices
//! (docs/planning.md, "Fine-tuning"). The settings shared with inference (dtype, flash
//! attention, TF32, allocator, memory fraction) come from `plan_common`.
use vramfit_api::{Fallback, MemoryEstimate, Plan};

use crate::error::PlanError;
use crate::job_input::JobInput;
use crate::node_class::NodeClass;
use crate::plan_common::{common_settings, partition_notes};
use crate::tuning::{self, TuningInput};

/// Plans the tuning job `job` (its section `tuning`) on `class`, after admission.
pub fn plan(
    job: &JobInput,
    tuning: &TuningInput,
    class: &NodeClass,
    fallback: &Fallback,
) -> Result<Plan, PlanError> {
    let needs_bf16 = fallback.tuning.as_ref().is_some_and(|t| t.bfloat16);
    if needs_bf16 && !class.capability.supports_bf16() {
        return Err(PlanError::Bfloat16AfterDivergedLoss {
            capability: class.capability,
        });
    }
    let common = common_settings(job, class, fallback);
    let (partition_reason, partition_warning) = partition_notes(class);
    let sized = tuning::size(job, tuning, class, fallback, common.dtype, common.tf32)?;
    let mut reasons: Vec<String> = partition_reason.into_iter().collect();
    reasons.extend(common.reasons);
    reasons.extend(sized.reasons);
    let mut warnings = sized.warnings;
    warnings.extend(partition_warning);
    let m = sized.plan.memory;
    Ok(Plan {
        node_class: class.name.clone(),
        gpu_count: sized.gpu_count,
        dtype: common.dtype,
        quantization: sized.quantization,
        flash_attention: common.flash_attention,
        tf32: common.tf32,
        pytorch_cuda_alloc_conf: common.pytorch_cuda_alloc_conf,
        memory_fraction_percent: common.memory_fraction_percent,
        max_tiles: common.max_tiles,
        context_length: tuning.sequence_length,
        llama_cpp: None,
        concurrency: None,
        memory: MemoryEstimate {
            weights_mib: m.weights_mib,
            kv_cache_mib: 0,
            overhead_mib: m.needed_mib.saturating_sub(m.weights_mib),
            adapters_mib: 0,
            needed_per_gpu_mib: m.needed_mib,
            vram_per_gpu_mib: class.memory_mib,
            usable_per_gpu_mib: m.usable_mib,
        },
        hourly_price_cents: class
            .hourly_price_cents_per_gpu
            .unwrap_or(0)
            .saturating_mul(sized.gpu_count),
        reasons,
        warnings,
        tuning: Some(sized.plan),
        group: None,
        adapters: None,
    })
}
