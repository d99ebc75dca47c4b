//! The operator's errors. A reconcile error is one step's error ([`ObserveError`],
//! [`BuildError`], [`ApplyError`], [`StatusError`]) wrapped in [`Error`](enum@Error), which
//! gives it a stable label for `vramfit_reconcile_errors_total{kind}`; every reconcile error is
//! retried with a per-job exponential backoff (an invalid spec is not an error: it is reported
//! in status and waits for a change). Errors that end the process are [`StartupError`]s.
use thiserror::Error;

mod steps;

pub use steps::{
    ApplyError, BuildError, GroupApplyError, ObserveError, ScaleError, ServingApplyError,
    StatusError, TakenObject,
};

/// What can make one reconcile fail.
#[derive(Debug, Error)]
pub enum Error {
    /// Reading the job and the caches.
    #[error(transparent)]
    Observe(#[from] ObserveError),
    /// Building the attempt's pod.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// Writing pods.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// Writing the job's status.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// The reconcile panicked (a bug): contained to this job, which is retried with backoff.
    #[error("the reconcile panicked: {0}")]
    Panicked(String),
    /// Writing a served job's Service or PodDisruptionBudget.
    #[error(transparent)]
    Serving(#[from] ServingApplyError),
    /// A group's Service, NetworkPolicy or pods could not be written.
    #[error(transparent)]
    Group(#[from] GroupApplyError),
    /// The autoscaler's write of the replicas.
    #[error(transparent)]
    Scale(#[from] ScaleError),
}

impl Error {
    /// A stable, low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Observe(ObserveError::MissingObjectKey(_))
            | Error::Build(BuildError::MissingObjectKey(_)) => "missing_object_key",
            Error::Build(BuildError::InvalidClass(_)) => "invalid_class",
            Error::Build(BuildError::Serialize(_)) => "serialize",
            Error::Apply(ApplyError::PodApply { .. }) => "pod_apply",
            Error::Apply(ApplyError::PodNameTaken { .. }) => "pod_name_taken",
            Error::Apply(ApplyError::PodDelete { .. }) => "pod_delete",
            Error::Apply(ApplyError::ModelVolume { .. }) => "model_volume_create",
            Error::Apply(ApplyError::ModelClaimTaken { .. }) => "model_claim_taken",
            Error::Status(StatusError::StatusPatch { .. }) => "status_patch",
            Error::Panicked(_) => "panic",
            Error::Serving(error) => error.metric_label(),
            Error::Group(error) => error.metric_label(),
            Error::Scale(_) => "scale_patch",
        }
    }

    /// Whether the API answered that the request conflicts or the server is overloaded (a
    /// retry soon is expected to succeed).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Apply(error) => error.is_transient(),
            Error::Status(StatusError::StatusPatch { source, .. }) => is_transient(source),
            Error::Serving(error) => error.is_transient(),
            Error::Group(error) => error.is_transient(),
            Error::Scale(error) => is_transient(&error.source),
            Error::Observe(_) | Error::Build(_) | Error::Panicked(_) => false,
        }
    }
}

/// Whether an API error is worth a quick retry: a conflict, throttling, a server error, or no
/// answer at all.
pub fn is_transient(source: &kube::Error) -> bool {
    match source {
        kube::Error::Api(status) => matches!(status.code, 409 | 429 | 500..=599),
        _ => true,
    }
}

/// What ends the process: start-up, leader election, the admin server.
#[derive(Debug, Error)]
pub enum StartupError {
    /// An API call failed.
    #[error("{context}: {source}")]
    Kube {
        /// What was being done.
        context: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Leader election failed or the lease was lost.
    #[error("leader election: {0}")]
    Lease(String),
    /// The controller ended without being asked to stop (it panicked, or its streams ended):
    /// the process exits so that `/readyz` and the Lease do not claim work nobody does.
    #[error("the controller ended unexpectedly: {0}")]
    ControllerEnded(String),
    /// The `/metrics`, `/healthz`, `/readyz` server ended while the operator ran: the
    /// kubelet's probes would see nothing, so the process exits.
    #[error("the metrics and health server ended: {0}")]
    AdminServerEnded(String),
    /// The metrics server could not start.
    #[error("metrics server on {addr}: {source}")]
    Http {
        /// Address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_stable() {
        assert_eq!(
            Error::from(ObserveError::MissingObjectKey("metadata.uid")).metric_label(),
            "missing_object_key"
        );
        let invalid = Error::from(BuildError::InvalidClass("x".into()));
        assert_eq!(invalid.metric_label(), "invalid_class");
        assert!(!invalid.is_transient());
        let taken = Error::from(ApplyError::PodNameTaken { pod: "p".into() });
        assert_eq!(taken.metric_label(), "pod_name_taken");
        assert_eq!(
            taken.to_string(),
            "pod p exists but this job does not own it",
            "wrapping keeps the step's message"
        );
    }
}
