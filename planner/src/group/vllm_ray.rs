//! vLLM across nodes (0.10.2, 0.11.0): tensor parallel over each node's GPUs, pipeline
//! parallel across the nodes, on a Ray cluster whose head runs in the leader's pod. Neither
//! version has a multi-node mode without Ray (docs/runtime-contracts.md).
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

pub(super) fn launch(_plan: &Plan, group: &GroupPlan, address: &RankAddress) -> EngineLaunch {
    if address.rank == 0 {
        EngineLaunch {
            command: None,
            args: leader_args(group),
            // vLLM calls `ray.init()` with no address; "auto" joins the Ray head the
            // leader's command started, and fails at once (rather than starting a Ray of
            // its own on 127.0.0.1 that no worker can join) where there is none.
            env: vec![("RAY_ADDRESS".to_string(), "auto".to_string())],
        }
    } else {
        EngineLaunch {
            command: Some(worker_command(address, group.port)),
            args: Vec::new(),
            env: Vec::new(),
        }
    }
}
