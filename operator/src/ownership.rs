//! Whose object is it, and what to do with it (pure): a job's own Services, budgets and
//! policies carry its labels ([`object_labels`]) and its controller reference ([`owner`]); only
//! an object the job controls ([`controlled_by`]) is ever applied onto ([`ObjectWrite`]); the IO
//! is [`crate::writes::ownership`].
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use vramfit_api::InferenceJob;
use vramfit_api::pod_keys::{APP_NAME, JOB_LABEL, label_value};

use crate::error::BuildError;

/// What to do with one of a served job's objects.
#[derive(Clone, Debug, PartialEq)]
pub enum ObjectWrite<K> {
    /// Nothing: it is as it should be (or absent and not wanted).
    Keep,
    /// The caches do not show it as the job's: create it, or apply it if the object of that
    /// name turns out to be the job's; someone else's is left alone.
    Create(Box<K>),
    /// The job's own (the caches show it with the job as controller), drifted: apply it onto
    /// the object of this uid only.
    Apply {
        /// The desired object.
        object: Box<K>,
        /// The uid of the job's object.
        uid: String,
    },
    /// Delete the job's own, of this name and uid.
    Delete {
        /// Its name.
        name: String,
        /// Its uid (a precondition of the deletion).
        uid: String,
    },
}

/// The labels of the objects vramfit creates for a served job (Service, PDB).
pub fn object_labels(job: &InferenceJob) -> BTreeMap<String, String> {
    let instance = label_value(&job.name_any());
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), APP_NAME.to_string()),
        ("app.kubernetes.io/instance".to_string(), instance.clone()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            crate::FIELD_MANAGER.to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            "inference".to_string(),
        ),
        (JOB_LABEL.to_string(), instance),
    ])
}

/// The controller owner reference of an object vramfit creates for `job`: deleting the job
/// deletes it (garbage collector).
pub fn owner(job: &InferenceJob) -> Result<OwnerReference, BuildError> {
    Ok(OwnerReference {
        api_version: InferenceJob::api_version(&()).to_string(),
        kind: InferenceJob::kind(&()).to_string(),
        name: job
            .metadata
            .name
            .clone()
            .ok_or(BuildError::MissingObjectKey("metadata.name"))?,
        uid: job
            .metadata
            .uid
            .clone()
            .ok_or(BuildError::MissingObjectKey("metadata.uid"))?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// Whether `job` (by uid) is the controller among `owners`.
pub fn controlled_by(owners: &[OwnerReference], job: &InferenceJob) -> bool {
    owners
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == job.metadata.uid.as_ref())
}

/// Whether `have` holds every label of `want`.
pub fn labels_hold(have: &BTreeMap<String, String>, want: &BTreeMap<String, String>) -> bool {
    want.iter().all(|(k, v)| have.get(k) == Some(v))
}
