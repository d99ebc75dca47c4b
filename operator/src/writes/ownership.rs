//! Writing a served job's Service and PodDisruptionBudget (API) without ever taking over an
//! object of the same name that is not the job's. The caches hold only objects labelled
//! `vramfit.io/job`, so one made by Helm or kubectl looks absent there: an object the caches do
//! not show as the job's is created with a plain create, which fails on any object of that
//! name; then an uncached read says whose it is. Only an object whose controller is the job
//! (by uid) is server-side applied, and the apply carries that object's uid, so that it fails
//! rather than lands on another object that took the name since.
use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
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
        ObjectWrite::Create(object) => create_or_apply(api, object, job, true).await,
        ObjectWrite::Apply { object, uid } => {
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

/// Creates an object whose spec never changes after its creation (a group's Service and
/// NetworkPolicy, named per attempt) as [`write_object`] creates one, but without taking its
/// fields over from the create (no field will ever have to be dropped): one write, not three.
pub async fn create_fixed<K>(
    api: &Api<K>,
    object: &K,
    job: &InferenceJob,
) -> Result<Written, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Serialize + Debug,
{
    create_or_apply(api, object, job, false).await
}

/// Creates `object` (then, with `take_fields`, makes the apply the only owner of its fields);
/// when its name is taken, applies it only if the object there is the job's.
async fn create_or_apply<K>(
    api: &Api<K>,
    object: &K,
    job: &InferenceJob,
    take_fields: bool,
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
            Ok(created) => {
                if take_fields {
                    take_field_ownership(api, object, &created.uid().unwrap_or_default()).await?;
                }
                return Ok(Written::Done);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => return Err(error),
        }
        // Uncached: the caches never show an object that lacks vramfit's label.
        match api.get_opt(&name).await? {
            Some(existing) if controlled_by(existing.owner_references(), job) => {
                let uid = existing.uid().unwrap_or_default();
                apply(api, object, &uid).await?;
                return Ok(Written::Done);
            }
            Some(_) => return Ok(Written::NameTaken),
            None => {}
        }
    }
    Ok(Written::Done)
}

/// Makes the job's apply the only owner of the fields of an object it has just created. A
/// create records its fields under an `Update` entry of the field manager, which an apply
/// never removes: a port the job later changes would stay beside the new one (a Service then
/// holds two ports named `http`, and the API server refuses every apply). So the object is
/// applied, and its managed fields are then set to that apply's entry alone.
async fn take_field_ownership<K>(api: &Api<K>, object: &K, uid: &str) -> Result<(), kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Serialize + Debug,
{
    let applied = apply(api, object, uid).await?;
    let entries: Vec<_> = applied
        .managed_fields()
        .iter()
        .filter(|e| {
            e.operation.as_deref() == Some("Apply")
                && e.manager.as_deref() == Some(crate::FIELD_MANAGER)
        })
        .cloned()
        .collect();
    if entries.is_empty() {
        return Ok(());
    }
    // The uid makes the patch fail on any other object of that name.
    let patch = json!({ "metadata": { "uid": uid, "managedFields": entries } });
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(drop)
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
