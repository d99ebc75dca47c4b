//! The ladder after an out-of-memory failure (docs/planning.md): fewer image tiles (straight
//! to the teams' conservative 12), then the next
//! quantization level or one more GPU (by preference), then flash attention off; for
//! llama.cpp, a smaller KV-cache type, one more GPU, then fewer offloaded layers. And the
//! ladder after garbage output: float16, then flash attention off.
use vramfit_api::{
    Dtype, DtypeRequest, Fallback, KvCacheType, Plan, Preference, Quantization, Runtime,
};

use vramfit_api::labels::ComputeCapability;

use crate::job_input::JobInput;
use crate::runtime_vllm;
use crate::tiles::CONSERVATIVE_TILES;

/// Most tenths of the llama.cpp budget a job may give up.
const MAX_OFFLOAD_STEPS: u32 = 5;

/// One step down from `plan` after an out-of-memory failure: the new fallback state and a
/// one-line description, or `None` when nothing is left to give up. `capability`: the
/// class's GPUs, where known (vLLM has no 8-bit below 8.0, so that step is skipped there).
pub fn next_step(
    job: &JobInput,
    plan: &Plan,
    fallback: &Fallback,
    max_gpus_per_pod: u32,
    capability: Option<ComputeCapability>,
) -> Option<(Fallback, String)> {
    // A group never shrinks back: its step-downs keep at least its nodes.
    let nodes_held = plan.group.as_ref().map(|g| g.nodes).or(fallback.min_nodes);
    if let Some(tuning) = &plan.tuning {
        // The batch split spans every GPU of a group.
        let whole = Plan {
            gpu_count: plan.total_gpus(),
            ..plan.clone()
        };
        return crate::tuning::fallback::next_step(job, &whole, tuning, fallback).map(
            |(next, why)| {
                let next = Fallback {
                    min_gpus: Some(plan.gpu_count),
                    min_nodes: nodes_held,
                    ..next
                };
                (next, why)
            },
        );
    }
    let max_gpus = job.max_gpus.min(max_gpus_per_pod);
    // Every step keeps what the failed plan already gave up (never fewer GPUs or nodes, never
    // less quantization), so memory per GPU only goes down.
    let held = Fallback {
        min_gpus: Some(plan.gpu_count),
        min_quantization: Some(plan.quantization),
        min_nodes: nodes_held,
        ..fallback.clone()
    };
    let more_gpus = if plan.gpu_count < max_gpus {
        let n = plan.gpu_count.saturating_add(1);
        Some((
            Fallback {
                min_gpus: Some(n),
                ..held.clone()
            },
            format!("one more GPU: {} → {n}", plan.gpu_count),
        ))
    } else {
        more_nodes(job, plan, &held)
    };
    if job.runtime == Runtime::Llamacpp {
        return llamacpp_step(job, plan, &held, more_gpus);
    }

    let tiles = plan
        .max_tiles
        .filter(|&t| fallback.tile_steps == 0 && t > CONSERVATIVE_TILES);
    if let Some(t) = tiles {
        let next = Fallback {
            tile_steps: 1,
            ..fallback.clone()
        };
        return Some((
            next,
            format!(
                "fewer image tiles: MAX_TILES {t} → {}",
                crate::tiles::rolled_back(t, 1)
            ),
        ));
    }
    let quantize = next_quantization(job, plan.quantization, capability).map(|q| {
        (
            Fallback {
                min_quantization: Some(q),
                ..held.clone()
            },
            format!(
                "quantization {} → {}",
                plan.quantization.as_str(),
                q.as_str()
            ),
        )
    });
    let (first, second) = match job.preference {
        Preference::Quality => (more_gpus, quantize),
        Preference::Economy => (quantize, more_gpus),
    };
    let resize = first.or(second);
    let resized_before = fallback.min_gpus.is_some() || fallback.min_quantization.is_some();
    let fallback = &held;
    // Flash attention goes off once a resize was tried, before further resizes.
    if plan.flash_attention && (resized_before || resize.is_none()) {
        let next = Fallback {
            flash_attention_off: true,
            ..fallback.clone()
        };
        return Some((next, "flash attention off".to_string()));
    }
    resize
}

/// The step after the workload's output check found garbage (docs/planning.md): float16
/// instead of bfloat16 (unless the job pins bfloat16; llama.cpp has no dtype to change), then
/// flash attention off (for llama.cpp only while the KV cache is not quantized, which needs
/// it). `None`: nothing is left to change, the job fails with the check's numbers.
pub fn next_after_bad_output(
    job: &JobInput,
    plan: &Plan,
    fallback: &Fallback,
) -> Option<(Fallback, String)> {
    let pytorch = job.runtime != Runtime::Llamacpp;
    if pytorch && plan.dtype == Dtype::Bfloat16 && job.dtype != DtypeRequest::Bfloat16 {
        let next = Fallback {
            float16: true,
            ..fallback.clone()
        };
        return Some((next, "float16 instead of bfloat16".to_string()));
    }
    let kv_quantized = plan
        .llama_cpp
        .is_some_and(|l| l.kv_cache_type.is_quantized());
    if plan.flash_attention && !kv_quantized {
        let next = Fallback {
            flash_attention_off: true,
            ..fallback.clone()
        };
        return Some((next, "flash attention off".to_string()));
    }
    None
}

/// Where a pod has every GPU it may take, one more node plays the role of one more GPU: for a
/// group, or a one-node plan of a job that may span nodes, up to `gpus.maxNodes` (a runtime
/// with no engine across nodes never gets one).
fn more_nodes(job: &JobInput, plan: &Plan, held: &Fallback) -> Option<(Fallback, String)> {
    let nodes = plan.nodes();
    let groupable = crate::group::size::engine(job).is_some();
    (groupable && nodes < job.max_nodes).then(|| {
        let n = nodes.saturating_add(1);
        (
            Fallback {
                min_nodes: Some(n),
                ..held.clone()
            },
            format!("one more node: {nodes} → {n}"),
        )
    })
}

fn next_quantization(
    job: &JobInput,
    current: Quantization,
    capability: Option<ComputeCapability>,
) -> Option<Quantization> {
    let runs = |q: Quantization| {
        q != Quantization::Int8
            || job.runtime != Runtime::Vllm
            || capability.is_none_or(|cc| runtime_vllm::eight_bit(cc).is_ok())
    };
    job.quantizations
        .iter()
        .copied()
        .find(|&q| q > current && runs(q))
}

fn llamacpp_step(
    job: &JobInput,
    plan: &Plan,
    fallback: &Fallback,
    more_gpus: Option<(Fallback, String)>,
) -> Option<(Fallback, String)> {
    let current = plan.llama_cpp.map_or(KvCacheType::F16, |l| l.kv_cache_type);
    let smaller_kv = job
        .kv_cache_types
        .iter()
        .copied()
        .find(|t| *t > current && (plan.flash_attention || !t.is_quantized()))
        .map(|t| {
            (
                Fallback {
                    min_kv_cache_type: Some(t),
                    ..fallback.clone()
                },
                format!("KV cache {} → {}", current.as_str(), t.as_str()),
            )
        });
    let fewer_layers = (fallback.offload_steps < MAX_OFFLOAD_STEPS).then(|| {
        (
            Fallback {
                offload_steps: fallback.offload_steps.saturating_add(1),
                ..fallback.clone()
            },
            "offload budget 10% smaller (fewer GPU layers)".to_string(),
        )
    });
    smaller_kv.or(more_gpus).or(fewer_layers)
}
