//! Each step's error: reading the caches ([`ObserveError`]), building a pod ([`BuildError`]),
//! writing pods ([`ApplyError`]), the status ([`StatusError`]), a served job's or a group's own
//! objects ([`ServingApplyError`], [`GroupApplyError`]). Each has a stable metric label through
//! [`super::Error`] and says whether a retry soon is expected to succeed.
use thiserror::Error;

use super::is_transient;

/// Why a job could not be observed.
#[derive(Debug, Error)]
pub enum ObserveError {
    /// An object from the API lacks a field every object has.
    #[error("the object has no {0}")]
    MissingObjectKey(&'static str),
}

/// Why the pod of an attempt could not be built.
#[derive(Debug, Error)]
pub enum BuildError {
    /// The job lacks a field every object has.
    #[error("the object has no {0}")]
    MissingObjectKey(&'static str),
    /// A node class that cannot place pods.
    #[error("{0}")]
    InvalidClass(String),
    /// Serialization of the plan or the pod spec.
    #[error("serializing: {0}")]
    Serialize(#[source] serde_json::Error),
}

/// Why a pod write failed.
#[derive(Debug, Error)]
pub enum ApplyError {
    /// The pod of an attempt could not be created or applied.
    #[error("applying pod {pod}: {source}")]
    PodApply {
        /// The pod.
        pod: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A new attempt's pod name is taken by a pod this job does not control.
    #[error("pod {pod} exists but this job does not own it")]
    PodNameTaken {
        /// The pod.
        pod: String,
    },
    /// A replaced pod could not be deleted.
    #[error("deleting pod {pod}: {source}")]
    PodDelete {
        /// The pod.
        pod: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A cached model's PersistentVolume or claim could not be created (the pod that mounts
    /// it is not created either).
    #[error("creating {object}: {source}")]
    ModelVolume {
        /// `PersistentVolume <name>` or `PersistentVolumeClaim <name>`.
        object: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The claim name of a cached model is held by a claim that is not the job's.
    #[error("PersistentVolumeClaim {claim} exists but this job does not own it")]
    ModelClaimTaken {
        /// The claim.
        claim: String,
    },
}

impl ApplyError {
    /// The API server's message when it refused a pod for good (403 quota or pod security,
    /// 422 invalid, 400 bad request…): the user has to change something.
    pub fn pod_rejection(&self) -> Option<String> {
        match self {
            ApplyError::PodApply {
                source: kube::Error::Api(status),
                ..
            } if (400..500).contains(&status.code) && !self.is_transient() => {
                Some(format!("{} ({})", status.message, status.code))
            }
            _ => None,
        }
    }

    /// Whether a retry soon is expected to succeed (see [`crate::error::is_transient`]).
    pub fn is_transient(&self) -> bool {
        match self {
            ApplyError::PodApply { source, .. }
            | ApplyError::PodDelete { source, .. }
            | ApplyError::ModelVolume { source, .. } => crate::error::is_transient(source),
            ApplyError::PodNameTaken { .. } | ApplyError::ModelClaimTaken { .. } => false,
        }
    }
}

/// Why a status write failed.
#[derive(Debug, Error)]
pub enum StatusError {
    /// The job's status could not be written.
    #[error("writing the status of {job}: {source}")]
    StatusPatch {
        /// `namespace/name` of the job.
        job: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Why the autoscaler's write of `spec.serve.replicas` (through the scale subresource) failed.
#[derive(Debug, Error)]
#[error("scaling {job} to {replicas} replicas: {source}")]
pub struct ScaleError {
    /// `namespace/name` of the job.
    pub job: String,
    /// The replicas it was to have.
    pub replicas: u32,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// Why a served job's Service or PodDisruptionBudget write failed.
#[derive(Debug, Error)]
pub enum ServingApplyError {
    /// The Service could not be applied.
    #[error("applying Service {name}: {source}")]
    ServiceApply {
        /// The Service.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The PodDisruptionBudget could not be applied.
    #[error("applying PodDisruptionBudget {name}: {source}")]
    PdbApply {
        /// The budget.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// An object of the name of the job's Service or PodDisruptionBudget exists and is not the
    /// job's: it is left untouched, and the job says so.
    #[error("{} {name} exists but this job does not own it", object.kind())]
    NameTaken {
        /// Which object.
        object: TakenObject,
        /// Its name.
        name: String,
    },
    /// The PodDisruptionBudget could not be deleted.
    #[error("deleting PodDisruptionBudget {name}: {source}")]
    PdbDelete {
        /// The budget.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl ServingApplyError {
    /// A stable label for `vramfit_reconcile_errors_total{kind}`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ServingApplyError::ServiceApply { .. } => "service_apply",
            ServingApplyError::PdbApply { .. } => "pdb_apply",
            ServingApplyError::PdbDelete { .. } => "pdb_delete",
            ServingApplyError::NameTaken {
                object: TakenObject::Service,
                ..
            } => "service_name_taken",
            ServingApplyError::NameTaken {
                object: TakenObject::PodDisruptionBudget,
                ..
            } => "pdb_name_taken",
        }
    }

    /// Whether a retry soon is expected to succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            ServingApplyError::ServiceApply { source, .. }
            | ServingApplyError::PdbApply { source, .. }
            | ServingApplyError::PdbDelete { source, .. } => is_transient(source),
            ServingApplyError::NameTaken { .. } => false,
        }
    }
}

/// Why a group's Service or NetworkPolicy write failed.
#[derive(Debug, Error)]
pub enum GroupApplyError {
    /// The API server refused a write of the object, or could not be reached.
    #[error("writing {kind} {name}: {source}")]
    Object {
        /// `Service` or `NetworkPolicy`.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// An object of the group's name exists and is not the job's: left untouched, and the
    /// group's pods are not created.
    #[error("{kind} {name} exists but this job does not own it")]
    NameTaken {
        /// `Service` or `NetworkPolicy`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// A pod write failed.
    #[error(transparent)]
    Pod(#[from] ApplyError),
}

impl GroupApplyError {
    /// A stable label for `vramfit_reconcile_errors_total{kind}`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            GroupApplyError::Object {
                kind: "Service", ..
            } => "service_apply",
            GroupApplyError::Object { .. } => "network_policy_apply",
            GroupApplyError::NameTaken {
                kind: "Service", ..
            } => "service_name_taken",
            GroupApplyError::NameTaken { .. } => "network_policy_name_taken",
            GroupApplyError::Pod(ApplyError::PodApply { .. }) => "pod_apply",
            GroupApplyError::Pod(ApplyError::PodNameTaken { .. }) => "pod_name_taken",
            GroupApplyError::Pod(ApplyError::PodDelete { .. }) => "pod_delete",
            GroupApplyError::Pod(ApplyError::ModelVolume { .. }) => "model_volume_create",
            GroupApplyError::Pod(ApplyError::ModelClaimTaken { .. }) => "model_claim_taken",
        }
    }

    /// Whether a retry soon is expected to succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            GroupApplyError::Object { source, .. } => is_transient(source),
            GroupApplyError::NameTaken { .. } => false,
            GroupApplyError::Pod(error) => error.is_transient(),
        }
    }
}

/// Which of a served job's objects has a name someone else holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TakenObject {
    /// The Service.
    Service,
    /// The PodDisruptionBudget.
    PodDisruptionBudget,
}

impl TakenObject {
    /// The kind, as Kubernetes spells it.
    pub fn kind(self) -> &'static str {
        match self {
            TakenObject::Service => "Service",
            TakenObject::PodDisruptionBudget => "PodDisruptionBudget",
        }
    }

    pub(crate) fn reason(self) -> vramfit_api::conditions::Reason {
        match self {
            TakenObject::Service => vramfit_api::conditions::Reason::ServiceNameTaken,
            TakenObject::PodDisruptionBudget => {
                vramfit_api::conditions::Reason::PodDisruptionBudgetNameTaken
            }
        }
    }
}
