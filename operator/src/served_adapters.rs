//! `serve.adapters` (docs/serving.md): each adapter resolved from the fine-tuning job it names,
//! read from the job cache (never the API server), before a served job is planned.
//!
//! Accepted, the job is planned and built with them: the list in `status.adapters` (which the
//! planner reads back, [`attach`]), and each tuning job's output volume copied into the pods
//! as `vramfit-adapter-<name>` (mounted read-only by the pod build). Refused, the job is held:
//! its pods are left as they are, serving the list last accepted, and `AdaptersReady=False`
//! says why until the tuning job or the list changes ([`RECHECK`]).
use std::time::Duration;

use k8s_openapi::api::core::v1::Volume;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::{ObjectRef, Store};
use vramfit_api::adapters::{ADAPTER_VOLUME_PREFIX, ResolvedAdapter, adapter_volume_name};
use vramfit_api::conditions::{self, ConditionType, ConditionsUpdate, Reason};
use vramfit_api::{InferenceJob, InferenceJobStatus, Phase};
use vramfit_planner::JobInput;
use vramfit_planner::adapters::{AdapterRefusal, Mode, from_tuning_job};

use crate::stores::cached_job::CachedJob;

/// How soon a held job looks at its tuning jobs again: a tuning job that succeeds, or is
/// created, does not wake the served jobs that name it.
pub const RECHECK: Duration = Duration::from_secs(20);

/// What a reconcile does about `serve.adapters`.
pub enum AdapterStep {
    /// The job names no adapter.
    None,
    /// Every adapter accepted: the job with the list in `status.adapters` and the tuning jobs'
    /// output volumes among its pod volumes; `changed` when the list differs from the one
    /// last recorded.
    Ready {
        /// The job to plan and build from.
        filled: Box<InferenceJob>,
        /// The accepted list differs from `status.adapters`.
        changed: bool,
    },
    /// An adapter refused: the condition's reason and message.
    Refused {
        /// Why, as the condition's reason.
        reason: Reason,
        /// One line naming the adapter and what to do.
        message: String,
    },
}

/// Resolves every adapter of a served `job` from the fine-tuning jobs in `jobs` (its own
/// namespace only). Reads the cache.
pub fn prepare(job: &InferenceJob, jobs: &Store<CachedJob>) -> AdapterStep {
    let Some(serve) = job.spec.serve.as_ref().filter(|s| !s.adapters.is_empty()) else {
        return AdapterStep::None;
    };
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    let template = job.spec.pod.clone().unwrap_or_default();
    if let Some(taken) = template
        .volumes
        .iter()
        .find(|v| v.name.starts_with(ADAPTER_VOLUME_PREFIX))
    {
        return AdapterStep::Refused {
            reason: Reason::AdapterVolumeNameTaken,
            message: format!(
                "pod volume {} is named as vramfit names an adapter's volume ({ADAPTER_VOLUME_PREFIX}<name>): rename it",
                taken.name
            ),
        };
    }
    let mut resolved = Vec::with_capacity(serve.adapters.len());
    let mut volumes = Vec::with_capacity(serve.adapters.len());
    for adapter in &serve.adapters {
        let tuning = jobs
            .get(&ObjectRef::new(&adapter.tuning_job.name).within(namespace))
            .and_then(|cached| cached.job().ok());
        match from_tuning_job(adapter, job, tuning.as_ref(), Mode::Cluster) {
            Ok(found) => {
                // Accepted: the tuning job exists and names its output volume.
                let source = tuning.as_ref().and_then(output_volume);
                let Some(source) = source else {
                    return AdapterStep::Refused {
                        reason: Reason::AdapterNoOutputVolume,
                        message: format!(
                            "adapter {}: fine-tuning job {} names an output volume its pod does not have",
                            adapter.name, adapter.tuning_job.name
                        ),
                    };
                };
                volumes.push(Volume {
                    name: adapter_volume_name(&adapter.name),
                    ..source
                });
                resolved.push(found);
            }
            Err(refusal) => return refused(refusal),
        }
    }
    let mut filled = job.clone();
    let pod = filled.spec.pod.get_or_insert_default();
    pod.volumes.extend(volumes);
    let status = filled.status.get_or_insert_default();
    let changed = status.adapters != resolved;
    status.adapters = resolved;
    AdapterStep::Ready {
        filled: Box::new(filled),
        changed,
    }
}

/// The tuning job's output volume, as its pods mount it.
fn output_volume(tuning: &InferenceJob) -> Option<Volume> {
    let name = tuning.spec.tuning.as_ref()?.output_volume.as_ref()?;
    let pod = tuning.spec.pod.as_ref()?;
    pod.volumes.iter().find(|v| &v.name == name).cloned()
}

fn refused(refusal: AdapterRefusal) -> AdapterStep {
    AdapterStep::Refused {
        reason: Reason::parse(refusal.reason).unwrap_or(Reason::AdapterNotReported),
        message: refusal.message,
    }
}

/// The planner's input with the adapters `job` was accepted with (`status.adapters`, set by
/// [`prepare`] on the job a reconcile plans from).
pub fn attach(input: &mut JobInput, job: &InferenceJob) {
    let accepted = job
        .status
        .as_ref()
        .map(|s| s.adapters.clone())
        .unwrap_or_default();
    vramfit_planner::adapters::attach(input, accepted);
}

/// Records on a decided status what [`prepare`] accepted for `job`: the list and
/// `AdaptersReady=True`; for a job without adapters, neither.
pub fn record(status: &mut InferenceJobStatus, job: &InferenceJob, now: &Time) {
    let accepted: &[ResolvedAdapter] = job.status.as_ref().map_or(&[], |s| &s.adapters);
    let names_any = job
        .spec
        .serve
        .as_ref()
        .is_some_and(|s| !s.adapters.is_empty());
    if !names_any {
        status.adapters.clear();
        status
            .conditions
            .retain(|c| c.type_ != ConditionType::AdaptersReady.as_str());
        return;
    }
    status.adapters = accepted.to_vec();
    ConditionsUpdate::new(&mut status.conditions, job.metadata.generation, now).set(
        ConditionType::AdaptersReady,
        true,
        Reason::AdaptersAccepted,
        accepted_message(accepted),
    );
    conditions::sort(&mut status.conditions);
}

/// One line: each adapter with its rank and source.
pub fn accepted_message(accepted: &[ResolvedAdapter]) -> String {
    let each: Vec<String> = accepted
        .iter()
        .map(|a| format!("{} (rank {}, {})", a.name, a.rank, a.source))
        .collect();
    format!(
        "serving {} adapter{}: {}",
        accepted.len(),
        if accepted.len() == 1 { "" } else { "s" },
        each.join(", ")
    )
}

/// The status of a job held for a refused adapter: `AdaptersReady=False` with the reason;
/// Pending if it had no phase yet; everything else (the replicas, the list last accepted) as
/// it was.
pub fn hold(job: &InferenceJob, reason: Reason, message: String, now: &Time) -> InferenceJobStatus {
    let mut status = job.status.clone().unwrap_or_default();
    status.phase.get_or_insert(Phase::Pending);
    ConditionsUpdate::new(&mut status.conditions, job.metadata.generation, now).set(
        ConditionType::AdaptersReady,
        false,
        reason,
        message,
    );
    conditions::sort(&mut status.conditions);
    status
}

#[cfg(test)]
#[path = "served_adapters_tests.rs"]
mod tests;
