//! Creates a decision's model volumes and claims before its pods (API). Each is created, an
//! existing one of the name taken as done — the volume's name hashes the job's uid and the
//! model, so it is this job's — except a claim that is not the job's (no cache label, another
//! volume, or another owner): that is reported and never taken over. A claim the API server
//! refuses for good (403: a namespace's ResourceQuota, a policy; 422: invalid) leaves no
//! volume behind, and the pods fetch their model themselves ([`fall_back`]).
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use tracing::{info, warn};
use vramfit_api::model_cache::VOLUME_LABEL;

use crate::model_cache::mount::{ModelVolume, VOLUME_NAME, unmount};
use crate::writes::pods::ApplyError;

/// What [`create`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Created {
    /// Every volume and claim is there: the pods mount them.
    All,
    /// A claim was refused for good (the message says why); its volume is deleted again, and
    /// the pods fetch their model themselves ([`fall_back`]).
    Refused(String),
}

/// Whether the API server refused `error` for good: a retry would be refused again (403
/// Forbidden — a ResourceQuota, an admission policy — or 422 Invalid).
fn refused(error: &kube::Error) -> Option<String> {
    match error {
        kube::Error::Api(status) if matches!(status.code, 403 | 422) => {
            Some(format!("{} ({})", status.message, status.code))
        }
        _ => None,
    }
}

/// Creates every volume, then its claim in `namespace`; `job_uid` is the claims' owner.
pub async fn create(
    client: &Client,
    namespace: &str,
    job_uid: &str,
    volumes: &[ModelVolume],
) -> Result<Created, ApplyError> {
    let params = PostParams {
        field_manager: Some(crate::FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    for volume in volumes {
        let pv_name = volume.volume.name_any();
        match pvs.create(&params, &volume.volume).await {
            Ok(_) => info!(volume = %pv_name, "created a model volume"),
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(source) => {
                return Err(ApplyError::ModelVolume {
                    object: format!("PersistentVolume {pv_name}"),
                    source,
                });
            }
        }
        let claim_name = volume.claim.name_any();
        match pvcs.create(&params, &volume.claim).await {
            Ok(_) => info!(claim = %claim_name, "created a model claim"),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let existing =
                    pvcs.get(&claim_name)
                        .await
                        .map_err(|source| ApplyError::ModelVolume {
                            object: format!("PersistentVolumeClaim {claim_name}"),
                            source,
                        })?;
                if !is_ours(&existing, &pv_name, job_uid) {
                    return Err(ApplyError::ModelClaimTaken { claim: claim_name });
                }
            }
            Err(source) => {
                if let Some(why) = refused(&source) {
                    delete_volume(&pvs, &pv_name).await?;
                    warn!(claim = %claim_name, %why, "model claim refused: the pods fetch the model");
                    return Ok(Created::Refused(format!(
                        "the model's claim {claim_name} was refused: {why}"
                    )));
                }
                return Err(ApplyError::ModelVolume {
                    object: format!("PersistentVolumeClaim {claim_name}"),
                    source,
                });
            }
        }
    }
    Ok(Created::All)
}

/// Deletes the model volume `name` whose claim was refused (its claimRef names a claim that
/// does not exist: no pod can be using it).
async fn delete_volume(pvs: &Api<PersistentVolume>, name: &str) -> Result<(), ApplyError> {
    match pvs.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            info!(volume = %name, "deleted the model volume of a refused claim");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(ApplyError::ModelVolume {
            object: format!("PersistentVolume {name}"),
            source,
        }),
    }
}

/// `pod` as it is created after [`create`] said `created`: unchanged when every claim is
/// there; else, when it mounts a model, it fetches it itself and says why
/// ([`crate::model_cache::mount::unmount`]).
pub fn fall_back(pod: &Pod, volumes: &[ModelVolume], created: &Created) -> Pod {
    let mut pod = pod.clone();
    let (Created::Refused(why), Some(volume)) = (created, volumes.first()) else {
        return pod;
    };
    let mounts = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|v| v.iter().any(|v| v.name == VOLUME_NAME));
    if mounts {
        unmount(&mut pod, &volume.undo, why);
    }
    pod
}

/// Whether `claim` is the job's own claim on volume `pv_name`.
pub fn is_ours(claim: &PersistentVolumeClaim, pv_name: &str, job_uid: &str) -> bool {
    claim.labels().get(VOLUME_LABEL).map(String::as_str) == Some("true")
        && claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(pv_name)
        && claim.owner_references().iter().any(|o| o.uid == job_uid)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use vramfit_api::InferenceJob;
    use vramfit_api::model_cache::{CachedModelPhase, POD_MODEL_ANNOTATION};

    use crate::batch::tests::{run, with_status};
    use crate::fixtures::{self, NAMESPACE};
    use crate::model_cache::mount::{claim_name, volume_name};
    use crate::model_cache::tests::{
        KEY, cache, cached_job, claims, cluster, env, settings, volumes,
    };
    use crate::model_cache::{WEIGHTS_NOTE_ANNOTATION, WEIGHTS_SOURCE_ANNOTATION};
    use crate::verifier::test_context_with_settings;

    const QUOTA: &str = "persistentvolumeclaims \"x\" is forbidden: exceeded quota: claims, \
                         requested: persistentvolumeclaims=1, used: persistentvolumeclaims=0, \
                         limited: persistentvolumeclaims=0";

    #[tokio::test]
    async fn a_claim_refused_by_a_quota_leaves_no_volume_and_the_pod_fetches_its_model() {
        let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
        cluster(&mut writers, &mut serving);
        writers.apply_model_cache(cache("l-2", CachedModelPhase::Ready));
        writers.mark_ready();
        let mut job: InferenceJob = cached_job();
        job.spec.serve = None;
        let pv = volume_name(NAMESPACE, &fixtures::uid("chat"), KEY);
        let pvc = claim_name("chat", KEY);
        let (mut pod, mut status) = (Value::Null, Value::Null);
        run(&ctx, &job, &mut api, async |api| {
            api.object_create(&volumes(), &pv).await;
            api.object_create_rejected(&claims(), &pvc, 403, QUOTA)
                .await;
            api.object_delete(&volumes(), &pv).await;
            pod = api.pod_create("chat-1").await;
            status = api.status_apply(&job).await;
            api.events("chat", &["PodCreated"]).await;
        })
        .await;
        let annotations = &pod["metadata"]["annotations"];
        assert_eq!(annotations[WEIGHTS_SOURCE_ANNOTATION], "FetchedByPod");
        assert_eq!(annotations.get(POD_MODEL_ANNOTATION), None);
        let note = annotations[WEIGHTS_NOTE_ANNOTATION].as_str().unwrap();
        assert!(
            note.contains(&format!("the model's claim {pvc} was refused"))
                && note.contains("exceeded quota"),
            "{note}"
        );
        let volumes_of_pod = pod["spec"]["volumes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            volumes_of_pod
                .iter()
                .all(|v| v.get("persistentVolumeClaim").is_none()),
            "{volumes_of_pod:?}"
        );
        let terms = pod["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            terms.iter().all(|t| !t["matchExpressions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e["key"] == "kubernetes.io/hostname")),
            "not kept to the holders: {terms:?}"
        );
        assert_eq!(
            env(&pod, "HF_HUB_OFFLINE"),
            Value::Null,
            "online: it downloads"
        );

        // The next pass reads the pod: the job says where its weights come from, and why.
        writers.apply_pod(fixtures::created(serde_json::from_value(pod).unwrap()));
        let job = with_status(&job, &status);
        let mut next = Value::Null;
        run(&ctx, &job, &mut api, async |api| {
            next = api.status_apply(&job).await;
        })
        .await;
        let weights = &next["status"]["weights"];
        assert_eq!(weights["source"], "FetchedByPod");
        assert!(
            weights["message"]
                .as_str()
                .unwrap()
                .contains("exceeded quota"),
            "{weights}"
        );
    }
}
