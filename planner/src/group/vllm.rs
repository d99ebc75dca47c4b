//! A vLLM group: tensor parallel over the GPUs of each node, pipeline parallel across the
//! nodes (one pipeline stage per node), on a Ray cluster whose head is the leader.
use vramfit_api::group::GroupEngine;

use crate::error::PlanError;
use crate::group::size::Nodes;
use crate::runtime_vllm;

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
