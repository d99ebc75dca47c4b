//! Apply a served job's decision (API): pod deletions first, then creations (never taking
//! over a pod someone else owns), metadata-only pod changes, then the Service and the
//! PodDisruptionBudget — created, or server-side applied (field manager `vramfit-operator`,
//! forced) only onto the job's own ([`super::ownership`]).
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tracing::{info, warn};
use vramfit_api::InferenceJob;
use vramfit_api::checkpoint::ResolvedModel;

use crate::attempts::Decision;
use crate::context::Context;
use crate::error::Error;
use crate::error::ServingApplyError;
use crate::error::TakenObject;
use crate::ownership::ObjectWrite;
use crate::replicas::decide::ServedDecision;
use crate::replicas::summary;
use crate::writes::ownership::{Written, write_object};
use crate::writes::pods::{ApplyError, apply_pods, create_counted, delete_job_pods, with_volumes};

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
    let what = "a replica pod";
    delete_job_pods(&pods, &namespace, &decision.delete_pods, ctx, what).await?;
    let new = decision.create_pods.iter().map(|(pod, _)| pod);
    let new = with_volumes(job, &namespace, new, &decision.volumes, ctx).await?;
    create_counted(&pods, &new, job, ctx, what).await?;
    apply_pods(&pods, &decision.apply_pods).await
}

/// Marks the job as woken when GPUs free up or a node's cache changes, while a replica waits
/// for room or for its model (placed within a second of the model's `Ready`, not at its next
/// look), or no longer.
pub fn mark_waiting(job: &InferenceJob, namespace: &str, decision: &ServedDecision, ctx: &Context) {
    ctx.serving.waiting().set(
        ObjectRef::new(&job.name_any()).within(namespace),
        decision.waits_for_room || decision.status.replicas_waiting_for_model.is_some(),
    );
}

/// The end both served pipelines share: the Service and the budget ([`write_objects`]), then
/// the status (with the autoscaler's `scaling` pass), events and metrics. Replicas whose Service or budget was not written are still
/// recorded, and the status says why; that error is returned once the status is written.
pub async fn write_objects_and_status(
    job: &InferenceJob,
    mut decision: ServedDecision,
    resolved: Option<ResolvedModel>,
    scaling: Option<crate::autoscaling::Report>,
    ctx: &Context,
) -> Result<Action, Error> {
    let objects = write_objects(job, &decision, ctx).await;
    // `serve.inferencePool`: the gateway's view of the same serving pods.
    if let Some(serve) = &job.spec.serve {
        super::inference_pool::apply(job, serve, ctx).await;
    }
    if let Err(error) = &objects {
        let now = Time(Timestamp::now());
        let old = job.status.clone().unwrap_or_default();
        let generation = job.metadata.generation;
        match error {
            ServingApplyError::NameTaken { object, name } => {
                summary::name_taken(&mut decision, &old, generation, &now, (*object, name));
            }
            _ => {
                summary::objects_refused(&mut decision, &old, generation, &now, &error.to_string())
            }
        }
    }
    for reason in &decision.restarts {
        ctx.metrics.serving().count_restart(reason);
    }
    if let Some(resolved) = resolved {
        let now = Time(Timestamp::now());
        crate::hub_models::record(
            &mut decision.status,
            resolved,
            job.metadata.generation,
            &now,
        );
    }
    // `serve.adapters`: the list accepted and `AdaptersReady`, or neither once there is none.
    crate::served_adapters::record(&mut decision.status, job, &Time(Timestamp::now()));
    // `serve.autoscaling`: the autoscaler's pass, or nothing of it once it is off.
    match scaling {
        Some(report) => {
            let now = Time(Timestamp::now());
            report.apply(&mut decision.status, job.metadata.generation, &now);
        }
        None => crate::autoscaling::report::clear(&mut decision.status),
    }
    let written = Decision {
        status: decision.status,
        delete_pod: None,
        apply_pod: None,
        create_pod: false,
        applied_plan: None,
        volumes: Vec::new(),
        events: decision.events,
        steps: decision.steps,
        bad_outputs: Vec::new(),
        results: Vec::new(),
        action: decision.action.clone(),
    };
    super::status::write(job, &written, ctx).await?;
    objects?;
    Ok(decision.action)
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
