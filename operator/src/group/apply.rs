//! Apply a group job's decision (API), in order: the pods of ended groups deleted (their GPUs
//! free), the running group's headless Service and NetworkPolicy created (never taking over an
//! object of the same name that is not the job's: `serving::ownership`), then its pods — none
//! of them unless both objects are the job's, so no rank runs unguarded — then metadata
//! changes, and last the Services and NetworkPolicies of groups that no longer run.
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::Api;
use tracing::{info, warn};
use vramfit_api::InferenceJob;

use super::decide::GroupDecision;
use crate::context::Context;
use crate::error::GroupApplyError;
use crate::ownership::ObjectWrite;
use crate::writes::ownership::{Written, write_object};
use crate::writes::pods::{ApplyError, apply_pods, create_counted, delete_job_pods, with_volumes};

/// Records the pods a decision creates, before the writes, so they count against their class
/// (one node's GPUs each) and are found by name until a store shows them.
pub fn reserve(job: &InferenceJob, namespace: &str, decision: &GroupDecision, ctx: &Context) {
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    if let Some(plan) = &decision.created_plan {
        for pod in &decision.create_pods {
            ctx.reservations
                .record(namespace, &pod.name_any(), uid, plan);
        }
    }
}

/// Deletes the pods of groups that ended.
pub async fn delete_pods(
    job: &InferenceJob,
    decision: &GroupDecision,
    ctx: &Context,
) -> Result<(), ApplyError> {
    let namespace = job.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let what = "a pod of an ended group";
    delete_job_pods(&pods, &namespace, &decision.delete_pods, ctx, what).await?;
    Ok(())
}

/// The running group's Service and NetworkPolicy, then its pods (created, or their metadata
/// applied). Pods not created are forgotten by the ledger.
pub async fn write_group(
    job: &InferenceJob,
    decision: &GroupDecision,
    ctx: &Context,
) -> Result<(), GroupApplyError> {
    let namespace = job.namespace().unwrap_or_default();
    let forget_created = || {
        for pod in &decision.create_pods {
            ctx.reservations.forget(&namespace, &pod.name_any());
        }
    };
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let policies: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &namespace);
    let objects = async {
        write_checked(&services, &decision.service, job, "Service").await?;
        write_checked(&policies, &decision.network_policy, job, "NetworkPolicy").await
    };
    if let Err(error) = objects.await {
        forget_created();
        return Err(error);
    }
    // The model volume the group's pods mount comes before them (`--model-cache`).
    let volumes: &[_] = if decision.create_pods.is_empty() {
        &[]
    } else {
        &decision.decision.volumes
    };
    let new = with_volumes(job, &namespace, decision.create_pods.iter(), volumes, ctx).await?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    create_counted(&pods, &new, job, ctx, "a pod of a group").await?;
    apply_pods(&pods, &decision.apply_pods).await?;
    Ok(())
}

/// Deletes the Services and NetworkPolicies of groups that no longer run (by uid: another
/// object that took the name since is left alone).
pub async fn delete_stale_objects(
    job: &InferenceJob,
    decision: &GroupDecision,
    ctx: &Context,
) -> Result<(), GroupApplyError> {
    let namespace = job.namespace().unwrap_or_default();
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    for write in &decision.delete_services {
        write_checked(&services, write, job, "Service").await?;
    }
    let policies: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &namespace);
    for write in &decision.delete_network_policies {
        write_checked(&policies, write, job, "NetworkPolicy").await?;
    }
    Ok(())
}

pub(crate) async fn write_checked<K>(
    api: &Api<K>,
    write: &ObjectWrite<K>,
    job: &InferenceJob,
    kind: &'static str,
) -> Result<(), GroupApplyError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let name = match write {
        ObjectWrite::Keep => return Ok(()),
        ObjectWrite::Create(object) | ObjectWrite::Apply { object, .. } => object.name_any(),
        ObjectWrite::Delete { name, .. } => name.clone(),
    };
    match write_object(api, write, job).await {
        Ok(Written::Done) => {
            info!(kind, %name, "written");
            Ok(())
        }
        Ok(Written::NameTaken) => {
            warn!(kind, %name, "the name is someone else's: left untouched");
            Err(GroupApplyError::NameTaken { kind, name })
        }
        Err(source) => Err(GroupApplyError::Object { kind, name, source }),
    }
}
