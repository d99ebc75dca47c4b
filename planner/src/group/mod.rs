//! Plans that span nodes: a group of pods, one per node of one class, rank 0 the leader,
//! joined by the runtime's own distributed engine (vLLM on Ray, llama.cpp RPC, torchrun).
pub mod contract;
pub mod launch;
pub mod llamacpp_rpc;
pub mod torchrun;
pub mod vllm_ray;

/// What one engine adds for one rank.
struct EngineLaunch {
    command: Option<Vec<String>>,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// `word` for a POSIX shell: itself when plain, else single-quoted.
fn shell_quote(word: &str) -> String {
    crate::workload::shell_words(std::slice::from_ref(&word.to_string()))
}
