//! vramfit's node agent: reads the node's GPUs through NVML (or a fixture file), renders them
//! as `vramfit.io/` node labels, and keeps its own node's labels true with server-side apply.
//!
//! Data flows one way: [`gpu`] (NVML or fixture) → [`labels`] (pure rendering) →
//! [`node_writer`] (apply when changed), driven by [`refresh`]; [`readiness`] and [`metrics`]
//! are served by the shared `vramfit_runtime::admin_server`.
#![forbid(unsafe_code)]

pub mod app;
pub mod backoff;
pub mod cli;
pub mod gpu;
pub mod labels;
pub mod metrics;
pub mod node_writer;
pub mod readiness;
pub mod refresh;
