//! Apply a served job's decision (API): pod deletions first, then creations (never taking
//! over a pod someone else owns), metadata-only pod changes, then the Service and the
//! PodDisruptionBudget — created, or server-side applied (field manager `vramfit-operator`,
//! forced) only onto the job's own ([`super::ownership`]).
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::Api;
use tracing::{info, warn};
use vramfit_api::InferenceJob;

use crate::context::Context;
use crate::error::ServingApplyError;
use crate::error::TakenObject;
use crate::ownership::ObjectWrite;
use crate::replicas::decide::ServedDecision;
use crate::writes::ownership::{Written, write_object};
use crate::writes::pods::{ApplyError, apply_pods, create_pods, delete_pod};

/// Records the pods a decision creates, before the writes, so they count against their
/// classes (and are found by name) until a store shows them.
pub fn reserve(job: &InferenceJob, namespace: &str, decision: &ServedDecision, ctx: &Context) {
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    for (pod, plan) in &decision.create_pods {
        ctx.reservations
            .record(namespace, &pod.name_any(), uid, plan);
    }
}

/// The pod writes of a decision, in order: deletions, creations, metadata applies. A pod not
/// created is forgotten by the ledger (its GPUs are free again).
pub async fn write_pods(
    job: &InferenceJob,
    decision: &ServedDecision,
    ctx: &Context,
) -> Result<(), ApplyError> {
    let namespace = job.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    for name in &decision.delete_pods {
        if delete_pod(&pods, name).await? {
            info!(pod = %name, "deleted a replica pod");
            ctx.serving.deleting.record(&namespace, name);
        }
        ctx.reservations.forget(&namespace, name);
    }
    // The model volumes the new pods mount come first (`--model-cache`).
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let volumes =
        crate::writes::volumes::create(&ctx.client, &namespace, uid, &decision.volumes).await;
    let created = match volumes {
        Ok(created) => created,
        Err(error) => {
            for (pod, _) in &decision.create_pods {
                ctx.reservations.forget(&namespace, &pod.name_any());
            }
            return Err(error);
        }
    };
    // A refused claim: the pods fetch their model themselves (`writes::volumes::fall_back`).
    let new: Vec<Pod> = (decision.create_pods.iter())
        .map(|(pod, _)| crate::writes::volumes::fall_back(pod, &decision.volumes, &created))
        .collect();
    let new: Vec<&Pod> = new.iter().collect();
    create_pods(&pods, &new, job, ctx, "a replica pod").await?;
    for pod in &new {
        crate::model_cache::count_created(ctx, pod);
    }
    apply_pods(&pods, &decision.apply_pods).await
}

/// The Service and PodDisruptionBudget writes of a decision. A Service name someone else holds
/// does not keep the budget from being written; it is the error returned then.
pub async fn write_objects(
    job: &InferenceJob,
    decision: &ServedDecision,
    ctx: &Context,
) -> Result<(), ServingApplyError> {
    let namespace = job.namespace().unwrap_or_default();
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let service = match write_object(&services, &decision.service, job).await {
        Ok(written) => checked(written, &decision.service, TakenObject::Service),
        Err(source) => {
            return Err(ServingApplyError::ServiceApply {
                name: job.name_any(),
                source,
            });
        }
    };
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &namespace);
    let pdb = match write_object(&pdbs, &decision.pdb, job).await {
        Ok(written) => checked(written, &decision.pdb, TakenObject::PodDisruptionBudget),
        Err(source) => Err(match &decision.pdb {
            ObjectWrite::Delete { name, .. } => ServingApplyError::PdbDelete {
                name: name.clone(),
                source,
            },
            _ => ServingApplyError::PdbApply {
                name: job.name_any(),
                source,
            },
        }),
    };
    service.and(pdb)
}

/// A write's outcome as a result, logged.
fn checked<K: ResourceExt>(
    written: Written,
    write: &ObjectWrite<K>,
    object: TakenObject,
) -> Result<(), ServingApplyError> {
    let name = match write {
        ObjectWrite::Keep => return Ok(()),
        ObjectWrite::Create(k) | ObjectWrite::Apply { object: k, .. } => k.name_any(),
        ObjectWrite::Delete { name, .. } => name.clone(),
    };
    match written {
        Written::Done if matches!(write, ObjectWrite::Delete { .. }) => {
            info!(kind = object.kind(), %name, "deleted");
            Ok(())
        }
        Written::Done => {
            info!(kind = object.kind(), %name, "written");
            Ok(())
        }
        Written::NameTaken => {
            warn!(kind = object.kind(), %name, "the name is someone else's: left untouched");
            Err(ServingApplyError::NameTaken { object, name })
        }
    }
}
