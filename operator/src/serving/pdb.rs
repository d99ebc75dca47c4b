//! The PodDisruptionBudget of a served job (pure): only while it asks for two replicas or
//! more, `maxUnavailable: 1` over exactly its replica pods, so that a node drain takes its
//! replicas one at a time and never all of them (docs/serving.md says why not `minAvailable`).
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use vramfit_api::{InferenceJob, ServeSpec};

use super::service::{controlled_by, labels_hold, object_labels, owner, selector};
use crate::reconcile::build::BuildError;

/// The replicas from which a served job gets a PodDisruptionBudget.
pub const PDB_FROM_REPLICAS: u32 = 2;

/// What to do with the job's PodDisruptionBudget.
#[derive(Clone, Debug, PartialEq)]
pub enum PdbWrite {
    /// Nothing: it is as it should be (or absent and not wanted, or someone else's).
    Keep,
    /// Apply this one (absent or drifted).
    Apply(Box<PodDisruptionBudget>),
    /// Delete the job's own (it asks for fewer than two replicas now).
    Delete(String),
}

/// The PodDisruptionBudget of `job` when it asks for two replicas or more.
pub fn desired_pdb(
    job: &InferenceJob,
    serve: &ServeSpec,
) -> Result<Option<PodDisruptionBudget>, BuildError> {
    if serve.replicas < PDB_FROM_REPLICAS {
        return Ok(None);
    }
    let namespace = job
        .namespace()
        .ok_or(BuildError::MissingObjectKey("metadata.namespace"))?;
    Ok(Some(PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(job.name_any()),
            namespace: Some(namespace),
            labels: Some(object_labels(job)),
            owner_references: Some(vec![owner(job)?]),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector(job)?),
                match_expressions: None,
            }),
            // A replica that is not Ready (crash-looping, loading) may always be evicted: it
            // serves nothing, and a drain must not wait on it.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_string()),
            min_available: None,
        }),
        status: None,
    }))
}

/// The write that brings the store's PodDisruptionBudget (`observed`) to `desired`.
pub fn pdb_write(
    observed: Option<&PodDisruptionBudget>,
    desired: Option<PodDisruptionBudget>,
    job: &InferenceJob,
) -> PdbWrite {
    let ours = observed.is_some_and(|pdb| controlled_by(pdb.owner_references(), job));
    match (observed, desired) {
        // Someone else's budget of that name: left alone.
        (Some(_), _) if !ours => PdbWrite::Keep,
        (None, None) => PdbWrite::Keep,
        (Some(pdb), None) => PdbWrite::Delete(pdb.name_any()),
        (None, Some(desired)) => PdbWrite::Apply(Box::new(desired)),
        (Some(pdb), Some(desired)) => {
            let (have, want) = (
                pdb.spec.clone().unwrap_or_default(),
                desired.spec.clone().unwrap_or_default(),
            );
            let same = have.max_unavailable == want.max_unavailable
                && have.min_available.is_none()
                && have.selector == want.selector
                && have.unhealthy_pod_eviction_policy == want.unhealthy_pod_eviction_policy
                && labels_hold(pdb.labels(), desired.labels());
            if same {
                PdbWrite::Keep
            } else {
                PdbWrite::Apply(Box::new(desired))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn job(replicas: u32) -> (InferenceJob, ServeSpec) {
        let serve = ServeSpec {
            replicas,
            ..ServeSpec::default()
        };
        let mut spec = fixtures::vllm_mistral_spec();
        spec.serve = Some(serve.clone());
        (fixtures::job("chat", spec), serve)
    }

    #[test]
    fn two_replicas_or_more_get_a_budget_of_one_unavailable() {
        let (one, serve_one) = job(1);
        assert_eq!(desired_pdb(&one, &serve_one).unwrap(), None);
        let (two, serve_two) = job(2);
        let pdb = desired_pdb(&two, &serve_two).unwrap().unwrap();
        let spec = pdb.spec.as_ref().unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(spec.min_available, None);
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
    }

    #[test]
    fn the_budget_is_applied_kept_or_deleted_as_replicas_change() {
        let (two, serve_two) = job(2);
        let wanted = desired_pdb(&two, &serve_two).unwrap();
        let pdb = wanted.clone().unwrap();
        assert!(matches!(
            pdb_write(None, wanted.clone(), &two),
            PdbWrite::Apply(_)
        ));
        assert_eq!(pdb_write(Some(&pdb), wanted.clone(), &two), PdbWrite::Keep);
        // Scaled down to one: the budget goes.
        assert_eq!(
            pdb_write(Some(&pdb), None, &two),
            PdbWrite::Delete("chat".into())
        );
        assert_eq!(pdb_write(None, None, &two), PdbWrite::Keep);
        // Edited by someone: applied again.
        let mut edited = pdb.clone();
        edited.spec.as_mut().unwrap().max_unavailable = Some(IntOrString::Int(0));
        assert!(matches!(
            pdb_write(Some(&edited), wanted.clone(), &two),
            PdbWrite::Apply(_)
        ));
        // Someone else's budget of the job's name: left alone, never deleted.
        let mut foreign = pdb.clone();
        foreign.metadata.owner_references = None;
        assert_eq!(pdb_write(Some(&foreign), None, &two), PdbWrite::Keep);
        assert_eq!(pdb_write(Some(&foreign), wanted, &two), PdbWrite::Keep);
    }
}
