//! The whole controller (`controller::run`) against a scripted API server whose job-pod watch
//! expires: after the relist the job must follow what the pod did while the watch was away,
//! watching every namespace or, with `--watch-namespaces`, the job's and another one.
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tower_test::mock::{self, SendResponse};
use vramfit_api::InferenceJob;

use crate::batch::tests::{
    a10g_cluster, created_pod, first_reconcile, run as reconcile_once, with_status,
};
use crate::controller::{ControllerConfig, run};
use crate::fixtures;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::stores::namespaces::WatchNamespaces;
use crate::verifier::{respond, test_context};

/// A job whose pod runs, with the status reconcile wrote for that (so the operator's first
/// reconcile of it writes nothing), its pod, and the same pod ended.
async fn running_job() -> (InferenceJob, Pod, Pod) {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    let mut running = fixtures::as_running(created_pod(&pod), "a-1");
    running.metadata.resource_version = Some("10".into());
    writers.apply_pod(running.clone());
    let scheduled = with_status(&job, &status);
    let mut written = scheduled.clone();
    reconcile_once(&ctx, &scheduled, &mut api, async |api| {
        written = with_status(&scheduled, &api.status_apply(&scheduled).await);
        api.event("chat", "Running").await;
    })
    .await;
    let mut ended = fixtures::as_succeeded(created_pod(&pod), "a-1");
    ended.metadata.resource_version = Some("20".into());
    (written, running, ended)
}

fn list(kind: &str, version: &str, items: Vec<Value>, next: Option<&str>) -> Value {
    json!({ "kind": kind, "apiVersion": "v1",
            "metadata": { "resourceVersion": version, "continue": next }, "items": items })
}

fn expired() -> Vec<u8> {
    let event = json!({ "type": "ERROR", "object": { "kind": "Status", "apiVersion": "v1",
        "metadata": {}, "status": "Failure", "reason": "Expired", "code": 410,
        "message": "too old resource version: 10 (20)" } });
    let mut line = serde_json::to_vec(&event).unwrap_or_default();
    line.push(b'\n');
    line
}

#[tokio::test]
async fn a_pod_that_ended_while_its_watch_was_away_ends_the_job_after_the_relist() {
    pod_ended_while_the_watch_was_away(WatchNamespaces::all()).await;
}

/// The same with one watch per namespace: the relist of the job's namespace (its pod watch
/// expired) is merged into the store without the other namespace's list.
#[tokio::test]
async fn with_watched_namespaces_a_relist_of_the_jobs_namespace_ends_the_job() {
    let namespaces = WatchNamespaces::parse(&format!("{},team-b", fixtures::NAMESPACE));
    pod_ended_while_the_watch_was_away(namespaces.unwrap()).await;
}

async fn pod_ended_while_the_watch_was_away(namespaces: WatchNamespaces) {
    let (job, running, ended) = running_job().await;
    let namespaced = namespaces.listed().is_some();
    let job_pods_path = match namespaced {
        true => format!("/api/v1/namespaces/{}/pods", fixtures::NAMESPACE),
        false => "/api/v1/pods".to_string(),
    };
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let (status_writes, mut written) = mpsc::unbounded_channel::<Value>();
    let cluster_wide_requests = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen_cluster_wide = cluster_wide_requests.clone();
    let server = tokio::spawn(async move {
        let mut open: Vec<SendResponse<Response<Body>>> = Vec::new();
        let (mut job_pod_lists, mut job_pod_watches) = (0, 0);
        while let Some((request, send)) = handle.next_request().await {
            let (method, path) = (request.method().clone(), request.uri().path().to_string());
            let query = request.uri().query().unwrap_or_default().to_string();
            let job_pods = path == job_pods_path && query.contains("labelSelector");
            // Every other namespace is empty; with watched namespaces nothing is listed or
            // watched cluster-wide but the GPU accounting pods, nodes and GpuNodeClasses.
            let other_namespace = path.contains("/namespaces/")
                && !path.contains(&format!("/namespaces/{}/", fixtures::NAMESPACE));
            let cluster_wide = !path.contains("/namespaces/");
            if namespaced
                && cluster_wide
                && (path.ends_with("/inferencejobs") || query.contains("labelSelector"))
            {
                seen_cluster_wide
                    .lock()
                    .unwrap()
                    .push(format!("{path}?{query}"));
            }
            if query.contains("watch=true") {
                if job_pods && job_pod_watches == 0 {
                    job_pod_watches += 1;
                    // The watch expires once the controller has taken in the job.
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        send.send_response(Response::new(Body::from(expired())));
                    });
                } else {
                    open.push(send);
                }
                continue;
            }
            if method == Method::GET {
                let pod = |pod: &Pod| serde_json::to_value(pod).unwrap_or_default();
                let body = match path.as_str() {
                    _ if other_namespace => list("List", "1", vec![], None),
                    "/api/v1/nodes" => list(
                        "NodeList",
                        "1",
                        vec![
                            serde_json::to_value(fixtures::gpu_node("a-1", "a10g", 4, 4))
                                .unwrap_or_default(),
                        ],
                        None,
                    ),
                    "/api/v1/pods" if !job_pods => list("PodList", "10", vec![pod(&running)], None),
                    _ if job_pods && query.contains("continue=") => {
                        // The relist's last page is slow: reconciles triggered before it read the
                        // store as it was before the relist.
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        list("PodList", "20", vec![], None)
                    }
                    _ if job_pods => {
                        job_pod_lists += 1;
                        match job_pod_lists {
                            1 => list("PodList", "10", vec![pod(&running)], None),
                            _ => list("PodList", "20", vec![pod(&ended)], Some("page-2")),
                        }
                    }
                    p if p.ends_with("/inferencejobs") => list(
                        "InferenceJobList",
                        "10",
                        vec![serde_json::to_value(&job).unwrap_or_default()],
                        None,
                    ),
                    _ => list("List", "1", vec![], None),
                };
                respond(send, 200, &body);
                continue;
            }
            let body: Value = serde_json::from_slice(
                &request
                    .into_body()
                    .collect_bytes()
                    .await
                    .unwrap_or_default(),
            )
            .unwrap_or(Value::Null);
            if path.ends_with("/inferencejobs/chat/status") {
                let _ = status_writes.send(body.clone());
                let mut answer = serde_json::to_value(&job).unwrap_or_default();
                answer["status"] = body["status"].clone();
                respond(send, 200, &answer);
            } else {
                respond(send, 201, &body);
            }
        }
    });

    let (stop_tx, stop) = watch::channel(false);
    let controller = tokio::spawn(run(
        Client::new(service, "default"),
        Arc::new(Metrics::new()),
        Arc::new(Health::new(false)),
        ControllerConfig {
            namespaces,
            ..ControllerConfig::default()
        },
        stop,
    ));
    let succeeded = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(write) = written.recv().await {
            if write["status"]["phase"] == "Succeeded" {
                return true;
            }
        }
        false
    })
    .await;
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), controller).await;
    server.abort();
    assert_eq!(
        succeeded,
        Ok(true),
        "the job's status never turned Succeeded"
    );
    assert_eq!(
        *cluster_wide_requests.lock().unwrap(),
        Vec::<String>::new(),
        "with --watch-namespaces, jobs and job pods are watched per namespace only"
    );
}
