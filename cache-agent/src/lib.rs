//! vramfit's node cache agent: keeps the node-local model cache (`vramfit-cache`) holding
//! what the node's ModelCache asks for, and says in its status what the cache holds.
//!
//! [`watch`] follows the ModelCache named after the node; [`cache_loop`] runs one pass at a
//! time: [`plan`] (pure) picks the next model to fetch, [`credential`] (pure) whether the Hub
//! token reads it, [`backoff`] when a failed one is tried again, [`status`] (pure) assembles
//! the status that [`status_writer`] applies. [`readiness`] and [`metrics`] are served by the
//! shared `vramfit_runtime::admin_server`.
#![forbid(unsafe_code)]

pub mod app;
pub mod backoff;
pub mod cache_loop;
pub mod cli;
pub mod credential;
pub mod metrics;
pub mod plan;
pub mod readiness;
pub mod recheck;
pub mod serve_mount;
pub mod status;
pub mod status_writer;
pub mod watch;
