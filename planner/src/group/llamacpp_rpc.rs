//! llama.cpp across nodes: the leader's `llama-server --rpc` over `rpc-server`s on the
//! workers. From b6327 (one device per `rpc-server` until multi-device servers, PR 16276 of
//! Oct 2025) a worker runs one `rpc-server` per GPU, GPU `i` on the group's port + `i`.
use vramfit_api::Plan;
use vramfit_api::group::GroupPlan;

use super::launch::{RankAddress, flags};
use super::{EngineLaunch, shell_quote};

/// The most values `--tensor-split` takes: `common/arg.cpp` refuses a list as long as
/// `llama_max_devices()` (16).
pub const MAX_TENSOR_SPLIT: usize = 15;

/// Every worker GPU's `rpc-server` endpoint, in the order `--rpc` lists (and llama.cpp puts
/// first among its devices, before the leader's own GPUs): worker by worker, GPU by GPU.
pub fn rpc_endpoints(address: &RankAddress, port: u32, gpus_per_node: u32) -> Vec<String> {
    address
        .worker_addresses
        .iter()
        .flat_map(|worker| {
            (0..gpus_per_node).map(move |gpu| format!("{worker}:{}", port.saturating_add(gpu)))
        })
        .collect()
}

fn leader_args(plan: &Plan, group: &GroupPlan, address: &RankAddress) -> Vec<String> {
    let mut pairs = vec![(
        "--rpc",
        rpc_endpoints(address, group.port, plan.gpu_count).join(","),
    )];
    // The plan's split, one share per device in llama.cpp's order (the workers' RPC devices,
    // then the leader's GPUs). Without it (or past llama.cpp's limit) llama.cpp splits by
    // each device's free memory, which on one class is the same split.
    if !group.tensor_split.is_empty() && group.tensor_split.len() <= MAX_TENSOR_SPLIT {
        let shares: Vec<String> = group.tensor_split.iter().map(u32::to_string).collect();
        pairs.push(("--tensor-split", shares.join(",")));
    }
    flags(&pairs)
}

/// One `rpc-server` per GPU, listening on every address of the pod (the NetworkPolicy keeps
/// all but the group's pods out: `rpc-server` has no authentication).
pub fn worker_command(port: u32, gpus_per_node: u32) -> Vec<String> {
    let server = |gpu: u32| -> Vec<String> {
        let mut words = vec![
            "rpc-server".to_string(),
            "--host".to_string(),
            "0.0.0.0".to_string(),
            "--port".to_string(),
            port.saturating_add(gpu).to_string(),
        ];
        if gpus_per_node > 1 {
            // Without a device an `rpc-server` of b6327 serves the first GPU only.
            words.extend(["--device".to_string(), format!("CUDA{gpu}")]);
        }
        words
    };
    if gpus_per_node <= 1 {
        return server(0);
    }
    // The others in the background, GPU 0's in the foreground: the container lives as long
    // as it does; a server that dies breaks the leader's model, which ends the group.
    let mut script: Vec<String> = (1..gpus_per_node)
        .map(|gpu| format!("{} &", words(&server(gpu))))
        .collect();
    script.push(format!("exec {}", words(&server(0))));
    vec!["sh".to_string(), "-c".to_string(), script.join(" ")]
}

fn words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

pub(super) fn launch(plan: &Plan, group: &GroupPlan, address: &RankAddress) -> EngineLaunch {
    if address.rank == 0 {
        EngineLaunch {
            command: None,
            default_command: None,
            args: leader_args(plan, group, address),
            env: Vec::new(),
        }
    } else {
        EngineLaunch {
            command: Some(worker_command(group.port, plan.gpu_count)),
            default_command: None,
            args: Vec::new(),
            env: Vec::new(),
        }
    }
}
