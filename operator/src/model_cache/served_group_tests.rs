//! The real reconcile of a served job whose replicas are groups, with the model cache on,
//! against the mock API server: three A10G×4 nodes all hold Llama-3.1-70B, whose 16-bit plan
//! is a group of three → the replica's group Service and NetworkPolicies, the job's one
//! volume and claim, then the group's three pods, each mounting the claim read-only and kept
//! to the holding nodes, and the replica's line showing its `weights`; with the model on no
//! node (the nodes asked for it, none downloading yet), the replica waits with no pod, and
//! once the wait runs out every pod fetches the model itself and says why; a refused claim
//! has every pod fetch it; a label change applies each mounting member's metadata alone.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{Timestamp, ToSpan};
use serde_json::{Value, json};
use vramfit_api::checkpoint::ResolvedModel;
use vramfit_api::model_cache::{
    CachedModel, CachedModelPhase, ModelCache, ModelCacheSpec, ModelCacheStatus,
    POD_MODEL_ANNOTATION, WantedModel,
};
use vramfit_api::{InferenceJob, ServeSpec};

use super::mount::{VOLUME_NAME, claim_name, volume_name};
use super::tests::{claims, hostnames, settings, volumes};
use super::{WEIGHTS_NOTE_ANNOTATION, WEIGHTS_SOURCE_ANNOTATION};
use crate::batch::tests::{run, with_status};
use crate::fixtures::{self, NAMESPACE};
use crate::group::testing::{served_group_objects_created, services};
use crate::verifier::test_context_with_settings;

const REPO: &str = "meta-llama/Llama-3.1-70B-Instruct";
const KEY: &str = "meta-llama/Llama-3.1-70B-Instruct@main";
/// Three A10G×4 nodes: the 16-bit 70B needs all three.
const NODES: [&str; 3] = ["a-1", "a-2", "a-3"];
/// The replica's group (slot 0, the job's first pod) and its members.
const GROUP: &str = "big-r0-1";
const MEMBERS: [&str; 3] = ["big-r0-1-0", "big-r0-1-1", "big-r0-1-2"];

/// A served job of Llama-3.1-70B in 16-bit, one replica of up to 4 nodes, the Hub's numbers
/// in status.
fn served_group_job() -> InferenceJob {
    let mut spec = fixtures::spec_from_json(&format!(
        r#"{{"model": {{"huggingFace": {{"repo": "{REPO}"}}}}, "runtime": "vllm",
            "image": "vllm/vllm-openai:v0.10.2", "contextLength": 4096, "batchSize": 1,
            "allowedQuantizations": ["none"], "gpus": {{"min": 1, "max": 8, "maxNodes": 4}}}}"#
    ));
    spec.serve = Some(ServeSpec {
        replicas: 1,
        ..ServeSpec::default()
    });
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

/// Node `node`'s cache, its agent alive: holding the model Ready, or (`None`) asked for it
/// and holding nothing yet.
fn node_cache(node: &str, phase: Option<CachedModelPhase>) -> ModelCache {
    let mut cache = ModelCache::new(node, ModelCacheSpec::default());
    if phase.is_none() {
        cache.spec.models = vec![WantedModel {
            repo: REPO.into(),
            revision: "main".into(),
            namespaces: vec![NAMESPACE.into()],
            in_use: false,
        }];
    }
    cache.status = Some(ModelCacheStatus {
        models: phase
            .map(|phase| CachedModel {
                repo: REPO.into(),
                revision: "main".into(),
                phase,
                bytes: 141_000_000_000,
                total_bytes: 141_000_000_000,
                public: true,
                ..CachedModel::default()
            })
            .into_iter()
            .collect(),
        heartbeat_time: Some(Time(Timestamp::now())),
        ..ModelCacheStatus::default()
    });
    cache
}

/// The claim `pod` mounts as the model's volume, if any.
fn model_claim(pod: &Value) -> Option<Value> {
    pod["spec"]["volumes"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == VOLUME_NAME)
        .map(|v| v["persistentVolumeClaim"].clone())
}

/// Each container's mount of the model (its `readOnly`).
fn model_mounts(pod: &Value) -> Vec<Value> {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["volumeMounts"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["name"] == VOLUME_NAME)
        .map(|m| m["readOnly"].clone())
        .collect()
}

/// What the first reconcile of [`served_group_job`] wrote, every node holding the model.
struct Mounted {
    job: InferenceJob,
    volume: Value,
    claim: Value,
    pods: Vec<Value>,
    status: Value,
}

/// Three nodes holding the model Ready, and the first reconcile: the replica's group objects,
/// the job's volume and claim, then the group's three pods, then the job's Service.
async fn mounted(
    ctx: &std::sync::Arc<crate::Context>,
    api: &mut crate::verifier::ApiServerVerifier,
    writers: &mut crate::stores::StoreWriters,
    serving: &mut crate::serving_state::ServingWriters,
) -> Mounted {
    for node in NODES {
        writers.apply_node(fixtures::gpu_node(node, "a10g", 4, 4));
        writers.apply_model_cache(node_cache(node, Some(CachedModelPhase::Ready)));
    }
    writers.mark_ready();
    serving.mark_ready();
    let job = served_group_job();
    let pv = volume_name(NAMESPACE, &fixtures::uid("big"), KEY);
    let pvc = claim_name("big", KEY);
    let mut out = Mounted {
        job: job.clone(),
        volume: Value::Null,
        claim: Value::Null,
        pods: Vec::new(),
        status: Value::Null,
    };
    run(ctx, &job, api, async |api| {
        served_group_objects_created(api, GROUP).await;
        out.volume = api.object_create(&volumes(), &pv).await;
        out.claim = api.object_create(&claims(), &pvc).await;
        for member in MEMBERS {
            out.pods.push(api.pod_create(member).await);
        }
        api.object_create(&services(), "big").await;
        out.status = api.status_apply(&job).await;
        api.events("big", &["PodCreated"]).await;
    })
    .await;
    out
}

/// Every node holds the model: the replica's group objects, the job's volume and claim, then
/// the group's three pods, each mounting the claim read-only on the holding nodes (one per
/// node); the replica's line shows the leader's weights.
#[tokio::test]
async fn a_replica_group_whose_nodes_hold_the_model_mounts_it_on_every_member() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    let Mounted {
        volume,
        claim,
        pods,
        status,
        ..
    } = mounted(&ctx, &mut api, &mut writers, &mut serving).await;
    let pv = volume_name(NAMESPACE, &fixtures::uid("big"), KEY);
    let pvc = claim_name("big", KEY);
    assert_eq!(volume["spec"]["accessModes"], json!(["ReadOnlyMany"]));
    assert_eq!(volume["spec"]["claimRef"]["name"], pvc.as_str());
    assert_eq!(claim["spec"]["volumeName"], pv.as_str());
    for pod in &pods {
        let name = &pod["metadata"]["name"];
        let annotations = &pod["metadata"]["annotations"];
        assert_eq!(annotations[WEIGHTS_SOURCE_ANNOTATION], "CacheHit", "{name}");
        assert_eq!(annotations[POD_MODEL_ANNOTATION], KEY, "{name}");
        assert_eq!(
            model_claim(pod),
            Some(json!({"claimName": pvc, "readOnly": true})),
            "{name}"
        );
        let mounts = model_mounts(pod);
        assert!(!mounts.is_empty(), "{name}");
        assert!(
            mounts.iter().all(|m| *m == json!(true)),
            "{name}: {mounts:?}"
        );
        let kept = hostnames(pod);
        assert!(!kept.is_empty(), "{name}");
        assert!(kept.iter().all(|v| *v == json!(NODES)), "{name}: {kept:?}");
        assert_eq!(
            pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                [0]["topologyKey"],
            "kubernetes.io/hostname",
            "{name}: one pod per node still"
        );
        assert_eq!(
            super::tests::env(pod, "HF_HUB_OFFLINE"),
            "1",
            "{name}: the runtime reads the mount, offline"
        );
    }
    let line = &status["status"]["replicaStatuses"][0];
    assert_eq!(line["podName"], GROUP);
    assert_eq!(line["members"].as_array().unwrap().len(), 3);
    assert_eq!(line["weights"]["source"], "CacheHit");
    assert_eq!(line["weights"]["model"], KEY);
}

/// The model on no node (each node is asked for it, none holds it yet): the replica waits,
/// no pod; once the wait has run out, the group's pods are created, each fetching the model
/// itself and saying why, with no volume or claim.
#[tokio::test]
async fn a_replica_group_waits_for_its_model_then_every_member_fetches_it() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    for node in NODES {
        writers.apply_node(fixtures::gpu_node(node, "a10g", 4, 4));
        writers.apply_model_cache(node_cache(node, None));
    }
    writers.mark_ready();
    serving.mark_ready();
    let job = served_group_job();
    let mut status = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        api.object_create(&services(), "big").await;
        status = api.status_apply(&job).await;
    })
    .await;
    let line = &status["status"]["replicaStatuses"][0];
    assert_eq!(line["reason"], "WaitingForModel", "{line}");
    let message = line["message"].as_str().unwrap().to_string();
    assert!(
        message.starts_with(&format!(
            "waiting for nodes a-1, a-2, a-3 to download {KEY}"
        )),
        "{message}"
    );
    assert_eq!(status["status"]["replicasWaitingForModel"], 1);
    assert!(
        waits(&ctx),
        "a replica group waiting for its model is woken when a node's cache changes"
    );
    assert!(
        line["members"].as_array().is_none_or(Vec::is_empty),
        "no pod while it waits: {line}"
    );

    // The wait began 901 s ago: every member fetches the model itself.
    let (head, _) = message.rsplit_once(" since ").unwrap();
    let long_ago = Timestamp::now() - 901.seconds();
    status["status"]["replicaStatuses"][0]["message"] = json!(format!("{head} since {long_ago}"));
    let job = with_status(&job, &status);
    let mut service =
        crate::replicas::service::desired_service(&job, job.spec.serve.as_ref().unwrap()).unwrap();
    service.metadata.uid = Some(crate::verifier::ApiServerVerifier::object_uid("big"));
    serving
        .services
        .apply_watcher_event(&kube::runtime::watcher::Event::Apply(service));
    let mut pods = Vec::new();
    run(&ctx, &job, &mut api, async |api| {
        served_group_objects_created(api, GROUP).await;
        for member in MEMBERS {
            pods.push(api.pod_create(member).await);
        }
        status = api.status_apply(&job).await;
        api.events("big", &["PodCreated"]).await;
    })
    .await;
    for pod in &pods {
        let name = &pod["metadata"]["name"];
        let annotations = &pod["metadata"]["annotations"];
        assert_eq!(
            annotations[WEIGHTS_SOURCE_ANNOTATION], "FetchedByPod",
            "{name}"
        );
        let why = annotations[WEIGHTS_NOTE_ANNOTATION].as_str().unwrap();
        assert!(
            why.starts_with("waited 900 s for nodes a-1, a-2, a-3 to download"),
            "{name}: {why}"
        );
        assert_eq!(model_claim(pod), None, "{name}");
    }
    let line = &status["status"]["replicaStatuses"][0];
    assert_eq!(line.get("reason"), None, "{line}");
    assert_eq!(line["weights"]["source"], "FetchedByPod");
    assert!(
        line["weights"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("waited 900 s")),
        "{line}"
    );
    assert_eq!(status["status"].get("replicasWaitingForModel"), None);
    assert!(!waits(&ctx));
}

/// Whether job `big` is in the set of served jobs woken by node and cache changes.
fn waits(ctx: &crate::context::Context) -> bool {
    ctx.serving
        .waiting()
        .jobs()
        .iter()
        .any(|job| job.name == "big" && job.namespace.as_deref() == Some(NAMESPACE))
}

/// A label change of a running replica group whose members mount the model applies each
/// member's metadata alone: their spec (the mount, its affinity and args) stays as created.
#[tokio::test]
async fn a_label_change_of_a_mounting_replica_group_applies_its_members_metadata_alone() {
    use kube::runtime::watcher::Event;
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    let out = mounted(&ctx, &mut api, &mut writers, &mut serving).await;
    let job = with_status(&out.job, &out.status);
    for (pod, node) in out.pods.iter().zip(NODES) {
        let mut pod = fixtures::as_running(crate::batch::tests::created_pod(pod), node);
        pod.status.get_or_insert_default().conditions =
            Some(vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]);
        writers.apply_pod(pod);
    }
    let uid = crate::verifier::ApiServerVerifier::object_uid;
    let mut service = crate::group::service::desired_service(&job, GROUP).unwrap();
    service.metadata.uid = Some(uid(GROUP));
    serving.services.apply_watcher_event(&Event::Apply(service));
    let leader_policy = format!("{GROUP}-leader");
    for (mut policy, name) in [
        (
            crate::group::network_policy::desired_network_policy(&job, GROUP).unwrap(),
            GROUP,
        ),
        (
            crate::group::network_policy::desired_leader_network_policy(&job, GROUP, 8000).unwrap(),
            leader_policy.as_str(),
        ),
    ] {
        policy.metadata.uid = Some(uid(name));
        serving
            .network_policies
            .apply_watcher_event(&Event::Apply(policy));
    }
    let mut service =
        crate::replicas::service::desired_service(&job, job.spec.serve.as_ref().unwrap()).unwrap();
    service.metadata.uid = Some(uid("big"));
    serving.services.apply_watcher_event(&Event::Apply(service));
    let mut followed = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        followed = api.status_apply(&job).await;
        api.events("big", &["Available"]).await;
    })
    .await;
    assert_eq!(followed["status"]["readyReplicas"], 1, "{followed}");
    let mut job = with_status(&job, &followed);
    job.metadata.generation = Some(2);
    job.spec.pod = Some(vramfit_api::PodTemplate {
        labels: [("team".to_string(), "vision".to_string())].into(),
        ..Default::default()
    });
    let mut applied = Vec::new();
    run(&ctx, &job, &mut api, async |api| {
        for member in MEMBERS {
            applied.push(api.pod_apply(member).await);
        }
        api.status_apply(&job).await;
    })
    .await;
    for pod in &applied {
        assert_eq!(pod["metadata"]["labels"]["team"], "vision", "{pod}");
        assert_eq!(pod.get("spec"), None, "{pod}");
    }
}

/// A claim the API server refuses for good (a namespace's quota): the volume just created is
/// deleted again, and every member of the replica's group is created fetching the model
/// itself, saying why, with no claim and no affinity to the holders.
#[tokio::test]
async fn a_refused_claim_has_every_member_of_the_replica_group_fetch_the_model() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_settings(settings());
    for node in NODES {
        writers.apply_node(fixtures::gpu_node(node, "a10g", 4, 4));
        writers.apply_model_cache(node_cache(node, Some(CachedModelPhase::Ready)));
    }
    writers.mark_ready();
    serving.mark_ready();
    let job = served_group_job();
    let pv = volume_name(NAMESPACE, &fixtures::uid("big"), KEY);
    let pvc = claim_name("big", KEY);
    let quota = "persistentvolumeclaims \"x\" is forbidden: exceeded quota: claims";
    let mut pods = Vec::new();
    run(&ctx, &job, &mut api, async |api| {
        served_group_objects_created(api, GROUP).await;
        api.object_create(&volumes(), &pv).await;
        api.object_create_rejected(&claims(), &pvc, 403, quota)
            .await;
        api.object_delete(&volumes(), &pv).await;
        for member in MEMBERS {
            pods.push(api.pod_create(member).await);
        }
        api.object_create(&services(), "big").await;
        api.status_apply(&job).await;
        api.events("big", &["PodCreated"]).await;
    })
    .await;
    for pod in &pods {
        let name = &pod["metadata"]["name"];
        let annotations = &pod["metadata"]["annotations"];
        assert_eq!(
            annotations[WEIGHTS_SOURCE_ANNOTATION], "FetchedByPod",
            "{name}"
        );
        assert_eq!(annotations.get(POD_MODEL_ANNOTATION), None, "{name}");
        let note = annotations[WEIGHTS_NOTE_ANNOTATION].as_str().unwrap();
        assert!(
            note.contains(&format!("the model's claim {pvc} was refused")),
            "{name}: {note}"
        );
        assert_eq!(model_claim(pod), None, "{name}");
        assert!(model_mounts(pod).is_empty(), "{name}");
        let terms = pod["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            terms
                .iter()
                .flat_map(|t| t["matchExpressions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default())
                .all(|e| e["key"] != "kubernetes.io/hostname"),
            "{name}: kept to no holder: {terms:?}"
        );
        assert_eq!(
            super::tests::env(pod, "HF_HUB_OFFLINE"),
            Value::Null,
            "{name}: the runtime fetches the model"
        );
    }
}
