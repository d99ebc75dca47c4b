//! PyTorch across nodes: every rank runs the job's own `torchrun` command; torchrun reads
//! each option it is not given from `PET_<OPTION>` (`torch/distributed/argparse_util.py`),
//! so the group's shape and its c10d rendezvous at the leader come as env.
use vramfit_api::Plan;
use vramfit_api::group::GroupPlan;

use super::EngineLaunch;
use super::launch::RankAddress;

/// Seconds a rank waits to reach the rendezvous store (`read_timeout`, 60 by default): the
/// leader's pod may start minutes after a worker's (an image pull); the rendezvous's own
/// `join_timeout` is 600.
pub const READ_TIMEOUT_SECONDS: u32 = 600;

pub(super) fn launch(plan: &Plan, group: &GroupPlan, address: &RankAddress) -> EngineLaunch {
    let endpoint = format!("{}:{}", address.leader_address, group.port);
    let leader = address.rank == 0;
    let env = [
        ("PET_NNODES", group.nodes.to_string()),
        ("PET_NODE_RANK", address.rank.to_string()),
        ("PET_NPROC_PER_NODE", plan.gpu_count.to_string()),
        ("PET_RDZV_BACKEND", "c10d".to_string()),
        ("PET_RDZV_ENDPOINT", endpoint),
        // One id per attempt: the leader's name holds the attempt.
        ("PET_RDZV_ID", address.leader_address.clone()),
        // The leader hosts the store: explicit, as the endpoint's name need not match the
        // pod's hostname, which is what torchrun would otherwise compare.
        (
            "PET_RDZV_CONF",
            format!(
                "is_host={},read_timeout={READ_TIMEOUT_SECONDS}",
                if leader { "true" } else { "false" }
            ),
        ),
        // For a program that joins torch.distributed without torchrun (env://).
        ("MASTER_ADDR", address.leader_address.clone()),
        ("MASTER_PORT", group.port.to_string()),
    ];
    EngineLaunch {
        command: None,
        default_command: None,
        args: Vec::new(),
        env: env.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    }
}
