//! Sizing for transformer runtimes (transformers, vLLM, custom): quantization and GPU count
//! (docs/planning.md). Quality: full precision on more GPUs before quantizing. Economy: fewest GPUs
//! first, quantizing before adding GPUs.
use vramfit_api::labels::MAX_GPUS_PER_NODE;
use vramfit_api::{Dtype, Fallback, MemoryEstimate, Preference, Quantization, Runtime};

use crate::adapters;
use crate::error::{NoEightBitUnderVllm, PlanError, SizeOverflow};
use crate::job_input::JobInput;
use crate::memory::{self, TransformerNeed};
use crate::node_class::NodeClass;
use crate::plan_common::gib;
use crate::runtime_vllm;

/// How a transformer job fits a class.
#[derive(Clone, Debug, PartialEq)]
pub struct TransformerSizing {
    /// GPUs taken.
    pub gpu_count: u32,
    /// Quantization.
    pub quantization: Quantization,
    /// Memory per GPU.
    pub memory: MemoryEstimate,
    /// Why.
    pub reasons: Vec<String>,
}

/// The GPU counts a job may take on a class after step-downs, or why none.
pub fn gpu_range(
    job: &JobInput,
    class: &NodeClass,
    fallback: &Fallback,
) -> Result<(u32, u32), PlanError> {
    let lo = job.min_gpus.max(fallback.min_gpus.unwrap_or(0));
    // No node has more GPUs than the labels admit: a class or job beyond that (no schema
    // allows one) is not searched GPU by GPU up to u32::MAX.
    let hi = job
        .max_gpus
        .min(class.max_gpus_per_pod())
        .min(MAX_GPUS_PER_NODE);
    if lo > hi {
        return Err(PlanError::TooFewGpusAfterStepDowns {
            needed: lo,
            limit: class.pod_gpu_limit(),
        });
    }
    Ok((lo, hi))
}

/// Sizes a transformer job on a class: the first (quantization, GPU count) that fits, in the
/// job's preference order.
pub fn size(
    job: &JobInput,
    class: &NodeClass,
    fallback: &Fallback,
    dtype: Dtype,
) -> Result<TransformerSizing, PlanError> {
    let (lo, hi) = gpu_range(job, class, fallback)?;
    let mut reasons = Vec::new();
    let mut refused = None;
    let quantizations: Vec<Quantization> = job
        .quantizations
        .iter()
        .copied()
        .filter(|q| fallback.min_quantization.is_none_or(|min| *q >= min))
        .filter(|&q| match runtime_level(job, class, q) {
            Ok(()) => true,
            Err(why) => {
                reasons.push(why.to_string());
                refused = Some(why);
                false
            }
        })
        .collect();
    let Some(&most_compact) = quantizations.last() else {
        return Err(match refused {
            Some(why) => PlanError::QuantizationUnsupported(why),
            None => PlanError::NoQuantizationLeft,
        });
    };
    let usable = usable_per_gpu_mib(job, class);
    let need =
        |q, n| memory::transformer_need(&job.model, q, job.tokens(), job.prefill_tokens(), n);
    // Served LoRA adapters: vLLM's buffers (sized by its tensor parallel) or their weights,
    // on each GPU beside the model.
    let adapters = |n| adapters::budget::per_gpu_mib(job, n);
    // A size past 64 bits does not fit anywhere.
    let fits = |q, n| {
        need(q, n).is_ok_and(|need| need.per_gpu_mib().saturating_add(adapters(n)) <= usable)
    };

    let counts: Vec<u32> = (lo..=hi).filter(|&n| splits_evenly(job, n)).collect();
    let candidates: Vec<(Quantization, u32)> = match job.preference {
        Preference::Quality => quantizations
            .iter()
            .flat_map(|&q| counts.iter().map(move |&n| (q, n)))
            .collect(),
        Preference::Economy => counts
            .iter()
            .flat_map(|&n| quantizations.iter().map(move |&q| (q, n)))
            .collect(),
    };
    let Some(&(quantization, gpu_count)) = candidates.iter().find(|&&(q, n)| fits(q, n)) else {
        let refusal = PlanError::DoesNotFit {
            needed_per_gpu_mib: need(most_compact, hi)?
                .per_gpu_mib()
                .saturating_add(adapters(hi)),
            usable_per_gpu_mib: usable,
            quantization: most_compact,
            gpus: hi,
            gpu: class.describe_gpu(),
        };
        return Err(match adapters::budget::need(job, hi) {
            Some(a) => PlanError::AdaptersDoNotFit {
                refusal: Box::new(refusal),
                count: a.count,
                adapters_mib: a.per_gpu_mib,
            },
            None => refusal,
        });
    };

    let chosen = need(quantization, gpu_count)?;
    reasons.push(quantization_reason(
        job,
        class,
        fallback,
        dtype,
        quantization,
        gpu_count,
        &|q, n| need(q, n).map(|need| need.per_gpu_mib().saturating_add(adapters(n))),
    ));
    reasons.push(gpu_count_reason(job, fallback, gpu_count, lo));
    let adapters_mib = adapters(gpu_count);
    reasons.push(format!(
        "memory: {} per GPU needed (weights {}, KV cache {}, overhead {}{}), {} usable of {} ({})",
        gib(chosen.per_gpu_mib().saturating_add(adapters_mib)),
        gib(chosen.weights_mib),
        gib(chosen.kv_cache_mib),
        gib(chosen.overhead_mib),
        if adapters_mib > 0 {
            format!(
                ", LoRA adapters {}",
                crate::error::adapters_share(adapters_mib)
            )
        } else {
            String::new()
        },
        gib(usable),
        gib(class.memory_mib),
        crate::plan_common::kept_free(class, usable)
    ));
    Ok(TransformerSizing {
        gpu_count,
        quantization,
        memory: estimate(chosen, adapters_mib, class, usable),
        reasons,
    })
}

/// Whether the runtime can run quantization level `q` on the class: vLLM has no in-flight
/// 8-bit below compute capability 8.0.
fn runtime_level(
    job: &JobInput,
    class: &NodeClass,
    q: Quantization,
) -> Result<(), NoEightBitUnderVllm> {
    if job.runtime == Runtime::Vllm && q == Quantization::Int8 {
        runtime_vllm::eight_bit(class.capability)?;
    }
    Ok(())
}

/// Memory a plan may fill per GPU: under vLLM, exactly the whole-percent share passed as
/// `--gpu-memory-utilization`.
fn usable_per_gpu_mib(job: &JobInput, class: &NodeClass) -> u64 {
    match job.runtime {
        Runtime::Vllm => memory::percent_of(class.memory_mib, class.usable_percent()),
        _ => class.usable_per_gpu_mib(),
    }
}

/// vLLM's tensor parallelism splits attention and KV heads evenly across GPUs: the GPUs of
/// the pod, or in a group the GPUs of one node (the pipeline spans the nodes).
fn splits_evenly(job: &JobInput, gpus: u32) -> bool {
    let tp = job.group_node_gpus.unwrap_or(gpus);
    job.runtime != Runtime::Vllm || runtime_vllm::splits_heads(&job.model, tp)
}

fn quantization_reason(
    job: &JobInput,
    class: &NodeClass,
    fallback: &Fallback,
    dtype: Dtype,
    chosen: Quantization,
    gpus: u32,
    need_mib: &dyn Fn(Quantization, u32) -> Result<u64, SizeOverflow>,
) -> String {
    // Per GPU, with the adapters' share: what decides the level.
    let needed = |q, n| need_mib(q, n).map_or_else(|e| format!("over 16 EiB ({})", e.what), gib);
    let usable = gib(usable_per_gpu_mib(job, class));
    let model = class.describe_gpu();
    if let (Quantization::None, Some(pre)) = (chosen, job.model.pre_quantized) {
        return format!(
            "no in-flight quantization: the {} checkpoint's {}-bit weights as stored ({} bytes{}); {} activations need {} per GPU on {gpus}×{model}, {usable} usable",
            pre.method.as_str(),
            pre.weight_bits,
            memory::weights_bytes(&job.model, chosen).unwrap_or(u64::MAX),
            if job.model.weight_bytes.is_some() {
                ", read from the safetensors headers"
            } else {
                ", estimated from the parameters"
            },
            dtype.as_str(),
            needed(Quantization::None, gpus)
        );
    }
    if chosen == Quantization::None {
        return format!(
            "no quantization: {} needs {} per GPU on {gpus}×{model}, {usable} usable",
            dtype.as_str(),
            needed(Quantization::None, gpus)
        );
    }
    let label = match (chosen, job.runtime) {
        (Quantization::Int8, Runtime::Vllm) => format!(
            "8-bit as {}",
            runtime_vllm::eight_bit(class.capability).unwrap_or_default()
        ),
        (Quantization::Int8, _) => "8-bit".to_string(),
        (_, Runtime::Vllm) => "4-bit (nf4, in-flight bitsandbytes)".to_string(),
        _ => "4-bit (nf4)".to_string(),
    };
    if fallback.min_quantization == Some(chosen) {
        return format!("{label}: kept or stepped down after an out-of-memory failure");
    }
    if !job.quantizations.contains(&Quantization::None) {
        return format!("{label}: the job does not allow full precision");
    }
    let (compare_gpus, why) = match job.preference {
        Preference::Quality => (job.max_gpus.min(class.max_gpus_per_pod()), ""),
        Preference::Economy => (gpus, "; economy quantizes before adding GPUs"),
    };
    // What each better allowed level would need, e.g. "27.6 GiB in bfloat16, 15.8 GiB in 8-bit".
    let better: Vec<String> = job
        .quantizations
        .iter()
        .filter(|q| **q < chosen && runtime_level(job, class, **q).is_ok())
        .map(|&q| {
            let form = match q {
                Quantization::None => dtype.as_str(),
                Quantization::Int8 => "8-bit",
                Quantization::Nf4 => "nf4",
            };
            format!("{} in {form}", needed(q, compare_gpus))
        })
        .collect();
    format!(
        "{label}: needs {} on {compare_gpus}×{model}, {usable} usable per GPU{why}",
        better.join(", ")
    )
}

fn gpu_count_reason(job: &JobInput, fallback: &Fallback, gpus: u32, lo: u32) -> String {
    let plural = if gpus == 1 { "GPU" } else { "GPUs" };
    if fallback.min_gpus == Some(gpus) {
        return format!("{gpus} {plural}: no fewer than after the last out-of-memory failure");
    }
    if gpus == lo && lo == job.min_gpus && lo > 1 {
        return format!("{gpus} {plural}: the job's minimum");
    }
    format!("{gpus} {plural}: fewest that fit")
}

fn estimate(
    need: TransformerNeed,
    adapters_mib: u64,
    class: &NodeClass,
    usable_per_gpu_mib: u64,
) -> MemoryEstimate {
    MemoryEstimate {
        weights_mib: need.weights_mib,
        kv_cache_mib: need.kv_cache_mib,
        overhead_mib: need.overhead_mib,
        adapters_mib,
        needed_per_gpu_mib: need.per_gpu_mib().saturating_add(adapters_mib),
        vram_per_gpu_mib: class.memory_mib,
        usable_per_gpu_mib,
    }
}
