//! Kubernetes Events (events.k8s.io/v1) on InferenceJobs: one per placement (`PodCreated`,
//! with the plan), one per phase transition after it, and one per step down. Publishing is
//! best effort: a failed event is logged, never fails a reconcile.
//!
//! [`EventRecorder`] publishes them as kube-runtime's `Recorder` does (same fields, same
//! series: an event repeated within 6 minutes patches the first one's `series`), but keeps
//! only a name and a count per event key for those 6 minutes, not the whole event, and
//! prunes them once a minute rather than scanning on every publish under one lock: at 5,000
//! jobs the recorder's cache was several MiB and a serial point of every reconcile.
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use vramfit_api::event_reasons::EventReason;
use vramfit_api::pod_keys::fnv1a64;

/// An event to publish on a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEvent {
    /// Warning or Normal.
    pub warning: bool,
    /// Why: the word alerts match on.
    pub reason: EventReason,
    /// What happened, one line.
    pub note: String,
    /// The pod the event is about, if any (the event's `related` object). Besides pointing
    /// at the pod, it keeps the events of different attempts apart: the recorder folds events
    /// with the same reason and objects into one series for 6 minutes, keeping the first note.
    pub pod: Option<String>,
}

impl JobEvent {
    /// A Normal event.
    pub fn normal(reason: EventReason, note: impl Into<String>) -> Self {
        Self {
            warning: false,
            reason,
            note: note.into(),
            pod: None,
        }
    }

    /// A Warning event.
    pub fn warning(reason: EventReason, note: impl Into<String>) -> Self {
        Self {
            warning: true,
            reason,
            note: note.into(),
            pod: None,
        }
    }

    /// The `InvalidSpec` warning for a refusal `message`, unless the job's `InvalidSpec`
    /// condition (in `old`) already says it: one event per distinct refusal, not one per
    /// reconcile.
    pub fn invalid_spec(old: &[vramfit_api::Condition], message: &str) -> Option<Self> {
        let already =
            vramfit_api::conditions::get(old, vramfit_api::conditions::ConditionType::InvalidSpec)
                .is_some_and(|c| c.status == "True" && c.message == message);
        (!already).then(|| Self::warning(EventReason::InvalidSpec, message))
    }

    /// The `InvalidSpec` condition (`value`, reason, message) of a spec that failed its check
    /// with `refusal`, or passed it, and the warning of [`Self::invalid_spec`] for a refusal.
    pub fn spec_check(
        refusal: Option<String>,
        old: &[vramfit_api::Condition],
    ) -> (bool, vramfit_api::conditions::Reason, String, Option<Self>) {
        use vramfit_api::conditions::Reason;
        match refusal {
            None => (
                false,
                Reason::SpecValid,
                "the spec can be planned".to_string(),
                None,
            ),
            Some(message) => {
                let event = Self::invalid_spec(old, &message);
                (true, Reason::InvalidSpec, message, event)
            }
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

/// `note` cut to at most `MAX_NOTE_BYTES` (1000) bytes, on a character boundary (progress bars and
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

/// How long a repeated event folds into the first one's series (as kube-runtime's recorder).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// How often the series keys older than [`SERIES_WINDOW`] are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// The event `action` of every vramfit event.
const ACTION: &str = "Reconcile";

/// Publishes events.k8s.io/v1 Events (see the module documentation).
pub struct EventRecorder {
    client: Client,
    controller: String,
    instance: String,
    series: Mutex<SeriesKeys>,
}

/// The events published in the last [`SERIES_WINDOW`], by key: what a repeat patches.
struct SeriesKeys {
    by_key: HashMap<u64, Published>,
    pruned: Instant,
}

#[derive(Clone, Debug)]
struct Published {
    name: String,
    count: i32,
    last: Instant,
}

impl EventRecorder {
    /// A recorder reporting as `controller`, instance `instance` (else the controller).
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Self {
        Self {
            client,
            controller: controller.to_string(),
            instance: instance.unwrap_or_else(|| controller.to_string()),
            series: Mutex::new(SeriesKeys {
                by_key: HashMap::new(),
                pruned: Instant::now(),
            }),
        }
    }

    /// Event keys held for series (for tests and benchmarks).
    pub fn held(&self) -> usize {
        self.lock().by_key.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SeriesKeys> {
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Publishes `events` on the object `regarding`; failures are logged. Returns how many were
    /// published.
    pub async fn publish(&self, regarding: &ObjectReference, events: &[JobEvent]) -> usize {
        let mut published = 0;
        for event in events {
            match self.publish_one(regarding, event).await {
                Ok(()) => published += 1,
                Err(error) => {
                    tracing::warn!(%error, reason = event.reason.as_str(), "could not publish an event")
                }
            }
        }
        published
    }

    async fn publish_one(
        &self,
        regarding: &ObjectReference,
        event: &JobEvent,
    ) -> Result<(), kube::Error> {
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let related = event.pod.as_ref().map(|name| ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Pod".to_string()),
            name: Some(name.clone()),
            namespace: regarding.namespace.clone(),
            ..ObjectReference::default()
        });
        let key = series_key(regarding, related.as_ref(), event);
        let now = Instant::now();
        let repeat = {
            let mut series = self.lock();
            if series.pruned.elapsed() >= PRUNE_EVERY {
                series
                    .by_key
                    .retain(|_, p| now.duration_since(p.last) < SERIES_WINDOW);
                series.pruned = now;
            }
            series
                .by_key
                .get(&key)
                .filter(|p| now.duration_since(p.last) < SERIES_WINDOW)
                .cloned()
        };
        let stamp = MicroTime(Timestamp::now());
        let published = match repeat {
            Some(first) => {
                let count = first.count + 1;
                let patch = json!({ "series": { "count": count, "lastObservedTime": stamp } });
                api.patch(&first.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                Published {
                    name: first.name,
                    count,
                    last: now,
                }
            }
            None => {
                let name = event_name(
                    regarding.name.as_deref().unwrap_or(&self.controller),
                    stamp.0.as_nanosecond(),
                );
                let body = Event {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: regarding.namespace.clone(),
                        ..ObjectMeta::default()
                    },
                    action: Some(ACTION.to_string()),
                    reason: Some(event.reason.to_string()),
                    note: Some(fit_note(&event.note).to_string()),
                    type_: Some(if event.warning { "Warning" } else { "Normal" }.to_string()),
                    event_time: Some(stamp),
                    regarding: Some(regarding.clone()),
                    related,
                    reporting_controller: Some(self.controller.clone()),
                    reporting_instance: Some(self.instance.clone()),
                    ..Event::default()
                };
                api.create(&PostParams::default(), &body).await?;
                Published {
                    name,
                    count: 1,
                    last: now,
                }
            }
        };
        self.lock().by_key.insert(key, published);
        Ok(())
    }
}

/// The longest name the API server gives an Event (a DNS subdomain).
const MAX_EVENT_NAME: usize = 253;

/// The name of a new event about `object` at `nanos` since the epoch: `<object>.<hex>`, as
/// kube-runtime names them. A job's name may itself be 253 characters, and the API server
/// refuses a longer event name (that job got no events at all): then the object's name is cut
/// and a hash of the whole name added as a label of its own (`<cut>.<hash>.<hex>`), so that two
/// long names still make two names.
pub fn event_name(object: &str, nanos: i128) -> String {
    let stamp = format!("{nanos:x}");
    let plain = format!("{object}.{stamp}");
    if plain.len() <= MAX_EVENT_NAME {
        return plain;
    }
    let hash = format!("{:08x}", fnv1a64(object.as_bytes()) as u32);
    let room = MAX_EVENT_NAME.saturating_sub(stamp.len() + hash.len() + 2);
    let mut end = room.min(object.len());
    while !object.is_char_boundary(end) {
        end -= 1;
    }
    // A DNS subdomain's labels end with a letter or digit.
    let prefix = object[..end].trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    let prefix = if prefix.is_empty() { "job" } else { prefix };
    // The hash is a label of its own: appended to the cut one it could pass 63 characters.
    format!("{prefix}.{hash}.{stamp}")
}

/// What makes two events the same series: type, reason, the object and the related pod (as
/// kube-runtime's `EventKey`, less the note, which may differ).
fn series_key(
    regarding: &ObjectReference,
    related: Option<&ObjectReference>,
    event: &JobEvent,
) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    event.warning.hash(&mut hasher);
    event.reason.hash(&mut hasher);
    for reference in std::iter::once(Some(regarding)).chain(std::iter::once(related)) {
        let reference = reference.cloned().unwrap_or_default();
        (
            reference.kind,
            reference.namespace,
            reference.name,
            reference.uid,
        )
            .hash(&mut hasher);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, Request, Response};
    use kube::client::Body;

    fn job_reference() -> ObjectReference {
        ObjectReference {
            api_version: Some("vramfit.io/v1alpha1".into()),
            kind: Some("InferenceJob".into()),
            name: Some("chat".into()),
            namespace: Some("team-a".into()),
            uid: Some("u-1".into()),
            ..ObjectReference::default()
        }
    }

    /// Answers every request with its own body; returns (method, path, body) of each.
    async fn recorded(
        requests: usize,
        publish: impl AsyncFnOnce(&EventRecorder),
    ) -> Vec<(Method, String, serde_json::Value)> {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let recorder = EventRecorder::new(
            Client::new(service, "default"),
            "vramfit-operator",
            Some("op-0".into()),
        );
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..requests {
                let Some((request, send)) = handle.next_request().await else {
                    break;
                };
                let (method, path) = (request.method().clone(), request.uri().path().to_string());
                let bytes = request.into_body().collect_bytes().await.unwrap();
                let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                let mut answer = body.clone();
                answer["metadata"]["name"] = json!("chat.1");
                answer["apiVersion"] = json!("events.k8s.io/v1");
                answer["kind"] = json!("Event");
                answer["eventTime"] = json!("2026-01-01T00:00:00.000000Z");
                send.send_response(
                    Response::builder()
                        .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                        .unwrap(),
                );
                seen.push((method, path, body));
            }
            seen
        });
        publish(&recorder).await;
        server.await.unwrap()
    }

    #[tokio::test]
    async fn events_carry_what_kube_runtime_sets_and_repeats_patch_the_series() {
        let created =
            JobEvent::normal(EventReason::PodCreated, "pod chat-1 (attempt 1)").about("chat-1");
        let rejected = JobEvent::warning(EventReason::PodRejected, "quota").about("chat-1");
        let seen = recorded(4, async |recorder| {
            assert_eq!(
                recorder
                    .publish(&job_reference(), std::slice::from_ref(&created))
                    .await,
                1
            );
            assert_eq!(
                recorder
                    .publish(&job_reference(), std::slice::from_ref(&rejected))
                    .await,
                1
            );
            // The same warning again, another note: one series.
            let again = JobEvent::warning(EventReason::PodRejected, "quota, again").about("chat-1");
            assert_eq!(
                recorder
                    .publish(&job_reference(), std::slice::from_ref(&again))
                    .await,
                1
            );
            assert_eq!(recorder.publish(&job_reference(), &[again]).await, 1);
            assert_eq!(recorder.held(), 2);
        })
        .await;
        let (method, path, body) = &seen[0];
        assert_eq!(*method, Method::POST);
        assert_eq!(path, "/apis/events.k8s.io/v1/namespaces/team-a/events");
        assert_eq!(body["reason"], "PodCreated");
        assert_eq!(body["type"], "Normal");
        assert_eq!(body["action"], "Reconcile");
        assert_eq!(body["note"], "pod chat-1 (attempt 1)");
        assert_eq!(body["regarding"]["kind"], "InferenceJob");
        assert_eq!(body["regarding"]["uid"], "u-1");
        assert_eq!(
            body["related"],
            json!({"apiVersion": "v1", "kind": "Pod", "name": "chat-1", "namespace": "team-a"})
        );
        assert_eq!(body["reportingController"], "vramfit-operator");
        assert_eq!(body["reportingInstance"], "op-0");
        assert!(
            body["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("chat.")
        );
        assert!(body["eventTime"].is_string());
        assert_eq!(seen[1].0, Method::POST);
        assert_eq!(seen[1].2["type"], "Warning");
        let name = seen[1].2["metadata"]["name"].as_str().unwrap().to_string();
        for (repeat, count) in [(&seen[2], 2), (&seen[3], 3)] {
            assert_eq!(repeat.0, Method::PATCH);
            assert_eq!(
                repeat.1,
                format!("/apis/events.k8s.io/v1/namespaces/team-a/events/{name}")
            );
            assert_eq!(repeat.2["series"]["count"], count);
            assert!(repeat.2["series"]["lastObservedTime"].is_string());
        }
    }

    #[tokio::test]
    async fn another_pod_or_job_is_another_event() {
        let seen = recorded(2, async |recorder| {
            let first = JobEvent::normal(EventReason::PodCreated, "x").about("chat-1");
            let second = JobEvent::normal(EventReason::PodCreated, "x").about("chat-2");
            recorder.publish(&job_reference(), &[first, second]).await;
        })
        .await;
        assert!(seen.iter().all(|(method, ..)| *method == Method::POST));
        let regarding = job_reference();
        let mut other = regarding.clone();
        other.uid = Some("u-2".into());
        let event = JobEvent::normal(EventReason::Running, "x");
        assert_ne!(
            series_key(&regarding, None, &event),
            series_key(&other, None, &event),
            "a job created again under the same name is another object"
        );
    }

    /// Regression: a job name of 253 characters (the most Kubernetes allows) made event names
    /// of 270, which the API server refuses: such jobs got no events.
    #[test]
    fn event_names_stay_within_253_characters_and_apart() {
        let nanos = 1_790_000_000_123_456_789i128;
        assert_eq!(event_name("chat", nanos), format!("chat.{nanos:x}"));
        // A DNS subdomain of 253 characters: labels of at most 63.
        let stem = vec!["a".repeat(50); 4].join(".");
        let long = format!("{stem}.{}", "b".repeat(49));
        let other = format!("{stem}.{}", "c".repeat(49));
        assert_eq!(long.len(), 253);
        let name = event_name(&long, nanos);
        assert!(name.len() <= 253, "{} characters", name.len());
        assert_ne!(
            name,
            event_name(&other, nanos),
            "two long names, two event names"
        );
        assert!(name.ends_with(&format!(".{nanos:x}")));
        let dns_label = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label.starts_with(|c: char| c.is_ascii_alphanumeric())
                && label.ends_with(|c: char| c.is_ascii_alphanumeric())
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        };
        assert!(name.split('.').all(dns_label), "{name}");
        // Wherever the cut falls (after a dot or a dash too), every label of the event's name
        // still ends with a letter or digit.
        for at in 200usize..250 {
            for mark in ['.', '-'] {
                // Valid job names only: no label over 63, none ending or starting with '-'.
                if mark == '-' && matches!(at % 51, 0 | 49 | 50) {
                    continue;
                }
                let name: String = (0usize..253)
                    .map(|i| match i {
                        _ if i == at => mark,
                        _ if i % 51 == 50 && (mark == '-' || i.abs_diff(at) > 1) => '.',
                        _ => 'a',
                    })
                    .collect();
                assert!(name.split('.').all(dns_label), "fixture {name}");
                let cut = event_name(&name, nanos);
                assert!(cut.len() <= 253 && cut.split('.').all(dns_label), "{cut}");
            }
        }
    }

    /// The recorder itself publishes an event about a job with a 253-character name.
    #[tokio::test]
    async fn a_job_with_the_longest_name_gets_its_events() {
        let mut regarding = job_reference();
        regarding.name = Some(format!("{}-{}", "chat".repeat(50), "x".repeat(52)));
        assert_eq!(regarding.name.as_deref().map(str::len), Some(253));
        let seen = recorded(1, async |recorder| {
            let event = JobEvent::normal(EventReason::PodCreated, "x");
            assert_eq!(recorder.publish(&regarding, &[event]).await, 1);
        })
        .await;
        let name = seen[0].2["metadata"]["name"].as_str().unwrap();
        assert!(name.len() <= 253, "{name}");
        assert!(name.starts_with("chatchat"), "{name}");
    }

    #[test]
    fn notes_are_cut_by_bytes_on_a_character_boundary() {
        assert_eq!(fit_note("short"), "short");
        let bar = "█".repeat(600); // 3 bytes each: 1800 bytes in 600 characters
        let cut = fit_note(&bar);
        assert!(cut.len() <= MAX_NOTE_BYTES, "{}", cut.len());
        assert_eq!(cut.chars().count(), MAX_NOTE_BYTES / 3);
    }
}
