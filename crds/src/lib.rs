//! vramfit's Kubernetes API, shared by the operator, the agent and the CLI.
//!
//! * [`InferenceJob`] (namespaced): what a team wants to run.
//! * [`GpuNodeClass`] (cluster-scoped): how an admin defines or overrides a class of GPU nodes.
//! * [`Plan`]: the configuration vramfit chose for a job on a node class (kept in status).
//! * [`labels`]: the node-label keys the agent writes and the operator reads, and the
//!   mapping from NVIDIA GPU Feature Discovery's labels; [`partitions`]: MIG slices and
//!   shared GPUs read from them.
//! * [`conditions`]: status condition types and reasons, and how they are set;
//!   [`AttemptOutcome`]: how an attempt ended; [`event_reasons`]: the reasons of its Events.
//! * [`pod_keys`]: the names, labels and annotations of the pods vramfit creates;
//!   [`reserved_pod_keys`]: the pod labels and annotations a job may not set.
//! * [`workload_report`]: what a workload reports in its termination message;
//!   [`training_report`]: what a fine-tuning workload reports.
//! * [`tuning`]: a fine-tuning job's section, its plan and its step-down state.
//! * [`model_cache`]: `ModelCache` (cluster-scoped, one per GPU node): the models a node's
//!   cache should hold and holds; where a replica's weights came from.
//! * [`autoscaling`]: `serve.autoscaling` and what the autoscaler last did.
//! * [`serve`]: the `serve` section of a served job and its replicas' status lines.
//! * [`workload_report`]: what a workload reports in its termination message.
#![forbid(unsafe_code)]
// kube's `printcolumn(...)` attributes repeat `type_ = …` by design; clippy reads them as duplicates.
#![allow(clippy::duplicated_attributes)]

pub mod adapters;
pub mod autoscaling;
pub mod checkpoint;
pub mod conditions;
pub mod crdgen;
pub mod event_reasons;
pub mod group;
pub mod inference_pool;
pub mod job;
pub mod labels;
pub mod model_cache;
pub mod nodeclass;
pub mod outcome;
pub mod partitions;
pub mod plan;
pub mod pod_keys;
pub mod pod_security;
pub mod reserved_env;
pub mod reserved_pod_keys;
mod schema;
pub mod schema_check;
pub mod serve;
pub mod training_report;
pub mod tuning;
mod words;
pub mod workload_report;

pub use job::*;
pub use model_cache::{ModelCache, ModelCacheSpec, ModelCacheStatus};
pub use nodeclass::*;
pub use outcome::AttemptOutcome;
pub use plan::*;
pub use pod_security::PodSecurity;
pub use serve::{ReplicaClasses, ReplicaRestart, ReplicaStatus, ServeSpec, ServiceType, SurgePod};

/// The API group of every vramfit resource.
pub const GROUP: &str = "vramfit.io";
/// The API version this crate describes.
pub const VERSION: &str = "v1alpha1";
