//! The planner's entry point: a job on a node class → a [`Plan`] or why the class cannot run it.
use vramfit_api::{ClassRejection, Fallback, Plan, Quantization, Runtime};

use crate::error::PlanError;
use crate::job_input::JobInput;
use crate::node_class::NodeClass;
use crate::plan_common::{admission, common_settings, partition_notes};
use crate::{plan_llamacpp, plan_transformers};

/// Plans `job` on `class`, applying the step-downs in `fallback`.
pub fn plan_for_class(
    job: &JobInput,
    class: &NodeClass,
    fallback: &Fallback,
) -> Result<Plan, PlanError> {
    admission(job, class)?;
    let common = common_settings(job, class, fallback);
    let (partition_reason, partition_warning) = partition_notes(class);
    let mut reasons: Vec<String> = partition_reason.into_iter().collect();
    reasons.extend(common.reasons);
    let mut memory_fraction_percent = common.memory_fraction_percent;
    let (gpu_count, quantization, memory, llama_cpp, warnings) = match job.runtime {
        Runtime::Llamacpp => {
            let s = plan_llamacpp::size(job, class, fallback, common.flash_attention)?;
            reasons.extend(s.reasons);
            // No process fraction applies: the plan's share of VRAM is its budget.
            memory_fraction_percent = s.budget_percent;
            (
                s.gpu_count,
                Quantization::None,
                s.memory,
                Some(s.llama_cpp),
                s.warnings,
            )
        }
        Runtime::Transformers | Runtime::Vllm | Runtime::Custom => {
            let s = plan_transformers::size(job, class, fallback, common.dtype)?;
            reasons.extend(s.reasons);
            (s.gpu_count, s.quantization, s.memory, None, Vec::new())
        }
    };
    let mut warnings = warnings;
    warnings.extend(partition_warning);
    if job.shell_command && matches!(job.runtime, Runtime::Vllm | Runtime::Llamacpp) {
        warnings.push(format!(
            "command is a shell script: the flags vramfit appends to args do not reach {}; pass $VRAMFIT_RUNTIME_ARGS to it",
            if job.runtime == Runtime::Vllm { "vLLM" } else { "llama.cpp" }
        ));
    }
    if job.runtime == Runtime::Vllm
        && job.model.vision
        && !crate::runtime_vllm::takes_max_dynamic_patch(&job.model)
    {
        warnings.push(
            "vLLM takes no tile count for this model: MAX_TILES is only an env var here, and the fewer-tiles step changes nothing that runs"
                .to_string(),
        );
    }
    Ok(Plan {
        node_class: class.name.clone(),
        gpu_count,
        dtype: common.dtype,
        quantization,
        flash_attention: common.flash_attention,
        tf32: common.tf32,
        pytorch_cuda_alloc_conf: common.pytorch_cuda_alloc_conf,
        memory_fraction_percent,
        max_tiles: common.max_tiles,
        context_length: job.context_length,
        llama_cpp,
        memory,
        // Saturates: a price past u32 (no schema allows one) ranks last rather than wraps.
        hourly_price_cents: class
            .hourly_price_cents_per_gpu
            .unwrap_or(0)
            .saturating_mul(gpu_count),
        reasons,
        warnings,
    })
}

/// Plans `job` on every class, in the classes' order.
pub fn plan_all(
    job: &JobInput,
    classes: &[NodeClass],
    fallback: &Fallback,
) -> Vec<Result<Plan, ClassRejection>> {
    classes
        .iter()
        .map(|class| {
            plan_for_class(job, class, fallback).map_err(|why| ClassRejection {
                node_class: class.name.clone(),
                reason: why.to_string(),
            })
        })
        .collect()
}
