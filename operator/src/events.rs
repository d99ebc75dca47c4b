//! Kubernetes Events (events.k8s.io/v1) on InferenceJobs: one per phase transition and per
//! step down. Publishing is best effort: a failed event is logged, never fails a reconcile.
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

/// Event reasons.
pub mod reasons {
    /// A plan was chosen for an attempt (note: class and plan summary).
    pub const PLANNED: &str = "Planned";
    /// The attempt's pod was created.
    pub const POD_CREATED: &str = "PodCreated";
    /// The pod runs.
    pub const RUNNING: &str = "Running";
    /// The job finished successfully.
    pub const SUCCEEDED: &str = "Succeeded";
    /// An attempt ran out of memory (Warning).
    pub const OUT_OF_MEMORY: &str = "OutOfMemory";
    /// Kubernetes ended an attempt's pod (eviction, preemption, drain, admission) (Warning).
    pub const DISRUPTED: &str = "Disrupted";
    /// The next attempt steps down (note: the step).
    pub const STEPPED_DOWN: &str = "SteppedDown";
    /// The job failed for good (Warning).
    pub const FAILED: &str = "Failed";
    /// No node class can run the job now (Warning).
    pub const UNSCHEDULABLE: &str = "Unschedulable";
    /// The spec cannot be planned (Warning).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The API server refused the attempt's pod (quota, pod security, an invalid volume…)
    /// (Warning).
    pub const POD_REJECTED: &str = "PodRejected";
}

/// An event to publish on a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEvent {
    /// Warning or Normal.
    pub warning: bool,
    /// One of [`reasons`].
    pub reason: &'static str,
    /// What happened, one line.
    pub note: String,
    /// The pod the event is about, if any (the event's `related` object). Besides pointing
    /// at the pod, it keeps the events of different attempts apart: the recorder folds events
    /// with the same reason and objects into one series for 6 minutes, keeping the first note.
    pub pod: Option<String>,
}

impl JobEvent {
    /// A Normal event.
    pub fn normal(reason: &'static str, note: impl Into<String>) -> Self {
        Self {
            warning: false,
            reason,
            note: note.into(),
            pod: None,
        }
    }

    /// A Warning event.
    pub fn warning(reason: &'static str, note: impl Into<String>) -> Self {
        Self {
            warning: true,
            reason,
            note: note.into(),
            pod: None,
        }
    }

    /// The same event, about `pod`.
    pub fn about(mut self, pod: impl Into<String>) -> Self {
        self.pod = Some(pod.into());
        self
    }
}

/// events.k8s.io/v1 accepts at most 1024 bytes of note; keep a margin.
const MAX_NOTE_BYTES: usize = 1000;

/// `note` cut to at most [`MAX_NOTE_BYTES`] bytes, on a character boundary (progress bars and
/// `…` are several bytes each: a cut by characters could still be rejected).
pub fn fit_note(note: &str) -> &str {
    if note.len() <= MAX_NOTE_BYTES {
        return note;
    }
    let mut end = MAX_NOTE_BYTES;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    &note[..end]
}

/// Publishes `events` on the job `reference`; failures are logged and counted by the caller.
/// Returns how many were published.
pub async fn publish(
    recorder: &Recorder,
    reference: &ObjectReference,
    events: &[JobEvent],
) -> usize {
    let mut published = 0;
    for event in events {
        let note = fit_note(&event.note).to_string();
        let result = recorder
            .publish(
                &Event {
                    type_: if event.warning {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    },
                    reason: event.reason.to_string(),
                    note: Some(note),
                    action: "Reconcile".to_string(),
                    secondary: event.pod.as_ref().map(|name| ObjectReference {
                        api_version: Some("v1".to_string()),
                        kind: Some("Pod".to_string()),
                        name: Some(name.clone()),
                        namespace: reference.namespace.clone(),
                        ..ObjectReference::default()
                    }),
                },
                reference,
            )
            .await;
        match result {
            Ok(()) => published += 1,
            Err(error) => {
                tracing::warn!(%error, reason = event.reason, "could not publish an event")
            }
        }
    }
    published
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_by_bytes_on_a_character_boundary() {
        assert_eq!(fit_note("short"), "short");
        let bar = "█".repeat(600); // 3 bytes each: 1800 bytes in 600 characters
        let cut = fit_note(&bar);
        assert!(cut.len() <= MAX_NOTE_BYTES, "{}", cut.len());
        assert_eq!(cut.chars().count(), MAX_NOTE_BYTES / 3);
    }
}
