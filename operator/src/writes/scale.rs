//! The autoscaler's one write to a job: `spec.serve.replicas` through the scale subresource,
//! the path `kubectl scale`, an HPA and KEDA take (RBAC: `inferencejobs/scale` patch).
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use vramfit_api::InferenceJob;

use crate::context::Context;
use crate::error::ScaleError;

/// Sets `job`'s replicas to `replicas`, on the resourceVersion it was decided from (a person's
/// change in between makes it a conflict, and the next pass decides again).
pub async fn set_replicas(
    job: &InferenceJob,
    replicas: u32,
    ctx: &Context,
) -> Result<(), ScaleError> {
    let namespace = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let jobs: Api<InferenceJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut metadata = json!({});
    if let Some(version) = job.resource_version() {
        metadata = json!({ "resourceVersion": version });
    }
    let body = json!({ "metadata": metadata, "spec": { "replicas": replicas } });
    let params = PatchParams {
        field_manager: Some(crate::AUTOSCALER_FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    jobs.patch_scale(&name, &params, &Patch::Merge(&body))
        .await
        .map(|_| ())
        .map_err(|source| ScaleError {
            job: format!("{namespace}/{name}"),
            replicas,
            source,
        })
}
