//! The real reconcile of a served job with the model cache on, against the mock API server:
//! a node whose cache holds the model → the volume, the claim, then the pod that mounts it on
//! that node; a node that downloads it → no pod until the model is Ready, then the pod
//! (`FetchedByNode`).
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use vramfit_api::InferenceJob;
use vramfit_api::checkpoint::{HuggingFaceModel, ResolvedModel};
use vramfit_api::model_cache::{
    CachedModel, CachedModelPhase, MOUNT_PATH, ModelCache, ModelCacheSpec, ModelCacheStatus,
    POD_MODEL_ANNOTATION,
};

use super::WEIGHTS_SOURCE_ANNOTATION;
use super::mount::{claim_name, volume_name};
use crate::batch::tests::{run, with_status};
use crate::fixtures::{self, NAMESPACE};
use crate::served::tests::api::{served_job, services};
use crate::settings::ModelCacheSettings;
use crate::settings::Settings;
use crate::stores::StoreWriters;
use crate::verifier::test_context_with_settings;

pub(crate) const KEY: &str = "mistralai/Mistral-7B-Instruct-v0.3@main";

pub(crate) fn volumes() -> String {
    "/api/v1/persistentvolumes".to_string()
}

pub(crate) fn claims() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims")
}

/// A served job of one replica whose model is `model.huggingFace`, with what the Hub said
/// already in status (no Hub read in the test).
pub(crate) fn cached_job() -> InferenceJob {
    let mut job = served_job(1);
    job.spec.model.hugging_face = Some(HuggingFaceModel {
        repo: "mistralai/Mistral-7B-Instruct-v0.3".into(),
        ..HuggingFaceModel::default()
    });
    job.status = Some(vramfit_api::InferenceJobStatus {
        resolved_model: Some(ResolvedModel {
            source: KEY.into(),
            parameters: Some(7_248_023_552),
            layers: 32,
            hidden_size: 4096,
            attention_heads: 32,
            kv_heads: 8,
            head_dim: 128,
            ..ResolvedModel::default()
        }),
        ..Default::default()
    });
    job
}

pub(crate) fn settings() -> Settings {
    Settings {
        model_cache: ModelCacheSettings {
            enabled: true,
            ..ModelCacheSettings::default()
        },
        ..Settings::default()
    }
}

/// Node `node`'s cache, holding the model in `phase`, its agent alive.
pub(crate) fn cache(node: &str, phase: CachedModelPhase) -> ModelCache {
    let mut cache = ModelCache::new(node, ModelCacheSpec::default());
    cache.status = Some(ModelCacheStatus {
        models: vec![CachedModel {
            repo: "mistralai/Mistral-7B-Instruct-v0.3".into(),
            revision: "main".into(),
            phase,
            bytes: 1_000,
            total_bytes: 14_500_000_000,
            public: true,
            ..CachedModel::default()
        }],
        heartbeat_time: Some(Time(Timestamp::now())),
        ..ModelCacheStatus::default()
    });
    cache
}

/// Three L40S×1 nodes.
pub(crate) fn cluster(
    writers: &mut StoreWriters,
    serving: &mut crate::serving_state::ServingWriters,
) {
    for node in ["l-1", "l-2", "l-3"] {
        writers.apply_node(fixtures::gpu_node(node, "l40s", 1, 1));
    }
    writers.mark_ready();
    serving.mark_ready();
}

pub(crate) fn hostnames(pod: &Value) -> Vec<Value> {
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|term| {
            let last = term["matchExpressions"].as_array().unwrap().last().unwrap();
            assert_eq!(last["key"], "kubernetes.io/hostname");
            last["values"].clone()
        })
        .collect()
}

pub(crate) fn env(pod: &Value, name: &str) -> Value {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_node_holding_the_model_gets_the_volume_the_claim_then_the_pod_that_mounts_it() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    cluster(&mut writers, &mut serving);
    writers.apply_model_cache(cache("l-2", CachedModelPhase::Ready));
    writers.mark_ready();
    let job = cached_job();
    let pv = volume_name(NAMESPACE, &fixtures::uid("chat"), KEY);
    let pvc = claim_name("chat", KEY);
    let (mut volume, mut claim, mut pod, mut status) =
        (Value::Null, Value::Null, Value::Null, Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        volume = api.object_create(&volumes(), &pv).await;
        claim = api.object_create(&claims(), &pvc).await;
        pod = api.pod_create("chat-r0-1").await;
        api.object_create(&services(), "chat").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(
        volume["spec"]["hostPath"]["path"],
        "/var/lib/vramfit/cache/served/mistralai--Mistral-7B-Instruct-v0.3/main"
    );
    assert_eq!(volume["spec"]["claimRef"]["name"], pvc.as_str());
    assert_eq!(claim["spec"]["volumeName"], pv.as_str());
    assert_eq!(
        claim["spec"]["resources"]["requests"]["storage"],
        "14500000000"
    );
    assert_eq!(pod["metadata"]["annotations"][POD_MODEL_ANNOTATION], KEY);
    assert_eq!(
        pod["metadata"]["annotations"][WEIGHTS_SOURCE_ANNOTATION],
        "CacheHit"
    );
    assert!(
        hostnames(&pod)
            .iter()
            .all(|v| *v == serde_json::json!(["l-2"]))
    );
    let volume_of_pod = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        volume_of_pod["persistentVolumeClaim"]["claimName"],
        pvc.as_str()
    );
    assert_eq!(env(&pod, "VRAMFIT_MODEL"), MOUNT_PATH);
    assert_eq!(env(&pod, "HF_HUB_OFFLINE"), "1");
    let line = &status["status"]["replicaStatuses"][0];
    assert_eq!(line["weights"]["source"], "CacheHit");
    assert_eq!(line["weights"]["model"], KEY);
}

#[tokio::test]
async fn a_replica_waits_while_a_node_downloads_the_model_then_mounts_it() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    cluster(&mut writers, &mut serving);
    writers.apply_model_cache(cache("l-1", CachedModelPhase::Fetching));
    writers.mark_ready();
    let job = cached_job();
    let mut status = Value::Null;
    let action = run(&ctx, &job, &mut api, async |api| {
        api.object_create(&services(), "chat").await;
        status = api.status_apply(&job).await;
    })
    .await;
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(10)),
        "looked at again soon while a replica waits"
    );
    let scheduled = status["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Scheduled")
        .unwrap()
        .clone();
    assert_eq!(
        scheduled["message"],
        "0/1 replicas have a pod; 1 wait for a node to download the model"
    );
    let line = &status["status"]["replicaStatuses"][0];
    assert_eq!(line["reason"], "WaitingForModel");
    let message = line["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "waiting for node l-1 to download {KEY} (1000 of 14500000000 bytes)"
        )),
        "{message}"
    );
    assert_eq!(status["status"]["replicasWaitingForModel"], 1);
    assert!(
        waits(&ctx),
        "a replica waiting for its model is woken when a node's cache changes"
    );

    // Still fetching: nothing is written.
    let job = with_status(&job, &status);
    serving
        .services
        .apply_watcher_event(&kube::runtime::watcher::Event::Apply(
            crate::replicas::service::desired_service(&job, job.spec.serve.as_ref().unwrap())
                .unwrap(),
        ));
    run(&ctx, &job, &mut api, async |_| {}).await;

    // Ready: the volume, the claim and the pod, FetchedByNode.
    writers.apply_model_cache(cache("l-1", CachedModelPhase::Ready));
    let pv = volume_name(NAMESPACE, &fixtures::uid("chat"), KEY);
    let pvc = claim_name("chat", KEY);
    let mut pod = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.object_create(&volumes(), &pv).await;
        api.object_create(&claims(), &pvc).await;
        pod = api.pod_create("chat-r0-1").await;
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
    let line = &status["status"]["replicaStatuses"][0];
    assert_eq!(line["weights"]["source"], "FetchedByNode");
    assert_eq!(line.get("reason"), None);
    assert_eq!(status["status"].get("replicasWaitingForModel"), None);
    assert!(!waits(&ctx));
}

/// Whether job `chat` is in the set of served jobs woken by node and cache changes.
pub(crate) fn waits(ctx: &crate::context::Context) -> bool {
    ctx.serving
        .waiting()
        .jobs()
        .iter()
        .any(|job| job.name == "chat" && job.namespace.as_deref() == Some(NAMESPACE))
}

/// The leader's sync: a node whose stored spec is already the wanted one is not written; a
/// node that should hold the model gets its ModelCache applied (owned by its Node); a GPU
/// node that wants nothing and has no ModelCache gets an empty one; a released model volume is
/// deleted, a bound one is not.
#[tokio::test]
async fn the_sync_applies_only_the_specs_that_differ_and_sweeps_released_volumes() {
    let mut two = settings();
    two.model_cache.prefetch_nodes = 2;
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(two);
    cluster(&mut writers, &mut serving);
    let mut job = cached_job();
    job.status.get_or_insert_default().replica_statuses = vec![vramfit_api::ReplicaStatus {
        pod_name: "chat-r0-1".into(),
        incarnation: 1,
        node_class: "l40s-x1".into(),
        updated: true,
        ..Default::default()
    }];
    writers.apply_job(&job);
    // l-1 holds it Ready and is asked already; the class's two nodes asked are l-1 (Ready
    // first), then l-2 (by name); l-3 wants nothing and has no ModelCache yet.
    let mut held = cache("l-1", CachedModelPhase::Ready);
    held.spec.models = vec![vramfit_api::model_cache::WantedModel {
        repo: "mistralai/Mistral-7B-Instruct-v0.3".into(),
        revision: "main".into(),
        namespaces: vec![NAMESPACE.into()],
        in_use: false,
    }];
    writers.apply_model_cache(held);
    writers.mark_ready();
    let task = tokio::spawn({
        let ctx = ctx.clone();
        async move { crate::cache_sync::sync_once(&ctx).await }
    });
    let (request, send) = api.next().await;
    assert_eq!(request.method(), http::Method::PATCH);
    assert_eq!(
        request.uri().to_string(),
        "/apis/vramfit.io/v1alpha1/modelcaches/l-2?&force=true&fieldManager=vramfit-operator"
    );
    let body = crate::verifier::ApiServerVerifier::body(request).await;
    assert_eq!(body["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(body["metadata"]["ownerReferences"][0]["name"], "l-2");
    assert_eq!(
        body["spec"]["models"][0]["repo"],
        "mistralai/Mistral-7B-Instruct-v0.3"
    );
    assert_eq!(
        body["spec"]["models"][0]["namespaces"],
        serde_json::json!([NAMESPACE])
    );
    crate::verifier::respond(send, 200, &body);

    // l-3 is asked for nothing, and gets its (empty) ModelCache for its agent to report in.
    let (request, send) = api.next().await;
    assert_eq!(request.method(), http::Method::PATCH);
    assert_eq!(
        request.uri().path(),
        "/apis/vramfit.io/v1alpha1/modelcaches/l-3"
    );
    let body = crate::verifier::ApiServerVerifier::body(request).await;
    assert_eq!(body["spec"], serde_json::json!({"models": []}));
    crate::verifier::respond(send, 200, &body);

    let (request, send) = api.next().await;
    assert_eq!(request.method(), http::Method::GET);
    assert!(
        request.uri().to_string().starts_with(
            "/api/v1/persistentvolumes?&labelSelector=vramfit.io%2Fmodel-cache%3Dtrue"
        ),
        "{}",
        request.uri()
    );
    let volume = |name: &str, phase: &str| serde_json::json!({"metadata": {"name": name}, "status": {"phase": phase}});
    crate::verifier::respond(
        send,
        200,
        &serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolumeList", "metadata": {},
            "items": [volume("vramfit-model-bound", "Bound"), volume("vramfit-model-gone", "Released")],
        }),
    );
    let (request, send) = api.next().await;
    assert_eq!(request.method(), http::Method::DELETE);
    assert_eq!(
        request.uri().path(),
        "/api/v1/persistentvolumes/vramfit-model-gone"
    );
    crate::verifier::respond(send, 200, &volume("vramfit-model-gone", "Released"));
    api.no_more_requests().await;
    task.await.unwrap();
}

/// `model.huggingFace.cache: false`: the job behaves as without the cache, whatever the nodes
/// hold: no volume, no annotation, no weights in status.
#[tokio::test]
async fn a_job_that_turns_the_cache_off_gets_the_pod_of_today() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    cluster(&mut writers, &mut serving);
    writers.apply_model_cache(cache("l-2", CachedModelPhase::Ready));
    writers.mark_ready();
    let mut job = cached_job();
    if let Some(hf) = job.spec.model.hugging_face.as_mut() {
        hf.cache = Some(false);
    }
    let (mut pod, mut status) = (Value::Null, Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        pod = api.pod_create("chat-r0-1").await;
        api.object_create(&services(), "chat").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    let annotations = pod["metadata"]["annotations"].as_object().unwrap();
    assert!(!annotations.contains_key(WEIGHTS_SOURCE_ANNOTATION));
    assert!(!annotations.contains_key(POD_MODEL_ANNOTATION));
    assert_eq!(env(&pod, "HF_HUB_OFFLINE"), Value::Null);
    assert_eq!(status["status"]["replicaStatuses"][0].get("weights"), None);
}

/// A claim of the model claim's name that is not the job's is never taken over: no pod, the
/// job says why, the reconcile is retried, the reservation released.
#[tokio::test]
async fn a_foreign_claim_of_the_name_is_reported_and_no_pod_is_created() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    cluster(&mut writers, &mut serving);
    writers.apply_model_cache(cache("l-2", CachedModelPhase::Ready));
    writers.mark_ready();
    let job = cached_job();
    let pv = volume_name(NAMESPACE, &fixtures::uid("chat"), KEY);
    let pvc = claim_name("chat", KEY);
    let task = tokio::spawn(crate::dispatch::reconcile(
        std::sync::Arc::new(crate::stores::cached_job::CachedJob::of(&job)),
        ctx.clone(),
    ));
    api.object_create(&volumes(), &pv).await;
    api.object_create_exists(&claims(), &pvc).await;
    let foreign = serde_json::json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": pvc, "namespace": NAMESPACE},
        "spec": {"volumeName": "someone-elses"},
    });
    api.object_get(&claims(), &pvc, &foreign).await;
    let status = api.status_apply(&job).await;
    api.events("chat", &["PodRejected"]).await;
    api.no_more_requests().await;
    let result = tokio::time::timeout(std::time::Duration::from_secs(5), task)
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
    assert!(
        scheduled["message"].as_str().unwrap().contains(&format!(
            "PersistentVolumeClaim {pvc} exists but this job does not own it"
        )),
        "{scheduled}"
    );
    assert!(ctx.reservations.is_empty());
}
