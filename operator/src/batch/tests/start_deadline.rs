//! Controller tests for the start deadline: a bound pod that does not start in time is
//! deleted (its GPUs freed) and the attempt ends; an image that cannot be pulled fails the
//! job, a pod stuck otherwise is tried again in a new pod.
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::batch::tests::{
    a10g_cluster, created_pod, first_reconcile, requeue_seconds, run, with_status,
};
use crate::fixtures;
use crate::verifier::test_context;

/// `pod`, bound to `a-1` an hour ago and still waiting for `reason`.
fn waiting_an_hour(pod: Pod, reason: &str) -> Pod {
    let mut pod = fixtures::with_waiting_container(fixtures::as_pending(pod, Some("a-1")), reason);
    pod.metadata.creation_timestamp =
        Some(Time(Timestamp::now() - SignedDuration::from_secs(3600)));
    pod
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_fails_the_job_and_frees_the_gpus() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    writers.apply_pod(waiting_an_hour(created_pod(&pod), "ImagePullBackOff"));
    let job = with_status(&job, &status);
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("chat-1").await;
        let body = api.status_apply(&job).await;
        let s = &body["status"];
        assert_eq!(s["phase"], "Failed");
        assert_eq!(s["attempts"][0]["outcome"], "StartTimeout");
        let message = s["attempts"][0]["message"].as_str().unwrap_or_default();
        assert!(
            message
                .starts_with("pod chat-1 did not start within 900 s on node a-1: ImagePullBackOff"),
            "{message}"
        );
        api.events("chat", &["StartDeadlineExceeded", "Failed"])
            .await;
    })
    .await;
}

#[tokio::test]
async fn a_pod_stuck_otherwise_is_tried_again_in_a_new_pod() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let mut spec = fixtures::vllm_mistral_spec();
    spec.start_deadline_seconds = Some(600);
    let job = fixtures::job("chat", spec);
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    writers.apply_pod(waiting_an_hour(created_pod(&pod), "ContainerCreating"));
    let job = with_status(&job, &status);
    run(&ctx, &job, &mut api, async |api| {
        api.pod_delete("chat-1").await;
        let next = api.pod_create("chat-2").await;
        assert_eq!(next["metadata"]["labels"]["vramfit.io/attempt"], "2");
        let body = api.status_apply(&job).await;
        let s = &body["status"];
        assert_eq!(s["attempts"][0]["outcome"], "StartTimeout");
        assert!(
            s["attempts"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("within 600 s")),
            "{s}"
        );
        assert_eq!(s["podName"], "chat-2");
        api.events("chat", &["StartDeadlineExceeded", "PodCreated"])
            .await;
    })
    .await;
}

#[tokio::test]
async fn a_pod_within_its_deadline_is_looked_at_again_when_it_falls() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    let mut waiting = fixtures::with_waiting_container(
        fixtures::as_pending(created_pod(&pod), Some("a-1")),
        "ContainerCreating",
    );
    waiting.metadata.creation_timestamp = Some(Time(Timestamp::now()));
    writers.apply_pod(waiting);
    let job = with_status(&job, &status);
    let action = run(&ctx, &job, &mut api, async |api| {
        api.status_apply(&job).await;
    })
    .await;
    let seconds = requeue_seconds(&action);
    // 900 s less the moment the test took, plus one second: never the hour-long resync.
    assert!((899.0..=901.0).contains(&seconds), "{action:?}");
}
