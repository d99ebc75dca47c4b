//! Plans that span nodes: a group of pods, one per node of one class, rank 0 the leader,
//! joined by the runtime's own distributed engine (vLLM on Ray, llama.cpp RPC, torchrun).
pub mod launch;
