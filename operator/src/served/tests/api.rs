//! The real `reconcile` of served jobs against the mock API server: every request in order
//! (pods deleted before pods are created, then the Service, the PDB, the status, the events).
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use serde_json::{Value, json};
use vramfit_api::InferenceJob;

use super::world::{replicas, served_spec};
use crate::batch::tests::{created_pod, run, with_status};
use crate::dispatch::reconcile;
use crate::fixtures::{self, NAMESPACE};
use crate::serving_state::ServingWriters;
use crate::stores::StoreWriters;
use crate::stores::cached_job::CachedJob;
use crate::verifier::{ApiServerVerifier, test_context_with_serving};

pub(crate) fn services() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/services")
}

pub(super) fn pdbs() -> String {
    format!("/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets")
}

/// Two A10G×1 nodes and one L40S×1 node.
pub(crate) fn cluster(writers: &mut StoreWriters, serving: &mut ServingWriters) {
    writers.apply_node(fixtures::gpu_node("l-1", "l40s", 1, 1));
    writers.apply_node(fixtures::gpu_node("l-2", "l40s", 1, 1));
    writers.apply_node(fixtures::gpu_node("l-3", "l40s", 1, 1));
    writers.mark_ready();
    serving.mark_ready();
}

pub(crate) fn ready(body: &Value, node: &str) -> Pod {
    let mut pod = fixtures::as_running(created_pod(body), node);
    pod.status.get_or_insert_default().conditions = Some(vec![PodCondition {
        type_: "Ready".into(),
        status: "True".into(),
        ..PodCondition::default()
    }]);
    pod
}

pub(crate) fn served_job(n: u32) -> InferenceJob {
    let mut spec = served_spec(replicas(n));
    spec.gpus.max = 1;
    fixtures::job("chat", spec)
}

/// The first reconcile of a job with two replicas: its pods, its Service, its PDB, its status.
pub(crate) async fn first(
    ctx: &Arc<crate::Context>,
    api: &mut crate::verifier::ApiServerVerifier,
    job: &InferenceJob,
) -> (Vec<Value>, Value, Value, Value) {
    let mut out = (Vec::new(), Value::Null, Value::Null, Value::Null);
    let action = run(ctx, job, api, async |api| {
        out.0.push(api.pod_create("chat-r0-1").await);
        out.0.push(api.pod_create("chat-r1-2").await);
        out.1 = api.object_create(&services(), "chat").await;
        out.2 = api.object_create(&pdbs(), "chat").await;
        out.3 = api.status_apply(job).await;
        api.events("chat", &["PodCreated", "PodCreated"]).await;
    })
    .await;
    assert_eq!(action, Action::requeue(Duration::from_secs(3600)));
    out
}

#[tokio::test]
async fn a_served_job_gets_its_replica_pods_then_its_service_and_budget_then_its_status() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = served_job(2);
    let (pods, service, pdb, status) = first(&ctx, &mut api, &job).await;

    let pod = &pods[0];
    assert_eq!(pod["metadata"]["labels"]["vramfit.io/replica"], "0");
    assert_eq!(
        pod["metadata"]["labels"]["vramfit.io/job-uid"],
        fixtures::uid("chat")
    );
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    let container = &pod["spec"]["containers"][0];
    assert_eq!(
        container["ports"],
        json!([{ "name": "http", "containerPort": 8000, "protocol": "TCP" }])
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/health");
    assert_eq!(
        container["startupProbe"]["failureThreshold"], 180,
        "1800 s / 10 s"
    );

    assert_eq!(service["apiVersion"], "v1");
    assert_eq!(service["kind"], "Service");
    assert_eq!(
        service["spec"],
        json!({ "type": "ClusterIP",
                "selector": { "vramfit.io/job": "chat", "vramfit.io/job-uid": fixtures::uid("chat") },
                "ports": [{ "name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP" }] })
    );
    assert_eq!(
        service["metadata"]["ownerReferences"][0]["uid"],
        fixtures::uid("chat")
    );
    assert_eq!(
        pdb["spec"]["minAvailable"], 1,
        "two replicas with a pod: one may go"
    );
    assert_eq!(pdb["spec"].get("maxUnavailable"), None);
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");

    let s = &status["status"];
    assert_eq!(s["replicas"], 2);
    assert_eq!(s["ready"], "0/2");
    assert_eq!(s["endpoint"], "http://chat.ml.svc:8000");
    assert_eq!(s["replicaStatuses"][1]["podName"], "chat-r1-2");
    assert_eq!(
        s["selector"],
        format!(
            "vramfit.io/job=chat,vramfit.io/job-uid={}",
            fixtures::uid("chat")
        )
    );
}

/// A rolling update: the surge pod is created while the old pod serves, and the old pod is
/// deleted only once the surge pod is Ready, before the next replica's surge pod is created.
#[tokio::test]
async fn a_rolling_update_creates_the_new_pod_first_and_deletes_the_old_one_once_it_is_ready() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = served_job(2);
    let (pods, service, pdb, status) = first(&ctx, &mut api, &job).await;
    writers.apply_pod(ready(&pods[0], "l-1"));
    writers.apply_pod(ready(&pods[1], "l-2"));
    serving.services.apply_watcher_event(&watcher::Event::Apply(
        serde_json::from_value::<Service>(service).unwrap(),
    ));
    serving.pdbs.apply_watcher_event(&watcher::Event::Apply(
        serde_json::from_value::<PodDisruptionBudget>(pdb).unwrap(),
    ));
    let job = with_status(&job, &status);
    let mut status = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        status = api.status_apply(&job).await;
        api.events("chat", &["Available"]).await;
    })
    .await;

    let mut changed = with_status(&job, &status);
    changed.metadata.generation = Some(2);
    changed.spec.image = "vllm/vllm-openai:v0.11.0".into();
    let mut surge = Value::Null;
    run(&ctx, &changed, &mut api, async |api| {
        surge = api.pod_create("chat-r0-3").await;
        status = api.status_apply(&changed).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(
        surge["spec"]["containers"][0]["image"],
        "vllm/vllm-openai:v0.11.0"
    );
    assert_eq!(
        status["status"]["replicaStatuses"][0]["surge"]["podName"],
        "chat-r0-3"
    );
    assert_eq!(
        status["status"]["readyReplicas"], 2,
        "both old pods still serve"
    );

    writers.apply_pod(ready(&surge, "l-3"));
    let changed = with_status(&changed, &status);
    run(&ctx, &changed, &mut api, async |api| {
        api.pod_delete("chat-r0-1").await;
        status = api.status_apply(&changed).await;
        api.events("chat", &["RollingUpdate"]).await;
    })
    .await;
    assert_eq!(
        status["status"]["replicaStatuses"][0]["podName"],
        "chat-r0-3"
    );
    // Regression (seen at scale on a real API server): the pod store still shows the deleted
    // pod, without its deletion: a reconcile then neither deletes it again nor starts the next
    // surge pod (the old pod still holds its GPU).
    let changed = with_status(&changed, &status);
    run(&ctx, &changed, &mut api, async |_| {}).await;
    // The next replica's surge pod waits until the old pod is gone (its GPU is free then).
    writers.delete_pod(created_pod(&pods[0]));
    run(&ctx, &changed, &mut api, async |api| {
        api.pod_create("chat-r1-4").await;
        status = api.status_apply(&changed).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(
        status["status"]["replicaStatuses"][1]["surge"]["podName"],
        "chat-r1-4"
    );
}

/// A Service deleted or edited behind the operator's back is applied again, and nothing else
/// is written.
#[tokio::test]
async fn a_deleted_or_edited_service_is_put_back() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = served_job(1);
    let mut status = Value::Null;
    let mut pod = Value::Null;
    let mut service = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        pod = api.pod_create("chat-r0-1").await;
        service = api.object_create(&services(), "chat").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    writers.apply_pod(created_pod(&pod));
    let job = with_status(&job, &status);
    // Gone from the store (deleted): created again.
    run(&ctx, &job, &mut api, async |api| {
        api.object_create(&services(), "chat").await;
    })
    .await;
    // Its selector edited: applied again, onto that object only (its uid).
    let mut edited: Service = serde_json::from_value(service).unwrap();
    edited.metadata.uid = Some(ApiServerVerifier::object_uid("chat"));
    edited.spec.as_mut().unwrap().selector = Some([("app".into(), "other".into())].into());
    serving
        .services
        .apply_watcher_event(&watcher::Event::Apply(edited.clone()));
    let applied = run(&ctx, &job, &mut api, async |api| {
        // Created by the job and never applied onto: its create's fields become the apply's
        // first, so that a field the apply leaves out is removed.
        let body = api.object_apply_after_create(&services(), "chat").await;
        assert_eq!(body["spec"]["selector"]["vramfit.io/job"], "chat");
        assert_eq!(
            body["metadata"]["uid"],
            ApiServerVerifier::object_uid("chat")
        );
    })
    .await;
    assert_eq!(applied, Action::requeue(Duration::from_secs(3600)));
    // As desired: nothing at all.
    let desired =
        crate::replicas::service::desired_service(&job, job.spec.serve.as_ref().unwrap()).unwrap();
    serving
        .services
        .apply_watcher_event(&watcher::Event::Apply(desired));
    run(&ctx, &job, &mut api, async |_| {}).await;
}

/// Scaling from two replicas to one deletes the worst replica's pod and the budget.
#[tokio::test]
async fn scaling_down_deletes_a_replica_pod_and_the_budget() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = served_job(2);
    let (pods, service, pdb, status) = first(&ctx, &mut api, &job).await;
    writers.apply_pod(ready(&pods[0], "l-1"));
    writers.apply_pod(created_pod(&pods[1]));
    serving.services.apply_watcher_event(&watcher::Event::Apply(
        serde_json::from_value::<Service>(service).unwrap(),
    ));
    let mut pdb = serde_json::from_value::<PodDisruptionBudget>(pdb).unwrap();
    pdb.metadata.uid = Some(ApiServerVerifier::object_uid("chat"));
    serving
        .pdbs
        .apply_watcher_event(&watcher::Event::Apply(pdb));
    let mut job = with_status(&job, &status);
    job.metadata.generation = Some(2);
    job.spec.serve.as_mut().unwrap().replicas = 1;
    run(&ctx, &job, &mut api, async |api| {
        // The replica that serves nothing goes.
        api.pod_delete("chat-r1-2").await;
        let body = api.object_delete(&pdbs(), "chat").await;
        assert_eq!(
            body["preconditions"]["uid"],
            ApiServerVerifier::object_uid("chat"),
            "only the budget the store showed as the job's"
        );
        let body = api.status_apply(&job).await;
        assert_eq!(body["status"]["ready"], "1/1");
        api.events("chat", &["ScaledDown", "Available"]).await;
    })
    .await;
}

/// A replica pod the API server refuses (an exceeded quota) is reported like a batch pod's, and
/// the reconcile fails to be retried with backoff; its reservation is released.
#[tokio::test]
async fn a_refused_replica_pod_is_reported_and_retried() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = served_job(1);
    let task = tokio::spawn(reconcile(Arc::new(CachedJob::of(&job)), ctx.clone()));
    api.pod_create_rejected("chat-r0-1", 403, "exceeded quota: gpus")
        .await;
    let status = api.status_apply(&job).await;
    api.events("chat", &["PodRejected"]).await;
    api.no_more_requests().await;
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("reconcile finishes")
        .expect("no panic");
    assert!(result.is_err(), "{result:?}");
    let scheduled = status["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Scheduled")
        .cloned()
        .unwrap();
    assert_eq!(scheduled["reason"], "PodRejected");
    assert!(ctx.reservations.is_empty());
}

/// Found on a real API server (its service IP range full at 254 Services): a Service the API
/// server refuses must not keep the status from being written. The replicas' pods are created
/// and recorded, the job says why it has no Service (`Degraded`, `ServiceRejected`, a Warning
/// event), and the reconcile fails to be retried with backoff.
#[tokio::test]
async fn a_refused_service_still_leaves_the_replicas_in_status() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = served_job(1);
    let task = tokio::spawn(reconcile(Arc::new(CachedJob::of(&job)), ctx.clone()));
    api.pod_create("chat-r0-1").await;
    let full = "Internal error occurred: failed to allocate a serviceIP: range is full";
    api.object_create_rejected(&services(), "chat", 500, full)
        .await;
    let status = api.status_apply(&job).await;
    api.events("chat", &["PodCreated", "ServiceRejected"]).await;
    api.no_more_requests().await;
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("reconcile finishes")
        .expect("no panic");
    assert!(result.is_err(), "retried with backoff: {result:?}");
    let s = &status["status"];
    assert_eq!(s["replicaStatuses"][0]["podName"], "chat-r0-1");
    let degraded = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .cloned()
        .unwrap();
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "ServiceRejected");
    assert!(
        degraded["message"]
            .as_str()
            .unwrap()
            .contains("range is full"),
        "{degraded}"
    );
}
