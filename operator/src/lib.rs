//! vramfit's operator: turns `InferenceJob`s into GPU pods planned for the node class they
//! land on, follows each pod to its end, and retries an out-of-memory failure one step down.
//!
//! The crate is a library with a thin binary (`vramfit-operator`). Decisions are pure
//! functions, IO sits at the edges:
//!
//! * [`node_classes`]: node classes and free GPUs from Nodes, Pods and GpuNodeClasses.
//! * [`placement`]: plan every class, keep those with room, choose one (pure).
//! * [`desired_pod`]: the pod of an attempt (pure); [`pod_security`]: its security context.
//! * [`oom`]: how a pod ended: success, out of memory, other failure (pure).
//! * [`next_status`]: the job's next status, pod and events from what was observed (pure).
//! * [`conditions`]: status conditions with stable transition times (pure).
//! * [`reconcile`]: the pipeline: read → validate → decide → apply pod → patch status.
//! * [`controller`]: the kube-runtime `Controller` wiring, watches and stores.
//! * [`slim`]: the pods and jobs the watches parse: only what vramfit reads.
//! * [`events`], [`metrics`], [`health`], [`leader`], [`reservations`]: the edges
//!   (the process runtime, `/healthz`, `/readyz` and `/metrics` included, is `vramfit-runtime`).
#![forbid(unsafe_code)]

pub mod app;
pub mod cli;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod desired_pod;
pub mod error;
pub mod events;
pub mod fixtures;
pub mod health;
pub mod leader;
pub mod lease_fence;
pub mod metrics;
pub mod next_status;
pub mod node_classes;
pub mod oom;
pub mod permissions;
pub mod placement;
pub mod pod_security;
pub mod reconcile;
pub mod relist;
pub mod reservations;
pub mod slim;
pub mod start_deadline;
pub mod tolerations;
pub mod watch_retry;

#[cfg(test)]
mod inventory_fuzz;
#[cfg(test)]
mod partition_tests;
#[cfg(test)]
mod reconcile_tests;
#[cfg(test)]
mod relist_tests;
#[cfg(test)]
mod start_deadline_tests;
#[cfg(test)]
mod verifier;
#[cfg(test)]
mod workload_report_tests;

pub use context::{Context, Settings, Stores};
pub use error::Error;
pub use reconcile::{error_policy, reconcile};

/// The field manager of every write (server-side apply of pods and job status).
pub const FIELD_MANAGER: &str = "vramfit-operator";
