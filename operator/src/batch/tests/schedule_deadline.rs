//! Controller tests for the schedule deadline: a pod the scheduler does not bind in time is
//! deleted (it no longer holds its class's GPUs) and the attempt ends; the next runs on another
//! class, and with none left the job fails.
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::controller::Action;

use crate::batch::tests::{
    a10g_cluster, created_pod, first_reconcile, requeue_seconds, run, with_status,
};
use crate::fixtures;
use crate::verifier::test_context;

/// `pod`, created `seconds` ago and never bound: the scheduler says no node fits it.
fn unbound_for(pod: Pod, seconds: i64) -> Pod {
    let mut pod = fixtures::with_unschedulable_condition(
        fixtures::as_pending(pod, None),
        "0/1 nodes are available: 1 Insufficient example.com/never.",
    );
    pod.metadata.creation_timestamp =
        Some(Time(Timestamp::now() - SignedDuration::from_secs(seconds)));
    pod
}

#[tokio::test]
async fn an_unbound_pod_past_its_deadline_ends_and_with_no_other_class_the_job_fails() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    writers.apply_pod(unbound_for(created_pod(&pod), 3600));
    let job = with_status(&job, &status);
    let action = run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("chat-1").await;
        let body = api.status_apply(&job).await;
        let s = &body["status"];
        assert_eq!(s["phase"], "Failed");
        assert_eq!(s["attempts"][0]["outcome"], "ScheduleTimeout");
        let message = s["attempts"][0]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(
                "pod chat-1 was not scheduled to a node of class a10g-x4 within 600 s: Unschedulable: 0/1 nodes are available: 1 Insufficient example.com/never."
            ),
            "{message}"
        );
        let ready = s["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(ready["reason"], "ScheduleDeadlineExceeded");
        assert!(
            ready["message"]
                .as_str()
                .is_some_and(|m| m.contains("a10g-x4: the pod of attempt 1 was not scheduled here in time")),
            "{ready}"
        );
        assert_eq!(s["attemptCount"], 1, "no second pod on the same class");
        api.events("chat", &["ScheduleDeadlineExceeded", "Failed"])
            .await;
    })
    .await;
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn an_unbound_pod_past_its_deadline_is_tried_on_another_class() {
    let (ctx, mut api, mut writers) = test_context();
    writers.apply_node(fixtures::gpu_node("h-1", "h100", 8, 8));
    writers.apply_node(fixtures::gpu_node("a-1", "a10g", 4, 4));
    writers.mark_ready();
    let mut spec = fixtures::vllm_mistral_spec();
    spec.schedule_deadline_seconds = Some(120);
    let job = fixtures::job("chat", spec);
    let mut created = serde_json::Value::Null;
    let mut status = serde_json::Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        created = api.pod_create("chat-1").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(status["status"]["nodeClass"], "h100-80gb-hbm3-x8");
    writers.apply_pod(unbound_for(created_pod(&created), 121));
    let job = with_status(&job, &status);
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("chat-1").await;
        let next = api.pod_create("chat-2").await;
        assert_eq!(next["metadata"]["labels"]["vramfit.io/node-class"], "a10g-x4");
        let body = api.status_apply(&job).await;
        let s = &body["status"];
        assert_eq!(s["phase"], "Scheduled");
        assert_eq!(s["attempts"][0]["outcome"], "ScheduleTimeout");
        assert_eq!(s["attempts"][1]["nodeClass"], "a10g-x4");
        assert!(
            s["attempts"][1]["step"]
                .as_str()
                .is_some_and(|step| step.starts_with("another class: pod chat-1 was not scheduled")),
            "{s}"
        );
        assert_eq!(
            s["rejectedClasses"],
            serde_json::json!([{ "nodeClass": "h100-80gb-hbm3-x8",
                                 "reason": "the pod of attempt 1 was not scheduled here in time" }])
        );
        api.events("chat", &["ScheduleDeadlineExceeded", "PodCreated"])
            .await;
    })
    .await;
}

#[tokio::test]
async fn an_unbound_pod_is_looked_at_again_when_its_deadline_falls() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    writers.apply_pod(unbound_for(created_pod(&pod), 0));
    let job = with_status(&job, &status);
    let action = run(&ctx, &job, &mut api, async |api| {
        api.status_apply(&job).await;
    })
    .await;
    let seconds = requeue_seconds(&action);
    // 600 s less the moment the test took, plus one second: not the hour-long resync.
    assert!((599.0..=601.0).contains(&seconds), "{action:?}");
}
