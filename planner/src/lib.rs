//! vramfit's planner: pure functions from (job, node class) to a plan, with no cluster.
//!
//! * [`gpu_catalog`]: product name → model, architecture, tier (docs/planning.md).
//! * [`model_catalog`]: model presets and their published sources (docs/planning.md).
//! * [`checkpoint`]: a checkpoint's numbers (vramfit-models) as a manifest's `model:` fields.
//! * [`node_class`]: classes of GPU nodes and their defaults.
//! * [`class_from_facts`]: the classes a node forms from its labels (mixed, MIG, shared).
//! * [`memory`]: the memory estimator (docs/planning.md).
//! * [`prequantized`]: pre-quantized checkpoints: each runtime's kernel and compute-capability
//!   floor per scheme (docs/runtime-contracts.md).
//! * [`plan`]: a job on a class → a plan with its reasons, or why not (docs/planning.md).
//! * [`ranking`]: which class wins among those with room, and why the others did not
//!   ([`ranking::choose_class`], the one choice of the operator and `vramfit plan`).
//! * [`error`]: why a spec, a class definition or a plan is refused, one line each.
//! * [`fallback`]: the step down after an out-of-memory failure (docs/planning.md).
//! * [`runtime_contract`]: supported runtime versions and the flag table (docs/runtime-contracts.md).
//! * [`runtime_vllm`]: how vLLM realises a plan (docs/runtime-contracts.md).
//! * [`user_args`]: a job's own command and args against the planned flags.
//! * [`serving`]: what a served job adds (where it listens) and the checks of its `serve`.
//! * [`workload`]: the pod's env and runtime flags (docs/planning.md).
//! * [`group`]: plans that span nodes (`gpus.maxNodes`): how many nodes per class, the
//!   runtime's split across them, and what each rank runs (docs/planning.md).
//! * [`adapters`]: LoRA adapters on a served job: each resolved from the fine-tuning job that
//!   wrote it, their share of each GPU, the runtime's LoRA flags (docs/planning.md).
//! * [`tuning`]: fine-tuning plans: method, micro-batch, checkpointing, accumulation,
//!   optimizer, the training-memory estimator and its step-downs (docs/planning.md).
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

pub mod adapters;
pub mod checkpoint;
pub mod class_from_facts;
pub mod concurrency;
pub mod error;
pub mod fallback;
pub mod gpu_catalog;
pub mod group;
pub mod job_input;
pub mod memory;
pub mod model_catalog;
pub mod node_class;
pub mod plan;
mod plan_common;
pub mod plan_llamacpp;
mod plan_transformers;
mod plan_tuning;
pub mod prequantized;
pub mod ranking;
pub mod runtime_contract;
pub mod runtime_vllm;
pub mod serving;
pub mod tiles;
pub mod tuning;
pub mod user_args;
pub mod workload;

pub use class_from_facts::classes_from_facts;
pub use error::{
    ClassDefinitionError, ModelError, NoEightBitUnderVllm, PlanError, PodGpuLimit, SizeOverflow,
    SpecError,
};
pub use job_input::{JobInput, resolve_job};
pub use node_class::{GpuUnit, NodeClass, builtin_classes};
pub use plan::{plan_all, plan_for_class};
pub use plan_common::gib;
