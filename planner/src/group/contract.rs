//! What the ranks of a group run besides the leader's runtime flags (those are in
//! `runtime_contract::FLAGS`): the workers' programs and their flags, and every env name a
//! group sets, with the source each was read from (docs/runtime-contracts.md renders these
//! tables; a test keeps the two equal and checks every launch against them).
use vramfit_api::group::GroupEngine;

use crate::runtime_contract::Values;

/// A flag of a program a worker runs.
#[derive(Clone, Copy, Debug)]
pub struct WorkerFlag {
    /// The engine whose workers run it.
    pub engine: GroupEngine,
    /// The program.
    pub program: &'static str,
    /// The flag, in the spelling vramfit emits.
    pub flag: &'static str,
    /// Its values; `None` for a switch.
    pub values: Option<Values>,
    /// What vramfit passes.
    pub passes: &'static str,
    /// Where it is read, at which version.
    pub evidence: &'static str,
}

/// Every flag of the workers' commands, and of a vLLM leader's where the job sets none.
pub const WORKER_FLAGS: &[WorkerFlag] = &[
    WorkerFlag {
        engine: GroupEngine::VllmRay,
        program: "multi-node-serving.sh leader",
        flag: "--ray_port",
        values: Some(Values::Count(1)),
        passes: "`group.port` (6379): the Ray head's port, the one the workers join",
        evidence: "vLLM `examples/online_serving/multi-node-serving.sh` `leader`: `--ray_port=*` (default 6379), then `ray start --head --port=$ray_port`; the same in vLLM's copies of 0.9.0 and later",
    },
    WorkerFlag {
        engine: GroupEngine::VllmRay,
        program: "multi-node-serving.sh leader",
        flag: "--ray_cluster_size",
        values: Some(Values::Count(2)),
        passes: "the group's pods: the script returns once that many Ray nodes are alive",
        evidence: "the same script: `--ray_cluster_size=*` (required), polled with `ray.init()` and `ray.nodes()` every 5 s",
    },
    WorkerFlag {
        engine: GroupEngine::VllmRay,
        program: "multi-node-serving.sh leader",
        flag: "--ray_init_timeout",
        values: Some(Values::Count(1)),
        passes: "1800: seconds to wait for every worker, then exit 1 (vLLM's own wait for the workers' GPUs)",
        evidence: "the same script: `--ray_init_timeout=*` (default 300)",
    },
    WorkerFlag {
        engine: GroupEngine::VllmRay,
        program: "ray start",
        flag: "--address",
        values: Some(Values::Endpoint),
        passes: "the leader's Ray head: `<leader>:<group.port>` (6379)",
        evidence: "Ray 2.48.0 (the least vLLM 0.10.2 and 0.11.0 require) `ray/scripts/scripts.py` `start` `--address` (line 348)",
    },
    WorkerFlag {
        engine: GroupEngine::VllmRay,
        program: "ray start",
        flag: "--block",
        values: None,
        passes: "the worker's container lives as long as its Ray node",
        evidence: "Ray 2.48.0 `ray/scripts/scripts.py` `--block` (line 524)",
    },
    WorkerFlag {
        engine: GroupEngine::LlamaCppRpc,
        program: "rpc-server",
        flag: "--host",
        values: Some(Values::OneOf(&["0.0.0.0"])),
        passes: "every address of the pod (the default, 127.0.0.1, is unreachable from the leader)",
        evidence: "`tools/rpc/rpc-server.cpp` `-H, --host HOST`, default 127.0.0.1, any other prints that the server is not secure (line 159 at 4227c9be, before b6327; line 109 at 0c1e5709, b11312)",
    },
    WorkerFlag {
        engine: GroupEngine::LlamaCppRpc,
        program: "rpc-server",
        flag: "--port",
        values: Some(Values::Count(1)),
        passes: "`group.port` (50052, the default) + the GPU's index",
        evidence: "`tools/rpc/rpc-server.cpp` `-p, --port PORT`, default 50052 (lines 189 and 135 at 4227c9be; lines 139 and 87 at 0c1e5709)",
    },
    WorkerFlag {
        engine: GroupEngine::LlamaCppRpc,
        program: "rpc-server",
        flag: "--device",
        values: Some(Values::Indexed("CUDA")),
        passes: "nodes of more than one GPU: one server per GPU",
        evidence: "`tools/rpc/rpc-server.cpp` `-d, --device` from PR 13304 (May 2025): one device per server (line 173 at 4227c9be) until PR 16276 (Oct 2025) lets one server take a list (line 123 at 0c1e5709)",
    },
];

/// Which ranks get an env name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ranks {
    /// Every rank.
    All,
    /// The leader only.
    Leader,
}

/// An env name a group sets.
#[derive(Clone, Copy, Debug)]
pub struct GroupEnv {
    /// The name.
    pub name: &'static str,
    /// The engine it is set for; `None` for every engine.
    pub engine: Option<GroupEngine>,
    /// Which ranks.
    pub ranks: Ranks,
    /// Its value.
    pub value: &'static str,
    /// Who reads it, and where that is seen.
    pub read_by: &'static str,
}

/// Every env name a group sets (beside the plan's own).
pub const GROUP_ENV_TABLE: &[GroupEnv] = &[
    GroupEnv {
        name: "LWS_LEADER_ADDRESS",
        engine: None,
        ranks: Ranks::All,
        value: "the leader's DNS name, `<leader pod>.<group>.<namespace>`",
        read_by: "images written for LeaderWorkerSet, which sets the same name to the same form",
    },
    GroupEnv {
        name: "LWS_GROUP_SIZE",
        engine: None,
        ranks: Ranks::All,
        value: "the group's pods",
        read_by: "images written for LeaderWorkerSet",
    },
    GroupEnv {
        name: "LWS_WORKER_INDEX",
        engine: None,
        ranks: Ranks::All,
        value: "the rank, 0 for the leader",
        read_by: "images written for LeaderWorkerSet",
    },
    GroupEnv {
        name: "VRAMFIT_GROUP_SIZE",
        engine: None,
        ranks: Ranks::All,
        value: "the group's pods",
        read_by: "the `vramfit_workload` trainer (FSDP across the group) and scripts",
    },
    GroupEnv {
        name: "VRAMFIT_GROUP_RANK",
        engine: None,
        ranks: Ranks::All,
        value: "the rank, 0 for the leader",
        read_by: "scripts",
    },
    GroupEnv {
        name: "VRAMFIT_LEADER_ADDRESS",
        engine: None,
        ranks: Ranks::All,
        value: "as `LWS_LEADER_ADDRESS`",
        read_by: "scripts",
    },
    GroupEnv {
        name: "VRAMFIT_GROUP_PORT",
        engine: None,
        ranks: Ranks::All,
        value: "`group.port`: 6379, 50052 or 29500",
        read_by: "scripts (the leader's `ray start --head --port=$VRAMFIT_GROUP_PORT`)",
    },
    GroupEnv {
        name: "VRAMFIT_GROUP_ENGINE",
        engine: None,
        ranks: Ranks::All,
        value: "`vllmRay`, `llamaCppRpc` or `torchrun`",
        read_by: "scripts",
    },
    GroupEnv {
        name: "VRAMFIT_RUNTIME_ARGS",
        engine: None,
        ranks: Ranks::Leader,
        value: "the plan's flags and then the group's, shell-quoted (in the place of the plan's value)",
        read_by: "a leader whose command is a shell script: `exec vllm serve \"$VRAMFIT_MODEL\" $VRAMFIT_RUNTIME_ARGS`",
    },
    GroupEnv {
        name: "RAY_ADDRESS",
        engine: Some(GroupEngine::VllmRay),
        ranks: Ranks::Leader,
        value: "`auto`",
        read_by: "Ray 2.48.0 `ray.init()`, which vLLM calls with no address (`vllm/executor/ray_utils.py` `initialize_ray_cluster`, 0.10.2 line 308): `auto` joins the head started in the container and raises \"Could not find any running Ray instance\" where there is none (`ray/_private/services.py` lines 373-418), instead of starting a Ray of its own on 127.0.0.1",
    },
    GroupEnv {
        name: "PET_NNODES",
        engine: Some(GroupEngine::Torchrun),
        ranks: Ranks::All,
        value: "the group's pods",
        read_by: "torchrun `--nnodes` (PyTorch 2.8.0 `torch/distributed/run.py` line 400); every option with `action=env` defaults to `PET_<OPTION>` (`torch/distributed/argparse_util.py` line 45)",
    },
    GroupEnv {
        name: "PET_NODE_RANK",
        engine: Some(GroupEngine::Torchrun),
        ranks: Ranks::All,
        value: "the rank (c10d assigns ranks by arrival; the static rendezvous reads it)",
        read_by: "torchrun `--node-rank` (`run.py` line 572)",
    },
    GroupEnv {
        name: "PET_NPROC_PER_NODE",
        engine: Some(GroupEngine::Torchrun),
        ranks: Ranks::All,
        value: "the plan's `gpuCount`",
        read_by: "torchrun `--nproc-per-node` (`run.py` line 407)",
    },
    GroupEnv {
        name: "PET_RDZV_BACKEND",
        engine: Some(GroupEngine::Torchrun),
        ranks: Ranks::All,
        value: "`c10d`",
        read_by: "torchrun `--rdzv-backend` (`run.py` line 420; default `static`)",
    },
    GroupEnv {
        name: "PET_RDZV_ENDPOINT",
        engine: Some(GroupEngine::Torchrun),
        ranks: Ranks::All,
        value: "`<leader>:<group.port>` (29500)",
        read_by: "torchrun `--rdzv-endpoint` (`run.py` line 428)",
    },
    GroupEnv {
        name: "PET_RDZV_ID",
        engine: Some(GroupEngine::Torchrun),
        ranks: Ranks::All,
        value: "the leader's DNS name (one per attempt)",
        read_by: "torchrun `--rdzv-id` (`run.py` line 436)",
    },
    GroupEnv {
        name: "PET_RDZV_CONF",
        engine: Some(GroupEngine::Torchrun),
        ranks: Ranks::All,
        value: "`is_host=true` on the leader, `is_host=false` elsewhere; `read_timeout=600`",
        read_by: "torchrun `--rdzv-conf` (`run.py` line 444); `is_host` and `read_timeout` (default 60 s to reach the store) in `torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py` lines 140-151",
    },
    GroupEnv {
        name: "MASTER_ADDR",
        engine: Some(GroupEngine::Torchrun),
        ranks: Ranks::All,
        value: "the leader's DNS name",
        read_by: "torch.distributed's `env://` initialisation, for a program started without torchrun (torchrun sets its own for its workers)",
    },
    GroupEnv {
        name: "MASTER_PORT",
        engine: Some(GroupEngine::Torchrun),
        ranks: Ranks::All,
        value: "`group.port`",
        read_by: "as `MASTER_ADDR`",
    },
];

/// The workers' flags as Markdown (docs/runtime-contracts.md holds it verbatim).
pub fn render_worker_flags() -> String {
    let mut out = String::from(
        "| engine | program | flag | values vramfit passes | what | evidence |\n|---|---|---|---|---|---|\n",
    );
    for f in WORKER_FLAGS {
        out.push_str(&format!(
            "| `{}` | `{}` | `{}` | {} | {} | {} |\n",
            f.engine.as_str(),
            f.program,
            f.flag,
            f.values.map_or("(a switch)".to_string(), |v| v.describe()),
            f.passes,
            f.evidence
        ));
    }
    out
}

/// The group's env as Markdown (docs/runtime-contracts.md holds it verbatim).
pub fn render_env() -> String {
    let mut out =
        String::from("| env | engine | ranks | value | read by |\n|---|---|---|---|---|\n");
    for e in GROUP_ENV_TABLE {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            e.name,
            e.engine
                .map_or("every".to_string(), |g| format!("`{}`", g.as_str())),
            match e.ranks {
                Ranks::All => "all",
                Ranks::Leader => "leader",
            },
            e.value,
            e.read_by
        ));
    }
    out
}

/// The worker flag `flag` of `program`, if vramfit emits it.
pub fn worker_flag(program: &str, flag: &str) -> Option<&'static WorkerFlag> {
    WORKER_FLAGS
        .iter()
        .find(|f| f.program == program && f.flag == flag)
}

/// The table's row for env `name`, if a group sets it.
pub fn group_env(name: &str) -> Option<&'static GroupEnv> {
    GROUP_ENV_TABLE.iter().find(|e| e.name == name)
}
