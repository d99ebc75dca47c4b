//! What the leader's sync reads, through the real stores: pods as the pod watch parses them
//! (full Pod JSON, slimmed), only the pods a job controls, only keys the ModelCache schema
//! accepts, and nothing before every store it reads is listed.
use std::collections::BTreeMap;
use std::sync::Arc;

use kube::runtime::watcher;
use serde_json::{Value, json};
use vramfit_api::InferenceJob;
use vramfit_api::checkpoint::HuggingFaceModel;
use vramfit_api::model_cache::{ModelCache, ModelCacheSpec, POD_MODEL_ANNOTATION, WantedModel};

use super::tests::{KEY, cached_job, cluster, settings};
use crate::cache_sync::{desired_specs, pods_seen, stores_listed, sync_once};
use crate::context::Context;
use crate::fixtures::{self, NAMESPACE};
use crate::stores::slim::SlimPod;
use crate::stores::{Listing, StoreWriters};
use crate::verifier::{ApiServerVerifier, test_context_with_settings};

/// A controller owner reference to InferenceJob `name` with `uid`.
fn job_owner(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob", "name": name,
           "uid": uid, "controller": true, "blockOwnerDeletion": true})
}

/// A running pod as the API server sends it (env, volumes, affinity and managed fields
/// included), bound to `node`, mounting `key`, owned as `owners` say.
fn pod_json(name: &str, node: &str, key: &str, owners: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": NAMESPACE, "uid": format!("uid-{name}"),
            "resourceVersion": "5",
            "labels": {"vramfit.io/job": "chat", "vramfit.io/node-class": "l40s-x1"},
            "annotations": {
                POD_MODEL_ANNOTATION: key,
                "vramfit.io/weights-source": "CacheHit",
                "vramfit.io/plan": "x".repeat(600),
            },
            "ownerReferences": owners,
            "managedFields": [{"manager": "vramfit-operator", "operation": "Apply",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "inference", "image": "vllm/vllm-openai:v0.10.2",
                "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                "volumeMounts": [{"name": "model", "mountPath": "/var/lib/vramfit/model",
                                  "readOnly": true}],
            }],
            "volumes": [{"name": "model", "persistentVolumeClaim":
                         {"claimName": "chat-model", "readOnly": true}}],
        },
        "status": {"phase": "Running"},
    })
}

/// Puts `pod` in the job pods store as the pod watch does: parsed from JSON into the slim form.
fn watch_pod(writers: &mut StoreWriters, pod: Value) {
    let slim: SlimPod = serde_json::from_value(pod).unwrap();
    writers
        .job_pods
        .apply_watcher_event(&watcher::Event::Apply(slim));
}

fn models_of(
    specs: &BTreeMap<String, (String, Vec<WantedModel>)>,
    node: &str,
) -> Vec<(String, bool)> {
    specs[node].1.iter().map(|m| (m.key(), m.in_use)).collect()
}

/// A context with three L40S nodes (l-1…l-3) and job `chat` (model [`KEY`]), every store
/// listed.
fn listed_context() -> (Arc<Context>, ApiServerVerifier, StoreWriters) {
    let (ctx, api, mut writers, mut serving) = test_context_with_settings(settings());
    cluster(&mut writers, &mut serving);
    writers.apply_job(&cached_job());
    writers.mark_ready();
    (ctx, api, writers)
}

/// Watches chat's pod `chat-r0-1` (controlled by the job, mounting [`KEY`]) on `node`.
fn watch_chat_pod(writers: &mut StoreWriters, node: &str) {
    let owners = json!([job_owner("chat", &fixtures::uid("chat"))]);
    watch_pod(writers, pod_json("chat-r0-1", node, KEY, owners));
}

/// The specs [`listed_context`] wants with chat's pod on l-1.
async fn specs_with_chat_pod_on_l1() -> BTreeMap<String, (String, Vec<WantedModel>)> {
    let (ctx, _api, mut writers) = listed_context();
    watch_chat_pod(&mut writers, "l-1");
    desired_specs(&ctx).await.unwrap()
}

#[tokio::test]
async fn a_pod_that_mounts_a_model_marks_it_in_use_on_its_node_through_the_real_pod_store() {
    let specs = specs_with_chat_pod_on_l1().await;
    assert_eq!(models_of(&specs, "l-1"), [(KEY.to_string(), true)]);
    assert!(specs["l-2"].1.is_empty() && specs["l-3"].1.is_empty());
}

#[tokio::test]
async fn only_pods_a_job_of_the_store_controls_pin_fetch_or_place_models() {
    let (ctx, _api, mut writers) = listed_context();
    let uid = fixtures::uid("chat");
    let forged = "o/forged@main";
    // Anyone who may create pods can write vramfit's labels and annotations, and any owner
    // reference: none of these is the job's.
    let not_controller = json!([{"apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob",
                                 "name": "chat", "uid": uid}]);
    let other_kind = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "chat",
                             "uid": uid, "controller": true}]);
    for (name, owners) in [
        ("loose", json!([])),
        ("wrong-uid", json!([job_owner("chat", "not-chat-s-uid")])),
        ("no-such-job", json!([job_owner("ghost", &uid)])),
        ("not-controller", not_controller),
        ("other-kind", other_kind),
    ] {
        watch_pod(&mut writers, pod_json(name, "l-2", forged, owners));
    }
    let seen = pods_seen(&ctx.stores.job_pods.state(), &|owner| {
        ctx.stores.is_job_of(owner)
    });
    assert!(seen.mounting.is_empty(), "{:?}", seen.mounting);
    assert!(seen.nodes_of_job.is_empty(), "{:?}", seen.nodes_of_job);
    let specs = desired_specs(&ctx).await.unwrap();
    assert!(
        specs.values().all(|(_, models)| models.is_empty()),
        "no forged pod pins its model, nor brings its job's model to its node: {specs:?}"
    );
    // The job's own pod does.
    watch_chat_pod(&mut writers, "l-3");
    let specs = desired_specs(&ctx).await.unwrap();
    assert_eq!(models_of(&specs, "l-3"), [(KEY.to_string(), true)]);
    assert!(specs["l-2"].1.is_empty());
}

/// A job stored before the CRD's rules on `model.huggingFace`, whose repository the
/// ModelCache schema refuses.
fn legacy_job() -> InferenceJob {
    let mut job = cached_job();
    job.metadata.name = Some("legacy".into());
    job.metadata.uid = Some(fixtures::uid("legacy"));
    job.spec.model.hugging_face = Some(HuggingFaceModel {
        repo: "o/.hidden".into(),
        ..HuggingFaceModel::default()
    });
    if let Some(status) = job.status.as_mut() {
        status.resolved_model = None;
    }
    job
}

#[tokio::test]
async fn one_invalid_key_is_left_out_and_the_node_s_other_models_are_still_asked() {
    let (ctx, _api, mut writers) = listed_context();
    writers.apply_job(&legacy_job());
    let chat = fixtures::uid("chat");
    let legacy = fixtures::uid("legacy");
    watch_pod(
        &mut writers,
        pod_json("chat-r0-1", "l-1", KEY, json!([job_owner("chat", &chat)])),
    );
    watch_pod(
        &mut writers,
        pod_json(
            "legacy-r0-1",
            "l-1",
            "o/.hidden@main",
            json!([job_owner("legacy", &legacy)]),
        ),
    );
    watch_pod(
        &mut writers,
        pod_json(
            "chat-r1-2",
            "l-1",
            "o/m@../../x",
            json!([job_owner("chat", &chat)]),
        ),
    );
    let specs = desired_specs(&ctx).await.unwrap();
    assert_eq!(
        models_of(&specs, "l-1"),
        [(KEY.to_string(), true)],
        "the valid model is asked, the two invalid keys are not"
    );
    assert!(
        specs
            .values()
            .flat_map(|(_, models)| models)
            .all(|m| m.problem().is_none()),
        "every entry is one the CRD accepts"
    );
}

/// Node `node`'s ModelCache with `models` as its stored spec (what a previous leader wrote).
fn stored(node: &str, models: Vec<WantedModel>) -> ModelCache {
    ModelCache::new(node, ModelCacheSpec { models })
}

/// The cluster of [`listed_context`] with chat's pod on l-1, as a restarted operator's stores
/// hold it: each node's ModelCache as the previous leader wrote it, the GPU usage listed, and
/// every other store listed but `unlisted` (an unlisted job store is still empty).
fn restarted(
    caches: &BTreeMap<String, (String, Vec<WantedModel>)>,
    unlisted: Option<Listing>,
) -> (Arc<Context>, ApiServerVerifier) {
    let (ctx, api, mut writers, _serving) = test_context_with_settings(settings());
    for node in ["l-1", "l-2", "l-3"] {
        writers.apply_node(fixtures::gpu_node(node, "l40s", 1, 1));
    }
    for (node, (_, models)) in caches {
        writers.apply_model_cache(stored(node, models.clone()));
    }
    watch_chat_pod(&mut writers, "l-1");
    if unlisted != Some(Listing::Jobs) {
        writers.apply_job(&cached_job());
    }
    writers.usage_mut().mark_listed();
    for which in Listing::ALL {
        if Some(which) != unlisted {
            writers.listed.mark(which);
        }
    }
    (ctx, api)
}

/// Runs one sync pass and expects no request at all.
async fn sends_nothing(ctx: &Arc<Context>, api: &mut ApiServerVerifier) {
    let task = tokio::spawn({
        let ctx = ctx.clone();
        async move { sync_once(&ctx).await }
    });
    api.no_more_requests().await;
    tokio::time::timeout(std::time::Duration::from_secs(5), task)
        .await
        .expect("the pass ends")
        .unwrap();
}

#[tokio::test]
async fn before_every_store_it_reads_is_listed_the_sync_computes_and_writes_nothing() {
    let wanted = specs_with_chat_pod_on_l1().await;
    for unlisted in Listing::ALL {
        let (ctx, mut api) = restarted(&wanted, Some(unlisted));
        assert!(!stores_listed(&ctx.stores), "{unlisted:?}");
        assert!(desired_specs(&ctx).await.is_none(), "{unlisted:?}");
        sends_nothing(&ctx, &mut api).await;
    }
    // The GPU usage (room per node, which nodes are asked ahead of a job's pods) too.
    let (ctx, _api, _writers, _serving) = test_context_with_settings(settings());
    for which in Listing::ALL {
        ctx.stores.listed.mark(which);
    }
    assert!(!stores_listed(&ctx.stores));
    let (ctx, _api) = restarted(&wanted, None);
    assert!(stores_listed(&ctx.stores));
    assert_eq!(desired_specs(&ctx).await.as_ref(), Some(&wanted));
}

#[tokio::test]
async fn a_restart_with_unchanged_specs_writes_no_model_cache() {
    let wanted = specs_with_chat_pod_on_l1().await;
    assert_eq!(models_of(&wanted, "l-1"), [(KEY.to_string(), true)]);

    // The restarted leader's first pass, the jobs not listed yet: nothing (it used to apply
    // an empty spec to l-1, then the model again a pass later).
    let (ctx, mut api) = restarted(&wanted, Some(Listing::Jobs));
    sends_nothing(&ctx, &mut api).await;

    // Every store listed, nothing changed: no ModelCache is written, only the volume sweep
    // lists.
    let (ctx, mut api) = restarted(&wanted, None);
    let task = tokio::spawn({
        let ctx = ctx.clone();
        async move { sync_once(&ctx).await }
    });
    let (request, send) = api.next().await;
    assert_eq!(request.method(), http::Method::GET, "{}", request.uri());
    assert!(
        request.uri().path().ends_with("/persistentvolumes"),
        "{}",
        request.uri()
    );
    crate::verifier::respond(
        send,
        200,
        &json!({"apiVersion": "v1", "kind": "PersistentVolumeList", "metadata": {}, "items": []}),
    );
    api.no_more_requests().await;
    task.await.unwrap();
}

/// A served job whose replicas are groups uses the cache as the others do: the sync asks its
/// replicas' class for its model ahead of its pods, and each member that mounts it marks it
/// in use on its own node (before, such a job wanted nothing and only its pods' marks
/// counted).
#[tokio::test]
async fn a_served_group_s_model_is_asked_on_its_class_and_in_use_on_each_member_s_node() {
    let (ctx, _api, mut writers, mut serving) = test_context_with_settings(settings());
    cluster(&mut writers, &mut serving);
    let mut job = cached_job();
    job.spec.gpus.max_nodes = 2;
    job.status.get_or_insert_default().replica_statuses = vec![vramfit_api::ReplicaStatus {
        pod_name: "chat-r0-1".into(),
        incarnation: 1,
        node_class: "l40s-x1".into(),
        updated: true,
        ..Default::default()
    }];
    writers.apply_job(&job);
    writers.mark_ready();
    // No member yet: every node of the class is asked (prefetch, up to 4 per class).
    let specs = desired_specs(&ctx).await.unwrap();
    for node in ["l-1", "l-2", "l-3"] {
        assert_eq!(
            models_of(&specs, node),
            [(KEY.to_string(), false)],
            "{node}: {specs:?}"
        );
    }
    // The replica's two members run on l-1 and l-2, mounting the model.
    let owners = json!([job_owner("chat", &fixtures::uid("chat"))]);
    for (member, node) in [("chat-r0-1-0", "l-1"), ("chat-r0-1-1", "l-2")] {
        watch_pod(&mut writers, pod_json(member, node, KEY, owners.clone()));
    }
    let seen = pods_seen(&ctx.stores.job_pods.state(), &|owner| {
        ctx.stores.is_job_of(owner)
    });
    assert_eq!(seen.mounting.len(), 2, "{:?}", seen.mounting);
    let specs = desired_specs(&ctx).await.unwrap();
    assert_eq!(models_of(&specs, "l-1"), [(KEY.to_string(), true)]);
    assert_eq!(models_of(&specs, "l-2"), [(KEY.to_string(), true)]);
}

/// A served group's class is asked at least as many nodes as a replica may have pods
/// (`maxNodes`), even past `--model-cache-prefetch-nodes`: fewer would keep a replica waiting
/// for nodes nobody asked, until its pods fetch the model themselves.
#[tokio::test]
async fn a_served_group_s_class_asks_as_many_nodes_as_a_replica_may_have_pods() {
    let mut one = settings();
    one.model_cache.prefetch_nodes = 1;
    let (ctx, _api, mut writers, mut serving) = test_context_with_settings(one);
    cluster(&mut writers, &mut serving);
    let mut job = cached_job();
    job.spec.gpus.max_nodes = 2;
    job.status.get_or_insert_default().replica_statuses = vec![vramfit_api::ReplicaStatus {
        pod_name: "chat-r0-1".into(),
        node_class: "l40s-x1".into(),
        reason: Some(super::WAITING_REASON.into()),
        ..Default::default()
    }];
    writers.apply_job(&job);
    writers.mark_ready();
    let specs = desired_specs(&ctx).await.unwrap();
    let asked = ["l-1", "l-2", "l-3"]
        .into_iter()
        .filter(|node| !specs[*node].1.is_empty())
        .count();
    assert_eq!(asked, 2, "{specs:?}");
}
