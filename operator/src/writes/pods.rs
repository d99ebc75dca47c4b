//! Apply (API): the pod writes of a decision — delete the pod of a replaced attempt, create a
//! new attempt's pod (never taking over a pod someone else owns), server-side apply a
//! metadata-only change — and the reservation ledger that covers the moment between a write and
//! the watch event that shows it.
pub use crate::error::ApplyError;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use tracing::info;
use vramfit_api::InferenceJob;

use crate::attempts::Decision;
use crate::context::Context;
use crate::model_cache::mount::ModelVolume;
use crate::observe::{Snapshot, controlled_by};

/// Forgets the reservations of the pods a snapshot saw settled (the GPU watch counts them, or
/// they finished and take no GPUs).
pub fn release_settled(snapshot: &Snapshot<'_>, ctx: &Context) {
    for pod in snapshot.settled_pods() {
        ctx.reservations.forget(snapshot.namespace(), &pod);
    }
}

/// Records the pod a decision creates, before the write, so it counts against its class.
pub fn reserve(job: &InferenceJob, decision: &Decision, ctx: &Context) {
    if let (Some(pod), Some(plan), Some(namespace)) =
        (&decision.apply_pod, &decision.applied_plan, job.namespace())
    {
        let uid = job.metadata.uid.as_deref().unwrap_or_default();
        ctx.reservations
            .record(&namespace, &pod.name_any(), uid, plan);
    }
}

/// The pod writes of a decision, in order: delete the replaced pod, then create or apply the
/// attempt's. A pod not written is forgotten by the ledger (its GPUs are free again).
pub async fn write_pods(
    job: &InferenceJob,
    decision: &Decision,
    ctx: &Context,
) -> Result<(), ApplyError> {
    let namespace = job.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);

    if let Some(old) = &decision.delete_pod {
        if delete_pod(&pods, old).await? {
            info!(pod = %old, "deleted the pod of a replaced attempt");
        }
        ctx.reservations.forget(&namespace, old);
    }

    let Some(pod) = &decision.apply_pod else {
        return Ok(());
    };
    let pod_name = pod.name_any();
    let new = with_volumes(
        job,
        &namespace,
        std::iter::once(pod),
        &decision.volumes,
        ctx,
    )
    .await?;
    let pod = &new[0];
    let written = if decision.create_pod {
        create_pod(&pods, pod, job).await
    } else {
        let params = PatchParams::apply(crate::FIELD_MANAGER).force();
        pods.patch(&pod_name, &params, &Patch::Apply(pod))
            .await
            .map(drop)
            .map_err(|source| ApplyError::PodApply {
                pod: pod_name.clone(),
                source,
            })
    };
    if written.is_err() {
        ctx.reservations.forget(&namespace, &pod_name);
    } else {
        info!(pod = %pod_name, "wrote the pod");
        if decision.create_pod {
            crate::model_cache::count_created(ctx, pod);
        }
    }
    written
}

/// Deletes the job's pods `names` (in the background), each remembered as deleted lately (the
/// pod store may show it a moment longer) and forgotten by the ledger.
pub(crate) async fn delete_job_pods(
    pods: &Api<Pod>,
    namespace: &str,
    names: &[String],
    ctx: &Context,
    what: &str,
) -> Result<(), ApplyError> {
    for name in names {
        if delete_pod(pods, name).await? {
            info!(pod = %name, "deleted {what}");
        }
        ctx.serving.deleting.record(namespace, name);
        ctx.reservations.forget(namespace, name);
    }
    Ok(())
}

/// The model volumes and claims the `new` pods mount (`--model-cache`), created before them;
/// returns the pods to create: as they are, or, where a claim was refused for good, fetching
/// their model themselves ([`crate::writes::volumes::fall_back`]). On a failure the pods are
/// forgotten by the ledger (their GPUs are free again).
pub(crate) async fn with_volumes<'p>(
    job: &InferenceJob,
    namespace: &str,
    new: impl Iterator<Item = &'p Pod> + Clone,
    volumes: &[ModelVolume],
    ctx: &Context,
) -> Result<Vec<Pod>, ApplyError> {
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let created = match crate::writes::volumes::create(&ctx.client, namespace, uid, volumes).await {
        Ok(created) => created,
        Err(error) => {
            for pod in new {
                ctx.reservations.forget(namespace, &pod.name_any());
            }
            return Err(error);
        }
    };
    Ok(new
        .map(|pod| crate::writes::volumes::fall_back(pod, volumes, &created))
        .collect())
}

/// Creates `new` in order ([`create_pods`]) and counts where each one's weights come from.
pub(crate) async fn create_counted(
    pods: &Api<Pod>,
    new: &[Pod],
    job: &InferenceJob,
    ctx: &Context,
    what: &str,
) -> Result<(), ApplyError> {
    let new: Vec<&Pod> = new.iter().collect();
    create_pods(pods, &new, job, ctx, what).await?;
    for pod in &new {
        crate::model_cache::count_created(ctx, pod);
    }
    Ok(())
}

/// Deletes a pod (in the background): `true` when this call deleted it, `false` when it was
/// already gone.
pub(crate) async fn delete_pod(pods: &Api<Pod>, name: &str) -> Result<bool, ApplyError> {
    match pods.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(source) => Err(ApplyError::PodDelete {
            pod: name.to_string(),
            source,
        }),
    }
}

/// Creates `new` in order ([`create_pod`]), logging each as `created {what}`. At the first
/// failure that pod and the ones after it, not created, are forgotten by the ledger (their
/// GPUs are free again).
pub(crate) async fn create_pods(
    pods: &Api<Pod>,
    new: &[&Pod],
    job: &InferenceJob,
    ctx: &Context,
    what: &str,
) -> Result<(), ApplyError> {
    let namespace = job.namespace().unwrap_or_default();
    for (index, pod) in new.iter().enumerate() {
        if let Err(error) = create_pod(pods, pod, job).await {
            for later in &new[index..] {
                ctx.reservations.forget(&namespace, &later.name_any());
            }
            return Err(error);
        }
        info!(pod = %pod.name_any(), "created {what}");
    }
    Ok(())
}

/// Server-side applies (forced) the metadata changes of pods that exist.
pub(crate) async fn apply_pods(pods: &Api<Pod>, changed: &[Pod]) -> Result<(), ApplyError> {
    let params = PatchParams::apply(crate::FIELD_MANAGER).force();
    for pod in changed {
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

/// Creates a new pod. A pod of that name already there is fine when this job controls it (it
/// was created before a restart the stores have not caught up with); anyone else's is
/// [`ApplyError::PodNameTaken`], never taken over.
pub(crate) async fn create_pod(
    pods: &Api<Pod>,
    pod: &Pod,
    job: &InferenceJob,
) -> Result<(), ApplyError> {
    let name = pod.name_any();
    let params = PostParams {
        field_manager: Some(crate::FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    let pod_error = |source| ApplyError::PodApply {
        pod: name.clone(),
        source,
    };
    match pods.create(&params, pod).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            match pods.get_opt(&name).await.map_err(pod_error)? {
                Some(existing) if controlled_by(&existing, job) => Ok(()),
                // Gone again since: the next reconcile creates it.
                None => Ok(()),
                Some(_) => Err(ApplyError::PodNameTaken { pod: name }),
            }
        }
        Err(source) => Err(pod_error(source)),
    }
}
