//! Plans that span nodes: a group of pods, one per node of one class, rank 0 the leader,
//! joined by the runtime's own distributed engine (vLLM on Ray, llama.cpp RPC, torchrun).
//!
//! * [`size`]: how many nodes per class (`gpus.maxNodes`), the group's shape and why.
//! * [`vllm_stages`]: vLLM's tensor parallel inside a node, pipeline parallel across nodes.
//! * [`rpc_or_offload`]: llama.cpp's RPC split against one node's partial offload.
//! * [`launch`]: what each rank's container runs, per engine ([`vllm_ray`],
//!   [`llamacpp_rpc`], [`torchrun`]), and [`contract`]: the flags and env it may emit.
pub mod contract;
pub mod launch;
pub mod llamacpp_rpc;
pub mod rpc_or_offload;
pub mod size;
pub mod torchrun;
pub mod vllm_ray;
pub mod vllm_stages;

/// What one engine adds for one rank.
struct EngineLaunch {
    command: Option<Vec<String>>,
    default_command: Option<Vec<String>>,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// `word` for a POSIX shell: itself when plain, else single-quoted.
fn shell_quote(word: &str) -> String {
    crate::workload::shell_words(std::slice::from_ref(&word.to_string()))
}
