//! The real reconcile of a batch group with the model cache on, against the mock API server:
//! three A10G×4 nodes all hold Llama-3.1-70B, whose 16-bit plan is a group of three → the
//! group's Service and NetworkPolicy, the job's one volume and claim, then the three pods,
//! each mounting the model and kept to the holding nodes; with one holder and nobody
//! downloading, every pod fetches the model itself and says why.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use vramfit_api::InferenceJob;
use vramfit_api::checkpoint::ResolvedModel;
use vramfit_api::model_cache::{
    CachedModel, CachedModelPhase, ModelCache, ModelCacheSpec, ModelCacheStatus,
    POD_MODEL_ANNOTATION,
};

use super::WEIGHTS_SOURCE_ANNOTATION;
use super::mount::{claim_name, volume_name};
use super::tests::{claims, hostnames, settings, volumes};
use crate::batch::tests::run;
use crate::fixtures::{self, NAMESPACE};
use crate::group::testing::{policies, services};
use crate::verifier::test_context_with_settings;

const REPO: &str = "meta-llama/Llama-3.1-70B-Instruct";
const KEY: &str = "meta-llama/Llama-3.1-70B-Instruct@main";
/// Three A10G×4 nodes: the 16-bit 70B needs all three.
const NODES: [&str; 3] = ["a-1", "a-2", "a-3"];

/// A batch job of Llama-3.1-70B in 16-bit, up to 4 nodes, the Hub's numbers in status.
fn group_job() -> InferenceJob {
    let spec = fixtures::spec_from_json(&format!(
        r#"{{"model": {{"huggingFace": {{"repo": "{REPO}"}}}}, "runtime": "vllm",
            "image": "vllm/vllm-openai:v0.10.2", "contextLength": 4096, "batchSize": 1,
            "allowedQuantizations": ["none"], "gpus": {{"min": 1, "max": 8, "maxNodes": 4}}}}"#
    ));
    let mut job = fixtures::job("big", spec);
    job.status = Some(vramfit_api::InferenceJobStatus {
        resolved_model: Some(ResolvedModel {
            source: KEY.into(),
            parameters: Some(70_553_706_496),
            layers: 80,
            hidden_size: 8192,
            attention_heads: 64,
            kv_heads: 8,
            head_dim: 128,
            vocab_size: Some(128_256),
            ..ResolvedModel::default()
        }),
        ..Default::default()
    });
    job
}

/// Node `node`'s cache holding the model Ready, its agent alive.
fn holding(node: &str) -> ModelCache {
    let mut cache = ModelCache::new(node, ModelCacheSpec::default());
    cache.status = Some(ModelCacheStatus {
        models: vec![CachedModel {
            repo: REPO.into(),
            revision: "main".into(),
            phase: CachedModelPhase::Ready,
            bytes: 141_000_000_000,
            total_bytes: 141_000_000_000,
            public: true,
            ..CachedModel::default()
        }],
        heartbeat_time: Some(Time(Timestamp::now())),
        ..ModelCacheStatus::default()
    });
    cache
}

#[tokio::test]
async fn a_group_of_three_whose_nodes_all_hold_the_model_mounts_it_on_every_pod() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    for node in NODES {
        writers.apply_node(fixtures::gpu_node(node, "a10g", 4, 4));
        writers.apply_model_cache(holding(node));
    }
    writers.mark_ready();
    serving.mark_ready();
    let job = group_job();
    let pv = volume_name(NAMESPACE, &fixtures::uid("big"), KEY);
    let pvc = claim_name("big", KEY);
    let (mut volume, mut pods, mut status) = (Value::Null, Vec::new(), Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        api.object_create(&services(), "big-1").await;
        api.object_create(&policies(), "big-1").await;
        volume = api.object_create(&volumes(), &pv).await;
        api.object_create(&claims(), &pvc).await;
        for rank in 0..3 {
            pods.push(api.pod_create(&format!("big-1-{rank}")).await);
        }
        status = api.status_apply(&job).await;
        api.events("big", &["PodCreated"]).await;
    })
    .await;
    assert_eq!(volume["spec"]["accessModes"], json!(["ReadOnlyMany"]));
    for pod in &pods {
        let name = &pod["metadata"]["name"];
        assert_eq!(
            pod["metadata"]["annotations"][WEIGHTS_SOURCE_ANNOTATION], "CacheHit",
            "{name}"
        );
        assert_eq!(
            pod["metadata"]["annotations"][POD_MODEL_ANNOTATION], KEY,
            "{name}"
        );
        let kept = hostnames(pod);
        assert!(!kept.is_empty(), "{name}");
        assert!(kept.iter().all(|v| *v == json!(NODES)), "{name}: {kept:?}");
        let claim = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == super::mount::VOLUME_NAME)
            .map(|v| v["persistentVolumeClaim"].clone())
            .unwrap();
        assert_eq!(claim, json!({"claimName": pvc, "readOnly": true}), "{name}");
        // One pod per node still: the group's anti-affinity stands beside the node affinity.
        assert_eq!(
            pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                [0]["topologyKey"],
            "kubernetes.io/hostname",
            "{name}"
        );
    }
    let s = &status["status"];
    assert_eq!(s["plan"]["group"]["nodes"], 3);
    assert_eq!(s["weights"]["source"], "CacheHit");
    assert_eq!(s["weights"]["model"], KEY);
}

#[tokio::test]
async fn a_group_with_fewer_holders_than_pods_fetches_in_every_pod_and_says_why() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    for node in NODES {
        writers.apply_node(fixtures::gpu_node(node, "a10g", 4, 4));
    }
    // a-1 holds it; the others have no agent (no ModelCache): nobody downloads it there.
    writers.apply_model_cache(holding("a-1"));
    writers.mark_ready();
    serving.mark_ready();
    let job = group_job();
    let (mut pods, mut status) = (Vec::new(), Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        api.object_create(&services(), "big-1").await;
        api.object_create(&policies(), "big-1").await;
        for rank in 0..3 {
            pods.push(api.pod_create(&format!("big-1-{rank}")).await);
        }
        status = api.status_apply(&job).await;
        api.events("big", &["PodCreated"]).await;
    })
    .await;
    for pod in &pods {
        let annotations = &pod["metadata"]["annotations"];
        assert_eq!(annotations[WEIGHTS_SOURCE_ANNOTATION], "FetchedByPod");
        let why = annotations[super::WEIGHTS_NOTE_ANNOTATION]
            .as_str()
            .unwrap();
        assert!(why.contains("1 of the group's 3 pods"), "{why}");
        let volumes = pod["spec"]["volumes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            volumes
                .iter()
                .all(|v| v["name"] != super::mount::VOLUME_NAME),
            "{volumes:?}"
        );
    }
    assert_eq!(status["status"]["weights"]["source"], "FetchedByPod");
}

/// A label change of a running group whose pods mount the model applies each member's
/// metadata alone: their spec (the mount's affinity and args) stays as created.
#[tokio::test]
async fn a_label_change_of_a_mounting_group_applies_its_members_metadata_alone() {
    use kube::runtime::watcher;
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    for node in NODES {
        writers.apply_node(fixtures::gpu_node(node, "a10g", 4, 4));
        writers.apply_model_cache(holding(node));
    }
    writers.mark_ready();
    serving.mark_ready();
    let job = group_job();
    let pv = volume_name(NAMESPACE, &fixtures::uid("big"), KEY);
    let pvc = claim_name("big", KEY);
    let (mut pods, mut status) = (Vec::new(), Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        api.object_create(&services(), "big-1").await;
        api.object_create(&policies(), "big-1").await;
        api.object_create(&volumes(), &pv).await;
        api.object_create(&claims(), &pvc).await;
        for rank in 0..3 {
            pods.push(api.pod_create(&format!("big-1-{rank}")).await);
        }
        status = api.status_apply(&job).await;
        api.events("big", &["PodCreated"]).await;
    })
    .await;
    for (pod, node) in pods.iter().zip(NODES) {
        writers.apply_pod(fixtures::as_running(
            crate::batch::tests::created_pod(pod),
            node,
        ));
    }
    let mut service = crate::group::service::desired_service(&job, "big-1").unwrap();
    service.metadata.uid = Some(crate::verifier::ApiServerVerifier::object_uid("big-1"));
    serving
        .services
        .apply_watcher_event(&watcher::Event::Apply(service));
    let mut policy = crate::group::network_policy::desired_network_policy(&job, "big-1").unwrap();
    policy.metadata.uid = Some(crate::verifier::ApiServerVerifier::object_uid("big-1"));
    serving
        .network_policies
        .apply_watcher_event(&watcher::Event::Apply(policy));
    let mut job = crate::batch::tests::with_status(&job, &status);
    job.metadata.generation = Some(2);
    job.spec.pod = Some(vramfit_api::PodTemplate {
        labels: [("team".to_string(), "vision".to_string())].into(),
        ..Default::default()
    });
    let mut applied = Vec::new();
    run(&ctx, &job, &mut api, async |api| {
        for rank in 0..3 {
            applied.push(api.pod_apply(&format!("big-1-{rank}")).await);
        }
        api.status_apply(&job).await;
        api.events("big", &["Running"]).await;
    })
    .await;
    for pod in &applied {
        assert_eq!(pod["metadata"]["labels"]["team"], "vision", "{pod}");
        assert_eq!(pod.get("spec"), None, "{pod}");
    }
}
