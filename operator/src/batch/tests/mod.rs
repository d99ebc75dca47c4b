//! Controller tests: the real `reconcile` against the [`ApiServerVerifier`], asserting every
//! request (method, path with `fieldManager=vramfit-operator`, body) in order.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use vramfit_api::{InferenceJob, InferenceJobStatus};

use crate::attempts::Decision;
use crate::context::Context;
use crate::dispatch::reconcile;
use crate::fixtures::{self, NAMESPACE};
use crate::observe::snapshot;
use crate::pod::build::BuildError;
use crate::settings::Requeues;
use crate::stores::StoreWriters;
use crate::stores::cached_job::CachedJob;
use crate::verifier::{ApiServerVerifier, test_context};

// (partitions, start_deadline and workload_report were undeclared, so neither built nor run,
// from the move of the tests into this folder until they were declared here.)
mod partitions;
mod schedule_deadline;
mod start_deadline;
mod tuning;
mod workload_report;

/// Observes and decides on `job` at `now`, writing nothing.
pub(crate) fn decide(
    job: &InferenceJob,
    ctx: &Context,
    now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> Result<Decision, BuildError> {
    snapshot(job, ctx)
        .expect("a namespaced job")
        .decide(now, &ctx.settings.requeues)
}

/// Runs one reconcile while `script` answers its requests; returns its action.
pub(crate) async fn run<F>(
    ctx: &Arc<Context>,
    job: &InferenceJob,
    api: &mut ApiServerVerifier,
    script: F,
) -> Action
where
    F: AsyncFnOnce(&mut ApiServerVerifier),
{
    match run_to_end(ctx, job, api, script).await {
        Ok(action) => action,
        Err(error) => panic!("reconcile did not finish well: {error:?}"),
    }
}

/// Runs one reconcile while `script` answers its requests, and no more requests come; returns
/// how the reconcile ended.
pub(crate) async fn run_to_end<F>(
    ctx: &Arc<Context>,
    job: &InferenceJob,
    api: &mut ApiServerVerifier,
    script: F,
) -> Result<Action, crate::error::Error>
where
    F: AsyncFnOnce(&mut ApiServerVerifier),
{
    let task = tokio::spawn(reconcile(Arc::new(CachedJob::of(job)), ctx.clone()));
    script(api).await;
    api.no_more_requests().await;
    match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(Ok(ended)) => ended,
        other => panic!("reconcile did not end: {other:?}"),
    }
}

/// The job with the status the verifier saw written.
pub(crate) fn with_status(job: &InferenceJob, body: &Value) -> InferenceJob {
    let mut job = job.clone();
    let status: InferenceJobStatus = serde_json::from_value(body["status"].clone()).unwrap();
    job.status = Some(status);
    job.metadata.resource_version = Some(crate::verifier::next_resource_version(&job));
    job
}

/// The reason of a decision's `Scheduled` condition.
fn scheduled_reason(decision: &Decision) -> String {
    decision
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Scheduled")
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

/// The delay of a requeue, in seconds (`Action` shows it only in its Debug form:
/// `Action { requeue_after: Some(900.9s) }`).
pub(crate) fn requeue_seconds(action: &Action) -> f64 {
    let shown = format!("{action:?}");
    shown
        .split("Some(")
        .nth(1)
        .and_then(|rest| rest.split('s').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no delay in {shown}"))
}

/// The pod the verifier saw applied, as the store would show it once created.
pub(crate) fn created_pod(body: &Value) -> Pod {
    fixtures::created(serde_json::from_value(body.clone()).unwrap())
}

pub(crate) fn a10g_cluster(writers: &mut StoreWriters) {
    writers.apply_node(fixtures::gpu_node("a-1", "a10g", 4, 4));
    writers.mark_ready();
}

fn env_value(pod: &Value, name: &str) -> Value {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == name))
        .map(|e| e["value"].clone())
        .unwrap_or(Value::Null)
}

pub(crate) fn condition(status: &Value, type_: &str) -> Value {
    status["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Asserts that the operator's metrics hold each of `lines` (a series, or a series and value).
pub(crate) fn assert_metrics(ctx: &Context, lines: &[&str]) {
    let metrics = ctx.metrics.encode().unwrap();
    for line in lines {
        assert!(metrics.contains(line), "missing {line} in {metrics}");
    }
}

/// Asserts the metrics of a bfloat16 attempt on `a10g-x4` whose output (or loss) check failed
/// and whose job stepped down to float16.
pub(crate) fn assert_bfloat16_bad_output_stepped_down(ctx: &Context) {
    assert_metrics(
        ctx,
        &[
            "vramfit_bad_outputs_total{node_class=\"a10g-x4\",dtype=\"bfloat16\"} 1",
            "vramfit_fallbacks_total{reason=\"float16\"} 1",
        ],
    );
}

/// The first reconcile of `chat` on an A10G cluster: returns (pod body, status body).
pub(crate) async fn first_reconcile(
    ctx: &Arc<Context>,
    api: &mut ApiServerVerifier,
    job: &InferenceJob,
) -> (Value, Value) {
    let mut bodies = (Value::Null, Value::Null);
    let action = run(ctx, job, api, async |api| {
        bodies.0 = api.pod_create("chat-1").await;
        bodies.1 = api.status_apply(job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(action, Action::requeue(Requeues::default().resync));
    bodies
}

#[tokio::test]
async fn first_reconcile_applies_the_pod_then_the_status() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;

    assert_eq!(pod["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        pod["metadata"]["ownerReferences"],
        json!([{ "apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob", "name": "chat",
                 "uid": fixtures::uid("chat"), "controller": true, "blockOwnerDeletion": true }])
    );
    assert_eq!(pod["metadata"]["labels"]["vramfit.io/job"], "chat");
    assert_eq!(pod["metadata"]["labels"]["vramfit.io/attempt"], "1");
    assert_eq!(
        pod["metadata"]["labels"]["vramfit.io/node-class"],
        "a10g-x4"
    );
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["resources"]["limits"]["nvidia.com/gpu"], "1");
    assert_eq!(container["terminationMessagePolicy"], "File");
    // Pod Security `restricted` defaults, and not one field a 1.30 server lacks.
    assert_eq!(
        pod["spec"]["securityContext"],
        json!({ "seccompProfile": { "type": "RuntimeDefault" } })
    );
    assert_eq!(
        container["securityContext"],
        json!({ "allowPrivilegeEscalation": false, "capabilities": { "drop": ["ALL"] } })
    );
    assert_eq!(env_value(&pod, "TORCH_DTYPE"), "bfloat16");
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"],
        json!([
            { "key": "vramfit.io/gpu.count", "operator": "In", "values": ["4"] },
            { "key": "vramfit.io/gpu.product", "operator": "In", "values": ["NVIDIA-A10G"] },
            // Shared, mixed and MIG-partitioned nodes carry the same product and count.
            { "key": "nvidia.com/gpu.sharing-strategy", "operator": "NotIn", "values": ["time-slicing", "mps"] },
            { "key": "vramfit.io/gpu.mixed", "operator": "NotIn", "values": ["true"] },
            { "key": "vramfit.io/gpu.mig", "operator": "NotIn", "values": ["enabled"] }
        ])
    );

    let s = &status["status"];
    assert_eq!(s["phase"], "Scheduled");
    assert_eq!(s["observedGeneration"], 1);
    assert_eq!(s["nodeClass"], "a10g-x4");
    assert_eq!(s["podName"], "chat-1");
    assert_eq!(s["attemptCount"], 1);
    assert_eq!(s["plan"]["gpuCount"], 1);
    assert_eq!(s["plan"]["dtype"], "bfloat16");
    assert_eq!(s["attempts"][0]["podName"], "chat-1");
    assert_eq!(condition(&status, "Scheduled")["reason"], "PodCreated");
    assert_eq!(condition(&status, "InvalidSpec")["status"], "False");
}

#[tokio::test]
async fn restart_is_idempotent() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;

    // A restarted operator (empty ledger) whose stores show the pod and the status: no write.
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    writers.apply_pod(created_pod(&pod));
    let written = with_status(&job, &status);
    let action = run(&ctx, &written, &mut api, async |_| {}).await;
    assert_eq!(action, Action::requeue(Requeues::default().resync));

    // It crashed between the pod apply and the status write: the pod is adopted, no second pod.
    let adopted = run(&ctx, &job, &mut api, async |api| {
        let again = api.status_apply(&job).await;
        assert_eq!(again["status"]["podName"], "chat-1");
        assert_eq!(again["status"]["plan"], status["status"]["plan"]);
        assert_eq!(again["status"]["attemptCount"], 1);
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(adopted, Action::requeue(Requeues::default().resync));

    // The pod was deleted behind its back: the same apply, under the same name.
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    run(&ctx, &written, &mut api, async |api| {
        let again = api.pod_create("chat-1").await;
        assert_eq!(again, pod, "the same pod, applied again");
        api.status_apply(&written).await;
    })
    .await;
}

#[tokio::test]
async fn a_running_pod_updates_the_status() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    writers.apply_pod(fixtures::as_running(created_pod(&pod), "a-1"));
    let job = with_status(&job, &status);
    run(&ctx, &job, &mut api, async |api| {
        let body = api.status_apply(&job).await;
        assert_eq!(body["status"]["phase"], "Running");
        assert_eq!(body["status"]["nodeName"], "a-1");
        assert_eq!(condition(&body, "Ready")["status"], "True");
        assert_eq!(condition(&body, "Ready")["reason"], "Running");
        api.event("chat", "Running").await;
    })
    .await;
}

#[tokio::test]
async fn cuda_oom_starts_the_next_attempt_one_step_down() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    let message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB";
    writers.apply_pod(fixtures::as_failed(
        created_pod(&pod),
        "a-1",
        "Error",
        1,
        message,
    ));
    let job = with_status(&job, &status);
    run(&ctx, &job, &mut api, async |api| {
        let next = api.pod_create("chat-2").await;
        assert_eq!(next["metadata"]["labels"]["vramfit.io/attempt"], "2");
        assert_eq!(
            next["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
            "2"
        );
        assert_eq!(env_value(&next, "VRAMFIT_GPU_COUNT"), "2");
        let body = api.status_apply(&job).await;
        let s = &body["status"];
        assert_eq!(s["attemptCount"], 2);
        assert_eq!(s["podName"], "chat-2");
        assert_eq!(s["fallback"]["minGpus"], 2);
        assert_eq!(s["attempts"][0]["outcome"], "OutOfMemory");
        assert_eq!(s["attempts"][0]["message"], message);
        assert_eq!(s["attempts"][1]["step"], "one more GPU: 1 → 2");
        assert_eq!(condition(&body, "OutOfMemory")["status"], "True");
        assert_eq!(condition(&body, "OutOfMemory")["reason"], "SteppedDown");
        api.events("chat", &["OutOfMemory", "SteppedDown", "PodCreated"])
            .await;
    })
    .await;
    let metrics = ctx.metrics.encode().unwrap();
    assert!(
        metrics.contains("vramfit_fallbacks_total{reason=\"gpus\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn exhausted_attempts_fail_with_the_last_reason() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let mut spec = fixtures::vllm_mistral_spec();
    spec.max_attempts = 1;
    let job = fixtures::job("chat", spec);
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    writers.apply_pod(fixtures::as_failed(
        created_pod(&pod),
        "a-1",
        "Error",
        1,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ));
    let job = with_status(&job, &status);
    let action = run(&ctx, &job, &mut api, async |api| {
        let body = api.status_apply(&job).await;
        assert_eq!(body["status"]["phase"], "Failed");
        assert!(body["status"]["completionTime"].is_string());
        assert_eq!(body["status"]["attempts"][0]["outcome"], "OutOfMemory");
        assert_eq!(
            condition(&body, "OutOfMemory")["reason"],
            "AttemptsExhausted"
        );
        let ready = condition(&body, "Ready");
        assert_eq!(ready["reason"], "AttemptsExhausted");
        assert!(
            ready["message"]
                .as_str()
                .unwrap()
                .contains("CUDA out of memory"),
            "{ready}"
        );
        api.events("chat", &["OutOfMemory", "Failed"]).await;
    })
    .await;
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn a_node_label_change_replans_an_unschedulable_job() {
    let (ctx, mut api, mut writers) = test_context();
    writers.apply_node(fixtures::cpu_node("n-1"));
    writers.mark_ready();
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let mut status = Value::Null;
    let action = run(&ctx, &job, &mut api, async |api| {
        status = api.status_apply(&job).await;
        assert_eq!(status["status"]["phase"], "Unschedulable");
        assert_eq!(condition(&status, "Scheduled")["reason"], "NoClassFits");
        api.event("chat", "Unschedulable").await;
    })
    .await;
    assert_eq!(action, Action::requeue(Requeues::default().unschedulable));

    // The agent labels the node: the job is planned and placed.
    let mut labelled = fixtures::gpu_node("n-1", "a10g", 1, 1);
    labelled.metadata.resource_version = Some("2".into());
    writers.apply_node(labelled);
    let job = with_status(&job, &status);
    run(&ctx, &job, &mut api, async |api| {
        let pod = api.pod_create("chat-1").await;
        assert_eq!(
            pod["metadata"]["labels"]["vramfit.io/node-class"],
            "a10g-x1"
        );
        let body = api.status_apply(&job).await;
        assert_eq!(body["status"]["phase"], "Scheduled");
        assert_eq!(condition(&body, "Scheduled")["status"], "True");
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
}

#[tokio::test]
async fn a_bf16_pinned_job_on_a_v100_cluster_is_unschedulable_with_the_reason() {
    let (ctx, mut api, mut writers) = test_context();
    writers.apply_node(fixtures::gpu_node("v-1", "v100", 4, 4));
    writers.mark_ready();
    let job = fixtures::job("pinned", fixtures::bf16_pinned_spec());
    run(&ctx, &job, &mut api, async |api| {
        let body = api.status_apply(&job).await;
        assert_eq!(body["status"]["phase"], "Unschedulable");
        let message = condition(&body, "Scheduled")["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            message
                .contains("v100-sxm2-16gb-x4: bfloat16 is pinned but compute capability 7.0 < 8.0"),
            "{message}"
        );
        assert_eq!(
            body["status"]["rejectedClasses"][0]["nodeClass"],
            "v100-sxm2-16gb-x4"
        );
        let event = api.event("pinned", "Unschedulable").await;
        assert_eq!(event["type"], "Warning");
    })
    .await;
}

#[tokio::test]
async fn an_invalid_spec_is_reported_and_waits_for_a_change() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("bad", fixtures::invalid_spec());
    let mut status = Value::Null;
    let action = run(&ctx, &job, &mut api, async |api| {
        status = api.status_apply(&job).await;
        assert_eq!(status["status"]["phase"], "Pending");
        let invalid = condition(&status, "InvalidSpec");
        assert_eq!(invalid["status"], "True");
        assert!(
            invalid["message"]
                .as_str()
                .unwrap()
                .contains("unknown model preset"),
            "{invalid}"
        );
        api.event("bad", "InvalidSpec").await;
    })
    .await;
    assert_eq!(action, Action::await_change(), "no requeue storm");

    // Reconciled again (its own status event): nothing written, still waiting.
    let job = with_status(&job, &status);
    let action = run(&ctx, &job, &mut api, async |_| {}).await;
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn a_job_that_does_not_deserialize_is_reported_once() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let mut meta = fixtures::job("odd", fixtures::vllm_mistral_spec()).metadata;
    meta.generation = Some(4);
    let object = Arc::new(CachedJob::invalid(
        meta,
        "spec.llamaCpp.gpuLayers: gpuLayers must be `auto` or a non-negative integer",
    ));
    for first in [true, false] {
        let task = tokio::spawn(reconcile(object.clone(), ctx.clone()));
        if first {
            let body = api.status_merge("odd").await;
            assert_eq!(body["status"]["observedGeneration"], 4);
            let invalid = body["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "InvalidSpec")
                .cloned()
                .unwrap();
            assert!(
                invalid["message"].as_str().unwrap().contains("gpuLayers"),
                "{invalid}"
            );
            api.event("odd", "InvalidSpec").await;
        }
        api.no_more_requests().await;
        let action = task.await.unwrap().unwrap();
        assert_eq!(action, Action::await_change());
    }
}

#[tokio::test]
async fn a_spec_change_replaces_a_pod_whose_spec_changes() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    writers.apply_pod(fixtures::as_running(created_pod(&pod), "a-1"));
    let mut job = with_status(&job, &status);
    job.metadata.generation = Some(2);
    job.spec.image = "vllm/vllm-openai:v0.9.0".into();
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("chat-1").await;
        let next = api.pod_create("chat-2").await;
        assert_eq!(
            next["spec"]["containers"][0]["image"],
            "vllm/vllm-openai:v0.9.0"
        );
        let body = api.status_apply(&job).await;
        assert_eq!(body["status"]["attempts"][0]["outcome"], "Replaced");
        assert_eq!(body["status"]["observedGeneration"], 2);
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
}

/// A pod is reserved before it is applied: a second job decided while the first pod's apply
/// is still in flight does not take the same last free GPU.
#[tokio::test]
async fn a_reserved_pod_takes_its_gpus_before_the_apply_returns() {
    use crate::writes::pods::reserve;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use vramfit_api::Phase;

    let (ctx, _api, mut writers) = test_context();
    writers.apply_node(fixtures::gpu_node("a-1", "a10g", 1, 1));
    writers.mark_ready();
    let first = fixtures::job("first", fixtures::vllm_mistral_spec());
    let second = fixtures::job("second", fixtures::vllm_mistral_spec());
    let now = || Time(Timestamp::now());

    let placed = decide(&first, &ctx, now()).unwrap();
    assert_eq!(placed.status.phase, Some(Phase::Scheduled));
    // Without the reservation the second job would see the same free GPU.
    let unreserved = decide(&second, &ctx, now()).unwrap();
    assert_eq!(unreserved.status.phase, Some(Phase::Scheduled));

    reserve(&first, &placed, &ctx);
    let after = decide(&second, &ctx, now()).unwrap();
    assert_eq!(
        after.status.phase,
        Some(Phase::Unschedulable),
        "{:?}",
        after.status
    );
    assert!(after.apply_pod.is_none());
}

/// `spec.pod.resources` passes through to the pod: a class none of whose nodes offers an
/// extended resource the job asks for is rejected up front, with the resource named; when no
/// class offers it, the job waits Unschedulable with that reason and gets no pod (which would
/// never be scheduled, holding its class's GPUs).
#[tokio::test]
async fn a_class_without_the_extended_resource_the_job_asks_for_is_rejected_up_front() {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use vramfit_api::Phase;

    let mut spec = fixtures::vllm_mistral_spec();
    spec.pod.get_or_insert_default().resources = Some(ResourceRequirements {
        limits: Some([("example.com/never".to_string(), Quantity("1".into()))].into()),
        ..ResourceRequirements::default()
    });
    let job = fixtures::job("chat", spec);
    let now = || Time(Timestamp::now());

    let (ctx, _api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let decision = decide(&job, &ctx, now()).unwrap();
    assert_eq!(decision.status.phase, Some(Phase::Unschedulable));
    assert!(decision.apply_pod.is_none());
    assert_eq!(
        decision.status.rejected_classes,
        [vramfit_api::ClassRejection {
            node_class: "a10g-x4".into(),
            reason:
                "spec.pod.resources asks for 1 example.com/never, which no node of the class offers"
                    .into(),
        }]
    );

    // A node of another class offers it: the job goes there, and says why not the first.
    let (ctx, _api, mut writers) = test_context();
    writers.apply_node(fixtures::gpu_node("a-1", "a10g", 4, 4));
    let mut offering = fixtures::gpu_node("l-1", "l40s", 1, 1);
    offering
        .status
        .get_or_insert_default()
        .allocatable
        .get_or_insert_default()
        .insert("example.com/never".into(), Quantity("1".into()));
    writers.apply_node(offering);
    writers.mark_ready();
    let decision = decide(&job, &ctx, now()).unwrap();
    assert_eq!(decision.status.phase, Some(Phase::Scheduled));
    assert_eq!(decision.status.node_class.as_deref(), Some("l40s-x1"));
    assert!(
        decision
            .status
            .rejected_classes
            .iter()
            .any(|r| r.node_class == "a10g-x4" && r.reason.contains("example.com/never")),
        "{:?}",
        decision.status.rejected_classes
    );
}

/// Whether a pod's required node affinity admits a node with `labels` (as the scheduler
/// reads it: terms ORed, expressions ANDed).
fn affinity_admits(pod: &Value, labels: &std::collections::BTreeMap<String, String>) -> bool {
    let terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    terms.iter().any(|term| {
        term["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|expression| {
                let key = expression["key"].as_str().unwrap_or_default();
                let values: Vec<&str> = expression["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let value = labels.get(key).map(String::as_str);
                match expression["operator"].as_str() {
                    Some("In") => value.is_some_and(|v| values.contains(&v)),
                    Some("NotIn") => value.is_none_or(|v| !values.contains(&v)),
                    other => panic!("operator {other:?}"),
                }
            })
    })
}

/// A node in an admin-defined class (its own runtime class, `allowJobs: false`) is also an
/// A10G×4 by its labels: a job that chose the discovered class must not land there, neither by
/// room (the node is no member of the discovered class) nor by the scheduler (the pod's node
/// affinity excludes the admin class's nodes).
#[tokio::test]
async fn a_job_cannot_land_on_an_admin_class_s_node_through_the_discovered_class() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use vramfit_api::Phase;

    let admin_class = || {
        let defined = fixtures::gpu_node_class_definition(
            "sandboxed-a10g",
            &[("pool", "sandbox"), ("zone", "a")],
            "NVIDIA A10G",
            4,
            23_028,
            "8.6",
        );
        let mut object = defined.0.clone().unwrap();
        object.spec.runtime_class_name = Some("kata".into());
        object.spec.allow_jobs = false;
        kube::core::DeserializeGuard(Ok(object))
    };
    let node = |name: &str, extra: &[(&str, &str)]| {
        let mut node = fixtures::gpu_node(name, "a10g", 4, 4);
        let labels = node.metadata.labels.get_or_insert_default();
        for (k, v) in extra {
            labels.insert(k.to_string(), v.to_string());
        }
        node
    };
    let sandboxed = node("s-1", &[("pool", "sandbox"), ("zone", "a")]);
    let same_pool_elsewhere = node("s-2", &[("pool", "sandbox"), ("zone", "b")]);
    let open = node("a-1", &[]);
    let mut spec = fixtures::vllm_mistral_spec();
    spec.node_classes = Some(vramfit_api::NodeClassSelection {
        allowed: vec!["a10g-x4".into()],
        ..Default::default()
    });
    let job = fixtures::job("chat", spec);
    let now = || Time(Timestamp::now());

    // Only the admin's node: the job has no A10G×4 class to land in.
    let (ctx, _api, mut writers) = test_context();
    writers.apply_node(sandboxed.clone());
    writers.apply_node_class(admin_class());
    writers.mark_ready();
    let decision = decide(&job, &ctx, now()).unwrap();
    assert_eq!(decision.status.phase, Some(Phase::Unschedulable));
    assert!(decision.apply_pod.is_none());

    // With an open node too: placed in the discovered class, and its pod's affinity admits the
    // open node and the one outside the admin's selector, never the admin's.
    let (ctx, _api, mut writers) = test_context();
    for n in [&sandboxed, &same_pool_elsewhere, &open] {
        writers.apply_node(n.clone());
    }
    writers.apply_node_class(admin_class());
    writers.mark_ready();
    let decision = decide(&job, &ctx, now()).unwrap();
    assert_eq!(decision.status.node_class.as_deref(), Some("a10g-x4"));
    let pod = serde_json::to_value(decision.apply_pod.unwrap()).unwrap();
    let labels = |n: &k8s_openapi::api::core::v1::Node| n.metadata.labels.clone().unwrap();
    assert!(
        !affinity_admits(&pod, &labels(&sandboxed)),
        "{}",
        pod["spec"]["affinity"]
    );
    assert!(affinity_admits(&pod, &labels(&same_pool_elsewhere)));
    assert!(affinity_admits(&pod, &labels(&open)));
    assert_eq!(pod["spec"]["runtimeClassName"], Value::Null);
}

/// The same before any store shows the predecessor's pod: the reservation this process made
/// for it belongs to the earlier job (by uid), so the new job neither adopts its plan nor
/// counts the pod as its own.
#[tokio::test]
async fn a_pod_an_earlier_job_of_the_same_name_just_applied_is_not_adopted() {
    use crate::writes::pods::reserve;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use vramfit_api::Phase;

    let (ctx, _api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let placed = decide(&job, &ctx, Time(Timestamp::now())).unwrap();
    reserve(&job, &placed, &ctx);

    let mut reborn = fixtures::job("chat", fixtures::vllm_mistral_spec());
    reborn.metadata.uid = Some("a-new-uid".to_string());
    let decision = decide(&reborn, &ctx, Time(Timestamp::now())).unwrap();
    assert_eq!(decision.status.phase, Some(Phase::Pending));
    assert!(decision.apply_pod.is_none());
    assert!(
        decision.status.attempts.is_empty(),
        "the predecessor's plan is not recorded as this job's attempt: {:?}",
        decision.status.attempts
    );
    assert_eq!(scheduled_reason(&decision), "PodNameTaken");
}

/// A pod holds room in a class before it binds only when the job its controller reference
/// names is in the job store with that very uid: anyone who may create pods can write the
/// reference and the class label, and would make the class look full to every tenant.
#[tokio::test]
async fn an_unbound_pod_holds_room_only_for_the_job_that_really_owns_it() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;
    use vramfit_api::Phase;
    use vramfit_api::pod_keys::{JOB_LABEL, NODE_CLASS_LABEL};

    let pending_pod_of = |job: &InferenceJob, uid: &str| {
        let mut pod = fixtures::gpu_pod(NAMESPACE, "squat", None, 4);
        pod.metadata.labels = Some(
            [(JOB_LABEL, "holder"), (NODE_CLASS_LABEL, "a10g-x4")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
        );
        pod.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "vramfit.io/v1alpha1".into(),
            kind: "InferenceJob".into(),
            name: job.metadata.name.clone().unwrap_or_default(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        pod
    };
    let holder = fixtures::job("holder", fixtures::vllm_mistral_spec());
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let phase_with = |pod| {
        let (ctx, _api, mut writers) = test_context();
        writers.apply_node(fixtures::gpu_node("a-1", "a10g", 4, 4));
        writers.apply_job(&holder);
        writers.apply_pod(pod);
        writers.mark_ready();
        decide(&job, &ctx, Time(Timestamp::now()))
            .unwrap()
            .status
            .phase
    };
    let real_uid = holder.metadata.uid.clone().unwrap_or_default();
    assert_eq!(
        phase_with(pending_pod_of(&holder, &real_uid)),
        Some(Phase::Unschedulable),
        "the holder's own pod, waiting for the scheduler, holds the class's four GPUs"
    );
    assert_eq!(
        phase_with(pending_pod_of(&holder, "not-the-holders-uid")),
        Some(Phase::Scheduled),
        "a forged reference holds nothing"
    );
    let nobody = fixtures::job("nobody", fixtures::vllm_mistral_spec());
    let nobody_uid = nobody.metadata.uid.clone().unwrap_or_default();
    assert_eq!(
        phase_with(pending_pod_of(&nobody, &nobody_uid)),
        Some(Phase::Scheduled),
        "a reference to a job that does not exist holds nothing"
    );
}

/// A job deleted and created again under the same name finds its predecessor's pod (the
/// garbage collector has not removed it yet): it must neither adopt nor follow that pod.
#[tokio::test]
async fn a_pod_of_an_earlier_job_with_the_same_name_is_not_adopted() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use vramfit_api::Phase;

    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod_body, _) = first_reconcile(&ctx, &mut api, &job).await;
    // The earlier job's pod, finished, still in the store.
    let old_pod = fixtures::as_succeeded(created_pod(&pod_body), "a-1");
    writers.apply_pod(old_pod);

    let mut reborn = fixtures::job("chat", fixtures::vllm_mistral_spec());
    reborn.metadata.uid = Some("a-new-uid".to_string());
    let decision = decide(&reborn, &ctx, Time(Timestamp::now())).unwrap();
    assert_eq!(
        decision.status.phase,
        Some(Phase::Pending),
        "{:?}",
        decision.status
    );
    assert!(decision.apply_pod.is_none());
    assert_eq!(scheduled_reason(&decision), "PodNameTaken");
}

/// A pod the API server refuses for good (here an exceeded quota) is reported in the job's
/// status and an Event, and the reconcile fails so that it is retried with backoff.
#[tokio::test]
async fn a_refused_pod_is_reported_in_status_and_retried_with_backoff() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let quota =
        "pods \"chat-1\" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1";
    let task = tokio::spawn(reconcile(Arc::new(CachedJob::of(&job)), ctx.clone()));
    api.pod_create_rejected("chat-1", 403, quota).await;
    let status = api.status_apply(&job).await;
    api.events("chat", &["PodRejected"]).await;
    api.no_more_requests().await;
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("reconcile finishes")
        .expect("no panic");
    assert!(result.is_err(), "retried by error_policy: {result:?}");

    let scheduled = condition(&status, "Scheduled");
    assert_eq!(scheduled["status"], "False");
    assert_eq!(scheduled["reason"], "PodRejected");
    assert!(
        scheduled["message"]
            .as_str()
            .unwrap()
            .contains("exceeded quota")
    );
    assert_eq!(status["status"]["phase"], "Pending");
    assert!(
        status["status"]["attempts"].is_null(),
        "no attempt for a pod that never existed"
    );
    assert!(
        ctx.reservations.is_empty(),
        "the refused pod's GPUs are free again"
    );
}

/// A reconcile that reads the job from a cache older than its own last status write does not
/// decide again (that would repeat the decision's events and fallback counts): it looks
/// again shortly, and proceeds once the cache has the write.
#[tokio::test]
async fn a_cache_behind_the_last_status_write_is_not_decided_on() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    writers.apply_pod(created_pod(&pod));

    // The same (stale) job again: no request at all.
    let action = run(&ctx, &job, &mut api, async |_| {}).await;
    assert_eq!(action, Action::requeue(Duration::from_millis(500)));

    // With the write in the cache, the pod is simply followed: nothing to write.
    let current = with_status(&job, &status);
    let action = run(&ctx, &current, &mut api, async |_| {}).await;
    assert_eq!(action, Action::requeue(Requeues::default().resync));
}

/// A pod of the attempt's name that this job does not control and the stores do not show
/// (no vramfit label): the pod is created, not applied, so it is reported (`PodNameTaken`)
/// instead of being taken over or looping on the server's refusal to change its spec.
#[tokio::test]
async fn a_foreign_pod_with_the_attempts_name_is_reported_not_taken_over() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let task = tokio::spawn(reconcile(Arc::new(CachedJob::of(&job)), ctx.clone()));
    api.pod_create_rejected("chat-1", 409, "pods \"chat-1\" already exists")
        .await;
    api.pod_get(
        "chat-1",
        &json!({ "apiVersion": "v1", "kind": "Pod",
                 "metadata": { "name": "chat-1", "namespace": NAMESPACE, "uid": "someone-else" } }),
    )
    .await;
    let status = api.status_apply(&job).await;
    api.events("chat", &["PodNameTaken"]).await;
    api.no_more_requests().await;
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("reconcile finishes")
        .expect("no panic");
    assert!(
        matches!(
            result,
            Err(crate::error::Error::Apply(
                crate::error::ApplyError::PodNameTaken { .. }
            ))
        ),
        "{result:?}"
    );
    let scheduled = condition(&status, "Scheduled");
    assert_eq!(scheduled["reason"], "PodNameTaken");
    assert!(ctx.reservations.is_empty(), "its GPUs are free again");
}

/// A pod this job created before a restart, which the stores do not show yet: the creation's
/// conflict is answered by reading it, and the job goes on with it.
#[tokio::test]
async fn its_own_pod_created_before_a_restart_is_taken_as_created() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    run(&ctx, &job, &mut api, async |api| {
        api.pod_create_rejected("chat-1", 409, "pods \"chat-1\" already exists")
            .await;
        api.pod_get(
            "chat-1",
            &json!({ "apiVersion": "v1", "kind": "Pod",
                     "metadata": { "name": "chat-1", "namespace": NAMESPACE, "uid": "x",
                       "ownerReferences": [{ "apiVersion": "vramfit.io/v1alpha1",
                         "kind": "InferenceJob", "name": "chat", "uid": fixtures::uid("chat"),
                         "controller": true }] } }),
        )
        .await;
        let body = api.status_apply(&job).await;
        assert_eq!(body["status"]["podName"], "chat-1");
        assert_eq!(body["status"]["phase"], "Scheduled");
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
}

/// A spec change that changes only the pod's metadata (its labels) applies the running pod
/// (server-side apply) instead of replacing it.
#[tokio::test]
async fn a_metadata_only_change_applies_the_running_pod() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    writers.apply_pod(fixtures::as_running(created_pod(&pod), "a-1"));
    let mut job = with_status(&job, &status);
    job.metadata.generation = Some(2);
    job.spec.pod = Some(vramfit_api::PodTemplate {
        labels: [("team".to_string(), "vision".to_string())].into(),
        ..Default::default()
    });
    run(&ctx, &job, &mut api, async |api| {
        let applied = api.pod_apply("chat-1").await;
        assert_eq!(applied["metadata"]["labels"]["team"], "vision");
        let body = api.status_apply(&job).await;
        assert_eq!(body["status"]["attemptCount"], 1, "the same attempt");
        assert_eq!(body["status"]["observedGeneration"], 2);
        api.event("chat", "Running").await;
    })
    .await;
}

/// Regressions (both seen on a real API server): a pod that finished, or that the GPU watch
/// counted, kept its reservation until the reservation expired, as long as no placement looked
/// at the ledger; deleted in that time (its job's cleanup), it went on holding its class's GPUs
/// for up to two minutes, and nothing woke the jobs waiting for them when it expired. The
/// job's own reconcile, which its pod's change triggers, releases the reservation once the pod
/// is counted or finished.
#[tokio::test]
async fn a_counted_or_finished_pod_releases_its_reservation_before_it_is_deleted() {
    use crate::writes::pods::{release_settled, reserve};
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use vramfit_api::Phase;

    type PodState = fn(Pod, &str) -> Pod;
    let states: [(&str, PodState); 2] = [
        ("bound and running", fixtures::as_running),
        ("finished", fixtures::as_succeeded),
    ];
    for (how, state) in states {
        let (ctx, _api, mut writers) = test_context();
        writers.apply_node(fixtures::gpu_node("a-1", "a10g", 1, 1));
        writers.mark_ready();
        let now = || Time(Timestamp::now());
        let first = fixtures::job("first", fixtures::vllm_mistral_spec());
        let placed = decide(&first, &ctx, now()).unwrap();
        reserve(&first, &placed, &ctx);
        let pod = fixtures::created(placed.apply_pod.clone().expect("the first job's pod"));

        // The stores show the pod; its change reconciles its job.
        let mut placed_job = first.clone();
        placed_job.status = Some(placed.status.clone());
        writers.apply_pod(state(pod.clone(), "a-1"));
        let seen = snapshot(&placed_job, &ctx).expect("a namespaced job");
        let _ = seen.decide(now(), &ctx.settings.requeues).unwrap();
        assert_eq!(seen.settled_pods(), ["first-1"], "{how}");
        release_settled(&seen, &ctx);
        assert!(ctx.reservations.is_empty(), "{how}");
        // Then the job is deleted, and the garbage collector deletes its pod.
        writers.delete_pod(pod);

        let second = fixtures::job("second", fixtures::vllm_mistral_spec());
        let next = decide(&second, &ctx, now()).unwrap();
        assert_eq!(
            next.status.phase,
            Some(Phase::Scheduled),
            "{how}: the deleted pod's GPU is free: {:?}",
            next.status.conditions
        );
    }
}
