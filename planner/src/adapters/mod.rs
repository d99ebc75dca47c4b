//! LoRA adapters on a served job (`serve.adapters`; docs/planning.md, "Served LoRA adapters").
//!
//! * [`resolve`]: one adapter from the fine-tuning job that wrote it, or why not.
//! * [`memory`]: vLLM's LoRA buffers and llama.cpp's adapter tensors, in bytes.
//! * [`budget`]: the adapters' share of each GPU on a class and the plan's line for it.
//! * [`flags`]: the runtime's LoRA flags, `VRAMFIT_ADAPTERS`, and the user flags refused.
//!
//! The operator and `vramfit plan` resolve each adapter ([`resolve::from_tuning_job`]), then
//! [`attach`] the accepted list to the job's input before planning it.
use vramfit_api::adapters::ResolvedAdapter;

use crate::job_input::JobInput;

pub mod budget;
pub mod flags;
pub mod memory;
pub mod resolve;

pub use resolve::{AdapterRefusal, Mode, from_tuning_job};

/// Stores the resolved adapters of a served job in its input, in `serve.adapters` order, so
/// that every class's plan holds them. A batch job (no `serve`) has none to store: the list
/// is dropped.
pub fn attach(input: &mut JobInput, resolved: Vec<ResolvedAdapter>) {
    if let Some(serve) = input.serve.as_mut() {
        serve.adapters = resolved;
    }
}
