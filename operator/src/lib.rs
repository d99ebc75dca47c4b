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
//! * [`serving`]: the pipeline of served jobs (`spec.serve`): replicas behind one Service.
//! * [`controller`]: the kube-runtime `Controller` wiring, watches and stores.
//! * [`slim`]: the pods and jobs the watches parse: only what vramfit reads.
//! * [`events`], [`metrics`], [`health`], [`leader`], [`reservations`]: the edges
//!   (the process runtime, `/healthz`, `/readyz` and `/metrics` included, is `vramfit-runtime`).
#![forbid(unsafe_code)]

pub mod app;
pub mod attempts;
pub mod backoff;
pub mod batch;
pub mod cache_sync;
pub mod capacity;
pub mod cli;
pub mod context;
pub mod controller;
pub mod dispatch;
pub mod error;
pub mod events;
// Faults for tests (a panicking reconcile, a panicking controller): unit tests and the
// `fault-injection` feature only, never a release build.
#[cfg(any(test, feature = "fault-injection"))]
pub mod fault_injection;
// Test fixtures: for unit tests, and for the benchmarks through the `fixtures` feature; never
// in the shipped binary.
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod group;
pub mod health;
pub mod hub_models;
pub mod job_gauges;
pub mod leader;
pub mod lease_fence;
pub mod metrics;
pub mod model_cache;
pub mod observe;
pub mod ownership;
pub mod permissions;
pub mod placement;
pub mod pod;
pub mod replicas;
pub mod served;
pub mod serving_state;
pub mod settings;
pub mod stores;
pub mod tolerations;
pub mod writes;

#[cfg(test)]
mod containment_tests;
#[cfg(test)]
mod relist_tests;
#[cfg(test)]
mod verifier;

pub use context::Context;
pub use dispatch::{error_policy, reconcile};
pub use error::Error;
pub use settings::Settings;
pub use stores::Stores;

/// The field manager of every write (server-side apply of pods and job status).
pub const FIELD_MANAGER: &str = "vramfit-operator";
