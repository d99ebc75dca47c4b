//! The Service and PodDisruptionBudget of a served job against the mock API server: an object
//! of the job's name that is not the job's — made by Helm or kubectl, so without vramfit's
//! label and absent from the caches — is never written; the job's own is; the budget counts
//! only replicas that have a pod.
use std::sync::Arc;

use serde_json::{Value, json};
use vramfit_api::InferenceJob;

use super::api::{cluster, pdbs, served_job, services};
use crate::batch::tests::{run, run_to_end, with_status};
use crate::fixtures::{self, NAMESPACE};
use crate::verifier::{ApiServerVerifier, test_context_with_serving};

/// A Service as `kubectl create service` or a Helm chart makes it: no vramfit label, no owner.
fn foreign_service() -> Value {
    json!({ "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "chat", "namespace": NAMESPACE, "uid": "helm-service-uid",
                          "labels": { "app.kubernetes.io/managed-by": "Helm" } },
            "spec": { "type": "LoadBalancer", "selector": { "app": "billing" },
                      "ports": [{ "port": 443, "protocol": "TCP" }] } })
}

fn foreign_pdb() -> Value {
    json!({ "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": { "name": "chat", "namespace": NAMESPACE, "uid": "helm-pdb-uid" },
            "spec": { "minAvailable": 1, "selector": { "matchLabels": { "app": "billing" } } } })
}

fn degraded(status: &Value) -> Value {
    status["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Degraded"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Runs one reconcile that must fail (to be retried with backoff) while `script` answers.
async fn run_failing<F>(
    ctx: &Arc<crate::Context>,
    job: &InferenceJob,
    api: &mut ApiServerVerifier,
    script: F,
) -> crate::error::Error
where
    F: AsyncFnOnce(&mut ApiServerVerifier),
{
    match run_to_end(ctx, job, api, script).await {
        Err(error) => error,
        Ok(action) => panic!("the reconcile should fail: {action:?}"),
    }
}

/// Regression: the Service cache holds only labelled objects, so a Service made by Helm with
/// the job's name looked absent, and the forced apply rewrote its selector and type and made
/// the job its controller. It is created with a plain create now: the API server refuses it,
/// an uncached read says whose the Service is, and it is left alone: no apply, no patch. The
/// job says `Degraded`/`ServiceNameTaken` (one event), its budget is still written, and the
/// reconcile fails to be retried with backoff — so the job takes its name once it is free.
#[tokio::test]
async fn a_foreign_service_of_the_jobs_name_is_never_written() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = served_job(2);
    let mut status = Value::Null;
    let error = run_failing(&ctx, &job, &mut api, async |api| {
        api.pod_create("chat-r0-1").await;
        api.pod_create("chat-r1-2").await;
        let posted = api.object_create_exists(&services(), "chat").await;
        assert_eq!(posted["spec"]["selector"]["vramfit.io/job"], "chat");
        api.object_get(&services(), "chat", &foreign_service())
            .await;
        // Nothing more to the Service: the budget, the status, the events.
        api.object_create(&pdbs(), "chat").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated", "PodCreated", "Degraded"])
            .await;
    })
    .await;
    assert_eq!(error.metric_label(), "service_name_taken");
    assert!(!error.is_transient());
    let condition = degraded(&status);
    assert_eq!(condition["status"], "True");
    assert_eq!(condition["reason"], "ServiceNameTaken");
    assert_eq!(
        status["status"]["replicaStatuses"][1]["podName"], "chat-r1-2",
        "the replicas are recorded"
    );

    // Looked at again: still someone else's; the status says so already, nothing is written.
    let job = with_status(&job, &status);
    run_failing(&ctx, &job, &mut api, async |api| {
        api.object_create_exists(&services(), "chat").await;
        api.object_get(&services(), "chat", &foreign_service())
            .await;
        api.object_create_exists(&pdbs(), "chat").await;
        let mut ours = foreign_pdb();
        ours["metadata"]["ownerReferences"] = json!([{ "apiVersion": "vramfit.io/v1alpha1",
            "kind": "InferenceJob", "name": "chat", "uid": fixtures::uid("chat"),
            "controller": true }]);
        api.object_get(&pdbs(), "chat", &ours).await;
        // The budget is the job's (its label was removed): applied onto it, by its uid.
        let body = api.object_apply_only(&pdbs(), "chat").await;
        assert_eq!(body["metadata"]["uid"], "helm-pdb-uid");
    })
    .await;

    // The foreign Service is deleted: the job creates its own and is no longer Degraded.
    let job = with_status(&job, &status);
    run(&ctx, &job, &mut api, async |api| {
        api.object_create(&services(), "chat").await;
        api.object_create(&pdbs(), "chat").await;
        let body = api.status_apply(&job).await;
        assert_eq!(degraded(&body)["status"], "False");
    })
    .await;
}

/// The same for a PodDisruptionBudget of the job's name that is not the job's:
/// `Degraded`/`PodDisruptionBudgetNameTaken`, the budget never written, the Service still.
#[tokio::test]
async fn a_foreign_budget_of_the_jobs_name_is_never_written() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = served_job(2);
    let mut status = Value::Null;
    let error = run_failing(&ctx, &job, &mut api, async |api| {
        api.pod_create("chat-r0-1").await;
        api.pod_create("chat-r1-2").await;
        api.object_create(&services(), "chat").await;
        api.object_create_exists(&pdbs(), "chat").await;
        api.object_get(&pdbs(), "chat", &foreign_pdb()).await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated", "PodCreated", "Degraded"])
            .await;
    })
    .await;
    assert_eq!(error.metric_label(), "pdb_name_taken");
    let condition = degraded(&status);
    assert_eq!(condition["reason"], "PodDisruptionBudgetNameTaken");
    assert!(
        condition["message"]
            .as_str()
            .unwrap_or_default()
            .contains("PodDisruptionBudget named chat exists and is not this job's"),
        "{condition}"
    );
}

/// Regression: the budget counted `serve.replicas`, so with room for one replica of two
/// (one L40S node) the Ready replica could never be evicted. A replica with no pod is not in
/// the budget: one replica with a pod gets none, and nothing is written to the budget.
#[tokio::test]
async fn a_replica_waiting_for_room_gets_no_budget() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    writers.apply_node(fixtures::gpu_node("l-1", "l40s", 1, 1));
    writers.mark_ready();
    serving.mark_ready();
    let job = served_job(2);
    let mut status = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.pod_create("chat-r0-1").await;
        api.object_create(&services(), "chat").await;
        // No budget: the next request is the status.
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated", "Degraded"]).await;
    })
    .await;
    assert_eq!(status["status"]["replicas"], 1);
    assert_eq!(degraded(&status)["reason"], "NoClassFits");
}
