//! Test builders of groups: a job that may span nodes and a plan on two nodes (the planner
//! decides when a job needs them; these tests take the plan as given), and the requests and
//! pods the reconcile tests of groups share.
use k8s_openapi::api::core::v1::Pod;
use vramfit_api::group::{GroupEngine, GroupPlan};
use vramfit_api::{Fallback, InferenceJob, Plan};
use vramfit_planner::fallback::next_step;
use vramfit_planner::{JobInput, NodeClass, plan_for_class};

use crate::fixtures::{self, NAMESPACE};
use crate::verifier::ApiServerVerifier;

/// Mistral on vLLM, `name`, allowed `max_nodes` nodes.
pub fn group_job(name: &str, max_nodes: u32) -> InferenceJob {
    let mut spec = fixtures::vllm_mistral_spec();
    spec.gpus.max_nodes = max_nodes;
    fixtures::job(name, spec)
}

/// The job's plan on `class`, spread over two nodes.
pub fn two_node_plan(input: &JobInput, class: &NodeClass) -> Plan {
    let mut plan = match plan_for_class(input, class, &Fallback::default()) {
        Ok(plan) => plan,
        Err(error) => panic!("{error}"),
    };
    plan.group = Some(GroupPlan {
        nodes: 2,
        engine: GroupEngine::VllmRay,
        tensor_parallel_size: Some(plan.gpu_count),
        pipeline_parallel_size: Some(2),
        tensor_split: Vec::new(),
        layers_per_node: Vec::new(),
        port: 6379,
        why: "two nodes in the tests".to_string(),
    });
    plan
}

/// The Services of the test namespace.
pub fn services() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/services")
}

/// The NetworkPolicies of the test namespace.
pub fn policies() -> String {
    format!("/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies")
}

/// The next requests: `group`'s Service, then its NetworkPolicy, created.
pub async fn group_objects_created(api: &mut ApiServerVerifier, group: &str) {
    api.object_create(&services(), group).await;
    api.object_create(&policies(), group).await;
}

/// The next requests: `group`'s Service, then its NetworkPolicy, deleted.
pub async fn group_objects_deleted(api: &mut ApiServerVerifier, group: &str) {
    api.object_delete(&services(), group).await;
    api.object_delete(&policies(), group).await;
}

/// The next requests: a served `group`'s Service, then its leader's NetworkPolicy (the
/// serving port), then its members' NetworkPolicy, created.
pub async fn served_group_objects_created(api: &mut ApiServerVerifier, group: &str) {
    api.object_create(&services(), group).await;
    api.object_create(&policies(), &format!("{group}-leader"))
        .await;
    api.object_create(&policies(), group).await;
}

/// The next requests: a served `group`'s Service, then its NetworkPolicies (by name: the
/// members', then the leader's), deleted.
pub async fn served_group_objects_deleted(api: &mut ApiServerVerifier, group: &str) {
    api.object_delete(&services(), group).await;
    api.object_delete(&policies(), group).await;
    api.object_delete(&policies(), &format!("{group}-leader"))
        .await;
}

/// `pod` failed on `node`, CUDA out of memory.
pub fn out_of_memory(pod: Pod, node: &str) -> Pod {
    fixtures::as_failed(
        pod,
        node,
        "Error",
        1,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    )
}

/// The nodes of the next group after `failed` ran out of memory: the planner's step down
/// from it on `class`.
pub fn nodes_one_step_down(input: &JobInput, class: &NodeClass, failed: &Plan) -> u32 {
    let Some((fallback, _)) = next_step(
        input,
        failed,
        &Fallback::default(),
        class.max_gpus_per_pod(),
        Some(class.capability),
    ) else {
        panic!("the planner has no step down from the failed plan");
    };
    match plan_for_class(input, class, &fallback) {
        Ok(plan) => plan.nodes(),
        Err(error) => panic!("{error}"),
    }
}

/// The job's plan on `class` as a llama.cpp group of two nodes over RPC (the leader waits for
/// its worker's `rpc-server`).
pub fn rpc_plan(input: &JobInput, class: &NodeClass) -> Plan {
    let mut plan = two_node_plan(input, class);
    plan.group = Some(GroupPlan {
        nodes: 2,
        engine: GroupEngine::LlamaCppRpc,
        tensor_parallel_size: None,
        pipeline_parallel_size: None,
        tensor_split: vec![1, 1],
        layers_per_node: vec![16, 16],
        port: 50052,
        why: "two nodes over RPC in the tests".to_string(),
    });
    plan
}

/// `pod` running on `node`, Ready, at `ip`.
pub fn ready_at(pod: Pod, node: &str, ip: &str) -> Pod {
    let mut pod = fixtures::as_running(pod, node);
    if let Some(status) = pod.status.as_mut() {
        status.pod_ip = Some(ip.to_string());
        status.conditions = Some(vec![k8s_openapi::api::core::v1::PodCondition {
            type_: "Ready".to_string(),
            status: "True".to_string(),
            ..k8s_openapi::api::core::v1::PodCondition::default()
        }]);
    }
    pod
}
