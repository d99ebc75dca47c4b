//! The PodDisruptionBudget of a served job (pure): over exactly its replica pods, sized from
//! the replicas that have a live pod (created, starting or running; not ended, not waiting for
//! room or a backoff): `minAvailable` = those less one, only while there are two or more. A
//! node drain then takes the replicas one at a time, and the budget never counts a replica that
//! cannot come back, so it never blocks a drain for good (docs/serving.md says why).
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use vramfit_api::InferenceJob;

use super::service::{controlled_by, labels_hold, object_labels, owner, serving_selector};
use crate::ownership::ObjectWrite;
use crate::pod::build::BuildError;

/// The live replicas from which a served job gets a PodDisruptionBudget.
pub const PDB_FROM_REPLICAS: u32 = 2;

/// What to do with the job's PodDisruptionBudget.
pub type PdbWrite = ObjectWrite<PodDisruptionBudget>;

/// The PodDisruptionBudget of `job` when `live` of its replicas have a live pod: none below
/// two, else `minAvailable: live - 1`.
///
/// Sized from the live replicas, not from `serve.replicas`: a replica that waits for room has
/// no pod, and a budget that counted it could never allow an eviction. Not from the Ready ones
/// either: an evicted replica is replaced at once by a pod that counts as live while it loads,
/// so the next eviction waits until it is Ready; a count of Ready replicas would drop with
/// each eviction and let the next one through.
pub fn desired_pdb(
    job: &InferenceJob,
    live: u32,
) -> Result<Option<PodDisruptionBudget>, BuildError> {
    if live < PDB_FROM_REPLICAS {
        return Ok(None);
    }
    let namespace = job
        .namespace()
        .ok_or(BuildError::MissingObjectKey("metadata.namespace"))?;
    let min_available = i32::try_from(live - 1).unwrap_or(i32::MAX);
    Ok(Some(PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(job.name_any()),
            namespace: Some(namespace),
            labels: Some(object_labels(job)),
            owner_references: Some(vec![owner(job)?]),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min_available)),
            selector: Some(LabelSelector {
                match_labels: Some(serving_selector(job)?),
                match_expressions: None,
            }),
            // A replica that is not Ready (crash-looping, loading) may always be evicted: it
            // serves nothing, and a drain must not wait on it.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_string()),
            max_unavailable: None,
        }),
        status: None,
    }))
}

/// The write that brings the store's PodDisruptionBudget (`observed`) to `desired`. Only a
/// budget the store shows with the job as controller is applied onto or deleted; any other is
/// someone else's, or not seen: a wanted budget is then created, never applied.
pub fn pdb_write(
    observed: Option<&PodDisruptionBudget>,
    desired: Option<PodDisruptionBudget>,
    job: &InferenceJob,
) -> PdbWrite {
    let ours = observed.filter(|pdb| controlled_by(pdb.owner_references(), job));
    match (ours, desired) {
        (None, None) => ObjectWrite::Keep,
        (None, Some(desired)) => ObjectWrite::Create(Box::new(desired)),
        (Some(pdb), None) => ObjectWrite::Delete {
            name: pdb.name_any(),
            uid: pdb.uid().unwrap_or_default(),
        },
        (Some(pdb), Some(desired)) => {
            let (have, want) = (
                pdb.spec.clone().unwrap_or_default(),
                desired.spec.clone().unwrap_or_default(),
            );
            let same = have.min_available == want.min_available
                && have.max_unavailable.is_none()
                && have.selector == want.selector
                && have.unhealthy_pod_eviction_policy == want.unhealthy_pod_eviction_policy
                && labels_hold(pdb.labels(), desired.labels());
            if same {
                ObjectWrite::Keep
            } else {
                ObjectWrite::Apply {
                    object: Box::new(desired),
                    uid: pdb.uid().unwrap_or_default(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use vramfit_api::ServeSpec;

    fn job(replicas: u32) -> InferenceJob {
        let serve = ServeSpec {
            replicas,
            ..ServeSpec::default()
        };
        let mut spec = fixtures::vllm_mistral_spec();
        spec.serve = Some(serve);
        fixtures::job("chat", spec)
    }

    fn min_available(pdb: &PodDisruptionBudget) -> Option<IntOrString> {
        pdb.spec.as_ref().and_then(|s| s.min_available.clone())
    }

    #[test]
    fn two_live_replicas_or_more_get_a_budget_of_all_but_one() {
        let chat = job(2);
        assert_eq!(desired_pdb(&chat, 0).unwrap(), None);
        assert_eq!(desired_pdb(&chat, 1).unwrap(), None);
        let pdb = desired_pdb(&chat, 2).unwrap().unwrap();
        let spec = pdb.spec.as_ref().unwrap();
        assert_eq!(spec.min_available, Some(IntOrString::Int(1)));
        assert_eq!(spec.max_unavailable, None);
        assert_eq!(
            spec.unhealthy_pod_eviction_policy.as_deref(),
            Some("AlwaysAllow")
        );
        assert_eq!(
            spec.selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["vramfit.io/job-uid"],
            fixtures::uid("chat")
        );
        assert_eq!(pdb.owner_references()[0].uid, fixtures::uid("chat"));
        let three = desired_pdb(&chat, 3).unwrap().unwrap();
        assert_eq!(min_available(&three), Some(IntOrString::Int(2)));
    }

    /// Regression: the budget was sized from `serve.replicas` (`maxUnavailable: 1`, whose
    /// expected count the disruption controller reads from the scale subresource), so with
    /// room for one of two replicas the Ready one could never be evicted, and `replicas: 100`
    /// made every node holding a replica undrainable. Only live replicas count now.
    #[test]
    fn replicas_waiting_for_room_are_not_in_the_budget() {
        let hundred = job(100);
        assert_eq!(
            desired_pdb(&hundred, 1).unwrap(),
            None,
            "one pod: no budget"
        );
        let pdb = desired_pdb(&hundred, 3).unwrap().unwrap();
        assert_eq!(
            min_available(&pdb),
            Some(IntOrString::Int(2)),
            "three pods: one of them may go, whatever serve.replicas says"
        );
    }

    #[test]
    fn the_budget_is_created_applied_kept_or_deleted_only_when_it_is_the_jobs() {
        let chat = job(2);
        let wanted = desired_pdb(&chat, 2).unwrap();
        let mut pdb = wanted.clone().unwrap();
        pdb.metadata.uid = Some("pdb-uid".into());
        // Not in the store: created, never applied.
        assert!(matches!(
            pdb_write(None, wanted.clone(), &chat),
            ObjectWrite::Create(_)
        ));
        assert_eq!(
            pdb_write(Some(&pdb), wanted.clone(), &chat),
            ObjectWrite::Keep
        );
        // Fewer than two live replicas: the budget goes, by its uid.
        assert_eq!(
            pdb_write(Some(&pdb), None, &chat),
            ObjectWrite::Delete {
                name: "chat".into(),
                uid: "pdb-uid".into()
            }
        );
        assert_eq!(pdb_write(None, None, &chat), ObjectWrite::Keep);
        // Edited by someone, or resized: applied again onto the same object.
        let mut edited = pdb.clone();
        edited.spec.as_mut().unwrap().min_available = Some(IntOrString::Int(0));
        assert!(matches!(
            pdb_write(Some(&edited), wanted.clone(), &chat),
            ObjectWrite::Apply { uid, .. } if uid == "pdb-uid"
        ));
        // A budget written by an older version (`maxUnavailable: 1`): applied.
        let mut older = pdb.clone();
        let spec = older.spec.as_mut().unwrap();
        spec.min_available = None;
        spec.max_unavailable = Some(IntOrString::Int(1));
        assert!(matches!(
            pdb_write(Some(&older), wanted.clone(), &chat),
            ObjectWrite::Apply { .. }
        ));
        // Someone else's budget of the job's name: never deleted nor applied onto; created
        // (which the API server refuses, and the job reports).
        let mut foreign = pdb.clone();
        foreign.metadata.owner_references = None;
        assert_eq!(pdb_write(Some(&foreign), None, &chat), ObjectWrite::Keep);
        assert!(matches!(
            pdb_write(Some(&foreign), wanted, &chat),
            ObjectWrite::Create(_)
        ));
    }
}
