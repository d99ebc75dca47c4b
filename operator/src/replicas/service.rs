//! The Service of a served job (pure): named after the job, owned by it, selecting exactly
//! its replica pods (by the job's uid), on the job's port; and whether the Service the store
//! shows still is that.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use vramfit_api::pod_keys::{GROUP_RANK_LABEL, JOB_LABEL, JOB_UID_LABEL, label_value};
use vramfit_api::{InferenceJob, ServeSpec};

pub use crate::ownership::{controlled_by, labels_hold, object_labels, owner};
use crate::pod::build::BuildError;

/// The name of the container port and of the Service port.
pub const PORT_NAME: &str = "http";

/// The labels that select a served job's replica pods: its name and its uid.
pub fn selector(job: &InferenceJob) -> Result<BTreeMap<String, String>, BuildError> {
    let uid = job
        .metadata
        .uid
        .clone()
        .ok_or(BuildError::MissingObjectKey("metadata.uid"))?;
    Ok(BTreeMap::from([
        (JOB_LABEL.to_string(), label_value(&job.name_any())),
        (JOB_UID_LABEL.to_string(), uid),
    ]))
}

/// The labels that select the pods that serve a job's clients: [`selector`]'s, and for a job
/// whose replicas are groups (`gpus.maxNodes` above 1, or groups its status lists still, while
/// they roll onto groups of one) the leaders' rank: a group's workers are the leader's, not
/// the clients'. The Service, the PodDisruptionBudget (one per replica) and `status.selector`
/// use it; a job of one-pod replicas keeps [`selector`] exactly.
pub fn serving_selector(job: &InferenceJob) -> Result<BTreeMap<String, String>, BuildError> {
    let mut labels = selector(job)?;
    if crate::pod::runs_groups(job) {
        labels.insert(GROUP_RANK_LABEL.to_string(), "0".to_string());
    }
    Ok(labels)
}

/// The selector as `status.selector` (and `kubectl get pods -l`) writes it.
pub fn selector_string(selector: &BTreeMap<String, String>) -> String {
    selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The URL of a served job's Service inside the cluster.
pub fn endpoint(job: &InferenceJob, serve: &ServeSpec) -> String {
    format!(
        "http://{}.{}.svc:{}",
        job.name_any(),
        job.namespace().unwrap_or_default(),
        serve.port
    )
}

/// The Service of `job`, served as `serve` says.
pub fn desired_service(job: &InferenceJob, serve: &ServeSpec) -> Result<Service, BuildError> {
    let namespace = job
        .namespace()
        .ok_or(BuildError::MissingObjectKey("metadata.namespace"))?;
    Ok(Service {
        metadata: ObjectMeta {
            name: Some(job.name_any()),
            namespace: Some(namespace),
            labels: Some(object_labels(job)),
            owner_references: Some(vec![owner(job)?]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some(serve.service_type.as_str().to_string()),
            selector: Some(serving_selector(job)?),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.to_string()),
                port: i32::from(serve.port),
                target_port: Some(IntOrString::String(PORT_NAME.to_string())),
                protocol: Some("TCP".to_string()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// What the store shows of the job's Service, against what vramfit applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceSeen {
    /// No Service of that name: apply it.
    Absent,
    /// The job's, as desired: nothing to write.
    AsDesired,
    /// The job's, changed by someone or by a spec change: apply it again.
    Drifted,
    /// A Service of that name that this job does not control: left alone.
    Foreign,
}

/// Compares the Service the store shows (`None`: none) with the desired one. Only what
/// vramfit sets is compared (the API server adds a cluster IP, defaults and its own fields).
pub fn compare(observed: Option<&Service>, desired: &Service, job: &InferenceJob) -> ServiceSeen {
    let Some(observed) = observed else {
        return ServiceSeen::Absent;
    };
    if !controlled_by(observed.owner_references(), job) {
        return ServiceSeen::Foreign;
    }
    let (have, want) = (
        observed.spec.clone().unwrap_or_default(),
        desired.spec.clone().unwrap_or_default(),
    );
    let port_matches = |want: &ServicePort| {
        have.ports.iter().flatten().any(|p| {
            p.name == want.name
                && p.port == want.port
                && p.target_port == want.target_port
                && p.protocol.as_deref().unwrap_or("TCP") == "TCP"
        })
    };
    let same = have.type_.as_deref().unwrap_or("ClusterIP")
        == want.type_.as_deref().unwrap_or("ClusterIP")
        && have.selector == want.selector
        && want.ports.iter().flatten().all(port_matches)
        && labels_hold(observed.labels(), desired.labels());
    if same {
        ServiceSeen::AsDesired
    } else {
        ServiceSeen::Drifted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use vramfit_api::ServiceType;

    fn served() -> (InferenceJob, ServeSpec) {
        let serve = ServeSpec {
            port: 8000,
            ..ServeSpec::default()
        };
        let mut spec = fixtures::vllm_mistral_spec();
        spec.serve = Some(serve.clone());
        (fixtures::job("chat", spec), serve)
    }

    #[test]
    fn the_service_is_named_after_the_job_owned_by_it_and_selects_its_pods_by_uid() {
        let (job, serve) = served();
        let service = desired_service(&job, &serve).unwrap();
        assert_eq!(service.name_any(), "chat");
        assert_eq!(service.namespace().as_deref(), Some(fixtures::NAMESPACE));
        let owner = &service.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("InferenceJob", fixtures::uid("chat").as_str())
        );
        assert_eq!(owner.controller, Some(true));
        let spec = service.spec.as_ref().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(
            spec.selector.as_ref().unwrap(),
            &BTreeMap::from([
                ("vramfit.io/job".to_string(), "chat".to_string()),
                ("vramfit.io/job-uid".to_string(), fixtures::uid("chat")),
            ])
        );
        let port = &spec.ports.as_ref().unwrap()[0];
        assert_eq!(port.port, 8000);
        assert_eq!(port.target_port, Some(IntOrString::String("http".into())));
        assert_eq!(endpoint(&job, &serve), "http://chat.ml.svc:8000");
        assert_eq!(
            selector_string(spec.selector.as_ref().unwrap()),
            format!(
                "vramfit.io/job=chat,vramfit.io/job-uid={}",
                fixtures::uid("chat")
            )
        );
    }

    #[test]
    fn drift_is_what_vramfit_sets_and_nothing_the_server_adds() {
        let (job, serve) = served();
        let desired = desired_service(&job, &serve).unwrap();
        assert_eq!(compare(None, &desired, &job), ServiceSeen::Absent);
        // As the API server returns it: a cluster IP, defaults, more labels.
        let mut observed = desired.clone();
        let spec = observed.spec.as_mut().unwrap();
        spec.cluster_ip = Some("10.0.0.12".into());
        spec.session_affinity = Some("None".into());
        observed.labels_mut().insert("team".into(), "ml".into());
        assert_eq!(
            compare(Some(&observed), &desired, &job),
            ServiceSeen::AsDesired
        );
        // Someone edits the selector, or the job changes its port or type.
        let mut edited = observed.clone();
        edited.spec.as_mut().unwrap().selector = Some(BTreeMap::from([("app".into(), "x".into())]));
        assert_eq!(compare(Some(&edited), &desired, &job), ServiceSeen::Drifted);
        let mut moved = serve.clone();
        moved.port = 9000;
        let desired_9000 = desired_service(&job, &moved).unwrap();
        assert_eq!(
            compare(Some(&observed), &desired_9000, &job),
            ServiceSeen::Drifted
        );
        let balanced = ServeSpec {
            service_type: ServiceType::LoadBalancer,
            ..serve.clone()
        };
        let desired_lb = desired_service(&job, &balanced).unwrap();
        assert_eq!(
            compare(Some(&observed), &desired_lb, &job),
            ServiceSeen::Drifted
        );
        // Someone else's Service of the same name is never taken over.
        let mut foreign = observed.clone();
        foreign.metadata.owner_references = None;
        assert_eq!(
            compare(Some(&foreign), &desired, &job),
            ServiceSeen::Foreign
        );
    }
}
