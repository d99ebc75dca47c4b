//! What one reconcile writes, decided by the pure step and carried out by the write steps
//! ([`crate::writes::pods`], [`crate::writes::status`]).
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use vramfit_api::workload_report::JobResult;
use vramfit_api::{InferenceJob, InferenceJobStatus, Plan};

use crate::events::JobEvent;
use crate::model_cache::mount::ModelVolume;

/// What to write: the status, a pod to delete and one to create or apply, the events.
#[derive(Clone, Debug)]
pub struct Decision {
    /// The status to hold (written when it differs from the job's).
    pub status: InferenceJobStatus,
    /// A pod to delete first (the replaced attempt's).
    pub delete_pod: Option<String>,
    /// A pod to apply.
    pub apply_pod: Option<Pod>,
    /// The pod is a new one (an attempt's first pod, or one that was gone): it is created,
    /// so that a pod of the same name that is not this job's is reported, not taken over.
    pub create_pod: bool,
    /// The plan of the applied pod (for the reservation ledger).
    pub applied_plan: Option<Plan>,
    /// The model volume and claim the created pod mounts, created before it.
    pub volumes: Vec<ModelVolume>,
    /// Events to publish once the writes succeeded.
    pub events: Vec<JobEvent>,
    /// Kinds of step taken down (`vramfit_fallbacks_total{reason}`).
    pub steps: Vec<&'static str>,
    /// `(class, dtype)` of attempts whose output check found garbage
    /// (`vramfit_bad_outputs_total`).
    pub bad_outputs: Vec<(String, String)>,
    /// `(class, result, hourly price in cents)` of a job that just finished with the
    /// workload's figures.
    pub results: Vec<(String, JobResult, u32)>,
    /// When to look again.
    pub action: Action,
}

impl Decision {
    /// Whether the status differs from the job's.
    pub fn status_changed(&self, job: &InferenceJob) -> bool {
        job.status.as_ref() != Some(&self.status)
    }
}
