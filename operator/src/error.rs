//! The operator's errors. Each has a stable label for `vramfit_reconcile_errors_total{kind}`
//! and decides its retry: every reconcile error is retried with a per-job exponential backoff
//! (an invalid spec is not an error: it is reported in status and waits for a change).
use thiserror::Error;

/// What can go wrong in a reconcile or at start-up.
#[derive(Debug, Error)]
pub enum Error {
    /// The pod of an attempt could not be applied.
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
    /// The job's status could not be written.
    #[error("writing the status of {job}: {source}")]
    StatusPatch {
        /// `namespace/name` of the job.
        job: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// An object from the API lacks a field every object has.
    #[error("the object has no {0}")]
    MissingObjectKey(&'static str),
    /// A node class that cannot place pods.
    #[error("{0}")]
    InvalidClass(String),
    /// Serialization of an object vramfit built.
    #[error("serializing: {0}")]
    Serialize(#[source] serde_json::Error),
    /// A CRD is not installed or not established.
    #[error("CRD {name} is not ready: {reason}")]
    CrdNotReady {
        /// The CRD.
        name: String,
        /// Why.
        reason: String,
    },
    /// Another API call failed (start-up, leader election).
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

impl Error {
    /// A stable, low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::PodApply { .. } => "pod_apply",
            Error::PodNameTaken { .. } => "pod_name_taken",
            Error::PodDelete { .. } => "pod_delete",
            Error::StatusPatch { .. } => "status_patch",
            Error::MissingObjectKey(_) => "missing_object_key",
            Error::InvalidClass(_) => "invalid_class",
            Error::Serialize(_) => "serialize",
            Error::CrdNotReady { .. } => "crd_not_ready",
            Error::Kube { .. } => "kube",
            Error::Lease(_) => "lease",
            Error::Http { .. } => "http",
        }
    }

    /// The API server's message when it refused a pod for good (403 quota or pod security,
    /// 422 invalid, 400 bad request…): the user has to change something.
    pub fn pod_rejection(&self) -> Option<String> {
        match self {
            Error::PodApply {
                source: kube::Error::Api(status),
                ..
            } if (400..500).contains(&status.code) && !self.is_transient() => {
                Some(format!("{} ({})", status.message, status.code))
            }
            _ => None,
        }
    }

    /// Whether the API answered that the request conflicts or the server is overloaded (a
    /// retry soon is expected to succeed).
    pub fn is_transient(&self) -> bool {
        let source = match self {
            Error::PodApply { source, .. }
            | Error::PodDelete { source, .. }
            | Error::StatusPatch { source, .. }
            | Error::Kube { source, .. } => source,
            _ => return false,
        };
        match source {
            kube::Error::Api(status) => matches!(status.code, 409 | 429 | 500..=599),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_stable() {
        assert_eq!(
            Error::MissingObjectKey("metadata.uid").metric_label(),
            "missing_object_key"
        );
        assert_eq!(
            Error::InvalidClass("x".into()).metric_label(),
            "invalid_class"
        );
        assert!(!Error::InvalidClass("x".into()).is_transient());
    }
}
