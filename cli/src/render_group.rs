//! How `vramfit plan` shows a plan that spans nodes: nodes × GPUs in the table, and below the
//! reasons the group's split and its memory per node. A one-node plan shows as before.
use vramfit_api::Plan;
use vramfit_api::group::GroupEngine;
use vramfit_planner::gib;

fn gpus(n: u32) -> String {
    if n == 1 {
        "1 GPU".to_string()
    } else {
        format!("{n} GPUs")
    }
}

/// The GPUS cell: `8` on one node, `2×8` (nodes × GPUs per node) for a group.
pub fn gpus_cell(plan: &Plan) -> String {
    match &plan.group {
        Some(group) => format!("{}×{}", group.nodes, plan.gpu_count),
        None => plan.gpu_count.to_string(),
    }
}

/// The lines under a group plan's reasons (which say why that many nodes): shape and engine,
/// the split, the memory per node; none for a one-node plan.
pub fn group_lines(plan: &Plan) -> Vec<String> {
    let Some(group) = &plan.group else {
        return Vec::new();
    };
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let split = match group.engine {
        GroupEngine::VllmRay => format!(
            "tensor parallel {} inside each node × pipeline parallel {} across the nodes",
            group.tensor_parallel_size.unwrap_or(plan.gpu_count),
            group.pipeline_parallel_size.unwrap_or(group.nodes)
        ),
        GroupEngine::LlamaCppRpc => format!(
            "layers per node {} (--tensor-split {})",
            list(&group.layers_per_node),
            list(&group.tensor_split)
        ),
        GroupEngine::Torchrun => format!(
            "sharded over all {} GPUs (torchrun, one process per GPU)",
            plan.total_gpus()
        ),
    };
    let per_node = |mib: u64| gib(mib.saturating_mul(u64::from(plan.gpu_count)));
    vec![
        format!(
            "group: {} nodes × {} ({} in all), engine {}, ranks meet on port {}",
            group.nodes,
            gpus(plan.gpu_count),
            plan.total_gpus(),
            group.engine.as_str(),
            group.port
        ),
        format!("  split: {split}"),
        format!(
            "  per node: {} needed of {} usable ({} × {} of {})",
            per_node(plan.memory.needed_per_gpu_mib),
            per_node(plan.memory.usable_per_gpu_mib),
            gpus(plan.gpu_count),
            gib(plan.memory.needed_per_gpu_mib),
            gib(plan.memory.usable_per_gpu_mib)
        ),
    ]
}
