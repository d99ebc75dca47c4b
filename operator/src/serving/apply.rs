//! Apply a served job's decision (API): pod deletions first, then creations (never taking
//! over a pod someone else owns), metadata-only pod changes, then the Service and the
//! PodDisruptionBudget — server-side apply, field manager `vramfit-operator`, forced.
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use thiserror::Error;
use tracing::info;
use vramfit_api::InferenceJob;

use super::decide::ServedDecision;
use super::pdb::PdbWrite;
use crate::context::Context;
use crate::reconcile::apply::{ApplyError, create_pod};

/// Why a served job's Service or PodDisruptionBudget write failed.
#[derive(Debug, Error)]
pub enum ServingApplyError {
    /// The Service could not be applied.
    #[error("applying Service {name}: {source}")]
    ServiceApply {
        /// The Service.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The PodDisruptionBudget could not be applied.
    #[error("applying PodDisruptionBudget {name}: {source}")]
    PdbApply {
        /// The budget.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The PodDisruptionBudget could not be deleted.
    #[error("deleting PodDisruptionBudget {name}: {source}")]
    PdbDelete {
        /// The budget.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl ServingApplyError {
    /// A stable label for `vramfit_reconcile_errors_total{kind}`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ServingApplyError::ServiceApply { .. } => "service_apply",
            ServingApplyError::PdbApply { .. } => "pdb_apply",
            ServingApplyError::PdbDelete { .. } => "pdb_delete",
        }
    }

    /// Whether a retry soon is expected to succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            ServingApplyError::ServiceApply { source, .. }
            | ServingApplyError::PdbApply { source, .. }
            | ServingApplyError::PdbDelete { source, .. } => crate::error::is_transient(source),
        }
    }
}

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
        match pods.delete(name, &DeleteParams::background()).await {
            Ok(_) => {
                info!(pod = %name, "deleted a replica pod");
                ctx.serving.deleting.record(&namespace, name);
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(ApplyError::PodDelete {
                    pod: name.clone(),
                    source,
                });
            }
        }
        ctx.reservations.forget(&namespace, name);
    }
    for (index, (pod, _)) in decision.create_pods.iter().enumerate() {
        if let Err(error) = create_pod(&pods, pod, job).await {
            // This pod and the ones after it were not created.
            for (later, _) in &decision.create_pods[index..] {
                ctx.reservations.forget(&namespace, &later.name_any());
            }
            return Err(error);
        }
        info!(pod = %pod.name_any(), "created a replica pod");
    }
    let params = PatchParams::apply(crate::FIELD_MANAGER).force();
    for pod in &decision.apply_pods {
        let name = pod.name_any();
        pods.patch(&name, &params, &Patch::Apply(pod))
            .await
            .map_err(|source| ApplyError::PodApply {
                pod: name.clone(),
                source,
            })?;
    }
    Ok(())
}

/// The Service and PodDisruptionBudget writes of a decision.
pub async fn write_objects(
    job: &InferenceJob,
    decision: &ServedDecision,
    ctx: &Context,
) -> Result<(), ServingApplyError> {
    let namespace = job.namespace().unwrap_or_default();
    let params = PatchParams::apply(crate::FIELD_MANAGER).force();
    if let Some(service) = &decision.service {
        let name = service.name_any();
        let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
        services
            .patch(&name, &params, &Patch::Apply(service))
            .await
            .map_err(|source| ServingApplyError::ServiceApply {
                name: name.clone(),
                source,
            })?;
        info!(service = %name, "applied the Service");
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &namespace);
    match &decision.pdb {
        PdbWrite::Keep => {}
        PdbWrite::Apply(pdb) => {
            let name = pdb.name_any();
            pdbs.patch(&name, &params, &Patch::Apply(pdb.as_ref()))
                .await
                .map_err(|source| ServingApplyError::PdbApply {
                    name: name.clone(),
                    source,
                })?;
            info!(pdb = %name, "applied the PodDisruptionBudget");
        }
        PdbWrite::Delete(name) => match pdbs.delete(name, &DeleteParams::background()).await {
            Ok(_) => info!(pdb = %name, "deleted the PodDisruptionBudget"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(ServingApplyError::PdbDelete {
                    name: name.clone(),
                    source,
                });
            }
        },
    }
    Ok(())
}
