//! vramfit's node agent: reads the node's GPUs through NVML (or a fixture file), renders them
//! as `vramfit.io/` node labels, and keeps its own node's labels true with server-side apply.
//!
//! Data flows one way: [`gpu`] (NVML or fixture) → [`labels`] (pure rendering) →
//! [`node_writer`] (apply when changed), driven by [`refresh`] and served by [`http`].
#![forbid(unsafe_code)]

pub mod app;
pub mod backoff;
pub mod cli;
pub mod gpu;
pub mod http;
pub mod labels;
pub mod metrics;
pub mod node_writer;
pub mod readiness;
pub mod refresh;
pub mod shutdown;
