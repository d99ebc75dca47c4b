//! A plan that spans nodes: one attempt (or one served replica) run as a group of pods, one
//! per node, rank 0 the leader, joined by the runtime's own distributed engine.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most nodes a group may span (`gpus.maxNodes`).
pub const MAX_GROUP_NODES: u32 = 16;

/// The runtime's distributed engine a group runs.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub enum GroupEngine {
    /// vLLM: tensor parallel over each node's GPUs, pipeline parallel across the nodes, on a
    /// Ray cluster whose head is the leader.
    VllmRay,
    /// llama.cpp: the leader's `llama-server --rpc` over an `rpc-server` on each worker, the
    /// layers split by `--tensor-split`.
    LlamaCppRpc,
    /// PyTorch: `torchrun` on every node with a c10d rendezvous at the leader (FSDP for
    /// fine-tuning, or the job's own torch.distributed program).
    Torchrun,
}

impl GroupEngine {
    /// The name in status and in `vramfit plan`.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupEngine::VllmRay => "vllmRay",
            GroupEngine::LlamaCppRpc => "llamaCppRpc",
            GroupEngine::Torchrun => "torchrun",
        }
    }

    /// Whether the leader starts only once every worker is Ready: llama.cpp's leader asks
    /// each `rpc-server` for its memory as it loads the model and fails on one that does not
    /// answer yet, while a vLLM worker joins the Ray head in a loop and torchrun's ranks wait
    /// for the rendezvous.
    pub fn leader_waits_for_workers(self) -> bool {
        matches!(self, GroupEngine::LlamaCppRpc)
    }
}

/// How a plan spans nodes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GroupPlan {
    /// Pods in the group, one per node of the plan's class, each with the plan's `gpuCount`.
    pub nodes: u32,
    /// The distributed engine that joins them.
    pub engine: GroupEngine,
    /// vLLM: `--tensor-parallel-size` (the GPUs of one node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_parallel_size: Option<u32>,
    /// vLLM: `--pipeline-parallel-size` (the nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_parallel_size: Option<u32>,
    /// llama.cpp: each device's share of the layers, in `--tensor-split` order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tensor_split: Vec<u32>,
    /// llama.cpp: layers on each node, leader first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers_per_node: Vec<u32>,
    /// The port the ranks meet on: Ray's GCS port, `rpc-server`'s port or the torchrun
    /// rendezvous; only the group's own pods may reach it.
    pub port: u32,
    /// Why this many nodes, one line.
    pub why: String,
}

/// One pod of a group, as an attempt's status lists it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GroupMember {
    /// Its rank; 0 is the leader.
    pub rank: u32,
    /// Its pod (`<job>-<attempt>-<rank>`).
    pub pod_name: String,
    /// The node it is bound to, once bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
}
