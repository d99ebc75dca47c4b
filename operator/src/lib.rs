//! vramfit's operator: turns `InferenceJob`s into GPU pods planned for the node class they
//! land on, follows each pod to its end, and retries an out-of-memory failure one step down.
//!
//! The crate is a library with a thin binary (`vramfit-operator`). Decisions are pure
//! functions, IO sits at the edges. The modules stand in layers, top first; a module imports
//! only modules on lower rows, never a peer (operator/README.md, "Layers", checked by
//! `operator/tests/layers.rs`):
//!
//! * process and wiring: [`app`] (flags, CRDs awaited, leader election, shutdown),
//!   [`controller`] (the kube-runtime `Controller`, its watches and wake streams), [`cli`],
//!   [`leader`].
//! * dispatch: [`dispatch`] hands a job to its pipeline, contains a panic to its job and
//!   retries with backoff ([`reconcile`], [`error_policy`]).
//! * pipelines: [`batch`] (one-pod batch and fine-tuning attempts), [`served`] (`spec.serve`:
//!   replicas behind one Service), [`group`] (attempts and replicas that span nodes),
//!   [`cache_sync`] (the leader's node model cache sync).
//! * writes: [`writes`]: pods, a job's own Services, budgets and policies, model volumes,
//!   status and events, with field ownership.
//! * decisions (pure): [`attempts`] (a batch attempt's state machine), [`replicas`] (served
//!   replicas').
//! * observation: [`observe`], a job's snapshot from the caches.
//! * node model cache: [`model_cache`], which node caches hold or should hold a model, and
//!   whether a pod mounts, waits for or fetches it (pure).
//! * shared state: [`context`] ([`Context`]); [`serving_state`] (served jobs' caches and
//!   waiting jobs), [`placement`] (plan every class, choose one; pure).
//! * cluster and counters: [`capacity`] (node classes, free GPUs, reservations; pure),
//!   [`metrics`].
//! * building blocks: [`pod`] (a pod built and read back; pure), [`ownership`] (whose object
//!   it is; pure), [`settings`] ([`Settings`]), [`job_gauges`].
//! * foundations: [`stores`] (the caches and their reflectors), [`error`] (each step's
//!   error), [`events`], [`backoff`], [`hub_models`], [`tolerations`], [`health`],
//!   [`lease_fence`], [`permissions`]; the process runtime (`/healthz`, `/readyz`,
//!   `/metrics`) is `vramfit-runtime`.
#![forbid(unsafe_code)]

pub mod app;
pub mod attempts;
pub mod autoscale;
pub mod autoscaling;
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
pub mod load_reader;
pub mod metrics;
pub mod model_cache;
pub mod observe;
pub mod ownership;
pub mod permissions;
pub mod placement;
pub mod pod;
pub mod replicas;
pub mod scaling_state;
pub mod served;
pub mod served_adapters;
pub mod serving_state;
pub mod settings;
pub mod stores;
pub mod tolerations;
pub mod writes;

#[cfg(test)]
mod autoscale_tests;
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

/// The field manager of the autoscaler's writes of `spec.serve.replicas`, apart from the
/// operator's own so that `kubectl get -o yaml --show-managed-fields` says who scaled.
pub const AUTOSCALER_FIELD_MANAGER: &str = "vramfit-autoscaler";
