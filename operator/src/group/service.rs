//! A group's headless Service (pure): named after the group, owned by the job, selecting the
//! group's pods, with no cluster IP and the addresses of pods not Ready yet published, so that
//! `<pod>.<group>.<namespace>` resolves for every rank from its start (the ranks meet before
//! any of them is Ready). No port: the records are what the ranks need.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use vramfit_api::InferenceJob;
use vramfit_api::pod_keys::GROUP_LABEL;

use crate::pod::build::BuildError;
use crate::replicas::service::{controlled_by, labels_hold, object_labels, owner};

/// The labels of a group's Service and NetworkPolicy: the job's objects' labels and the
/// group's.
pub fn group_object_labels(job: &InferenceJob, group: &str) -> BTreeMap<String, String> {
    let mut labels = object_labels(job);
    labels.insert(GROUP_LABEL.to_string(), group.to_string());
    labels
}

/// The selector of a group's pods.
pub fn group_selector(group: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(GROUP_LABEL.to_string(), group.to_string())])
}

/// The headless Service of `group`, a group of `job`'s.
pub fn desired_service(job: &InferenceJob, group: &str) -> Result<Service, BuildError> {
    let namespace = job
        .namespace()
        .ok_or(BuildError::MissingObjectKey("metadata.namespace"))?;
    Ok(Service {
        metadata: ObjectMeta {
            name: Some(group.to_string()),
            namespace: Some(namespace),
            labels: Some(group_object_labels(job, group)),
            owner_references: Some(vec![owner(job)?]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(group_selector(group)),
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// Whether the Service the store shows is the job's (by uid) and holds what vramfit sets (the
/// API server adds defaults and its own fields, which are not compared).
pub fn as_desired(observed: &Service, desired: &Service, job: &InferenceJob) -> bool {
    let (have, want) = (
        observed.spec.clone().unwrap_or_default(),
        desired.spec.clone().unwrap_or_default(),
    );
    controlled_by(observed.owner_references(), job)
        && have.cluster_ip == want.cluster_ip
        && have.selector == want.selector
        && have.publish_not_ready_addresses == want.publish_not_ready_addresses
        && labels_hold(observed.labels(), desired.labels())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::testing::group_job;

    #[test]
    fn the_service_is_headless_owned_by_the_job_and_selects_the_group() {
        let job = group_job("big", 2);
        let service = desired_service(&job, "big-1").unwrap();
        assert_eq!(service.name_any(), "big-1");
        assert_eq!(service.owner_references()[0].controller, Some(true));
        assert_eq!(service.labels()[GROUP_LABEL], "big-1");
        let spec = service.spec.as_ref().unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        assert_eq!(spec.selector, Some(group_selector("big-1")));
        assert!(as_desired(&service, &service, &job));
        // As the server shows it: defaults added; still as desired.
        let mut served = service.clone();
        served.spec.as_mut().unwrap().session_affinity = Some("None".into());
        assert!(as_desired(&served, &service, &job));
        let mut edited = served.clone();
        edited.spec.as_mut().unwrap().selector = Some(BTreeMap::from([("a".into(), "b".into())]));
        assert!(!as_desired(&edited, &service, &job));
        let mut foreign = served;
        foreign.metadata.owner_references = None;
        assert!(!as_desired(&foreign, &service, &job));
    }
}
