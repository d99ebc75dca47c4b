//! What each rank of a group runs: the command (where a worker runs another program than
//! the leader), the flags appended to the job's args, and the env, from the plan's group.
use vramfit_api::Plan;

use crate::job_input::JobInput;

/// Where a rank stands in its group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankAddress {
    /// The leader's DNS name (`<leader pod>.<headless Service>.<namespace>`).
    pub leader_address: String,
    /// This pod's rank; 0 is the leader.
    pub rank: u32,
}

/// What one rank's container gets beside the job's own command and args.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankLaunch {
    /// Replaces the job's command and args (a worker that runs another program), if set.
    pub command: Option<Vec<String>>,
    /// Flags appended after the job's args and the plan's runtime flags (leader only).
    pub args: Vec<String>,
    /// Env set on this rank's container, beside the plan's env.
    pub env: Vec<(String, String)>,
}

/// The launch of `address.rank` in the group of `plan` (a plan without a group: nothing).
pub fn for_rank(_job: &JobInput, plan: &Plan, address: &RankAddress) -> RankLaunch {
    let Some(group) = &plan.group else {
        return RankLaunch::default();
    };
    // The names LeaderWorkerSet gives its pods, so images written for LWS run unchanged.
    let env = vec![
        (
            "LWS_LEADER_ADDRESS".to_string(),
            address.leader_address.clone(),
        ),
        ("LWS_GROUP_SIZE".to_string(), group.nodes.to_string()),
        ("LWS_WORKER_INDEX".to_string(), address.rank.to_string()),
    ];
    RankLaunch {
        command: None,
        args: Vec::new(),
        env,
    }
}
