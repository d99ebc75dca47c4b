//! How `vramfit plan` shows a plan that spans nodes: nodes × GPUs in the table, below the
//! reasons the group's split and its memory per node, and with `--class` (or `-o json`) what
//! each rank's pod runs. A one-node plan shows as before.
use std::fmt::Write;

use serde::Serialize;
use vramfit_api::group::GroupEngine;
use vramfit_api::pod_keys::{group_pod_name, replica_group_pod_name};
use vramfit_api::{InferenceJob, Plan};
use vramfit_planner::group::launch::{CommandLine, RankAddress, for_rank};
use vramfit_planner::workload::{runtime_args, shell_words};
use vramfit_planner::{JobInput, gib};

use crate::render::EnvVar;

/// What one rank's pod runs, as the operator builds it (`RankLaunch::command_line` and
/// `with_env` of the planner, the functions the operator builds the pods with).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RankOutcome {
    /// 0 for the leader.
    rank: u32,
    /// The pod's name in the job's first group (attempt 1, or replica 0's first pod).
    pod: String,
    /// The container's command; absent: the image's entrypoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<Vec<String>>,
    /// The container's args.
    args: Vec<String>,
    /// The env the rank gets on top of the plan's `env` (a name here wins).
    env: Vec<EnvVar>,
}

/// Every rank of `plan`'s group (none for a plan of one pod): the job's command and args, the
/// plan's flags, then what the group's engine gives each rank.
pub fn ranks(job: &InferenceJob, input: &JobInput, plan: &Plan) -> Vec<RankOutcome> {
    if plan.group.is_none() {
        return Vec::new();
    }
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let nodes = plan.nodes();
    (0..nodes)
        .map(|rank| {
            let (address, pod) = if job.spec.serve.is_some() {
                (
                    RankAddress::of_replica_group(&name, &namespace, (0, 1), nodes, rank),
                    replica_group_pod_name(&name, 0, 1, rank),
                )
            } else {
                (
                    RankAddress::of_batch_group(&name, &namespace, 1, nodes, rank),
                    group_pod_name(&name, 1, rank),
                )
            };
            let launch = for_rank(input, plan, &address);
            // The one pod's command line, as the operator's `desired_pod` builds it.
            let mut args = job.spec.args.clone();
            args.extend(runtime_args(input, plan));
            let line = launch.command_line(CommandLine {
                command: (!job.spec.command.is_empty()).then(|| job.spec.command.clone()),
                args,
            });
            let env = launch.with_env(
                Vec::new(),
                |var: &EnvVar| var.name.as_str(),
                |name, value| EnvVar { name, value },
            );
            RankOutcome {
                rank,
                pod,
                command: line.command,
                args: line.args,
                env,
            }
        })
        .collect()
}

/// The ranks as text: each rank's pod, command, args and own env.
pub fn ranks_text(ranks: &[RankOutcome]) -> String {
    let mut out =
        String::from("  ranks (one pod per node; each gets the env above, then its own):\n");
    for r in ranks {
        let role = if r.rank == 0 { "leader" } else { "worker" };
        let _ = writeln!(out, "    rank {} ({role}), pod {}:", r.rank, r.pod);
        let _ = writeln!(
            out,
            "      command: {}",
            r.command
                .as_deref()
                .map_or("(the image's entrypoint)".to_string(), shell_words)
        );
        if !r.args.is_empty() {
            let _ = writeln!(out, "      args: {}", shell_words(&r.args));
        }
        for EnvVar { name, value } in &r.env {
            let _ = writeln!(out, "      {name}={value}");
        }
    }
    out
}

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
            "layers per node {} (leader first); --tensor-split {} (the workers' GPUs first, as llama.cpp orders its devices)",
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

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_api::InferenceJobSpec;
    use vramfit_planner::{builtin_classes, plan_for_class, resolve_job};

    fn plan(max_nodes: u32) -> Plan {
        let spec: InferenceJobSpec = serde_yaml::from_str(&format!(
            "{{model: {{preset: llama-3.1-70b-instruct}}, runtime: vllm, image: x, allowedQuantizations: [none], gpus: {{max: 4, maxNodes: {max_nodes}}}}}"
        ))
        .unwrap();
        let class = builtin_classes()
            .into_iter()
            .find(|c| c.name == "a10g-x4")
            .unwrap();
        plan_for_class(&resolve_job(&spec).unwrap(), &class, &Default::default())
            .unwrap_or_else(|_| panic!("a plan for {max_nodes} nodes"))
    }

    #[test]
    fn a_group_shows_nodes_times_gpus_its_split_and_memory_per_node() {
        let p = plan(8);
        assert_eq!(gpus_cell(&p), "3×4");
        let lines = group_lines(&p);
        assert_eq!(
            lines[0],
            "group: 3 nodes × 4 GPUs (12 in all), engine vllmRay, ranks meet on port 6379"
        );
        assert_eq!(
            lines[1],
            "  split: tensor parallel 4 inside each node × pipeline parallel 3 across the nodes"
        );
        let needed = gib(p.memory.needed_per_gpu_mib * 4);
        assert!(
            lines[2].starts_with(&format!(
                "  per node: {needed} needed of 72.0 GiB usable (4 GPUs × "
            )),
            "{}",
            lines[2]
        );
        assert_eq!(lines.len(), 3);
        // A one-node plan: its GPU count alone, no group lines.
        let one = Plan { group: None, ..p };
        assert_eq!(gpus_cell(&one), "4");
        assert!(group_lines(&one).is_empty());
    }
}
