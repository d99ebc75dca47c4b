//! A served job's `InferencePool` (`serve.inferencePool`, pure): named after the job, owned by
//! it, selecting exactly the pods its Service selects (one-pod replicas, or the leaders of
//! groups), on the serving port, with the endpoint picker the job names.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use vramfit_api::inference_pool::{
    EndpointPickerRef, InferencePool, InferencePoolSpec, LabelSelector, Port,
};
use vramfit_api::serve::InferencePoolRequest;
use vramfit_api::{InferenceJob, ServeSpec};

use crate::error::BuildError;
use crate::ownership::{object_labels, owner};

/// The pool `job` asks for with `request`.
pub fn desired_pool(
    job: &InferenceJob,
    serve: &ServeSpec,
    request: &InferencePoolRequest,
) -> Result<InferencePool, BuildError> {
    let picker = &request.endpoint_picker;
    let mut pool = InferencePool::new(
        &job.name_any(),
        InferencePoolSpec {
            selector: LabelSelector {
                match_labels: super::service::serving_selector(job)?,
            },
            target_ports: vec![Port {
                number: i32::from(serve.port),
            }],
            endpoint_picker_ref: EndpointPickerRef {
                group: Some(String::new()),
                kind: Some("Service".to_string()),
                name: picker.name.clone(),
                port: Some(Port {
                    number: i32::from(picker.port),
                }),
                failure_mode: picker.failure_mode,
            },
        },
    );
    pool.metadata = ObjectMeta {
        name: Some(job.name_any()),
        namespace: job.namespace(),
        labels: Some(object_labels(job)),
        owner_references: Some(vec![owner(job)?]),
        ..ObjectMeta::default()
    };
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_api::inference_pool::FailureMode;
    use vramfit_api::serve::EndpointPicker;

    fn request() -> InferencePoolRequest {
        InferencePoolRequest {
            endpoint_picker: EndpointPicker {
                name: "llm-d-epp".into(),
                port: 9002,
                failure_mode: Some(FailureMode::FailOpen),
            },
        }
    }

    #[test]
    fn the_pool_selects_what_the_service_selects_on_the_serving_port() {
        let mut spec = crate::fixtures::vllm_mistral_spec();
        spec.serve = Some(ServeSpec {
            port: 8123,
            ..ServeSpec::default()
        });
        let job = crate::fixtures::job("chat", spec);
        let serve = job.spec.serve.clone().unwrap();
        let pool = desired_pool(&job, &serve, &request()).unwrap();
        let service = super::super::service::desired_service(&job, &serve).unwrap();
        assert_eq!(
            Some(pool.spec.selector.match_labels.clone()),
            service.spec.unwrap().selector
        );
        assert_eq!(pool.spec.target_ports, [Port { number: 8123 }]);
        let picker = &pool.spec.endpoint_picker_ref;
        assert_eq!(
            (picker.name.as_str(), picker.port, picker.kind.as_deref()),
            ("llm-d-epp", Some(Port { number: 9002 }), Some("Service"))
        );
        assert_eq!(picker.failure_mode, Some(FailureMode::FailOpen));
        let owner = &pool.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("InferenceJob", Some(true))
        );
        assert_eq!(pool.metadata.name.as_deref(), Some("chat"));
        // What goes on the wire: v1's field names.
        let wire = serde_json::to_value(&pool).unwrap();
        assert_eq!(wire["apiVersion"], "inference.networking.k8s.io/v1");
        assert_eq!(wire["spec"]["endpointPickerRef"]["failureMode"], "FailOpen");
        assert_eq!(wire["spec"]["targetPorts"][0]["number"], 8123);
    }

    #[test]
    fn a_group_job_s_pool_selects_its_leaders_only() {
        let mut spec = crate::fixtures::vllm_mistral_spec();
        spec.gpus.max_nodes = 2;
        spec.serve = Some(ServeSpec::default());
        let job = crate::fixtures::job("big", spec);
        let serve = job.spec.serve.clone().unwrap();
        let pool = desired_pool(&job, &serve, &request()).unwrap();
        assert_eq!(
            pool.spec.selector.match_labels.get("vramfit.io/group-rank"),
            Some(&"0".to_string())
        );
    }
}
