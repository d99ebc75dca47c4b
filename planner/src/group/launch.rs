//! What each rank of a group runs: the command (where a worker runs another program than
//! the leader), the flags appended to the job's args, and the env, from the plan's group
//! (docs/runtime-contracts.md, "Groups across nodes").
use vramfit_api::Plan;
use vramfit_api::group::GroupEngine;
use vramfit_api::pod_keys::{
    group_name, group_pod_name, replica_group_name, replica_group_pod_name,
};

use crate::group::{llamacpp_rpc, torchrun, vllm_ray};
use crate::job_input::JobInput;

/// Where a rank stands in its group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankAddress {
    /// The leader's DNS name (`<leader pod>.<headless Service>.<namespace>`).
    pub leader_address: String,
    /// This pod's rank; 0 is the leader.
    pub rank: u32,
    /// The workers' DNS names, rank 1 first (the leader's `llama-server --rpc` names every
    /// worker's `rpc-server`). Empty where the engine does not need them.
    pub worker_addresses: Vec<String>,
}

impl RankAddress {
    /// The address of `rank` in a batch job's group for `attempt` of `nodes` pods: every
    /// pod is `<pod>.<group>.<namespace>` (its hostname and the headless Service's name as
    /// subdomain), with the names of `vramfit_api::pod_keys`.
    pub fn of_batch_group(
        job_name: &str,
        namespace: &str,
        attempt: u32,
        nodes: u32,
        rank: u32,
    ) -> Self {
        let group = group_name(job_name, attempt);
        Self::of_group(
            &group,
            &|r| group_pod_name(job_name, attempt, r),
            namespace,
            nodes,
            rank,
        )
    }

    /// The address of `rank` in the group of `nodes` pods that serves as pod number
    /// `incarnation` of a served job's replica `slot` (names of `vramfit_api::pod_keys`).
    pub fn of_replica_group(
        job_name: &str,
        namespace: &str,
        (slot, incarnation): (u32, u32),
        nodes: u32,
        rank: u32,
    ) -> Self {
        let group = replica_group_name(job_name, slot, incarnation);
        let member = |r| replica_group_pod_name(job_name, slot, incarnation, r);
        Self::of_group(&group, &member, namespace, nodes, rank)
    }

    /// `<member(r)>.<group>.<namespace>` for every rank `r` of a group of `nodes` pods.
    fn of_group(
        group: &str,
        member: &dyn Fn(u32) -> String,
        namespace: &str,
        nodes: u32,
        rank: u32,
    ) -> Self {
        let address = |r: u32| format!("{}.{group}.{namespace}", member(r));
        RankAddress {
            leader_address: address(0),
            rank,
            worker_addresses: (1..nodes).map(address).collect(),
        }
    }
}

/// What one rank's container gets beside the job's own command and args.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankLaunch {
    /// Replaces the job's command and args (a worker that runs another program), if set.
    pub command: Option<Vec<String>>,
    /// The command where the job sets none (a vLLM leader: start the Ray head, wait for the
    /// workers, then serve); a job's own command wins.
    pub default_command: Option<Vec<String>>,
    /// Flags appended after the job's args and the plan's runtime flags (leader only).
    pub args: Vec<String>,
    /// Env set on this rank's container, beside the plan's env (a name here wins over the
    /// plan's and the job's).
    pub env: Vec<(String, String)>,
}

/// A container's command line: its `command` (`None`: the image's entrypoint) and `args`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandLine {
    /// The container's `command`.
    pub command: Option<Vec<String>>,
    /// The container's `args`.
    pub args: Vec<String>,
}

impl RankLaunch {
    /// What this rank's container runs, from `one_pod`: the command line of the plan's one
    /// pod (the job's command; the job's args, then the plan's flags). The operator builds
    /// every rank's pod with it and `vramfit plan` shows it, so both say the same.
    pub fn command_line(&self, one_pod: CommandLine) -> CommandLine {
        if let Some(command) = &self.command {
            // A worker that runs another program: its command line is the launch's alone.
            return CommandLine {
                command: Some(command.clone()),
                args: Vec::new(),
            };
        }
        let mut args = one_pod.args;
        args.extend(self.args.iter().cloned());
        CommandLine {
            command: one_pod.command.or_else(|| self.default_command.clone()),
            args,
        }
    }

    /// `env` with this rank's variables: each replaces any of the same name (the job's, the
    /// plan's) and comes after the others. `name` reads a variable's name, `var` makes one.
    pub fn with_env<T>(
        &self,
        mut env: Vec<T>,
        name: impl Fn(&T) -> &str,
        var: impl Fn(String, String) -> T,
    ) -> Vec<T> {
        for (key, value) in &self.env {
            env.retain(|v| name(v) != key.as_str());
            env.push(var(key.clone(), value.clone()));
        }
        env
    }
}

/// The env names a group sets on every rank: LeaderWorkerSet's, so images written for LWS
/// run unchanged, and vramfit's own.
pub const GROUP_ENV: [&str; 8] = [
    "LWS_LEADER_ADDRESS",
    "LWS_GROUP_SIZE",
    "LWS_WORKER_INDEX",
    "VRAMFIT_GROUP_SIZE",
    "VRAMFIT_GROUP_RANK",
    "VRAMFIT_LEADER_ADDRESS",
    "VRAMFIT_GROUP_PORT",
    "VRAMFIT_GROUP_ENGINE",
];

/// The launch of `address.rank` in the group of `plan` (a plan without a group: nothing).
/// A group of one node runs as the plan of one pod does: the env only, no engine.
pub fn for_rank(job: &JobInput, plan: &Plan, address: &RankAddress) -> RankLaunch {
    let Some(group) = &plan.group else {
        return RankLaunch::default();
    };
    let values = [
        address.leader_address.clone(),
        group.nodes.to_string(),
        address.rank.to_string(),
        group.nodes.to_string(),
        address.rank.to_string(),
        address.leader_address.clone(),
        group.port.to_string(),
        group.engine.as_str().to_string(),
    ];
    let mut env: Vec<(String, String)> = GROUP_ENV
        .iter()
        .map(|name| name.to_string())
        .zip(values)
        .collect();
    if group.nodes <= 1 {
        return RankLaunch {
            env,
            ..RankLaunch::default()
        };
    }
    let engine = match group.engine {
        GroupEngine::VllmRay => vllm_ray::launch(plan, group, address),
        GroupEngine::LlamaCppRpc => llamacpp_rpc::launch(plan, group, address),
        GroupEngine::Torchrun => torchrun::launch(plan, group, address),
    };
    env.extend(engine.env);
    if address.rank == 0 && !engine.args.is_empty() {
        // A leader whose command is a shell script reads its flags from this env var
        // (docs/runtime-contracts.md): there, the group's flags follow the plan's.
        let mut all = crate::workload::runtime_args(job, plan);
        all.extend(engine.args.iter().cloned());
        env.push((
            "VRAMFIT_RUNTIME_ARGS".to_string(),
            crate::workload::shell_words(&all),
        ));
    }
    RankLaunch {
        command: engine.command,
        default_command: engine.default_command,
        args: engine.args,
        env,
    }
}

/// Flag/value pairs as one argument list.
pub(crate) fn flags(pairs: &[(&str, String)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(name, value)| [name.to_string(), value.clone()])
        .collect()
}

#[cfg(test)]
mod address_tests {
    use super::RankAddress;

    #[test]
    fn a_replica_group_s_ranks_are_named_under_the_replica_s_group() {
        let worker = RankAddress::of_replica_group("chat", "ml", (1, 4), 3, 2);
        assert_eq!(worker.leader_address, "chat-r1-4-0.chat-r1-4.ml");
        assert_eq!(worker.rank, 2);
        assert_eq!(
            worker.worker_addresses,
            vec!["chat-r1-4-1.chat-r1-4.ml", "chat-r1-4-2.chat-r1-4.ml"]
        );
        let batch = RankAddress::of_batch_group("big", "ml", 3, 2, 0);
        assert_eq!(batch.leader_address, "big-3-0.big-3.ml");
        assert_eq!(batch.worker_addresses, vec!["big-3-1.big-3.ml"]);
    }
}
