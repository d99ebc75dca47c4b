//! The job cache's element: an InferenceJob kept as the compact JSON of its spec and status,
//! with only the metadata the controller and the reconcile read, and the two status fields
//! that wake-ups and gauges read for every job.
//!
//! Why not `InferenceJob`: 5,000 typed jobs held about 19 MiB of heap (an `InferenceJob` is
//! 1.5 KiB inline before any string, and a status with its plan, reasons, conditions and
//! attempts is a hundred small allocations), the largest part of the operator's memory. As
//! JSON a job with its status is about 2.6 KiB, still 13 MiB at 5,000 jobs (a heap profile);
//! deflated, a third of that. A reconcile inflates and parses it back (tens of µs, once per
//! reconcile, against a reconcile's API round trips of milliseconds).
//!
//! A job that passes the CRD schema but not vramfit's types is kept as such, with its error
//! (as `DeserializeGuard` would), so one malformed object cannot break the watch.
use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::error_boundary::InvalidObject;
use serde::{Deserialize, Deserializer, Serialize};
use vramfit_api::conditions::{self, ConditionType};
use vramfit_api::{InferenceJob, InferenceJobSpec, InferenceJobStatus, Phase};

use super::deflate::{deflate, inflate};

/// One cached InferenceJob.
#[derive(Clone, Debug)]
pub struct CachedJob {
    /// Identity only: name, namespace, uid, resourceVersion, generation, creation and deletion
    /// timestamps (no labels, annotations or managed fields: reconcile reads none of them).
    metadata: ObjectMeta,
    content: Content,
}

#[derive(Clone, Debug)]
enum Content {
    /// `{"spec":…,"status":…}` as deflated JSON, and what every wake-up and scrape reads.
    Valid {
        body: Box<[u8]>,
        phase: Option<Phase>,
        node_class: Option<Box<str>>,
        /// The status says the spec is invalid, for the generation the job has: only a new
        /// generation can change that.
        invalid_spec: bool,
    },
    /// Why the object is not a valid InferenceJob.
    Invalid(Box<str>),
}

/// What the body holds.
#[derive(Serialize)]
struct BodyOut<'a> {
    spec: &'a InferenceJobSpec,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a InferenceJobStatus>,
}

#[derive(Deserialize)]
struct BodyIn {
    spec: InferenceJobSpec,
    #[serde(default)]
    status: Option<InferenceJobStatus>,
}

/// The object as the API sends it; spec and status are checked against vramfit's types after.
#[derive(Deserialize)]
struct Wire {
    metadata: IdentityMeta,
    #[serde(default)]
    spec: serde_json::Value,
    #[serde(default)]
    status: serde_json::Value,
}

/// The metadata fields kept (everything else, managed fields included, is skipped unparsed).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IdentityMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    deletion_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl From<IdentityMeta> for ObjectMeta {
    fn from(meta: IdentityMeta) -> Self {
        ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            generation: meta.generation,
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            ..ObjectMeta::default()
        }
    }
}

fn identity(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        generation: meta.generation,
        creation_timestamp: meta.creation_timestamp.clone(),
        deletion_timestamp: meta.deletion_timestamp.clone(),
        ..ObjectMeta::default()
    }
}

impl CachedJob {
    /// The cached form of a job.
    pub fn of(job: &InferenceJob) -> Self {
        Self::from_parts(identity(&job.metadata), &job.spec, job.status.as_ref())
    }

    fn from_parts(
        metadata: ObjectMeta,
        spec: &InferenceJobSpec,
        status: Option<&InferenceJobStatus>,
    ) -> Self {
        let invalid_spec = status.is_some_and(|s| {
            conditions::get(&s.conditions, ConditionType::InvalidSpec).is_some_and(|c| {
                c.status == "True"
                    && c.observed_generation.is_some()
                    && c.observed_generation == metadata.generation
            })
        });
        let content = match deflate_json(&BodyOut { spec, status }) {
            Ok(body) => Content::Valid {
                body,
                phase: status.and_then(|s| s.phase),
                node_class: status.and_then(|s| s.node_class.as_deref().map(Box::from)),
                invalid_spec,
            },
            // Serializing vramfit's own types does not fail; if it ever did, say so.
            Err(error) => Content::Invalid(format!("cannot cache the job: {error}").into()),
        };
        Self { metadata, content }
    }

    /// An object that is not a valid InferenceJob, with its identity and why (the watch builds
    /// these by deserializing; tests build one directly).
    #[cfg(test)]
    pub fn invalid(metadata: ObjectMeta, error: impl Into<String>) -> Self {
        Self {
            metadata: identity(&metadata),
            content: Content::Invalid(error.into().into()),
        }
    }

    /// The job, parsed back; or, for an object that is not a valid InferenceJob, why, with its
    /// metadata (what a `DeserializeGuard` would hold).
    pub fn job(&self) -> Result<InferenceJob, Box<InvalidObject>> {
        let invalid = |error: String| {
            Box::new(InvalidObject {
                error,
                metadata: self.metadata.clone(),
            })
        };
        match &self.content {
            Content::Valid { body, .. } => {
                let json = inflate(body).map_err(|e| invalid(e.to_string()))?;
                let body: BodyIn =
                    serde_json::from_slice(&json).map_err(|e| invalid(e.to_string()))?;
                Ok(InferenceJob {
                    metadata: self.metadata.clone(),
                    spec: body.spec,
                    status: body.status,
                })
            }
            Content::Invalid(error) => Err(invalid(error.to_string())),
        }
    }

    /// Whether the object is a valid InferenceJob.
    pub fn is_valid(&self) -> bool {
        matches!(self.content, Content::Valid { .. })
    }

    /// `status.phase` (unset for an invalid object).
    pub fn phase(&self) -> Option<Phase> {
        match &self.content {
            Content::Valid { phase, .. } => *phase,
            Content::Invalid(_) => None,
        }
    }

    /// Whether the status reports the spec invalid for the job's current generation (a wake-up
    /// cannot change that; a new generation can).
    pub fn invalid_spec_is_current(&self) -> bool {
        matches!(
            self.content,
            Content::Valid {
                invalid_spec: true,
                ..
            }
        )
    }

    /// `status.nodeClass` (unset for an invalid object).
    pub fn node_class(&self) -> Option<&str> {
        match &self.content {
            Content::Valid { node_class, .. } => node_class.as_deref(),
            Content::Invalid(_) => None,
        }
    }

    /// Bytes of the kept body (or error).
    #[cfg(test)]
    fn body_len(&self) -> usize {
        match &self.content {
            Content::Valid { body, .. } => body.len(),
            Content::Invalid(error) => error.len(),
        }
    }
}

/// `body` as deflated JSON.
fn deflate_json(body: &BodyOut<'_>) -> Result<Box<[u8]>, serde_json::Error> {
    Ok(deflate(&serde_json::to_vec(body)?))
}

impl<'de> Deserialize<'de> for CachedJob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        let metadata = ObjectMeta::from(wire.metadata);
        let spec = InferenceJobSpec::deserialize(wire.spec);
        let status = match wire.status {
            serde_json::Value::Null => Ok(None),
            status => InferenceJobStatus::deserialize(status).map(Some),
        };
        Ok(match (spec, status) {
            (Ok(spec), Ok(status)) => Self::from_parts(metadata, &spec, status.as_ref()),
            (Err(error), _) | (_, Err(error)) => Self {
                metadata,
                content: Content::Invalid(error.to_string().into()),
            },
        })
    }
}

impl Resource for CachedJob {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        InferenceJob::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        InferenceJob::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        InferenceJob::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        InferenceJob::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    #[test]
    fn a_job_read_from_the_api_comes_back_whole_less_what_reconcile_never_reads() {
        let mut job = fixtures::job("chat", fixtures::vllm_mistral_spec());
        job.status = Some(InferenceJobStatus {
            phase: Some(Phase::Scheduled),
            node_class: Some("a10g-x1".into()),
            attempt_count: 1,
            ..Default::default()
        });
        let mut wire = serde_json::to_value(&job).unwrap();
        wire["metadata"]["managedFields"] =
            json!([{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]);
        wire["metadata"]["annotations"] =
            json!({"kubectl.kubernetes.io/last-applied-configuration": "{…}"});
        let cached: CachedJob = serde_json::from_value(wire).unwrap();

        assert!(cached.is_valid());
        assert_eq!(cached.phase(), Some(Phase::Scheduled));
        assert_eq!(cached.node_class(), Some("a10g-x1"));
        let back = cached.job().unwrap();
        assert_eq!(back.spec, job.spec);
        assert_eq!(back.status, job.status);
        assert_eq!(back.metadata.uid, job.metadata.uid);
        assert_eq!(back.metadata.name, job.metadata.name);
        assert_eq!(back.metadata.namespace, job.metadata.namespace);
        assert_eq!(back.metadata.generation, job.metadata.generation);
        assert_eq!(
            back.metadata.resource_version,
            job.metadata.resource_version
        );
        assert!(back.metadata.managed_fields.is_none());
        assert!(back.metadata.annotations.is_none());
        assert_eq!(CachedJob::of(&job).job().unwrap().spec, job.spec);
    }

    #[test]
    fn a_job_vramfit_cannot_read_is_kept_with_its_error_and_identity() {
        let wire = json!({
            "apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob",
            "metadata": {"name": "odd", "namespace": "team-a", "uid": "u-1", "generation": 2},
            "spec": {"model": {"preset": "mistral-7b"}, "runtime": "no-such-runtime", "image": "x"},
        });
        let cached: CachedJob = serde_json::from_value(wire).unwrap();
        assert!(!cached.is_valid());
        assert_eq!(cached.phase(), None);
        let invalid = cached.job().unwrap_err();
        assert!(
            invalid.error.contains("no-such-runtime"),
            "{}",
            invalid.error
        );
        assert_eq!(invalid.metadata.name.as_deref(), Some("odd"));
        assert_eq!(invalid.metadata.generation, Some(2));
    }

    #[test]
    fn the_cached_body_is_deflated() {
        let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
        let cached = CachedJob::of(&job);
        let json = serde_json::to_vec(&BodyOut {
            spec: &job.spec,
            status: job.status.as_ref(),
        })
        .unwrap();
        assert!(
            cached.body_len() < json.len(),
            "{} of {} bytes",
            cached.body_len(),
            json.len()
        );
        assert_eq!(cached.job().unwrap().spec, job.spec);
    }

    #[test]
    fn the_cached_body_is_smaller_than_the_typed_job() {
        let mut job = fixtures::job("chat", fixtures::vllm_mistral_spec());
        job.status = Some(InferenceJobStatus {
            phase: Some(Phase::Running),
            ..Default::default()
        });
        let cached = CachedJob::of(&job);
        // The typed job is 1.5 KiB inline before any of its strings.
        assert!(
            cached.body_len() < std::mem::size_of::<InferenceJob>(),
            "{} bytes",
            cached.body_len()
        );
    }
}
