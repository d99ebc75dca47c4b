//! The autoscaler's step in the real `reconcile` against the mock API server: a loaded job is
//! scaled through the scale subresource (and nothing else is written in that pass); a job an
//! HPA targets is left alone, and its status and one event say so.
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use serde_json::{Value, json};
use vramfit_api::InferenceJob;
use vramfit_api::autoscaling::{AutoscalingSpec, ScalingBehavior};

use crate::autoscaling::Reading;
use crate::batch::tests::{run, with_status};
use crate::fixtures::NAMESPACE;
use crate::scaling_state::PodReading;
use crate::served::tests::api::{cluster, first, ready, served_job};
use crate::verifier::{ApiServerVerifier, respond, test_context_with_serving};

fn autoscaled(job: &InferenceJob, max: u32) -> InferenceJob {
    let mut job = job.clone();
    job.spec.serve.as_mut().unwrap().autoscaling = Some(AutoscalingSpec {
        min_replicas: 1,
        max_replicas: max,
        target_utilization_percent: 70,
        metric: None,
        behavior: ScalingBehavior::default(),
    });
    job
}

/// Two Ready replicas of the job, its Service and budget in the stores, each replica read
/// with `in_flight` requests; the job as its first status left it.
async fn two_ready_replicas(
    in_flight: f64,
) -> (
    Arc<crate::Context>,
    ApiServerVerifier,
    InferenceJob,
    Vec<Pod>,
) {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let job = served_job(2);
    let (pods, service, pdb, status) = first(&ctx, &mut api, &job).await;
    let mut ready_pods = Vec::new();
    for (i, (body, node)) in pods.iter().zip(["l-1", "l-2"]).enumerate() {
        let mut pod = ready(body, node);
        pod.metadata.uid = Some(format!("pod-uid-{i}"));
        pod.status.get_or_insert_default().pod_ip = Some(format!("10.0.0.{}", i + 1));
        writers.apply_pod(pod.clone());
        ready_pods.push(pod);
    }
    serving.services.apply_watcher_event(&watcher::Event::Apply(
        serde_json::from_value::<Service>(service).unwrap(),
    ));
    let mut pdb = serde_json::from_value::<PodDisruptionBudget>(pdb).unwrap();
    pdb.metadata.uid = Some(ApiServerVerifier::object_uid("chat"));
    serving
        .pdbs
        .apply_watcher_event(&watcher::Event::Apply(pdb));
    for pod in &ready_pods {
        ctx.scaling.record(
            pod.metadata.uid.clone().unwrap(),
            PodReading {
                at: Instant::now(),
                result: Ok(Reading {
                    running: in_flight,
                    waiting: 0.0,
                    kv_cache_usage: None,
                }),
            },
        );
    }
    let job = with_status(&job, &status);
    (ctx, api, job, ready_pods)
}

fn scale_path() -> String {
    format!("/apis/vramfit.io/v1alpha1/namespaces/{NAMESPACE}/inferencejobs/chat/scale")
}

#[tokio::test]
async fn a_loaded_job_is_scaled_through_the_scale_subresource_and_nothing_else_that_pass() {
    // Each replica (planned for 4 sequences at 8k on an L40S: more fit) holds 40 requests.
    let (ctx, mut api, job, pods) = two_ready_replicas(40.0).await;
    let capacity: u32 = pods[0].metadata.labels.as_ref().unwrap()["vramfit.io/concurrency"]
        .parse()
        .unwrap();
    assert!(
        capacity >= 4,
        "the plan's concurrency is on the pod: {capacity}"
    );
    let job = autoscaled(&job, 6);
    let action = run(&ctx, &job, &mut api, async |api| {
        let (request, send) = api.next().await;
        assert_eq!(request.method(), http::Method::PATCH);
        assert_eq!(
            request.uri().to_string(),
            format!("{}?&fieldManager=vramfit-autoscaler", scale_path())
        );
        assert_eq!(
            request.headers()["content-type"],
            "application/merge-patch+json"
        );
        let body = ApiServerVerifier::body(request).await;
        assert_eq!(
            body["metadata"]["resourceVersion"],
            json!(job.metadata.resource_version)
        );
        let replicas = body["spec"]["replicas"].as_u64().unwrap();
        assert!(replicas > 2 && replicas <= 6, "{body}");
        respond(
            send,
            200,
            &json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                    "metadata": {"name": "chat", "namespace": NAMESPACE},
                    "spec": {"replicas": replicas}, "status": {"replicas": 2}}),
        );
        let event = api.event("chat", "Autoscaled").await;
        assert!(
            event["note"]
                .as_str()
                .unwrap()
                .starts_with(&format!("2 → {replicas} replicas: load")),
            "{event}"
        );
    })
    .await;
    assert_eq!(action, Action::await_change());
    // The pass's figures on /metrics, by job.
    let text = ctx.metrics.encode().unwrap();
    let series = |name: &str| {
        text.lines()
            .find(|l| {
                l.starts_with(&format!(
                    "{name}{{job_namespace=\"{NAMESPACE}\",inference_job=\"chat\"}}"
                ))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    assert_eq!(series("vramfit_autoscaler_replicas"), Some(2.0), "{text}");
    assert!(series("vramfit_autoscaler_desired_replicas").is_some_and(|d| d > 2.0));
    assert!(series("vramfit_autoscaler_utilization_percent").is_some_and(|u| u > 100.0));
}

#[tokio::test]
async fn a_job_an_hpa_targets_is_left_to_it_and_says_so_once() {
    let (ctx, mut api, job, _) = two_ready_replicas(40.0).await;
    ctx.scaling.set_external(
        NAMESPACE,
        [("chat".to_string(), "keda-hpa-chat".to_string())].into(),
    );
    let job = autoscaled(&job, 6);
    let mut written = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        // The step's event, then the pipeline's status with the step's report.
        api.events("chat", &["AutoscalerStandsAside"]).await;
        written = api.status_apply(&job).await;
        // The pipeline's own: both replicas are Ready.
        api.events("chat", &["Available"]).await;
    })
    .await;
    let condition = written["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Autoscaling")
        .cloned()
        .unwrap();
    assert_eq!(condition["status"], "False");
    assert_eq!(condition["reason"], "ExternalAutoscaler");
    assert!(
        condition["message"]
            .as_str()
            .unwrap()
            .contains("keda-hpa-chat")
    );
    assert_eq!(written["status"]["autoscaling"]["desiredReplicas"], 2);
    assert_eq!(written["status"]["autoscaling"]["readReplicas"], 2);
    // The next pass, with that status, publishes no second event and writes nothing.
    let job = with_status(&job, &written);
    run(&ctx, &job, &mut api, async |_| {}).await;
}

/// A pod of job `job`: ready or not, with a group rank or none, planned for `concurrency`.
fn replica_pod(
    job: &InferenceJob,
    name: &str,
    rank: Option<u32>,
    ready: bool,
    concurrency: u32,
) -> Pod {
    let mut labels = json!({
        vramfit_api::pod_keys::JOB_LABEL: "chat",
        vramfit_api::pod_keys::CONCURRENCY_LABEL: concurrency.to_string(),
    });
    if let Some(rank) = rank {
        labels[vramfit_api::pod_keys::GROUP_RANK_LABEL] = json!(rank.to_string());
    }
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": format!("uid-{name}"),
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob", "name": "chat",
                "uid": job.metadata.uid, "controller": true,
            }],
        },
        "spec": {"containers": [{"name": "inference"}]},
        "status": {
            "phase": "Running",
            "podIP": format!("10.1.0.{}", name.len()),
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn a_groups_leader_alone_counts_and_is_read_for_its_group() {
    let (ctx, _api, mut writers) = crate::verifier::test_context();
    let job = served_job(2);
    let mut other = job.clone();
    other.metadata.uid = Some("another-job".into());
    // Group 0: its leader Ready (read), a member Ready; group 1: its leader still starting.
    writers.apply_pod(replica_pod(&job, "chat-r0-1-0", Some(0), true, 8));
    writers.apply_pod(replica_pod(&job, "chat-r0-1-1", Some(1), true, 8));
    writers.apply_pod(replica_pod(&job, "chat-r1-2-0", Some(0), false, 8));
    writers.apply_pod(replica_pod(&job, "chat-r1-2-1", Some(1), true, 8));
    // Another job's leader, Ready: not this job's.
    writers.apply_pod(replica_pod(&other, "chat-r2-3-0", Some(0), true, 8));
    ctx.scaling.record(
        "uid-chat-r0-1-0".into(),
        PodReading {
            at: Instant::now(),
            result: Ok(Reading {
                running: 6.0,
                waiting: 0.0,
                kv_cache_usage: None,
            }),
        },
    );
    let now = Instant::now();
    let observed = crate::observe::replica_load::observe(
        &job,
        &ctx,
        4,
        now,
        std::time::Duration::from_secs(45),
    );
    let read: Vec<&str> = observed.ready.iter().map(|(uid, _)| uid.as_str()).collect();
    assert_eq!(read, ["uid-chat-r0-1-0"], "only the Ready leader is read");
    assert_eq!(
        observed.replicas.len(),
        2,
        "one replica per group: {observed:?}"
    );
    let states: Vec<String> = observed
        .replicas
        .iter()
        .map(|r| format!("{}:{:?}", r.capacity, r.state))
        .collect();
    assert!(
        states.iter().any(|s| s.starts_with("8:Read")) && states.iter().any(|s| s == "8:Starting"),
        "{states:?}"
    );
}

#[tokio::test]
async fn a_new_leader_keeps_the_last_status_until_it_has_read_the_replicas() {
    // Two replicas at half their capacity, the most the job may have: nothing to scale.
    let (ctx, mut api, job, _) = two_ready_replicas(1.0).await;
    let job = autoscaled(&job, 2);
    let mut written = Value::Null;
    run(&ctx, &job, &mut api, async |api| {
        written = api.status_apply(&job).await;
        api.events("chat", &["Available"]).await;
    })
    .await;
    assert_eq!(written["status"]["autoscaling"]["readReplicas"], 2);
    let job = with_status(&job, &written);

    // A new leader: its load reader has not read the replicas yet. The status stands: no
    // write (before, MetricsUnavailable, then the reading's status back: two writes).
    let key = format!("{NAMESPACE}/chat");
    ctx.scaling.forget(&key, job.metadata.uid.as_deref());
    run(&ctx, &job, &mut api, async |_| {}).await;

    // Once read, the pass decides again: the same status, still nothing to write.
    for (i, _) in [0, 1].iter().enumerate() {
        ctx.scaling.record(
            format!("pod-uid-{i}"),
            PodReading {
                at: Instant::now(),
                result: Ok(Reading {
                    running: 1.0,
                    waiting: 0.0,
                    kv_cache_usage: None,
                }),
            },
        );
    }
    run(&ctx, &job, &mut api, async |_| {}).await;
}
