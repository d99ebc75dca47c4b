//! The real `reconcile` of group jobs against the mock API server: every request in order
//! (ended groups' pods deleted first, then the running group's Service, NetworkPolicy and
//! pods, the status, the events, and last the ended groups' Service and NetworkPolicy).
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::watcher;
use serde_json::{Value, json};
use vramfit_api::{Fallback, InferenceJob};
use vramfit_planner::{plan_for_class, resolve_job};

use super::build::group_pods;
use super::network_policy::desired_network_policy;
use super::service::desired_service;
use super::testing::{
    group_job, group_objects_created, group_objects_deleted, nodes_one_step_down, out_of_memory,
    policies, ready_at, rpc_plan, services, two_node_plan,
};
use crate::batch::tests::{condition, run, with_status};
use crate::fixtures::{self, NAMESPACE};
use crate::pod::build::desired_pod;
use crate::serving_state::ServingWriters;
use crate::settings::GroupSpread;
use crate::stores::StoreWriters;
use crate::verifier::{ApiServerVerifier, test_context_with_serving};

/// Two A10G×4 nodes.
fn cluster(writers: &mut StoreWriters, serving: &mut ServingWriters) {
    writers.apply_node(fixtures::gpu_node("a-1", "a10g", 4, 4));
    writers.apply_node(fixtures::gpu_node("a-2", "a10g", 4, 4));
    writers.mark_ready();
    serving.mark_ready();
}

/// The pods of `job`'s group for `attempt` on two nodes, as the API server shows them once
/// created (Pending, unbound), leader first.
fn two_node_group(job: &InferenceJob, attempt: u32) -> Vec<Pod> {
    let input = resolve_job(&job.spec).unwrap();
    let class = fixtures::class("a10g", 4);
    let plan = two_node_plan(&input, &class);
    let base = desired_pod(job, &input, &plan, &class, attempt).unwrap();
    group_pods(&base, &input, &plan, "big", attempt, GroupSpread::Node)
        .unwrap()
        .into_iter()
        .map(fixtures::created)
        .collect()
}

/// `pod` Pending on `node` (none: unbound) since 700 s ago, past the schedule deadline.
fn pending_past_deadline(pod: Pod, node: Option<&str>) -> Pod {
    let mut pod = fixtures::as_pending(pod, node);
    pod.metadata.creation_timestamp = Some(Time(Timestamp::now() - SignedDuration::from_secs(700)));
    if node.is_none()
        && let Some(spec) = pod.spec.as_mut()
    {
        spec.node_name = None;
    }
    pod
}

/// The group's Service and NetworkPolicy in the stores, as created.
fn objects_in_store(serving: &mut ServingWriters, job: &InferenceJob, group: &str) {
    let mut service = desired_service(job, group).unwrap();
    service.metadata.uid = Some(ApiServerVerifier::object_uid(group));
    serving
        .services
        .apply_watcher_event(&watcher::Event::Apply(service));
    let mut policy = desired_network_policy(job, group).unwrap();
    policy.metadata.uid = Some(ApiServerVerifier::object_uid(group));
    serving
        .network_policies
        .apply_watcher_event(&watcher::Event::Apply(policy));
}

/// The group's Service and NetworkPolicy gone from the stores.
fn remove_objects_from_store(serving: &mut ServingWriters, job: &InferenceJob, group: &str) {
    let service = desired_service(job, group).unwrap();
    serving
        .services
        .apply_watcher_event(&watcher::Event::Delete(service));
    let policy = desired_network_policy(job, group).unwrap();
    serving
        .network_policies
        .apply_watcher_event(&watcher::Event::Delete(policy));
}

/// A job whose two-node group for attempt 1 runs on a-1 and a-2 (adopted, then followed),
/// with the status the operator wrote for it; the stores hold the pods and objects.
async fn running_group(
    ctx: &Arc<crate::Context>,
    api: &mut ApiServerVerifier,
    writers: &mut StoreWriters,
    serving: &mut ServingWriters,
) -> (InferenceJob, Vec<Pod>) {
    let job = group_job("big", 2);
    let pods: Vec<Pod> = two_node_group(&job, 1)
        .into_iter()
        .zip(["a-1", "a-2"])
        .map(|(pod, node)| fixtures::as_running(pod, node))
        .collect();
    for pod in &pods {
        writers.apply_pod(pod.clone());
    }
    objects_in_store(serving, &job, "big-1");
    // A restarted operator finds the group it created before its status write landed: it
    // adopts it (its plan from the pods), writing only the status.
    let mut adopted = Value::Null;
    run(ctx, &job, api, async |api| {
        adopted = api.status_apply(&job).await;
        api.events("big", &["PodCreated"]).await;
    })
    .await;
    let s = &adopted["status"];
    assert_eq!(s["attemptCount"], 1);
    assert_eq!(s["podName"], "big-1-0", "the leader stands for the group");
    assert_eq!(s["plan"]["group"]["nodes"], 2, "the plan the pods carry");
    assert_eq!(
        s["attempts"][0]["members"],
        json!([{ "rank": 0, "podName": "big-1-0", "nodeName": "a-1" },
               { "rank": 1, "podName": "big-1-1", "nodeName": "a-2" }])
    );
    assert!(
        condition(&adopted, "Scheduled")["message"]
            .as_str()
            .unwrap()
            .starts_with("group big-1 (attempt 1) created"),
        "{adopted}"
    );
    let job = with_status(&job, &adopted);
    let mut followed = Value::Null;
    run(ctx, &job, api, async |api| {
        followed = api.status_apply(&job).await;
        api.events("big", &["Running"]).await;
    })
    .await;
    assert_eq!(followed["status"]["phase"], "Running");
    assert_eq!(followed["status"]["nodeName"], "a-1", "the leader's node");
    (with_status(&job, &followed), pods)
}

/// The first reconcile: the group's headless Service, its NetworkPolicy, then its pods (as
/// many as the plan's nodes: Mistral fits one A10G, a group of one), then the status.
#[tokio::test]
async fn a_first_reconcile_creates_the_service_the_policy_then_the_pods_then_the_status() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = group_job("big", 2);
    let (mut service, mut policy, mut pod, mut status) =
        (Value::Null, Value::Null, Value::Null, Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        service = api.object_create(&services(), "big-1").await;
        policy = api.object_create(&policies(), "big-1").await;
        pod = api.pod_create("big-1-0").await;
        status = api.status_apply(&job).await;
        api.events("big", &["PodCreated"]).await;
    })
    .await;
    let owner = json!([{ "apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob", "name": "big",
                         "uid": fixtures::uid("big"), "controller": true, "blockOwnerDeletion": true }]);
    assert_eq!(
        service["spec"],
        json!({ "clusterIP": "None", "publishNotReadyAddresses": true,
                "selector": { "vramfit.io/group": "big-1" } })
    );
    assert_eq!(service["metadata"]["ownerReferences"], owner);
    assert_eq!(policy["apiVersion"], "networking.k8s.io/v1");
    assert_eq!(
        policy["spec"]["ingress"],
        json!([{ "from": [{ "podSelector": { "matchLabels": { "vramfit.io/group": "big-1" } } }] }])
    );
    assert_eq!(policy["metadata"]["ownerReferences"], owner);
    assert_eq!(pod["metadata"]["ownerReferences"], owner);
    assert_eq!(pod["metadata"]["labels"]["vramfit.io/group"], "big-1");
    assert_eq!(pod["metadata"]["labels"]["vramfit.io/group-rank"], "0");
    assert_eq!(pod["spec"]["hostname"], "big-1-0");
    assert_eq!(pod["spec"]["subdomain"], "big-1");
    assert_eq!(
        pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            [0]["topologyKey"],
        "kubernetes.io/hostname"
    );
    let s = &status["status"];
    assert_eq!(s["phase"], "Scheduled");
    assert_eq!(s["podName"], "big-1-0");
    assert_eq!(
        s["attempts"][0]["members"],
        json!([{ "rank": 0, "podName": "big-1-0" }])
    );
}

/// A restarted operator that finds the group, its Service and its policy in place writes
/// nothing.
#[tokio::test]
async fn a_restart_with_everything_in_place_writes_nothing() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let (job, _) = running_group(&ctx, &mut api, &mut writers, &mut serving).await;
    run(&ctx, &job, &mut api, async |_| {}).await;
}

/// Members bound one by one are not a status write each (a lone pod's binding is not
/// written either): the worker's node comes with the write that says the group runs.
#[tokio::test]
async fn a_member_bound_alone_writes_nothing_its_node_comes_with_running() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = group_job("big", 2);
    let pods = two_node_group(&job, 1);
    writers.apply_pod(fixtures::as_pending(pods[0].clone(), Some("a-1")));
    writers.apply_pod(pods[1].clone());
    objects_in_store(&mut serving, &job, "big-1");
    let mut adopted = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        adopted = api.status_apply(&job).await;
        api.events("big", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(
        adopted["status"]["attempts"][0]["members"],
        json!([{ "rank": 0, "podName": "big-1-0", "nodeName": "a-1" },
               { "rank": 1, "podName": "big-1-1" }])
    );
    let job = with_status(&job, &adopted);
    // The worker is bound: nothing else changed, nothing is written.
    writers.apply_pod(fixtures::as_pending(pods[1].clone(), Some("a-2")));
    run(&ctx, &job, &mut api, async |_| {}).await;
    // Both run: one write, with both nodes.
    writers.apply_pod(fixtures::as_running(pods[0].clone(), "a-1"));
    writers.apply_pod(fixtures::as_running(pods[1].clone(), "a-2"));
    let mut running = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        running = api.status_apply(&job).await;
        api.events("big", &["Running"]).await;
    })
    .await;
    assert_eq!(running["status"]["phase"], "Running");
    assert_eq!(
        running["status"]["attempts"][0]["members"],
        json!([{ "rank": 0, "podName": "big-1-0", "nodeName": "a-1" },
               { "rank": 1, "podName": "big-1-1", "nodeName": "a-2" }])
    );
}

/// An attempt that ends records the nodes its members were bound to, also one bound since
/// the last status write (a binding alone is not written).
#[tokio::test]
async fn an_ended_attempt_records_the_nodes_of_members_bound_since_the_last_write() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = group_job("big", 2);
    let pods = two_node_group(&job, 1);
    writers.apply_pod(pods[0].clone());
    writers.apply_pod(pods[1].clone());
    objects_in_store(&mut serving, &job, "big-1");
    let mut adopted = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        adopted = api.status_apply(&job).await;
        api.events("big", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(
        adopted["status"]["attempts"][0]["members"],
        json!([{ "rank": 0, "podName": "big-1-0" }, { "rank": 1, "podName": "big-1-1" }])
    );
    let job = with_status(&job, &adopted);
    // The leader is bound (not written), the worker never is: the deadline ends the attempt.
    writers.apply_pod(pending_past_deadline(pods[0].clone(), Some("a-1")));
    writers.apply_pod(pending_past_deadline(pods[1].clone(), None));
    let mut status = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("big-1-0").await;
        api.pod_delete("big-1-1").await;
        status = api.status_apply(&job).await;
        api.events("big", &["ScheduleDeadlineExceeded", "Failed"])
            .await;
        group_objects_deleted(api, "big-1").await;
    })
    .await;
    let s = &status["status"];
    assert_eq!(s["attempts"][0]["outcome"], "ScheduleTimeout");
    assert_eq!(
        s["attempts"][0]["members"],
        json!([{ "rank": 0, "podName": "big-1-0", "nodeName": "a-1" },
               { "rank": 1, "podName": "big-1-1" }])
    );
}

/// A worker that runs out of memory ends the group: the running leader is deleted at once,
/// the next attempt (one step down) gets its own Service, policy and pods, the ended group's
/// Service and policy go, and the failed worker goes once the status records its end.
#[tokio::test]
async fn a_worker_out_of_memory_replaces_the_whole_group_one_step_down() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let (job, pods) = running_group(&ctx, &mut api, &mut writers, &mut serving).await;
    writers.apply_pod(out_of_memory(pods[1].clone(), "a-2"));
    // The planner's step down from the failed plan says how many nodes the next group has.
    let input = resolve_job(&job.spec).unwrap();
    let class = fixtures::class("a10g", 4);
    let failed = job.status.as_ref().and_then(|s| s.plan.clone()).unwrap();
    let nodes = nodes_one_step_down(&input, &class, &failed);
    assert!(nodes <= 2, "the two nodes hold the next group");
    let (mut status, mut new_pods) = (Value::Null, Vec::new());
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("big-1-0").await;
        group_objects_created(api, "big-2").await;
        for rank in 0..nodes {
            new_pods.push(api.pod_create(&format!("big-2-{rank}")).await);
        }
        status = api.status_apply(&job).await;
        api.events("big", &["OutOfMemory", "SteppedDown", "PodCreated"])
            .await;
        group_objects_deleted(api, "big-1").await;
    })
    .await;
    let s = &status["status"];
    assert_eq!(s["attempts"][0]["outcome"], "OutOfMemory");
    let message = s["attempts"][0]["message"].as_str().unwrap();
    assert!(
        message.starts_with("pod big-1-1 (rank 1): ") && message.contains("CUDA out of memory"),
        "the member that failed is named: {message}"
    );
    assert_eq!(
        s["attempts"][0]["members"][1]["nodeName"], "a-2",
        "the ended group's members stay listed"
    );
    assert_eq!(s["attemptCount"], 2);
    assert!(s["fallback"] != Value::Null, "one step down: {s}");
    assert_eq!(s["podName"], "big-2-0");

    // The status records the end: the failed worker goes too (the deleted leader is no
    // longer the job's to delete); the new group is in place.
    let job = with_status(&job, &status);
    for pod in new_pods {
        writers.apply_pod(fixtures::created(serde_json::from_value(pod).unwrap()));
    }
    objects_in_store(&mut serving, &job, "big-2");
    remove_objects_from_store(&mut serving, &job, "big-1");
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("big-1-1").await;
    })
    .await;
}

/// A group not all bound by the schedule deadline is deleted whole (the bound pod too); with
/// no other class the job fails, as a single pod's would, and the group's objects go.
#[tokio::test]
async fn a_group_not_all_bound_by_the_deadline_is_deleted_together() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let (job, pods) = running_group(&ctx, &mut api, &mut writers, &mut serving).await;
    writers.apply_pod(pending_past_deadline(pods[0].clone(), Some("a-1")));
    writers.apply_pod(fixtures::with_unschedulable_condition(
        pending_past_deadline(pods[1].clone(), None),
        "0/2 nodes are available: 1 node(s) didn't match pod anti-affinity rules",
    ));
    let mut status = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("big-1-0").await;
        api.pod_delete("big-1-1").await;
        status = api.status_apply(&job).await;
        api.events("big", &["ScheduleDeadlineExceeded", "Failed"])
            .await;
        group_objects_deleted(api, "big-1").await;
    })
    .await;
    let s = &status["status"];
    assert_eq!(s["attempts"][0]["outcome"], "ScheduleTimeout");
    assert!(
        s["attempts"][0]["message"]
            .as_str()
            .unwrap()
            .contains("didn't match pod anti-affinity"),
        "{s}"
    );
    assert_eq!(s["phase"], "Failed");
}

/// The leader's success ends the job: the workers are deleted, the leader's pod stays.
#[tokio::test]
async fn the_leader_succeeding_ends_the_job_and_deletes_the_workers() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let (job, pods) = running_group(&ctx, &mut api, &mut writers, &mut serving).await;
    writers.apply_pod(fixtures::as_succeeded(pods[0].clone(), "a-1"));
    let mut status = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("big-1-1").await;
        status = api.status_apply(&job).await;
        api.events("big", &["Succeeded"]).await;
        group_objects_deleted(api, "big-1").await;
    })
    .await;
    assert_eq!(status["status"]["phase"], "Succeeded");
    assert_eq!(status["status"]["attempts"][0]["outcome"], "Succeeded");
}

/// A Service of the group's name that is not the job's is never taken over, and no pod of the
/// group is created unguarded: the job says why.
#[tokio::test]
async fn a_foreign_service_of_the_group_name_is_left_alone_and_no_pod_is_created() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = group_job("big", 2);
    let foreign = json!({ "apiVersion": "v1", "kind": "Service",
                          "metadata": { "name": "big-1", "namespace": NAMESPACE, "uid": "someone-else" } });
    let mut status = Value::Null;
    let ended = crate::batch::tests::run_to_end(&ctx, &job, &mut api, async |api| {
        api.object_create_exists(&services(), "big-1").await;
        api.object_get(&services(), "big-1", &foreign).await;
        status = api.status_apply(&job).await;
        api.events("big", &["Degraded"]).await;
    })
    .await;
    assert!(ended.is_err(), "retried with backoff");
    let degraded = condition(&status, "Degraded");
    assert_eq!(degraded["reason"], "ServiceNameTaken");
    assert_eq!(status["status"]["attemptCount"], 0, "no attempt recorded");
}

/// A worker that fails for another reason fails the job (as a single pod's failure does): the
/// running leader is deleted, the failed worker stays for its logs, the objects go.
#[tokio::test]
async fn a_worker_failing_fails_the_job_and_deletes_the_running_leader() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let (job, pods) = running_group(&ctx, &mut api, &mut writers, &mut serving).await;
    writers.apply_pod(fixtures::as_failed(
        pods[1].clone(),
        "a-2",
        "Error",
        2,
        "RuntimeError: connection refused by the leader",
    ));
    let mut status = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("big-1-0").await;
        status = api.status_apply(&job).await;
        api.events("big", &["Failed"]).await;
        group_objects_deleted(api, "big-1").await;
    })
    .await;
    let s = &status["status"];
    assert_eq!(s["phase"], "Failed");
    assert_eq!(s["attempts"][0]["outcome"], "Failed");
    let ready = condition(&status, "Ready");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .starts_with("attempt 1 (group big-1) failed:"),
        "{ready}"
    );
    assert!(
        s["attempts"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("pod big-1-1 (rank 1): "),
        "{s}"
    );
}

/// A worker deleted behind the operator's back ends the group as Kubernetes ended it: the
/// leader is deleted and the job is placed again at once, in a new group.
#[tokio::test]
async fn a_lost_worker_replaces_the_group_with_the_same_fallback() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let (job, pods) = running_group(&ctx, &mut api, &mut writers, &mut serving).await;
    writers.delete_pod(pods[1].clone());
    let input = resolve_job(&job.spec).unwrap();
    let nodes = plan_for_class(&input, &fixtures::class("a10g", 4), &Fallback::default())
        .unwrap()
        .nodes();
    let mut status = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("big-1-0").await;
        group_objects_created(api, "big-2").await;
        for rank in 0..nodes {
            api.pod_create(&format!("big-2-{rank}")).await;
        }
        status = api.status_apply(&job).await;
        api.events("big", &["Disrupted", "PodCreated"]).await;
        group_objects_deleted(api, "big-1").await;
    })
    .await;
    let s = &status["status"];
    assert_eq!(s["attempts"][0]["outcome"], "Disrupted");
    assert!(
        s["attempts"][0]["message"]
            .as_str()
            .unwrap()
            .contains("pod big-1-1 (rank 1) of group big-1 is gone"),
        "{s}"
    );
    assert_eq!(s["fallback"], Value::Null, "no step down");
    assert_eq!(s["attemptCount"], 2);
}

/// A llama.cpp group: the worker first; the leader only once the worker's `rpc-server` is
/// Ready, pointed at the worker's address; then the leader runs. Returns the job as the last
/// status left it and the group's pods as built.
async fn running_llama_cpp_group(
    ctx: &Arc<crate::Context>,
    api: &mut ApiServerVerifier,
    writers: &mut StoreWriters,
    serving: &mut ServingWriters,
) -> (InferenceJob, Vec<Pod>) {
    cluster(writers, serving);
    let mut spec = fixtures::llamacpp_spec();
    spec.gpus.max_nodes = 2;
    let job = fixtures::job("big", spec);
    let input = resolve_job(&job.spec).unwrap();
    let class = fixtures::class("a10g", 4);
    let plan = rpc_plan(&input, &class);
    let base = desired_pod(&job, &input, &plan, &class, 1).unwrap();
    let pods: Vec<Pod> = group_pods(&base, &input, &plan, "big", 1, GroupSpread::Node)
        .unwrap()
        .into_iter()
        .map(fixtures::created)
        .collect();
    let probe = &pods[1].spec.as_ref().unwrap().containers[0].startup_probe;
    assert_eq!(
        probe
            .as_ref()
            .and_then(|p| p.tcp_socket.as_ref())
            .map(|t| &t.port),
        Some(&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(50052)),
        "the worker is Ready once its rpc-server listens (a startup probe: it serves one client)"
    );
    // Only the worker exists, running, its server not listening yet: the group waits for it,
    // and the status lists the worker alone.
    writers.apply_pod(fixtures::as_running(pods[1].clone(), "a-2"));
    objects_in_store(serving, &job, "big-1");
    let mut adopted = Value::Null;
    run(ctx, &job, api, async |api| {
        adopted = api.status_apply(&job).await;
        api.events("big", &["PodCreated"]).await;
    })
    .await;
    let s = &adopted["status"];
    assert_eq!(
        s["attempts"][0]["members"],
        json!([{ "rank": 1, "podName": "big-1-1", "nodeName": "a-2" }]),
        "{s}"
    );
    assert_ne!(s["phase"], "Running", "no leader runs: {s}");
    let job = with_status(&job, &adopted);
    // The worker is Ready: the leader is created, its worker's name resolving to its address.
    writers.apply_pod(ready_at(pods[1].clone(), "a-2", "10.244.0.7"));
    let (mut leader, mut status) = (Value::Null, Value::Null);
    run(ctx, &job, api, async |api| {
        leader = api.pod_create("big-1-0").await;
        status = api.status_apply(&job).await;
    })
    .await;
    assert_eq!(
        leader["spec"]["hostAliases"],
        json!([{ "ip": "10.244.0.7", "hostnames": [format!("big-1-1.big-1.{NAMESPACE}")] }])
    );
    assert_eq!(
        leader["metadata"]["annotations"]["vramfit.io/worker-addresses"],
        format!("big-1-1.big-1.{NAMESPACE}=10.244.0.7"),
        "what the aliases pin, where the pod cache shows it"
    );
    let args = leader["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains(&format!("\"--rpc\",\"big-1-1.big-1.{NAMESPACE}:50052\"")),
        "{args}"
    );
    assert_eq!(
        leader["spec"]["containers"][0]["readinessProbe"],
        Value::Null,
        "a batch leader has no probe"
    );
    assert_eq!(
        status["status"]["attempts"][0]["members"],
        json!([{ "rank": 0, "podName": "big-1-0" },
               { "rank": 1, "podName": "big-1-1", "nodeName": "a-2" }]),
        "the leader is listed once created"
    );
    let job = with_status(&job, &status);
    // The leader runs, then is lost: listed, so it is not awaited again but ends the group.
    writers.apply_pod(fixtures::as_running(
        fixtures::created(serde_json::from_value(leader).unwrap()),
        "a-1",
    ));
    let mut running = Value::Null;
    run(ctx, &job, api, async |api| {
        running = api.status_apply(&job).await;
        api.events("big", &["Running"]).await;
    })
    .await;
    assert_eq!(running["status"]["phase"], "Running");
    (with_status(&job, &running), pods)
}

/// A pass that replaces [`running_llama_cpp_group`]'s group: it deletes the pods `deleted`
/// of group big-1, places group big-2 and removes big-1's objects; the status it applies.
async fn llama_cpp_group_replaced(
    ctx: &Arc<crate::Context>,
    job: &InferenceJob,
    api: &mut ApiServerVerifier,
    deleted: &[&str],
) -> Value {
    let mut replaced = Value::Null;
    run(ctx, job, api, async |api| {
        for pod in deleted {
            api.pod_delete(pod).await;
        }
        group_objects_created(api, "big-2").await;
        // The next group is planned anew: the job's model fits one A10G (the two nodes over
        // RPC were this test's plan), so its one pod is a leader that waits for nobody.
        api.pod_create("big-2-0").await;
        replaced = api.status_apply(job).await;
        api.events("big", &["Disrupted", "PodCreated"]).await;
        group_objects_deleted(api, "big-1").await;
    })
    .await;
    replaced
}

/// A llama.cpp group's leader lost after it was created (listed, so not awaited again) ends
/// the group: a new group is placed.
#[tokio::test]
async fn a_llama_cpp_leader_comes_once_its_worker_is_ready_and_its_loss_replaces_the_group() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    let (job, pods) = running_llama_cpp_group(&ctx, &mut api, &mut writers, &mut serving).await;
    writers.delete_pod(pods[0].clone());
    let replaced = llama_cpp_group_replaced(&ctx, &job, &mut api, &["big-1-1"]).await;
    let s = &replaced["status"];
    assert_eq!(s["attemptCount"], 2, "{s}");
    assert!(
        s["attempts"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("the leader big-1-0 of group big-1 is gone")),
        "{s}"
    );
}

/// A llama.cpp group's worker made again under its name while its leader runs (a new pod, a
/// new address): the leader's host aliases, which cannot change, still name the old one, so
/// the group is replaced whole, as for a lost member.
#[tokio::test]
async fn a_worker_at_a_new_address_replaces_the_llama_cpp_group() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    let (job, pods) = running_llama_cpp_group(&ctx, &mut api, &mut writers, &mut serving).await;
    let mut again = pods[1].clone();
    again.metadata.uid = Some("a-new-pod".to_string());
    writers.apply_pod(ready_at(again, "a-2", "10.244.0.8"));
    let replaced = llama_cpp_group_replaced(&ctx, &job, &mut api, &["big-1-0", "big-1-1"]).await;
    let s = &replaced["status"];
    assert_eq!(s["attempts"][0]["outcome"], "Disrupted", "{s}");
    assert!(
        s["attempts"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains(
                "pod big-1-1 (rank 1) of group big-1 has a new address its leader is not pointed at"
            )),
        "{s}"
    );
    assert_eq!(s["attemptCount"], 2, "{s}");
}

/// A job runs its pods as groups while `maxNodes` is above 1, and after it went back to 1 while
/// its status still lists group members; a job of one-pod attempts never does.
#[test]
fn a_job_runs_groups_while_its_status_lists_members() {
    let mut job = fixtures::job("big", fixtures::vllm_mistral_spec());
    assert!(!crate::pod::runs_groups(&job), "one node, no status");
    let attempt = |members: Value| {
        json!({ "attempts": [{ "number": 1, "podName": "big-1", "nodeClass": "a10g-x4",
                               "planSummary": "", "members": members }] })
    };
    job.status = Some(serde_json::from_value(attempt(json!([]))).unwrap());
    assert!(!crate::pod::runs_groups(&job), "an attempt of one pod");
    job.status = Some(
        serde_json::from_value(attempt(json!([{ "rank": 0, "podName": "big-1-0" }]))).unwrap(),
    );
    assert!(crate::pod::runs_groups(&job), "a group still listed");
    job.status = None;
    job.spec.gpus.max_nodes = 2;
    assert!(crate::pod::runs_groups(&job));
}
