//! The planner's entry point: a job on a node class → a [`Plan`] or why the class cannot run it.
use vramfit_api::{ClassRejection, Dtype, DtypeRequest, Fallback, Plan, Quantization, Runtime};

use crate::error::PlanError;
use crate::job_input::JobInput;
use crate::node_class::NodeClass;
use crate::plan_common::{admission, common_settings, partition_notes};
use crate::{plan_llamacpp, plan_transformers, prequantized};

/// Plans `job` on `class`, applying the step-downs in `fallback`: on one node, or where the
/// job allows more nodes (`gpus.maxNodes`) and one node does not hold it, on a group of
/// nodes of the class (docs/planning.md, "Plans that span nodes").
pub fn plan_for_class(
    job: &JobInput,
    class: &NodeClass,
    fallback: &Fallback,
) -> Result<Plan, PlanError> {
    crate::group::size::plan(job, class, fallback)
}

/// Plans `job` on one node of `class` (a group's sizing calls it with a class whose node
/// has every GPU of the group).
pub(crate) fn plan_one_node(
    job: &JobInput,
    class: &NodeClass,
    fallback: &Fallback,
) -> Result<Plan, PlanError> {
    admission(job, class)?;
    if let Some(tuning) = &job.tuning {
        return crate::plan_tuning::plan(job, tuning, class, fallback);
    }
    let mut common = common_settings(job, class, fallback);
    let (partition_reason, partition_warning) = partition_notes(class);
    let mut reasons: Vec<String> = partition_reason.into_iter().collect();
    reasons.extend(std::mem::take(&mut common.reasons));
    reasons.extend(pre_quantized_kernel(job, class, &mut common.dtype)?);
    reasons.extend(experts_reason(job));
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
    warnings.extend(
        job.serve
            .as_ref()
            .and_then(crate::serving::ServeInput::unresolved_adapters),
    );
    let adapters = crate::adapters::budget::need(job, gpu_count);
    if let Some(a) = &adapters {
        reasons.push(crate::adapters::budget::reason(job, a));
    }
    // vLLM's LoRA buffers come out of the memory its KV cache would take.
    let concurrency = job.serve.as_ref().map(|_| {
        crate::concurrency::served(
            job,
            quantization,
            gpu_count,
            memory
                .usable_per_gpu_mib
                .saturating_sub(memory.adapters_mib),
        )
    });
    if let Some(n) = concurrency {
        reasons.push(crate::concurrency::reason(job, n));
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
        concurrency,
        memory,
        // Saturates: a price past u32 (no schema allows one) ranks last rather than wraps.
        hourly_price_cents: class
            .hourly_price_cents_per_gpu
            .unwrap_or(0)
            .saturating_mul(gpu_count),
        reasons,
        warnings,
        tuning: None,
        group: None,
        adapters: adapters.map(|a| a.plan()),
    })
}

/// The kernel a pre-quantized checkpoint runs with on the class, or why the class is below
/// the scheme's floor; a kernel that takes float16 only makes the dtype float16.
fn pre_quantized_kernel(
    job: &JobInput,
    class: &NodeClass,
    dtype: &mut Dtype,
) -> Result<Vec<String>, PlanError> {
    let Some(q) = job
        .model
        .pre_quantized
        .filter(|_| job.runtime != Runtime::Llamacpp)
    else {
        return Ok(Vec::new());
    };
    let cc = class.capability;
    let scheme = prequantized::Scheme::of(&q).describe();
    let Some(kernel) = prequantized::kernel(job.runtime, &q, cc)? else {
        return Ok(vec![format!(
            "{scheme} checkpoint: {} checks no compute capability for it",
            crate::error::runtime_label(job.runtime)
        )]);
    };
    let mut reasons = vec![format!(
        "kernel: {} for the {scheme} checkpoint (compute capability {cc} ≥ {})",
        kernel.kernel, kernel.min
    )];
    if kernel.float16_only && *dtype == Dtype::Bfloat16 {
        if job.dtype == DtypeRequest::Bfloat16 {
            return Err(PlanError::PinnedBfloat16Float16Kernel {
                kernel: kernel.kernel,
                capability: cc,
            });
        }
        *dtype = Dtype::Float16;
        reasons.push(format!(
            "float16: {} takes float16 activations only",
            kernel.kernel
        ));
    }
    Ok(reasons)
}

/// What a mixture-of-experts model holds in memory and what runs per token.
fn experts_reason(job: &JobInput) -> Option<String> {
    let experts = job.model.experts?;
    let active = job.model.active_parameters.map_or(String::new(), |a| {
        format!("; {:.1}B active per token (speed)", a as f64 / 1e9)
    });
    Some(format!(
        "mixture of experts: all {experts} experts of each MoE layer in memory ({:.1}B parameters){active}",
        job.model.parameters as f64 / 1e9
    ))
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
