//! One job's bug stays that job's problem, and a controller that ends takes the process down:
//! the reconcile boundary ([`crate::dispatch::contain_panics`]) against a mock API server, the
//! whole controller ([`crate::controller::run`]) with a job whose reconcile panics, and the
//! process's [`crate::app::lead`] when the controller task ends on its own.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use tokio::sync::watch;
use vramfit_runtime::admin_server::ReadinessSource;

use crate::app::lead;
use crate::batch::tests::{a10g_cluster, with_status};
use crate::cli::Args;
use crate::controller::{self, ControllerConfig};
use crate::dispatch::{contain_panics, error_policy, reconcile};
use crate::error::{Error, StartupError};
use crate::fault_injection::panic_in_reconcile_of;
use crate::fixtures::{self, NAMESPACE};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::settings::Requeues;
use crate::stores::cached_job::CachedJob;
use crate::verifier::test_context;

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

/// The reconcile boundary: a panic becomes the job's `ReconcileFailed` condition, a Warning
/// event, a `panic` error for the metric and the backoff; the job's next good reconcile
/// clears the condition.
#[tokio::test]
async fn a_panic_in_a_reconcile_is_reported_on_its_job_and_retried_with_backoff() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("boom", fixtures::vllm_mistral_spec());
    let cached = Arc::new(CachedJob::of(&job));
    let panicking = tokio::spawn(contain_panics(cached.clone(), ctx.clone(), |_, _| async {
        panic!("attempt to multiply with overflow")
    }));
    let status = api.status_apply(&job).await;
    let failed = condition(&status, "ReconcileFailed");
    assert_eq!(failed["status"], "True");
    assert_eq!(failed["reason"], "InternalError");
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("attempt to multiply with overflow")
            && message.contains("other jobs are not affected"),
        "{message}"
    );
    assert_eq!(status["status"]["phase"], "Pending");
    api.event("boom", "ReconcileFailed").await;
    api.no_more_requests().await;
    let result = panicking
        .await
        .expect("the panic is caught, not propagated");
    let error = result.expect_err("a panic is an error");
    assert!(matches!(error, Error::Panicked(_)), "{error}");
    assert_eq!(error.metric_label(), "panic");
    let text = ctx.metrics.encode().unwrap();
    assert!(
        text.contains("vramfit_reconcile_errors_total{kind=\"panic\"} 1"),
        "{text}"
    );
    // Retried with the job's backoff, doubling, not at once.
    let first = error_policy(cached.clone(), &error, ctx.clone());
    let second = error_policy(cached.clone(), &error, ctx.clone());
    assert_eq!(first, Action::requeue(Duration::from_secs(1)));
    assert_eq!(second, Action::requeue(Duration::from_secs(2)));

    // Fixed (the next reconcile goes through): the condition turns False.
    let reported = with_status(&job, &status);
    let task = tokio::spawn(reconcile(Arc::new(CachedJob::of(&reported)), ctx.clone()));
    api.pod_create("boom-1").await;
    let status = api.status_apply(&reported).await;
    api.events("boom", &["PodCreated"]).await;
    let action = task.await.unwrap().unwrap();
    assert_eq!(action, Action::requeue(Requeues::default().resync));
    let cleared = condition(&status, "ReconcileFailed");
    assert_eq!(
        (&cleared["status"], &cleared["reason"]),
        (&json!("False"), &json!("Reconciled"))
    );
}

/// What the mock API server saw: `(method, path, body)` of every write.
type Writes = Arc<Mutex<Vec<(Method, String, Value)>>>;

/// An API server with fixed lists (by path), watches that stay open, and writes answered
/// with their own body (a status patch: with the job it patches).
fn fake_api_server(lists: BTreeMap<String, Vec<Value>>, jobs: Vec<Value>) -> (Client, Writes) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let writes: Writes = Arc::default();
    let seen = writes.clone();
    tokio::spawn(async move {
        let mut open_watches = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let query = request.uri().query().unwrap_or_default().to_string();
            let path = request.uri().path().to_string();
            let method = request.method().clone();
            if query.contains("watch=true") {
                open_watches.push(send);
                continue;
            }
            let answer = if method == Method::GET {
                let items = lists.get(&path).cloned().unwrap_or_default();
                json!({ "metadata": { "resourceVersion": "1" }, "items": items })
            } else {
                let bytes = request.into_body().collect_bytes().await.unwrap();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                seen.lock()
                    .unwrap()
                    .push((method, path.clone(), body.clone()));
                match path.strip_suffix("/status") {
                    Some(job_path) => {
                        let name = job_path.rsplit('/').next().unwrap_or_default();
                        let mut job = jobs
                            .iter()
                            .find(|j| j["metadata"]["name"] == name)
                            .cloned()
                            .unwrap_or(Value::Null);
                        job["status"] = body["status"].clone();
                        job
                    }
                    None => {
                        let mut created = body;
                        created["metadata"]["uid"] = json!("created");
                        created
                    }
                }
            };
            let bytes = serde_json::to_vec(&answer).unwrap();
            send.send_response(Response::builder().body(Body::from(bytes)).unwrap());
        }
    });
    (Client::new(service, "default"), writes)
}

/// The whole controller: the reconcile of one job panics every time; the other job is placed
/// all the same, the panicking one carries the condition, and the controller keeps running.
#[tokio::test]
async fn a_job_whose_reconcile_panics_does_not_stop_the_others() {
    panic_in_reconcile_of("explodes-in-controller");
    let jobs: Vec<Value> = ["explodes-in-controller", "steady-in-controller"]
        .into_iter()
        .map(|name| serde_json::to_value(fixtures::job(name, fixtures::vllm_mistral_spec())))
        .collect::<Result<_, _>>()
        .unwrap();
    let node = serde_json::to_value(fixtures::gpu_node("a-1", "a10g", 4, 4)).unwrap();
    let lists = BTreeMap::from([
        ("/api/v1/nodes".to_string(), vec![node]),
        (
            "/apis/vramfit.io/v1alpha1/inferencejobs".to_string(),
            jobs.clone(),
        ),
    ]);
    let (client, writes) = fake_api_server(lists, jobs);
    let health = Arc::new(Health::new(false));
    let (stop_tx, stop) = watch::channel(false);
    let config = ControllerConfig {
        settings: crate::Settings {
            error_backoff_base: Duration::from_millis(50),
            ..crate::Settings::default()
        },
        ..ControllerConfig::default()
    };
    let running = tokio::spawn(controller::run(
        client,
        Arc::new(Metrics::new()),
        health.clone(),
        config,
        stop,
    ));
    let jobs_path = format!("/apis/vramfit.io/v1alpha1/namespaces/{NAMESPACE}/inferencejobs");
    let placed_and_reported = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let writes = writes.lock().unwrap().clone();
            let steady_pod = writes.iter().any(|(method, path, body)| {
                *method == Method::POST
                    && *path == format!("/api/v1/namespaces/{NAMESPACE}/pods")
                    && body["metadata"]["name"] == "steady-in-controller-1"
            });
            let reported = writes.iter().any(|(method, path, body)| {
                *method == Method::PATCH
                    && *path == format!("{jobs_path}/explodes-in-controller/status")
                    && condition(body, "ReconcileFailed")["reason"] == "InternalError"
            });
            // Backoff 50 ms, 100 ms, …: the panicking job is reconciled again, not once only
            // (each time its report is written: the store's copy never shows it).
            let retries = writes
                .iter()
                .filter(|(_, path, _)| {
                    *path == format!("{jobs_path}/explodes-in-controller/status")
                })
                .count();
            if steady_pod && reported && retries >= 2 {
                return writes;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let writes = placed_and_reported.expect("the steady job placed, the panic reported");
    assert!(
        !writes
            .iter()
            .any(|(method, path, body)| *method == Method::POST
                && path.ends_with("/pods")
                && body["metadata"]["name"] == "explodes-in-controller-1"),
        "the panicking job got no pod"
    );
    assert!(!running.is_finished(), "the controller still runs");
    assert_eq!(health.readiness(), Ok(()), "and the replica stays ready");
    let _ = stop_tx.send(true);
    let stopped = tokio::time::timeout(Duration::from_secs(10), running).await;
    assert!(
        matches!(stopped, Ok(Ok(Ok(())))),
        "a requested stop is a clean end: {stopped:?}"
    );
}

/// An API server for `lead`: both CRDs established, and one Lease that GET, POST and PATCH
/// (the lease manager's and the fence's requests) read and write.
fn crds_and_lease_server() -> (Client, Arc<Mutex<Value>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let lease = Arc::new(Mutex::new(Value::Null));
    let stored = lease.clone();
    tokio::spawn(async move {
        let mut version = 1u64;
        while let Some((request, send)) = handle.next_request().await {
            let path = request.uri().path().to_string();
            let method = request.method().clone();
            let (status, answer) = if let Some(name) =
                path.strip_prefix("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/")
            {
                let crd = json!({
                    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": { "name": name },
                    "spec": { "group": "vramfit.io", "scope": "Namespaced", "versions": [],
                              "names": { "plural": "x", "kind": "X" } },
                    "status": { "conditions": [{ "type": "Established", "status": "True" }] }
                });
                (200, crd)
            } else if path.contains("/leases") {
                let bytes = request.into_body().collect_bytes().await.unwrap();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let mut lease = stored.lock().unwrap();
                match method {
                    Method::GET if lease.is_null() => (
                        404,
                        json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "message": "not found", "reason": "NotFound", "code": 404 }),
                    ),
                    Method::GET => (200, lease.clone()),
                    _ => {
                        if lease.is_null() || method == Method::POST {
                            *lease = body.clone();
                        } else if let Some(spec) = body["spec"].as_object() {
                            for (key, value) in spec {
                                lease["spec"][key] = value.clone();
                            }
                        }
                        version += 1;
                        lease["apiVersion"] = json!("coordination.k8s.io/v1");
                        lease["kind"] = json!("Lease");
                        lease["metadata"]["resourceVersion"] = json!(version.to_string());
                        (200, lease.clone())
                    }
                }
            } else {
                (
                    404,
                    json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "not found", "reason": "NotFound", "code": 404 }),
                )
            };
            let bytes = serde_json::to_vec(&answer).unwrap();
            let response = Response::builder()
                .status(status)
                .body(Body::from(bytes))
                .unwrap();
            send.send_response(response);
        }
    });
    (Client::new(service, "default"), lease)
}

/// A controller run that ends at once, without being asked to.
async fn ends_on_its_own(
    _: Client,
    _: Arc<Metrics>,
    _: Arc<Health>,
    _: ControllerConfig,
    _: watch::Receiver<bool>,
) -> Result<(), StartupError> {
    Ok(())
}

/// A controller run that panics (a bug outside the reconcile boundary).
async fn panics(
    _: Client,
    _: Arc<Metrics>,
    _: Arc<Health>,
    _: ControllerConfig,
    _: watch::Receiver<bool>,
) -> Result<(), StartupError> {
    panic!("a bug in the controller's own loop")
}

/// Regression: under leader election the controller task was spawned and its end never
/// watched, so a leader whose controller had died kept its Lease and its `/readyz` 200.
#[tokio::test]
async fn lead_fails_when_the_controller_ends_on_its_own() {
    for leader_election in [false, true] {
        let (client, lease) = crds_and_lease_server();
        let mut flags = vec!["vramfit-operator", "--lease-namespace", "vramfit"];
        if leader_election {
            flags.push("--leader-election");
        }
        let args = Args::parse_from(flags);
        let health = Arc::new(Health::new(leader_election));
        let (_stop_tx, stop) = watch::channel(false);
        let ended = tokio::time::timeout(
            Duration::from_secs(20),
            lead(
                client.clone(),
                &args,
                Arc::new(Metrics::new()),
                health.clone(),
                stop.clone(),
                ends_on_its_own,
            ),
        )
        .await
        .expect("lead returns");
        assert!(
            matches!(&ended, Err(StartupError::ControllerEnded(why)) if why.contains("without being asked")),
            "leader election {leader_election}: {ended:?}"
        );
        assert!(health.readiness().is_err(), "not ready any more");
        if leader_election {
            let holder = lease.lock().unwrap()["spec"]["holderIdentity"].clone();
            assert!(
                holder.is_null() || holder == "",
                "the lease is handed over at once: {holder}"
            );
        }

        let panicked = tokio::time::timeout(
            Duration::from_secs(20),
            lead(
                client,
                &args,
                Arc::new(Metrics::new()),
                Arc::new(Health::new(leader_election)),
                stop,
                panics,
            ),
        )
        .await
        .expect("lead returns");
        assert!(
            matches!(&panicked, Err(StartupError::ControllerEnded(why)) if why.contains("a bug in the controller's own loop")),
            "leader election {leader_election}: {panicked:?}"
        );
    }
}

/// A clean stop is not an error.
#[tokio::test]
async fn lead_ends_cleanly_on_a_requested_stop() {
    let (client, _) = crds_and_lease_server();
    let args = Args::parse_from(["vramfit-operator"]);
    let (stop_tx, stop) = watch::channel(false);
    let waits_for_stop = |_: Client,
                          _: Arc<Metrics>,
                          _: Arc<Health>,
                          _: ControllerConfig,
                          mut stop: watch::Receiver<bool>| async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
        Ok(())
    };
    let leading = lead(
        client,
        &args,
        Arc::new(Metrics::new()),
        Arc::new(Health::new(false)),
        stop,
        waits_for_stop,
    );
    let stopping = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = stop_tx.send(true);
    };
    let (ended, ()) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(10), leading),
        stopping
    );
    assert!(matches!(ended, Ok(Ok(()))), "{ended:?}");
}
