//! Creates a decision's model volumes and claims before its pods (API). Each is created, an
//! existing one of the name taken as done — the volume's name hashes the job's uid and the
//! model, so it is this job's — except a claim that is not the job's (no cache label, another
//! volume, or another owner): that is reported and never taken over.
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tracing::info;
use vramfit_api::model_cache::VOLUME_LABEL;

use super::mount::ModelVolume;
use crate::reconcile::apply::ApplyError;

/// Creates every volume, then its claim in `namespace`; `job_uid` is the claims' owner.
pub async fn create(
    client: &Client,
    namespace: &str,
    job_uid: &str,
    volumes: &[ModelVolume],
) -> Result<(), ApplyError> {
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
                return Err(ApplyError::ModelVolume {
                    object: format!("PersistentVolumeClaim {claim_name}"),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Whether `claim` is the job's own claim on volume `pv_name`.
pub fn is_ours(claim: &PersistentVolumeClaim, pv_name: &str, job_uid: &str) -> bool {
    claim.labels().get(VOLUME_LABEL).map(String::as_str) == Some("true")
        && claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(pv_name)
        && claim.owner_references().iter().any(|o| o.uid == job_uid)
}
