//! The real reconcile of a batch job with the model cache on, against the mock API server: a
//! node whose cache holds the model → the volume, the claim, then the attempt's pod that
//! mounts it there; a node that downloads it → no pod, the job says what it waits for, then
//! the pod once the model is Ready (`FetchedByNode`).
use serde_json::Value;
use vramfit_api::InferenceJob;
use vramfit_api::model_cache::{CachedModelPhase, MOUNT_PATH, POD_MODEL_ANNOTATION};

use super::WEIGHTS_SOURCE_ANNOTATION;
use super::mount::{claim_name, volume_name};
use super::tests::{
    KEY, cache, cached_job, claims, cluster, env, hostnames, settings, volumes, waits,
};
use crate::batch::tests::{condition, run, with_status};
use crate::fixtures::{self, NAMESPACE};
use crate::verifier::test_context_with_settings;

/// [`cached_job`] as a batch job (no `serve`).
fn batch_job() -> InferenceJob {
    let mut job = cached_job();
    job.spec.serve = None;
    job
}

#[tokio::test]
async fn a_batch_attempt_gets_the_volume_the_claim_then_its_pod_on_the_node_holding_the_model() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    cluster(&mut writers, &mut serving);
    writers.apply_model_cache(cache("l-2", CachedModelPhase::Ready));
    writers.mark_ready();
    let job = batch_job();
    let pv = volume_name(NAMESPACE, &fixtures::uid("chat"), KEY);
    let pvc = claim_name("chat", KEY);
    let (mut volume, mut claim, mut pod, mut status) =
        (Value::Null, Value::Null, Value::Null, Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        volume = api.object_create(&volumes(), &pv).await;
        claim = api.object_create(&claims(), &pvc).await;
        pod = api.pod_create("chat-1").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(volume["spec"]["claimRef"]["name"], pvc.as_str());
    assert_eq!(
        volume["spec"]["accessModes"],
        serde_json::json!(["ReadOnlyMany"])
    );
    assert_eq!(claim["spec"]["volumeName"], pv.as_str());
    assert_eq!(pod["metadata"]["annotations"][POD_MODEL_ANNOTATION], KEY);
    assert_eq!(
        pod["metadata"]["annotations"][WEIGHTS_SOURCE_ANNOTATION],
        "CacheHit"
    );
    let names = hostnames(&pod);
    assert!(!names.is_empty());
    assert!(
        names.iter().all(|v| *v == serde_json::json!(["l-2"])),
        "{names:?}"
    );
    assert_eq!(env(&pod, "VRAMFIT_MODEL"), MOUNT_PATH);
    assert_eq!(env(&pod, "HF_HUB_OFFLINE"), "1");
    let s = &status["status"];
    assert_eq!(s["phase"], "Scheduled");
    assert_eq!(s["weights"]["source"], "CacheHit");
    assert_eq!(s["weights"]["model"], KEY);
    assert_eq!(s.get("replicasWaitingForModel"), None);
    crate::batch::tests::assert_metrics(
        &ctx,
        &["vramfit_replica_weights_total{source=\"CacheHit\"} 1"],
    );
}

#[tokio::test]
async fn a_batch_attempt_waits_without_a_pod_while_a_node_downloads_its_model() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    cluster(&mut writers, &mut serving);
    writers.apply_model_cache(cache("l-1", CachedModelPhase::Fetching));
    writers.mark_ready();
    let job = batch_job();
    let mut status = Value::Null;
    let action = run(&ctx, &job, &mut api, async |api| {
        status = api.status_apply(&job).await;
    })
    .await;
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(10)),
        "looked at again soon while the attempt waits"
    );
    let scheduled = condition(&status, "Scheduled");
    assert_eq!(scheduled["status"], "False");
    assert_eq!(scheduled["reason"], "WaitingForModel");
    let message = scheduled["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "attempt 1 on class l40s-x1: waiting for node l-1 to download {KEY} (1000 of 14500000000 bytes) since "
        )),
        "{message}"
    );
    let s = &status["status"];
    assert_eq!(s["phase"], "Pending");
    assert_eq!(s["replicasWaitingForModel"], 1);
    assert_eq!(s["nodeClass"], "l40s-x1", "the sync asks the class's nodes");
    assert_eq!(s["attemptCount"], 0, "no attempt without a pod");
    assert_eq!(s.get("weights"), None);
    assert!(
        waits(&ctx),
        "an attempt waiting for its model is woken when a node's cache changes"
    );

    // Still fetching: the same wait, nothing written.
    let job = with_status(&job, &status);
    run(&ctx, &job, &mut api, async |_| {}).await;

    // Ready: the volume, the claim, then the pod, FetchedByNode.
    writers.apply_model_cache(cache("l-1", CachedModelPhase::Ready));
    let pv = volume_name(NAMESPACE, &fixtures::uid("chat"), KEY);
    let pvc = claim_name("chat", KEY);
    let mut pod = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.object_create(&volumes(), &pv).await;
        api.object_create(&claims(), &pvc).await;
        pod = api.pod_create("chat-1").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(
        pod["metadata"]["annotations"][WEIGHTS_SOURCE_ANNOTATION],
        "FetchedByNode"
    );
    assert!(
        hostnames(&pod)
            .iter()
            .all(|v| *v == serde_json::json!(["l-1"]))
    );
    let s = &status["status"];
    assert_eq!(s["weights"]["source"], "FetchedByNode");
    assert_eq!(s.get("replicasWaitingForModel"), None);
    assert_eq!(condition(&status, "Scheduled")["reason"], "PodCreated");
    assert!(!waits(&ctx));
}

#[tokio::test]
async fn a_batch_attempt_with_no_node_holding_or_fetching_its_model_fetches_it_in_its_pod() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    cluster(&mut writers, &mut serving);
    let job = batch_job();
    let (mut pod, mut status) = (Value::Null, Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        pod = api.pod_create("chat-1").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(
        pod["metadata"]["annotations"][WEIGHTS_SOURCE_ANNOTATION],
        "FetchedByPod"
    );
    assert_eq!(
        pod["metadata"]["annotations"].get(POD_MODEL_ANNOTATION),
        None
    );
    assert_eq!(status["status"]["weights"]["source"], "FetchedByPod");
}

#[tokio::test]
async fn an_attempt_after_out_of_memory_mounts_the_model_again_as_a_cache_hit() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    for node in ["a-1", "a-2"] {
        writers.apply_node(fixtures::gpu_node(node, "a10g", 4, 4));
    }
    writers.apply_model_cache(cache("a-2", CachedModelPhase::Ready));
    writers.mark_ready();
    serving.mark_ready();
    let job = batch_job();
    let pv = volume_name(NAMESPACE, &fixtures::uid("chat"), KEY);
    let pvc = claim_name("chat", KEY);
    let (mut pod, mut status) = (Value::Null, Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        api.object_create(&volumes(), &pv).await;
        api.object_create(&claims(), &pvc).await;
        pod = api.pod_create("chat-1").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    writers.apply_pod(fixtures::as_failed(
        crate::batch::tests::created_pod(&pod),
        "a-2",
        "Error",
        1,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB",
    ));
    let job = with_status(&job, &status);
    let mut next = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        // The volume and claim are asked again (an existing one is taken as done).
        api.object_create(&volumes(), &pv).await;
        api.object_create(&claims(), &pvc).await;
        next = api.pod_create("chat-2").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["OutOfMemory", "SteppedDown", "PodCreated"])
            .await;
    })
    .await;
    assert_eq!(
        next["metadata"]["annotations"][WEIGHTS_SOURCE_ANNOTATION],
        "CacheHit"
    );
    assert!(
        hostnames(&next)
            .iter()
            .all(|v| *v == serde_json::json!(["a-2"]))
    );
    let s = &status["status"];
    assert_eq!(s["attempts"][0]["outcome"], "OutOfMemory");
    assert_eq!(s["podName"], "chat-2");
    assert_eq!(s["weights"]["source"], "CacheHit");
}

/// A spec change of the pod's labels only applies the running pod: the apply of a pod that
/// mounts the model carries its metadata alone (its spec, with the mount's affinity and args,
/// stays as created: a pod's spec cannot change).
#[tokio::test]
async fn a_metadata_only_apply_of_a_mounting_pod_leaves_its_spec_alone() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    cluster(&mut writers, &mut serving);
    writers.apply_model_cache(cache("l-2", CachedModelPhase::Ready));
    writers.mark_ready();
    let job = batch_job();
    let pv = volume_name(NAMESPACE, &fixtures::uid("chat"), KEY);
    let pvc = claim_name("chat", KEY);
    let (mut pod, mut status) = (Value::Null, Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        api.object_create(&volumes(), &pv).await;
        api.object_create(&claims(), &pvc).await;
        pod = api.pod_create("chat-1").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    writers.apply_pod(fixtures::as_running(
        crate::batch::tests::created_pod(&pod),
        "l-2",
    ));
    let mut job = with_status(&job, &status);
    job.metadata.generation = Some(2);
    job.spec.pod = Some(vramfit_api::PodTemplate {
        labels: [("team".to_string(), "vision".to_string())].into(),
        ..Default::default()
    });
    let mut applied = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        applied = api.pod_apply("chat-1").await;
        api.status_apply(&job).await;
        api.event("chat", "Running").await;
    })
    .await;
    assert_eq!(applied["metadata"]["labels"]["team"], "vision");
    assert_eq!(applied.get("spec"), None, "{applied}");
}

/// After out of memory, an attempt one step down whose model a node downloads waits, and the
/// job says the step taken and what the attempt waits for.
#[tokio::test]
async fn an_attempt_after_out_of_memory_may_wait_for_its_model() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    for node in ["a-1", "a-2"] {
        writers.apply_node(fixtures::gpu_node(node, "a10g", 4, 4));
    }
    writers.mark_ready();
    serving.mark_ready();
    let job = batch_job();
    let (mut pod, mut status) = (Value::Null, Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        pod = api.pod_create("chat-1").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(
        pod["metadata"]["annotations"][WEIGHTS_SOURCE_ANNOTATION],
        "FetchedByPod"
    );
    writers.apply_pod(fixtures::as_failed(
        crate::batch::tests::created_pod(&pod),
        "a-1",
        "Error",
        1,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB",
    ));
    writers.apply_model_cache(cache("a-2", CachedModelPhase::Fetching));
    let job = with_status(&job, &status);
    run(&ctx, &job, &mut api, async |api| {
        status = api.status_apply(&job).await;
        api.events("chat", &["OutOfMemory"]).await;
    })
    .await;
    let s = &status["status"];
    assert_eq!(s["attempts"][0]["outcome"], "OutOfMemory");
    assert_eq!(
        s["attemptCount"], 1,
        "the next attempt is not recorded while it waits"
    );
    assert_eq!(s["replicasWaitingForModel"], 1);
    assert_eq!(condition(&status, "Scheduled")["reason"], "WaitingForModel");
    let oom = condition(&status, "OutOfMemory");
    assert_eq!(oom["status"], "True");
    let message = oom["message"].as_str().unwrap();
    assert!(
        message.starts_with("attempt 1 ran out of memory (")
            && message.contains("; attempt 2: ")
            && message.ends_with(", waiting for its model"),
        "{message}"
    );
}
