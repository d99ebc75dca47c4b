//! vramfit's planner: pure functions from (job, node class) to a plan, with no cluster.
#![forbid(unsafe_code)]

pub mod gpu_catalog;
