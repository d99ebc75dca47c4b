//! vramfit's planner: pure functions from (job, node class) to a plan, with no cluster.
//!
//! * [`gpu_catalog`]: product name → model, architecture, tier (DOMAIN §1–2).
//! * [`model_catalog`]: model presets and their published sources (DOMAIN §6).
//! * [`node_class`]: classes of GPU nodes and their defaults.
//! * [`memory`]: the memory estimator (DOMAIN §6).
//! * [`plan`]: a job on a class → a plan with its reasons, or why not (DOMAIN §3–7).
//! * [`ranking`]: which class wins (DOMAIN §7).
//! * [`fallback`]: the step down after an out-of-memory failure (DOMAIN §8).
//! * [`workload`]: the pod's env and runtime flags (DOMAIN §9).
#![forbid(unsafe_code)]

pub mod fallback;
pub mod gpu_catalog;
pub mod job_input;
pub mod memory;
pub mod model_catalog;
pub mod node_class;
pub mod plan;
mod plan_common;
mod plan_llamacpp;
mod plan_transformers;
pub mod ranking;
pub mod tiles;
pub mod workload;

pub use job_input::{JobInput, resolve_job};
pub use node_class::{NodeClass, builtin_classes};
pub use plan::{plan_all, plan_for_class};
pub use plan_common::gib;
