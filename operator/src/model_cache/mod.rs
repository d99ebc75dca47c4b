//! The node-local model cache, operator side (docs/model-cache-placement.md): which models each
//! GPU node's cache should hold ([`wanted`], written by [`crate::cache_sync`] into each node's
//! `ModelCache`), and, when a pod is placed, whether it mounts the model a node holds, waits
//! while a node downloads it, or fetches it itself ([`placement`], [`mount`]); a pod's weights
//! source as its job's status says ([`weights`]).
//!
//! Served replicas (hooked in by `replicas/cache_hook.rs`: a replica of one pod, or a group
//! of pods decided as [`group_placement`] decides a batch group; `group/served.rs` gives a
//! late leader its workers' mount), batch attempts ([`attempt_placement`], hooked in by
//! `attempts/cache_hook.rs`) and batch groups ([`group_placement`]: all of a group's pods
//! mount or none; `group/cache_hook.rs`) use the cache. Everything here is off unless the
//! operator runs with `--model-cache`.
//!
//! | module | holds | API |
//! |---|---|---|
//! | [`job_model`] | the model a job would take from the cache | pure |
//! | [`view`] | what placement reads of the caches and of each node's free GPUs | pure |
//! | [`wanted`] | the desired `spec.models` of every node | pure |
//! | [`placement`] | the class a pod prefers and where the weights of one pod or N pods come from | pure |
//! | [`attempt_placement`] | a batch attempt's decision, and the start of its wait read back from status | pure |
//! | [`group_placement`] | a group's decision (N holders for N pods: a batch group, a served replica that spans nodes), a late leader mounting as its workers | pure |
//! | [`mount`] | the PersistentVolume, the claim, the pod's mount, affinity and env; a metadata-only apply | pure |
//! | [`weights`] | a pod's `weights` status, read back from it | pure |
//! | [`changes`] | which ModelCache changes start a sync and wake waiting jobs (not a bare heartbeat) | pure |
//!
//! Its IO sits above it: the leader's task that writes the ModelCache specs and sweeps released
//! volumes ([`crate::cache_sync`]), and a decision's volumes and claims, created before its pods
//! ([`crate::writes::volumes`]).
use std::time::Duration;

pub mod attempt_placement;
#[cfg(test)]
mod batch_tests;
pub mod changes;
pub mod group_placement;
#[cfg(test)]
mod group_tests;
pub mod job_model;
pub mod mount;
pub mod placement;
#[cfg(test)]
mod served_group_tests;
#[cfg(test)]
mod sync_input_tests;
#[cfg(test)]
pub(crate) mod tests;
pub mod view;
pub mod wanted;
pub mod weights;

/// The annotation of a replica pod that says where its weights come from (a
/// `WeightsSource` value): the decision survives an operator restart.
pub const WEIGHTS_SOURCE_ANNOTATION: &str = "vramfit.io/weights-source";

/// The annotation of a replica pod that fetches its model itself though its job uses the
/// cache: why (read back into the replica's `weights.message`).
pub const WEIGHTS_NOTE_ANNOTATION: &str = "vramfit.io/weights-note";

/// How often the leader's sync task writes the ModelCache specs and sweeps volumes.
pub const SYNC_PERIOD: Duration = Duration::from_secs(10);

/// How soon a replica that waits for its model is looked at again.
pub const WAIT_REQUEUE: Duration = Duration::from_secs(10);

/// A node agent's status older than this is not trusted (the agent may be gone): its models
/// are neither mounted nor waited for.
pub const HEARTBEAT_TRUST: Duration = Duration::from_secs(600);

/// The replica line's `reason` while it waits for a node to download its model.
pub const WAITING_REASON: &str = "WaitingForModel";

/// Marks a batch job (or group) whose next attempt waits for its model as woken when a node's
/// cache changes (with the served jobs that wait: within a second of the model's `Ready`,
/// not at its next look), or no longer.
pub fn wake_while_waiting(
    ctx: &crate::context::Context,
    job: &vramfit_api::InferenceJob,
    status: &vramfit_api::InferenceJobStatus,
) {
    let Some(namespace) = kube::ResourceExt::namespace(job) else {
        return;
    };
    let key = kube::runtime::reflector::ObjectRef::new(&kube::ResourceExt::name_any(job))
        .within(&namespace);
    ctx.serving
        .waiting()
        .set(key, status.replicas_waiting_for_model.is_some());
}

/// Counts a created replica pod by where its weights come from
/// (`vramfit_replica_weights_total{source}`), when it says so (the cache is on for its job).
pub fn count_created(ctx: &crate::context::Context, pod: &k8s_openapi::api::core::v1::Pod) {
    if let Some(source) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(WEIGHTS_SOURCE_ANNOTATION))
    {
        ctx.metrics.serving().count_weights(source);
    }
}
