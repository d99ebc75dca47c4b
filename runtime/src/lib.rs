//! The process runtime shared by vramfit's long-running binaries (`vramfit-agent` and
//! `vramfit-operator`):
//!
//! * [`logging`]: `tracing` set-up (`RUST_LOG`, `--log-format text|json`, stderr).
//! * [`shutdown`]: stop on SIGTERM or SIGINT, fanned out to every task.
//! * [`admin_server`]: `/healthz`, `/readyz` and `/metrics`, with graceful shutdown; each
//!   binary supplies what readiness means and what the metrics are.
#![forbid(unsafe_code)]

pub mod admin_server;
pub mod logging;
pub mod shutdown;
