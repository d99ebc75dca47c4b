//! Plans that span nodes: a group of pods, one per node of one class, rank 0 the leader,
//! joined by the runtime's own distributed engine (vLLM on Ray, llama.cpp RPC, torchrun).
//!
//! * [`size`]: how many nodes per class (`gpus.maxNodes`), the group's shape and why.
//! * [`vllm`]: vLLM's tensor parallel inside a node, pipeline parallel across nodes.
//! * [`llamacpp`]: llama.cpp's RPC split against one node's partial offload.
//! * [`launch`]: what each rank's container runs.
pub mod launch;
pub mod llamacpp;
pub mod size;
pub mod vllm;
