//! `compare::run` against a fake API server: a second invocation re-attaches (creates only
//! the missing jobs, by server-side apply as `vramfit-compare`), follows the jobs to their
//! results and reports them; an Unschedulable job of a class without nodes is a line, not
//! a hang.
// Test and benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use vramfit_api::InferenceJob;
use vramfit_cli::compare::follow::{FollowEnd, FollowOptions};
use vramfit_cli::compare::{self, Request as CompareRequest};
use vramfit_planner::builtin_classes;

fn job() -> InferenceJob {
    serde_yaml::from_str(
        "apiVersion: vramfit.io/v1alpha1\nkind: InferenceJob\nmetadata: {name: captions, namespace: team-a}\nspec:\n  model: {preset: mistral-7b-instruct-v0.3}\n  runtime: vllm\n  image: img\n",
    )
    .unwrap()
}

/// What the fake kubelet and operator make of a job: a result on a10g-x1, no nodes for t4-x1.
fn with_status(mut object: Value) -> Value {
    let class = object["metadata"]["labels"]["vramfit.io/comparison-class"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let phase = object["metadata"]["labels"]["vramfit.io/comparison-phase"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    object["status"] = if class == "t4-x1" {
        json!({"phase": "Unschedulable", "rejectedClasses": [
            {"nodeClass": "t4-x1", "reason": "no nodes"},
            {"nodeClass": "a10g-x1", "reason": "not in the job's nodeClasses.allowed"}]})
    } else {
        let seconds = if phase == "baseline" { 300.0 } else { 200.0 };
        json!({"phase": "Succeeded", "attemptCount": 1,
            "plan": {"nodeClass": class, "gpuCount": 1, "dtype": "float16", "quantization": "none",
                "flashAttention": false, "tf32": true, "pytorchCudaAllocConf": "x",
                "memoryFractionPercent": 90, "contextLength": 4096, "memory": {"weightsMib": 1,
                "kvCacheMib": 1, "overheadMib": 1, "neededPerGpuMib": 3, "vramPerGpuMib": 23028,
                "usablePerGpuMib": 18000}, "hourlyPriceCents": 60, "reasons": []},
            "result": {"items": 120, "seconds": seconds, "itemsPerHour": 0.0, "peakGpuMemoryMib": [15000]}})
    };
    object
}

#[tokio::test]
async fn a_second_invocation_reattaches_follows_and_reports() {
    let request = CompareRequest {
        classes: vec!["a10g-x1".into(), "t4-x1".into()],
        repeat: 1,
        ..CompareRequest::default()
    };
    let comparison = compare::prepare(&job(), &builtin_classes(), &request, "default").unwrap();
    assert_eq!(comparison.namespace, "team-a");
    let names: Vec<String> = comparison.jobs.iter().map(|j| j.name()).collect();
    assert_eq!(
        names,
        [
            "captions-a10g-x1-baseline-1",
            "captions-a10g-x1-optimized-1",
            "captions-t4-x1-baseline-1",
            "captions-t4-x1-optimized-1"
        ]
    );

    // One job already exists: a first invocation created it before it was stopped.
    let stored: Arc<Mutex<BTreeMap<String, Value>>> = Arc::default();
    let first = serde_json::to_value(&comparison.jobs[0].job).unwrap();
    stored.lock().unwrap().insert(names[0].clone(), first);
    let applies: Arc<Mutex<Vec<String>>> = Arc::default();

    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let (server_stored, server_applies) = (stored.clone(), applies.clone());
    tokio::spawn(async move {
        let mut lists = 0;
        while let Some((request, send)) = handle.next_request().await {
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or_default().to_string();
            assert!(
                path.starts_with("/apis/vramfit.io/v1alpha1/namespaces/team-a/inferencejobs"),
                "{path}"
            );
            let answer = match *request.method() {
                Method::GET => {
                    assert!(
                        query.contains("labelSelector=vramfit.io%2Fcomparison%3Dcaptions"),
                        "{query}"
                    );
                    lists += 1;
                    // The first list is start's: no status yet. Later lists: the results.
                    let items: Vec<Value> = server_stored
                        .lock()
                        .unwrap()
                        .values()
                        .map(|o| {
                            if lists > 1 {
                                with_status(o.clone())
                            } else {
                                o.clone()
                            }
                        })
                        .collect();
                    json!({"apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJobList",
                        "metadata": {"resourceVersion": "1"}, "items": items})
                }
                Method::PATCH => {
                    assert!(query.contains("fieldManager=vramfit-compare"), "{query}");
                    let name = path.rsplit('/').next().unwrap().to_string();
                    let bytes = request.into_body().collect_bytes().await.unwrap();
                    let body: Value = serde_json::from_slice(&bytes).unwrap();
                    server_applies.lock().unwrap().push(name.clone());
                    server_stored.lock().unwrap().insert(name, body.clone());
                    body
                }
                ref other => panic!("unexpected {other} {path}"),
            };
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            );
        }
    });

    let options = FollowOptions {
        timeout: Duration::from_secs(30),
        poll: Duration::from_millis(10),
        progress: false,
    };
    let finished = compare::run(
        Client::new(service, "default"),
        &comparison,
        options,
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(finished.end, FollowEnd::Done);
    assert_eq!(finished.started.reattached, [names[0].clone()]);
    assert_eq!(
        *applies.lock().unwrap(),
        names[1..].to_vec(),
        "only the missing jobs are applied"
    );

    let report = &finished.report;
    let a10g = &report.classes[0];
    assert_eq!(a10g.node_class, "a10g-x1");
    assert_eq!(a10g.speedup, Some(1.5));
    let t4 = &report.classes[1];
    assert_eq!(t4.phases[0].problems, ["run 1: class t4-x1 has no nodes"]);
    assert_eq!(t4.phases[0].finished, 0);
    let fastest = report.fastest.as_ref().unwrap();
    assert_eq!(fastest.node_class, "a10g-x1");
    assert!(
        compare::report::table(report).contains("t4-x1 baseline: run 1: class t4-x1 has no nodes")
    );
}
