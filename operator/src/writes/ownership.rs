//! Writing a served job's Service and PodDisruptionBudget (API) without ever taking over an
//! object of the same name that is not the job's. The caches hold only objects labelled
//! `vramfit.io/job`, so one made by Helm or kubectl looks absent there: an object the caches do
//! not show as the job's is created with a plain create, which fails on any object of that
//! name; then an uncached read says whose it is. Only an object whose controller is the job
//! (by uid) is server-side applied, and the apply carries that object's uid, so that it fails
//! rather than lands on another object that took the name since.
//!
//! A create is one write. It records the object's fields under an `Update` entry of the field
//! manager, which an apply never removes; so before the first apply onto an object the job
//! created, that entry is made the apply's ([`own_created_fields`]): a field a later apply
//! leaves out is then removed, not kept beside the new one. Most objects are never applied
//! onto after their creation, and pay nothing for it.
use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use vramfit_api::InferenceJob;

use crate::ownership::{ObjectWrite, controlled_by};

/// How a write went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Created, applied, deleted, or nothing to do.
    Done,
    /// An object of that name exists and is not the job's: left untouched.
    NameTaken,
}

/// Does `write` on `api` for `job`.
pub async fn write_object<K>(
    api: &Api<K>,
    write: &ObjectWrite<K>,
    job: &InferenceJob,
) -> Result<Written, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Serialize + Debug,
{
    match write {
        ObjectWrite::Keep => Ok(Written::Done),
        ObjectWrite::Create(object) => create_or_apply(api, object, job).await,
        ObjectWrite::Apply { object, uid } => {
            // Uncached: the caches drop managed fields.
            if let Some(live) = api.get_opt(&object.name_any()).await? {
                own_created_fields(api, &live, uid).await?;
            }
            apply(api, object, uid).await?;
            Ok(Written::Done)
        }
        ObjectWrite::Delete { name, uid } => {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            match api.delete(name, &params).await {
                Ok(_) => Ok(Written::Done),
                // Gone already, or another object took the name since: not ours to delete.
                Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => {
                    Ok(Written::Done)
                }
                Err(error) => Err(error),
            }
        }
    }
}

/// Creates `object`; when its name is taken, applies it only if the object there is the job's.
async fn create_or_apply<K>(
    api: &Api<K>,
    object: &K,
    job: &InferenceJob,
) -> Result<Written, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Serialize + Debug,
{
    let params = PostParams {
        field_manager: Some(crate::FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    let name = object.name_any();
    // Twice at most: an object found taken and then gone is created again at once.
    for _ in 0..2 {
        match api.create(&params, object).await {
            Ok(_) => return Ok(Written::Done),
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => return Err(error),
        }
        // Uncached: the caches never show an object that lacks vramfit's label.
        match api.get_opt(&name).await? {
            Some(existing) if controlled_by(existing.owner_references(), job) => {
                let uid = existing.uid().unwrap_or_default();
                own_created_fields(api, &existing, &uid).await?;
                apply(api, object, &uid).await?;
                return Ok(Written::Done);
            }
            Some(_) => return Ok(Written::NameTaken),
            None => {}
        }
    }
    Ok(Written::Done)
}

/// Makes the fields the job's create recorded (its `Update` entry) the apply's, on `live`, the
/// object of `uid`, before an apply onto it: an apply never removes fields an `Update` entry
/// holds, so a port the job later changed would stay beside the new one (a Service then holds
/// two ports named `http`, and the API server refuses every apply). Nothing is written when
/// there is no such entry, or `live` is another object.
async fn own_created_fields<K>(api: &Api<K>, live: &K, uid: &str) -> Result<(), kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Serialize + Debug,
{
    if live.uid().as_deref() != Some(uid) {
        return Ok(());
    }
    let Some(entries) = created_fields_as_applied(live.managed_fields()) else {
        return Ok(());
    };
    // The uid makes the patch fail on any other object of that name.
    let patch = json!({ "metadata": { "uid": uid, "managedFields": entries } });
    api.patch(
        &live.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(drop)
}

/// `entries` with the operator's `Update` entry (its creates') folded into its `Apply` entry,
/// or turned into one; `None` when there is no such `Update` entry.
fn created_fields_as_applied(entries: &[ManagedFieldsEntry]) -> Option<Vec<ManagedFieldsEntry>> {
    let ours = |entry: &ManagedFieldsEntry, operation: &str| {
        entry.manager.as_deref() == Some(crate::FIELD_MANAGER)
            && entry.operation.as_deref() == Some(operation)
            && entry.subresource.as_deref().unwrap_or_default().is_empty()
    };
    let created = entries.iter().find(|e| ours(e, "Update"))?;
    let mut kept: Vec<ManagedFieldsEntry> = entries
        .iter()
        .filter(|e| !ours(e, "Update"))
        .cloned()
        .collect();
    match kept.iter_mut().find(|e| ours(e, "Apply")) {
        Some(applied) => {
            let mut fields = applied.fields_v1.take().map(|f| f.0).unwrap_or_default();
            merge_fields(&mut fields, created.fields_v1.as_ref().map(|f| &f.0));
            applied.fields_v1 = Some(FieldsV1(fields));
        }
        None => kept.push(ManagedFieldsEntry {
            operation: Some("Apply".to_string()),
            time: None,
            ..created.clone()
        }),
    }
    Some(kept)
}

/// Adds the fields of `more` (a `FieldsV1` trie: nested objects, leaves `{}`) to `into`.
fn merge_fields(into: &mut serde_json::Value, more: Option<&serde_json::Value>) {
    let Some(serde_json::Value::Object(more)) = more else {
        return;
    };
    if !into.is_object() {
        *into = serde_json::Value::Object(serde_json::Map::new());
    }
    let Some(into) = into.as_object_mut() else {
        return;
    };
    for (key, value) in more {
        merge_fields(
            into.entry(key.clone())
                .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new())),
            Some(value),
        );
    }
}

/// Server-side applies `object` (forced, field manager `vramfit-operator`) onto the object of
/// `uid`: with another uid there, or none, the API server refuses it.
async fn apply<K>(api: &Api<K>, object: &K, uid: &str) -> Result<K, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Serialize + Debug,
{
    let mut guarded = object.clone();
    guarded.meta_mut().uid = Some(uid.to_string());
    let params = PatchParams::apply(crate::FIELD_MANAGER).force();
    api.patch(&object.name_any(), &params, &Patch::Apply(&guarded))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(manager: &str, operation: &str, fields: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.to_string()),
            operation: Some(operation.to_string()),
            api_version: Some("v1".to_string()),
            fields_type: Some("FieldsV1".to_string()),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }
    }

    #[test]
    fn the_creates_entry_becomes_the_applys_and_no_other_entry_moves() {
        let created = entry(
            "vramfit-operator",
            "Update",
            json!({ "f:spec": { "f:ports": {} } }),
        );
        let kubectl = entry("kubectl", "Update", json!({ "f:metadata": {} }));
        let entries = created_fields_as_applied(&[created, kubectl.clone()]).expect("a change");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0], kubectl);
        assert_eq!(entries[1].operation.as_deref(), Some("Apply"));
        assert_eq!(entries[1].manager.as_deref(), Some("vramfit-operator"));
        assert_eq!(
            entries[1].fields_v1,
            Some(FieldsV1(json!({ "f:spec": { "f:ports": {} } })))
        );
    }

    #[test]
    fn with_both_entries_the_fields_of_the_create_join_the_applys() {
        let created = entry(
            "vramfit-operator",
            "Update",
            json!({ "f:spec": { "f:ports": { "k:{\"port\":8000}": {} } } }),
        );
        let applied = entry(
            "vramfit-operator",
            "Apply",
            json!({ "f:spec": { "f:ports": { "k:{\"port\":9000}": {} }, "f:selector": {} } }),
        );
        let entries = created_fields_as_applied(&[applied, created]).expect("a change");
        assert_eq!(entries.len(), 1);
        assert_eq!(
            entries[0].fields_v1,
            Some(FieldsV1(json!({ "f:spec": {
                "f:ports": { "k:{\"port\":8000}": {}, "k:{\"port\":9000}": {} },
                "f:selector": {}
            } })))
        );
    }

    #[test]
    fn without_a_creates_entry_nothing_is_written() {
        let applied = entry("vramfit-operator", "Apply", json!({}));
        let status = ManagedFieldsEntry {
            subresource: Some("status".to_string()),
            ..entry("vramfit-operator", "Update", json!({}))
        };
        assert_eq!(created_fields_as_applied(&[applied, status]), None);
    }
}
