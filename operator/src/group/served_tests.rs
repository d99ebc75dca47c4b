//! The real `reconcile` of a served job whose replicas are groups against the mock API
//! server: every request in order (ended groups' pods deleted first, then each group's
//! Service and NetworkPolicies (the leader's, then the members'), then the new pods, the
//! job's Service and budget, the status, the events, and last the objects of groups whose
//! pods are gone).
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::runtime::watcher;
use serde_json::{Value, json};
use vramfit_api::{Fallback, InferenceJob, ServeSpec};
use vramfit_planner::{plan_for_class, resolve_job};

use super::network_policy::{desired_leader_network_policy, desired_network_policy};
use super::service::desired_service;
use super::testing::{
    nodes_one_step_down, out_of_memory, policies, served_group_objects_created,
    served_group_objects_deleted, services,
};
use crate::batch::tests::{created_pod, run, with_status};
use crate::fixtures::{self, NAMESPACE};
use crate::serving_state::ServingWriters;
use crate::stores::StoreWriters;
use crate::verifier::{ApiServerVerifier, test_context_with_serving};

fn pdbs() -> String {
    format!("/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets")
}

/// Qwen3-32B in 16 bits on vLLM, two replicas, each allowed two nodes: it needs two A10G×2
/// nodes per replica.
fn served_group_job() -> InferenceJob {
    served_group_job_quantized(&["none"])
}

/// [`served_group_job`] allowed the `quantizations`.
fn served_group_job_quantized(quantizations: &[&str]) -> InferenceJob {
    let mut spec = fixtures::spec_from_json(
        r#"{"model": {"preset": "qwen3-32b"}, "runtime": "vllm",
            "image": "vllm/vllm-openai:v0.10.2",
            "contextLength": 2048, "gpus": {"max": 2, "maxNodes": 2}}"#,
    );
    spec.allowed_quantizations = Some(
        quantizations
            .iter()
            .map(|q| serde_json::from_value(json!(q)).unwrap())
            .collect(),
    );
    spec.serve = Some(ServeSpec {
        replicas: 2,
        ..ServeSpec::default()
    });
    fixtures::job("chat", spec)
}

/// `nodes` A10G×2 nodes, `a-1`….
fn cluster(writers: &mut StoreWriters, serving: &mut ServingWriters, nodes: u32) {
    for node in 1..=nodes {
        writers.apply_node(fixtures::gpu_node(&format!("a-{node}"), "a10g", 2, 2));
    }
    writers.mark_ready();
    serving.mark_ready();
}

fn ready(pod: Pod, node: &str) -> Pod {
    let mut pod = fixtures::as_running(pod, node);
    pod.status.get_or_insert_default().conditions = Some(vec![PodCondition {
        type_: "Ready".into(),
        status: "True".into(),
        ..PodCondition::default()
    }]);
    pod
}

/// The group's Service and NetworkPolicies in the stores, as created (the job serves on 8000).
fn objects_in_store(serving: &mut ServingWriters, job: &InferenceJob, group: &str) {
    objects_in_store_on(serving, job, group, 8000);
}

/// The job's Service in the stores, as created.
fn job_service_in_store(serving: &mut ServingWriters, job: &InferenceJob) {
    let mut service =
        crate::replicas::service::desired_service(job, job.spec.serve.as_ref().unwrap()).unwrap();
    service.metadata.uid = Some(ApiServerVerifier::object_uid("chat"));
    serving
        .services
        .apply_watcher_event(&watcher::Event::Apply(service));
}

/// [`objects_in_store`] for a job that serves on `port`.
fn objects_in_store_on(serving: &mut ServingWriters, job: &InferenceJob, group: &str, port: u16) {
    let mut service = desired_service(job, group).unwrap();
    service.metadata.uid = Some(ApiServerVerifier::object_uid(group));
    serving
        .services
        .apply_watcher_event(&watcher::Event::Apply(service));
    let leader_policy = format!("{group}-leader");
    for (mut policy, name) in [
        (desired_network_policy(job, group).unwrap(), group),
        (
            desired_leader_network_policy(job, group, port).unwrap(),
            leader_policy.as_str(),
        ),
    ] {
        policy.metadata.uid = Some(ApiServerVerifier::object_uid(name));
        serving
            .network_policies
            .apply_watcher_event(&watcher::Event::Apply(policy));
    }
}

/// The first reconcile's writes, in order.
struct First {
    services: Vec<Value>,
    leader_policies: Vec<Value>,
    policies: Vec<Value>,
    pods: Vec<Value>,
    service: Value,
    pdb: Value,
    status: Value,
}

async fn first(
    ctx: &Arc<crate::Context>,
    api: &mut ApiServerVerifier,
    job: &InferenceJob,
) -> First {
    let mut out = First {
        services: Vec::new(),
        leader_policies: Vec::new(),
        policies: Vec::new(),
        pods: Vec::new(),
        service: Value::Null,
        pdb: Value::Null,
        status: Value::Null,
    };
    run(ctx, job, api, async |api| {
        for group in ["chat-r0-1", "chat-r1-2"] {
            out.services
                .push(api.object_create(&services(), group).await);
            out.leader_policies.push(
                api.object_create(&policies(), &format!("{group}-leader"))
                    .await,
            );
            out.policies
                .push(api.object_create(&policies(), group).await);
        }
        for pod in ["chat-r0-1-0", "chat-r0-1-1", "chat-r1-2-0", "chat-r1-2-1"] {
            out.pods.push(api.pod_create(pod).await);
        }
        out.service = api.object_create(&services(), "chat").await;
        out.pdb = api.object_create(&pdbs(), "chat").await;
        out.status = api.status_apply(job).await;
        api.events("chat", &["PodCreated", "PodCreated"]).await;
    })
    .await;
    out
}

#[test]
fn the_test_job_needs_two_nodes_per_replica() {
    let job = served_group_job();
    let input = resolve_job(&job.spec).unwrap();
    let plan = plan_for_class(&input, &fixtures::class("a10g", 2), &Fallback::default()).unwrap();
    assert_eq!(plan.nodes(), 2, "{plan:?}");
}

/// The first reconcile of two replicas of two nodes: per replica its group's headless
/// Service and NetworkPolicies, then its two pods; the job's Service and budget select the
/// leaders only; each replica's line lists its members.
#[tokio::test]
async fn a_first_reconcile_creates_each_replica_s_group_and_a_service_of_leaders() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving, 4);
    let job = served_group_job();
    let out = first(&ctx, &mut api, &job).await;
    assert_eq!(
        out.services[0]["spec"],
        json!({ "clusterIP": "None", "publishNotReadyAddresses": true,
                "selector": { "vramfit.io/group": "chat-r0-1" } })
    );
    assert_eq!(
        out.policies[1]["spec"],
        json!({ "podSelector": { "matchLabels": { "vramfit.io/group": "chat-r1-2" } },
                "policyTypes": ["Ingress"],
                "ingress": [{ "from": [{ "podSelector":
                    { "matchLabels": { "vramfit.io/group": "chat-r1-2" } } }] }] }),
        "the members let in only each other"
    );
    assert_eq!(
        out.leader_policies[1]["spec"],
        json!({ "podSelector": { "matchLabels":
                    { "vramfit.io/group": "chat-r1-2", "vramfit.io/group-rank": "0" } },
                "policyTypes": ["Ingress"],
                "ingress": [{ "ports": [{ "port": 8000, "protocol": "TCP" }] }] }),
        "the serving port is open to clients on the leader alone"
    );
    let leader = &out.pods[0];
    let worker = &out.pods[1];
    assert_eq!(
        leader["metadata"]["labels"]["vramfit.io/group"],
        "chat-r0-1"
    );
    assert_eq!(leader["metadata"]["labels"]["vramfit.io/group-rank"], "0");
    assert_eq!(leader["metadata"]["labels"]["vramfit.io/replica"], "0");
    assert_eq!(worker["metadata"]["labels"]["vramfit.io/group-rank"], "1");
    assert_eq!(worker["spec"]["hostname"], "chat-r0-1-1");
    assert_eq!(worker["spec"]["subdomain"], "chat-r0-1");
    let container = |pod: &Value| pod["spec"]["containers"][0].clone();
    assert!(
        container(leader)["readinessProbe"].is_object(),
        "the leader answers for the group"
    );
    assert_eq!(
        container(worker)["readinessProbe"],
        Value::Null,
        "a worker does not serve the health route"
    );
    let env = |pod: &Value, name: &str| {
        container(pod)["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(
        env(worker, "LWS_LEADER_ADDRESS"),
        Some(json!(format!("chat-r0-1-0.chat-r0-1.{NAMESPACE}")))
    );
    let leaders = json!({ "vramfit.io/job": "chat", "vramfit.io/job-uid": fixtures::uid("chat"),
                          "vramfit.io/group-rank": "0" });
    assert_eq!(out.service["spec"]["selector"], leaders);
    assert_eq!(out.pdb["spec"]["selector"]["matchLabels"], leaders);
    assert_eq!(out.pdb["spec"]["minAvailable"], 1, "replicas, not members");
    let s = &out.status["status"];
    assert_eq!(
        s["selector"],
        format!(
            "vramfit.io/group-rank=0,vramfit.io/job=chat,vramfit.io/job-uid={}",
            fixtures::uid("chat")
        )
    );
    assert_eq!(s["replicaStatuses"][1]["podName"], "chat-r1-2");
    assert_eq!(
        s["replicaStatuses"][1]["members"],
        json!([{ "rank": 0, "podName": "chat-r1-2-0" }, { "rank": 1, "podName": "chat-r1-2-1" }])
    );
}

/// Two replicas of two nodes each, running and Ready on a-1…a-4, with the status the operator
/// wrote for them and their objects in the stores.
async fn serving_groups(
    ctx: &Arc<crate::Context>,
    api: &mut ApiServerVerifier,
    writers: &mut StoreWriters,
    serving: &mut ServingWriters,
) -> (InferenceJob, Vec<Pod>) {
    serving_groups_of(ctx, api, writers, serving, served_group_job()).await
}

/// [`serving_groups`] of `job`.
async fn serving_groups_of(
    ctx: &Arc<crate::Context>,
    api: &mut ApiServerVerifier,
    writers: &mut StoreWriters,
    serving: &mut ServingWriters,
    job: InferenceJob,
) -> (InferenceJob, Vec<Pod>) {
    let out = first(ctx, api, &job).await;
    let job = with_status(&job, &out.status);
    let pods: Vec<Pod> = out
        .pods
        .iter()
        .zip(["a-1", "a-2", "a-3", "a-4"])
        .map(|(body, node)| ready(created_pod(body), node))
        .collect();
    for pod in &pods {
        writers.apply_pod(pod.clone());
    }
    for group in ["chat-r0-1", "chat-r1-2"] {
        objects_in_store(serving, &job, group);
    }
    job_service_in_store(serving, &job);
    let live = crate::replicas::pdb::desired_pdb(&job, 2).unwrap().unwrap();
    let mut pdb = live;
    pdb.metadata.uid = Some(ApiServerVerifier::object_uid("chat"));
    serving
        .pdbs
        .apply_watcher_event(&watcher::Event::Apply(pdb));
    let mut followed = Value::Null;
    run(ctx, &job, api, async |api| {
        followed = api.status_apply(&job).await;
        api.events("chat", &["Available"]).await;
    })
    .await;
    let s = &followed["status"];
    assert_eq!(s["readyReplicas"], 2, "{s}");
    assert_eq!(
        s["replicaStatuses"][0]["members"],
        json!([{ "rank": 0, "podName": "chat-r0-1-0", "nodeName": "a-1" },
               { "rank": 1, "podName": "chat-r0-1-1", "nodeName": "a-2" }])
    );
    (with_status(&job, &followed), pods)
}

/// A restarted operator that finds every group, its objects, the Service and the budget in
/// place writes nothing.
#[tokio::test]
async fn a_restart_with_everything_in_place_writes_nothing() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving, 4);
    let (job, _) = serving_groups(&ctx, &mut api, &mut writers, &mut serving).await;
    run(&ctx, &job, &mut api, async |_| {}).await;
}

/// A served group whose policy opened the serving port on every member (before the leader had
/// a policy of its own) is narrowed in place: the leader's policy is created first (the port
/// stays open on the leader), then the group's policy is applied without the port.
#[tokio::test]
async fn a_group_policy_that_opened_the_port_on_every_member_is_narrowed() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving, 4);
    let (job, _) = serving_groups(&ctx, &mut api, &mut writers, &mut serving).await;
    for group in ["chat-r0-1", "chat-r1-2"] {
        let mut open = desired_network_policy(&job, group).unwrap();
        open.metadata.uid = Some(ApiServerVerifier::object_uid(group));
        let port = k8s_openapi::api::networking::v1::NetworkPolicyIngressRule {
            from: None,
            ports: Some(vec![k8s_openapi::api::networking::v1::NetworkPolicyPort {
                port: Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(8000)),
                protocol: Some("TCP".into()),
                end_port: None,
            }]),
        };
        if let Some(spec) = open.spec.as_mut() {
            spec.ingress.get_or_insert_with(Vec::new).push(port);
        }
        serving
            .network_policies
            .apply_watcher_event(&watcher::Event::Apply(open));
        let leader = desired_leader_network_policy(&job, group, 8000).unwrap();
        serving
            .network_policies
            .apply_watcher_event(&watcher::Event::Delete(leader));
    }
    let mut narrowed = Vec::new();
    run(&ctx, &job, &mut api, async |api| {
        for group in ["chat-r0-1", "chat-r1-2"] {
            api.object_create(&policies(), &format!("{group}-leader"))
                .await;
            narrowed.push(api.object_apply(&policies(), group).await);
        }
    })
    .await;
    assert_eq!(
        narrowed[0]["spec"]["ingress"],
        json!([{ "from": [{ "podSelector": { "matchLabels": { "vramfit.io/group": "chat-r0-1" } } }] }])
    );
}

/// A worker lost from replica 1's group replaces that group whole, at once and with the same
/// plan, where two more nodes have room: its leader is deleted, the new group gets its own
/// Service, policy and pods, the old group's objects go; replica 0 is not touched.
#[tokio::test]
async fn a_lost_worker_replaces_only_its_replica_s_group() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving, 6);
    let (job, pods) = serving_groups(&ctx, &mut api, &mut writers, &mut serving).await;
    writers.delete_pod(pods[3].clone());
    let mut status = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("chat-r1-2-0").await;
        served_group_objects_created(api, "chat-r1-3").await;
        api.pod_create("chat-r1-3-0").await;
        api.pod_create("chat-r1-3-1").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["Disrupted", "PodCreated"]).await;
        served_group_objects_deleted(api, "chat-r1-2").await;
    })
    .await;
    let s = &status["status"];
    assert_eq!(s["replicaStatuses"][0]["podName"], "chat-r0-1");
    assert_eq!(
        s["replicaStatuses"][0]["ready"], true,
        "replica 0 serves on"
    );
    assert_eq!(s["replicaStatuses"][1]["podName"], "chat-r1-3");
    assert_eq!(s["recentRestarts"][0]["reason"], "Disrupted");
    assert!(
        s["recentRestarts"][0]["message"]
            .as_str()
            .unwrap()
            .contains("pod chat-r1-2-1 (rank 1) of group chat-r1-2 is gone"),
        "{s}"
    );
}

/// A worker that fails ends its group: the running leader leaves at once (it holds GPUs and
/// must not stay in the endpoints), the failed worker stays for its logs while the replica
/// backs off; replica 0 is not touched.
#[tokio::test]
async fn a_failed_worker_ends_its_group_and_its_leader_goes_at_once() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving, 4);
    let (job, pods) = serving_groups(&ctx, &mut api, &mut writers, &mut serving).await;
    writers.apply_pod(fixtures::as_failed(
        pods[3].clone(),
        "a-4",
        "Error",
        1,
        "RuntimeError: Ray worker lost its leader",
    ));
    let mut status = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("chat-r1-2-0").await;
        api.object_delete(&pdbs(), "chat").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["ReplicaFailed"]).await;
    })
    .await;
    let s = &status["status"];
    assert_eq!(s["readyReplicas"], 1);
    assert_eq!(s["replicaStatuses"][0]["ready"], true);
    assert_eq!(s["replicaStatuses"][1]["reason"], "Failed");
    assert!(
        s["replicaStatuses"][1]["message"]
            .as_str()
            .unwrap()
            .contains("next pod in 10 s"),
        "{s}"
    );
}

/// Scaling down removes a replica's whole group: both its pods, then (after the status) its
/// Service and policy; the budget goes below two replicas.
#[tokio::test]
async fn scaling_down_removes_a_replica_s_whole_group() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving, 4);
    let (mut job, _) = serving_groups(&ctx, &mut api, &mut writers, &mut serving).await;
    if let Some(serve) = job.spec.serve.as_mut() {
        serve.replicas = 1;
    }
    let mut status = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("chat-r1-2-0").await;
        api.pod_delete("chat-r1-2-1").await;
        api.object_delete(&pdbs(), "chat").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["ScaledDown"]).await;
        served_group_objects_deleted(api, "chat-r1-2").await;
    })
    .await;
    let lines = status["status"]["replicaStatuses"].as_array().unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["podName"], "chat-r0-1");
}

/// A spec change rolls the replicas group by group: a Ready replica gets a surge group (its
/// own Service, policy and pods, where two more nodes have room) and keeps serving meanwhile.
#[tokio::test]
async fn a_spec_change_rolls_a_replica_onto_a_surge_group() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving, 6);
    let (mut job, _) = serving_groups(&ctx, &mut api, &mut writers, &mut serving).await;
    job.spec.image = "vllm/vllm-openai:v0.11.0".to_string();
    let mut status = Value::Null;
    let mut pods = Vec::new();
    run(&ctx, &job, &mut api, async |api| {
        served_group_objects_created(api, "chat-r0-3").await;
        pods.push(api.pod_create("chat-r0-3-0").await);
        pods.push(api.pod_create("chat-r0-3-1").await);
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(
        pods[1]["spec"]["containers"][0]["image"],
        "vllm/vllm-openai:v0.11.0"
    );
    let line = &status["status"]["replicaStatuses"][0];
    assert_eq!(
        line["podName"], "chat-r0-1",
        "the old group serves meanwhile"
    );
    assert_eq!(line["ready"], true);
    assert_eq!(line["surge"]["podName"], "chat-r0-3");

    // The surge group Ready: it takes the slot, and the old group goes whole, its objects
    // after the status.
    let job = with_status(&job, &status);
    for (body, node) in pods.iter().zip(["a-5", "a-6"]) {
        writers.apply_pod(ready(created_pod(body), node));
    }
    objects_in_store(&mut serving, &job, "chat-r0-3");
    let mut rolled = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("chat-r0-1-0").await;
        api.pod_delete("chat-r0-1-1").await;
        rolled = api.status_apply(&job).await;
        api.events("chat", &["RollingUpdate"]).await;
        served_group_objects_deleted(api, "chat-r0-1").await;
    })
    .await;
    let line = &rolled["status"]["replicaStatuses"][0];
    assert_eq!(line["podName"], "chat-r0-3");
    assert_eq!(
        line["members"],
        json!([{ "rank": 0, "podName": "chat-r0-3-0", "nodeName": "a-5" },
               { "rank": 1, "podName": "chat-r0-3-1", "nodeName": "a-6" }])
    );
}

/// A worker out of memory steps its replica down (the planner's next step from the group's
/// plan) and replaces that replica's whole group at once, on the nodes its ended group frees;
/// replica 0 keeps its plan.
#[tokio::test]
async fn a_worker_out_of_memory_steps_only_its_replica_down() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving, 4);
    let job = served_group_job_quantized(&["none", "int8"]);
    let (job, pods) = serving_groups_of(&ctx, &mut api, &mut writers, &mut serving, job).await;
    writers.apply_pod(out_of_memory(pods[3].clone(), "a-4"));
    // The planner's step down from the failed plan says how many nodes the next group has.
    let input = resolve_job(&job.spec).unwrap();
    let class = fixtures::class("a10g", 2);
    let failed = crate::pod::build::recorded_plan(&pods[2]).unwrap();
    let nodes = nodes_one_step_down(&input, &class, &failed);
    let mut status = Value::Null;
    let mut created = Vec::new();
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("chat-r1-2-0").await;
        api.pod_delete("chat-r1-2-1").await;
        served_group_objects_created(api, "chat-r1-3").await;
        for rank in 0..nodes {
            created.push(api.pod_create(&format!("chat-r1-3-{rank}")).await);
        }
        status = api.status_apply(&job).await;
        api.events("chat", &["OutOfMemory", "SteppedDown", "PodCreated"])
            .await;
        served_group_objects_deleted(api, "chat-r1-2").await;
    })
    .await;
    let s = &status["status"];
    assert_eq!(s["replicaStatuses"][0]["podName"], "chat-r0-1");
    assert_eq!(s["replicaStatuses"][0]["fallback"], Value::Null);
    let line = &s["replicaStatuses"][1];
    assert_eq!(line["podName"], "chat-r1-3");
    assert!(line["fallback"] != Value::Null, "one step down: {line}");
    assert_eq!(line["members"].as_array().unwrap().len(), nodes as usize);
    assert_eq!(
        created[0]["metadata"]["labels"]["vramfit.io/group-rank"],
        "0"
    );
    assert_eq!(s["recentRestarts"][0]["reason"], "OutOfMemory");
}

/// A served llama.cpp replica over two L40S nodes: its worker first, Ready once its
/// `rpc-server` listens; then its leader, pointed at the worker's address, listed in the
/// replica's line once created.
#[tokio::test]
async fn a_llama_cpp_replica_s_leader_comes_once_its_worker_is_ready() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    llama_cpp_replica_with_its_leader(&ctx, &mut api, &mut writers, &mut serving).await;
}

/// [`a_llama_cpp_replica_s_leader_comes_once_its_worker_is_ready`]'s steps: returns the job
/// as the last status left it, its leader as created and its worker as built.
async fn llama_cpp_replica_with_its_leader(
    ctx: &Arc<crate::Context>,
    api: &mut ApiServerVerifier,
    writers: &mut StoreWriters,
    serving: &mut ServingWriters,
) -> (InferenceJob, Pod, Pod) {
    writers.apply_node(fixtures::gpu_node("l-1", "l40s", 1, 1));
    writers.apply_node(fixtures::gpu_node("l-2", "l40s", 1, 1));
    writers.mark_ready();
    serving.mark_ready();
    let mut spec = fixtures::spec_from_json(
        r#"{"model": {"preset": "llama-3.1-70b-instruct-q4_k_m"}, "runtime": "llamacpp",
            "image": "ghcr.io/ggml-org/llama.cpp:server-cuda", "contextLength": 4096,
            "gpus": {"max": 1, "maxNodes": 2}}"#,
    );
    spec.serve = Some(ServeSpec {
        replicas: 1,
        port: 8080,
        ..ServeSpec::default()
    });
    let job = fixtures::job("chat", spec);
    let (mut worker, mut status) = (Value::Null, Value::Null);
    run(ctx, &job, api, async |api| {
        served_group_objects_created(api, "chat-r0-1").await;
        worker = api.pod_create("chat-r0-1-1").await;
        // One replica: a Service, no disruption budget.
        api.object_create(&services(), "chat").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    let container = |pod: &Value| pod["spec"]["containers"][0].clone();
    assert_eq!(
        container(&worker)["startupProbe"]["tcpSocket"],
        json!({ "port": 50052 }),
        "Ready once its rpc-server listens"
    );
    assert_eq!(
        container(&worker)["readinessProbe"],
        Value::Null,
        "rpc-server serves one client: a probe once the leader is connected would time out"
    );
    assert_eq!(container(&worker)["livenessProbe"], Value::Null);
    assert_eq!(
        status["status"]["replicaStatuses"][0]["members"],
        json!([{ "rank": 1, "podName": "chat-r0-1-1" }]),
        "no leader yet"
    );
    let job = with_status(&job, &status);
    objects_in_store_on(serving, &job, "chat-r0-1", 8080);
    job_service_in_store(serving, &job);
    let worker_pod: Pod = serde_json::from_value(worker).unwrap();
    writers.apply_pod(fixtures::as_running(
        fixtures::created(worker_pod.clone()),
        "l-2",
    ));
    // Running, its server not listening yet: no leader.
    let mut waiting = Value::Null;
    run(ctx, &job, api, async |api| {
        waiting = api.status_apply(&job).await;
    })
    .await;
    assert_eq!(waiting["status"]["readyReplicas"], 0);
    let job = with_status(&job, &waiting);
    writers.apply_pod(super::testing::ready_at(
        fixtures::created(worker_pod.clone()),
        "l-2",
        "10.244.0.9",
    ));
    let (mut leader, mut status) = (Value::Null, Value::Null);
    run(ctx, &job, api, async |api| {
        leader = api.pod_create("chat-r0-1-0").await;
        status = api.status_apply(&job).await;
    })
    .await;
    assert_eq!(
        leader["spec"]["hostAliases"],
        json!([{ "ip": "10.244.0.9", "hostnames": [format!("chat-r0-1-1.chat-r0-1.{NAMESPACE}")] }])
    );
    assert!(
        container(&leader)["readinessProbe"]["httpGet"].is_object(),
        "the leader answers for the replica"
    );
    assert_eq!(
        status["status"]["replicaStatuses"][0]["members"],
        json!([{ "rank": 0, "podName": "chat-r0-1-0" },
               { "rank": 1, "podName": "chat-r0-1-1", "nodeName": "l-2" }])
    );
    let leader: Pod = serde_json::from_value(leader).unwrap();
    (with_status(&job, &status), leader, worker_pod)
}

/// A served llama.cpp replica whose worker is made again under its name while its leader
/// runs (a new pod, a new address): the leader's host aliases, which cannot change, name the
/// old address, so the replica's group ends and is replaced whole.
#[tokio::test]
async fn a_worker_at_a_new_address_replaces_the_llama_cpp_replica_s_group() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    let (job, leader, worker) =
        llama_cpp_replica_with_its_leader(&ctx, &mut api, &mut writers, &mut serving).await;
    writers.apply_pod(ready(fixtures::created(leader), "l-1"));
    let mut again = fixtures::created(worker);
    again.metadata.uid = Some("a-new-pod".to_string());
    writers.apply_pod(super::testing::ready_at(again, "l-2", "10.244.0.10"));
    let mut status = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("chat-r0-1-0").await;
        api.pod_delete("chat-r0-1-1").await;
        served_group_objects_created(api, "chat-r0-2").await;
        api.pod_create("chat-r0-2-1").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["Disrupted", "PodCreated"]).await;
        served_group_objects_deleted(api, "chat-r0-1").await;
    })
    .await;
    let s = &status["status"];
    assert_eq!(s["replicaStatuses"][0]["podName"], "chat-r0-2", "{s}");
    assert_eq!(s["recentRestarts"][0]["reason"], "Disrupted", "{s}");
    assert!(
        s["recentRestarts"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("has a new address its leader is not pointed at")),
        "{s}"
    );
}

/// A job whose replicas no longer span nodes (`maxNodes` back to 1) while its groups run:
/// they roll onto groups of one, replica by replica, as for any spec change (the one-pod
/// pipeline would delete every group at once and leave their Services and policies).
#[tokio::test]
async fn max_nodes_back_to_one_rolls_the_groups_onto_groups_of_one() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving, 6);
    let (mut job, _) = serving_groups(&ctx, &mut api, &mut writers, &mut serving).await;
    job.spec.gpus.max_nodes = 1;
    // Qwen3-32B in 16 bits needs 4 A10Gs: on one A10G×2 node only in 4 bits.
    job.spec.allowed_quantizations = Some(vec![
        serde_json::from_value(json!("none")).unwrap(),
        serde_json::from_value(json!("nf4")).unwrap(),
    ]);
    let (mut status, mut pod) = (Value::Null, Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        served_group_objects_created(api, "chat-r0-3").await;
        pod = api.pod_create("chat-r0-3-0").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    let line = &status["status"]["replicaStatuses"][0];
    assert_eq!(
        line["podName"], "chat-r0-1",
        "the old group serves meanwhile"
    );
    assert_eq!(line["surge"]["podName"], "chat-r0-3");
    assert_eq!(
        pod["metadata"]["labels"]["vramfit.io/group-rank"], "0",
        "a group of one"
    );
}
