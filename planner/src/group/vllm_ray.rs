//! vLLM across nodes (0.10.2, 0.11.0): tensor parallel over each node's GPUs, pipeline
//! parallel across the nodes, on a Ray cluster whose head runs in the leader's pod (started
//! by the job's command, or where it sets none by vLLM's own script). Neither version has a
//! multi-node mode without Ray (docs/runtime-contracts.md).
use vramfit_api::Plan;
use vramfit_api::group::GroupPlan;

use super::launch::{RankAddress, flags};
use super::{EngineLaunch, shell_quote};

/// The leader's flags: pipeline parallel over the nodes, on Ray. `--tensor-parallel-size`
/// (the GPUs of one node) is the plan's own flag.
fn leader_args(group: &GroupPlan) -> Vec<String> {
    let stages = group.pipeline_parallel_size.unwrap_or(group.nodes);
    flags(&[
        ("--pipeline-parallel-size", stages.to_string()),
        ("--distributed-executor-backend", "ray".to_string()),
    ])
}

/// A worker joins the leader's Ray head and stays in it. `ray start --address` fails while
/// the leader's head is not up (its name does not resolve before the leader has an address,
/// or nothing listens yet), so it is retried; the group ends when the leader does.
pub fn worker_command(address: &RankAddress, port: u32) -> Vec<String> {
    let head = shell_quote(&format!("{}:{port}", address.leader_address));
    vec![
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "until ray start --address={head} --block; do echo 'waiting for the Ray head at '{head}; sleep 5; done"
        ),
    ]
}

/// vLLM's own script that starts a Ray head and waits until every node of the cluster has
/// joined, where vLLM's images ship it (`WORKDIR /vllm-workspace`, `COPY examples examples`;
/// docs/runtime-contracts.md).
pub const MULTI_NODE_SERVING_SCRIPT: &str =
    "/vllm-workspace/examples/online_serving/multi-node-serving.sh";

/// Seconds the leader's script waits for every worker's Ray node (its `--ray_init_timeout`,
/// 300 by default): a worker's pod may start minutes after the leader's (an image pull of
/// several GB), and vLLM itself waits up to 1800 s for the workers' GPUs.
pub const RAY_INIT_TIMEOUT_SECONDS: u32 = 1800;

/// The leader's command where the job sets none: vLLM's script starts the Ray head on the
/// group's port and waits for all the group's nodes, then `vllm serve` runs with the pod's
/// args (`"$@"`: the job's args, the plan's flags and the group's), as LeaderWorkerSet's
/// vLLM example does. A head that never sees every worker ends the leader, and the group.
pub fn leader_command(group: &GroupPlan) -> Vec<String> {
    let script = format!(
        "bash {MULTI_NODE_SERVING_SCRIPT} leader --ray_port={} --ray_cluster_size={} --ray_init_timeout={RAY_INIT_TIMEOUT_SECONDS} && exec vllm serve \"$@\"",
        group.port, group.nodes
    );
    vec![
        "sh".to_string(),
        "-c".to_string(),
        script,
        // `$0` of the script; the args follow as `$1`….
        "vllm-leader".to_string(),
    ]
}

pub(super) fn launch(_plan: &Plan, group: &GroupPlan, address: &RankAddress) -> EngineLaunch {
    if address.rank == 0 {
        EngineLaunch {
            command: None,
            default_command: Some(leader_command(group)),
            args: leader_args(group),
            // vLLM calls `ray.init()` with no address; "auto" joins the Ray head the
            // leader's command started, and fails at once (rather than starting a Ray of
            // its own on 127.0.0.1 that no worker can join) where there is none. The
            // script's own count of the Ray nodes joins the same way.
            env: vec![("RAY_ADDRESS".to_string(), "auto".to_string())],
        }
    } else {
        EngineLaunch {
            command: Some(worker_command(address, group.port)),
            default_command: None,
            args: Vec::new(),
            env: Vec::new(),
        }
    }
}
