//! A vLLM group: tensor parallel over the GPUs of each node, pipeline parallel across the
//! nodes (one pipeline stage per node), on a Ray cluster whose head is the leader.
use vramfit_api::group::GroupEngine;

use crate::error::PlanError;
use crate::group::size::Nodes;
use crate::plan_common::gib;
use crate::{memory, runtime_vllm};

/// Whether vLLM can run the job as `n` pipeline stages of the class's GPUs: each stage needs a
/// layer (`--pipeline-parallel-size` ≤ layers) and the tensor parallel size (the GPUs of one
/// node) must split the attention and KV heads. Other engines take any `n`.
pub fn admits(nodes: &Nodes, n: u32) -> bool {
    nodes.engine != GroupEngine::VllmRay
        || (n <= nodes.job.model.layers
            && runtime_vllm::splits_heads(&nodes.job.model, nodes.gpus()))
}

/// Why [`admits`] refuses `n`.
pub fn why_not(nodes: &Nodes, n: u32) -> PlanError {
    let model = &nodes.job.model;
    PlanError::NoGroupShape(if n > model.layers {
        format!(
            "vLLM cannot split {} layers into {n} pipeline stages",
            model.layers
        )
    } else {
        format!(
            "vLLM's tensor parallel size {} (the GPUs of one node) does not split {} attention heads and {} KV heads evenly",
            nodes.gpus(),
            model.attention_heads,
            model.kv_heads
        )
    })
}

/// The layers of each pipeline stage as vLLM splits them (`get_pp_indices` in
/// `vllm/distributed/utils.py`): `layers / stages` each, the remainder one more each on the
/// stages before the last, from the second-to-last back.
pub fn stage_layers(layers: u32, stages: u32) -> Vec<u32> {
    let stages = stages.max(1);
    let base = layers.checked_div(stages).unwrap_or(layers);
    let extra = layers.checked_rem(stages).unwrap_or(0);
    (0..stages)
        .map(|k| {
            // Stage `stages - 2 - i` gets one more for i in 0..extra (vLLM's `partitions[-i]`
            // for i in 2..extra + 2).
            let from_end = stages.saturating_sub(k);
            if from_end >= 2 && from_end < extra.saturating_add(2) {
                base.saturating_add(1)
            } else {
                base
            }
        })
        .collect()
}

/// Memory per GPU of the largest pipeline stage, not the even share: a stage holds whole
/// layers, the first also the token embeddings, the last the output layer. Replaces the plan's
/// weights, KV cache and need per GPU with that stage's, or says the group does not fit.
pub fn largest_stage(nodes: &Nodes, n: u32, plan: &mut vramfit_api::Plan) -> Result<(), PlanError> {
    let job = nodes.job;
    let model = &job.model;
    let gpus = u64::from(plan.gpu_count.max(1));
    let layers = model.layers.max(1);
    let weights = memory::weights_bytes(model, plan.quantization)?;
    // The token embeddings and the output layer (16-bit), where the vocabulary is known.
    let table = model.vocab_size.map_or(0, |v| {
        2u64.saturating_mul(u64::from(v))
            .saturating_mul(u64::from(model.hidden_size))
    });
    let tables = table.saturating_mul(2).min(weights);
    let per_layer = memory::div_ceil(weights.saturating_sub(tables), u64::from(layers));
    let kv_per_layer =
        memory::kv_cache_bytes_per_layer(model, job.tokens(), vramfit_api::KvCacheType::F16)?;
    let split = stage_layers(layers, n);
    let last = split.len().saturating_sub(1);
    let (weights_bytes, kv_bytes) = split
        .iter()
        .enumerate()
        .map(|(k, &l)| {
            let ends = [k == 0, k == last].iter().filter(|e| **e).count() as u64;
            (
                per_layer
                    .saturating_mul(u64::from(l))
                    .saturating_add(tables.min(table.saturating_mul(ends))),
                kv_per_layer.saturating_mul(u64::from(l)),
            )
        })
        .max_by_key(|(w, kv)| w.saturating_add(*kv))
        .unwrap_or((weights, 0));
    let even = gib(plan.memory.needed_per_gpu_mib);
    let m = &mut plan.memory;
    m.weights_mib = memory::div_ceil(memory::mib(weights_bytes), gpus);
    m.kv_cache_mib = memory::div_ceil(memory::mib(kv_bytes), gpus);
    m.needed_per_gpu_mib = m
        .weights_mib
        .saturating_add(m.kv_cache_mib)
        .saturating_add(m.overhead_mib);
    if m.needed_per_gpu_mib > m.usable_per_gpu_mib {
        return Err(PlanError::DoesNotFit {
            needed_per_gpu_mib: m.needed_per_gpu_mib,
            usable_per_gpu_mib: m.usable_per_gpu_mib,
            quantization: plan.quantization,
            gpus: plan.gpu_count.saturating_mul(n),
            gpu: nodes.class.describe_gpu(),
        });
    }
    let needed = gib(m.needed_per_gpu_mib);
    let (w, kv, overhead) = (gib(m.weights_mib), gib(m.kv_cache_mib), gib(m.overhead_mib));
    let on_group = format!(" per GPU on {n}×");
    for reason in &mut plan.reasons {
        // The quantization reason's figure: the largest stage's too.
        *reason = reason.replace(&format!("{even}{on_group}"), &format!("{needed}{on_group}"));
        if reason.starts_with("memory: ") {
            *reason = format!(
                "memory: {needed} per GPU needed by the largest pipeline stage (weights {w}, KV cache {kv}, overhead {overhead}), {} usable of {} ({})",
                gib(m.usable_per_gpu_mib),
                gib(m.vram_per_gpu_mib),
                crate::plan_common::kept_free(nodes.class, m.usable_per_gpu_mib)
            );
        }
    }
    plan.reasons.push(format!(
        "pipeline stages of {} layers (vLLM's split), the first with the token embeddings and the last with the output layer",
        split
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join("/")
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_split_as_vllm_does() {
        // vLLM: 80 layers over 3 stages → [27, 27, 26]; 126 over 4 → [31, 32, 32, 31].
        assert_eq!(stage_layers(80, 3), vec![27, 27, 26]);
        assert_eq!(stage_layers(126, 4), vec![31, 32, 32, 31]);
        assert_eq!(stage_layers(126, 2), vec![63, 63]);
        assert_eq!(stage_layers(61, 2), vec![31, 30]);
        assert_eq!(stage_layers(5, 0), vec![5]);
        for (l, n) in [(80, 3), (61, 16), (2, 2), (126, 5)] {
            assert_eq!(stage_layers(l, n).iter().sum::<u32>(), l);
        }
    }
}
