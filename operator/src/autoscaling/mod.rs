//! The autoscaler's decision (pure): how many replicas a served job's load asks for, measured
//! on each replica against the concurrency planned for its class, then held to the job's
//! bounds and to the stabilization windows and rate limits of `serve.autoscaling.behavior`,
//! which mean what HPA's `behavior` means (docs/autoscaling.md).
//!
//! `load.rs` turns the replicas' readings into the job's load; `recommend.rs` the load into a
//! replica count; `behavior.rs` holds that count to the windows and rates; `decide.rs` puts
//! them in order, with a person's change and an HPA or KEDA autoscaler taken into account;
//! `report.rs` what a pass puts in the job's status; `runtime_metrics.rs` a replica's load read
//! from its runtime's own metrics.
pub mod behavior;
pub mod decide;
pub mod load;
pub mod recommend;
pub mod report;
pub mod runtime_metrics;

#[cfg(test)]
mod tests;

pub use behavior::{History, Rules};
pub use decide::{Decision, Inputs, Outcome, decide};
pub use load::{Reading, Replica, ReplicaState};
pub use report::Report;
