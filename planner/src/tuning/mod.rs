//! Fine-tuning plans (docs/planning.md, "Fine-tuning"): a job's `tuning` section on a node
//! class → method (QLoRA, LoRA, full), GPUs and parallelism, optimizer, micro-batch, gradient
//! checkpointing, accumulation, with the training memory part by part and a reason for each.
//!
//! * [`input`]: the section checked, with its defaults.
//! * [`batch_split`]: the effective batch as micro-batch × GPUs × accumulation.
//! * [`reserved_mount`]: the folder the tuning volumes are mounted under, the job's mounts kept
//!   out of it.
//! * [`shape`]: the model's training numbers (intermediate size, vocabulary, LoRA layers).
//! * [`memory`]: the training-memory estimator.
//! * [`size`]: the choices on one class.
//! * [`fallback`]: the step-downs after out of memory and after a diverged loss.
//! * [`env`]: the training env contract.
pub mod batch_split;
pub mod env;
pub mod fallback;
pub mod input;
pub mod memory;
pub mod reserved_mount;
pub mod shape;
pub mod size;

pub use input::{LoraSettings, TuningInput, TuningSpecError};
pub use size::{TuningSizing, size};
