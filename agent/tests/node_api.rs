//! The agent against kube's mock service: the exact requests it sends to the API server,
//! and the ones it must not send.
// Test and benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::time::Instant;
use tower_test::mock::{self, SendResponse};
use vramfit_agent::backoff::Backoff;
use vramfit_agent::gpu::fixture::FixtureProbe;
use vramfit_agent::labels::{NodeLabels, render};
use vramfit_agent::metrics::Metrics;
use vramfit_agent::node_writer::{NodeWriter, SyncOutcome};
use vramfit_agent::readiness::Readiness;
use vramfit_agent::refresh::{Prober, RefreshLoop, write_once};
use vramfit_api::labels as keys;
use vramfit_runtime::shutdown::Shutdown;

const NODE: &str = "gpu-node-1";
/// What kube 5.0 sends for a forced server-side apply (its query builder leaves an empty
/// pair after `?`, which the API server ignores).
const APPLY_PATH: &str = "/api/v1/nodes/gpu-node-1?&force=true&fieldManager=vramfit-agent";

/// Labels that belong to others and must never appear in an apply.
fn foreign_labels() -> BTreeMap<String, String> {
    [
        ("kubernetes.io/hostname", "gpu-node-1"),
        ("nvidia.com/gpu.product", "NVIDIA-A10G"),
        ("node.kubernetes.io/instance-type", "g5.xlarge"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

fn labels_of(name: &str) -> NodeLabels {
    let yaml = std::fs::read_to_string(fixture(name)).unwrap();
    render(
        &vramfit_agent::gpu::fixture::FixtureFile::parse(&yaml, &fixture(name))
            .unwrap()
            .to_probe(),
    )
}

fn node_json(labels: &BTreeMap<String, String>) -> Value {
    json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": NODE, "labels": labels } })
}

/// The API server side of the mock: answers requests one by one and checks them.
struct ApiServer {
    handle: mock::Handle<Request<Body>, Response<Body>>,
}

impl ApiServer {
    fn new() -> (Client, ApiServer) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        (Client::new(service, "default"), ApiServer { handle })
    }

    async fn next(&mut self) -> (Request<Body>, SendResponse<Response<Body>>) {
        self.handle
            .next_request()
            .await
            .expect("the agent sent no request")
    }

    fn reply(send: SendResponse<Response<Body>>, status: StatusCode, body: &Value) {
        let response = Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap();
        send.send_response(response);
    }

    /// Expects `GET /api/v1/nodes/<NODE>` and answers with a node carrying `labels`.
    async fn expect_get(&mut self, labels: &BTreeMap<String, String>) {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::GET);
        assert_eq!(request.uri().to_string(), format!("/api/v1/nodes/{NODE}"));
        Self::reply(send, StatusCode::OK, &node_json(labels));
    }

    /// Expects the server-side apply, checks it, answers with the node after the apply
    /// (`others` plus the applied labels), and returns the applied labels.
    async fn expect_apply(&mut self, others: &BTreeMap<String, String>) -> NodeLabels {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::PATCH);
        assert_eq!(request.uri().to_string(), APPLY_PATH);
        assert_eq!(
            request.headers()["content-type"],
            "application/apply-patch+yaml"
        );
        let body: Value =
            serde_json::from_slice(&request.into_body().collect_bytes().await.unwrap()).unwrap();
        // Exactly the node's identity and our labels: nothing else, nobody else's labels.
        let labels: NodeLabels =
            serde_json::from_value(body["metadata"]["labels"].clone()).unwrap();
        assert_eq!(body, node_json(&labels), "apply body");
        for key in labels.keys() {
            assert!(
                key.starts_with(keys::PREFIX),
                "foreign key {key} in the apply"
            );
        }
        let mut after = others.clone();
        after.extend(labels.clone());
        Self::reply(send, StatusCode::OK, &node_json(&after));
        labels
    }

    /// Expects the server-side apply of exactly `desired` and answers with a node carrying
    /// `after` (what the server keeps: a key another manager owns survives the apply).
    async fn expect_apply_of(&mut self, desired: &NodeLabels, after: &BTreeMap<String, String>) {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::PATCH);
        assert_eq!(request.uri().to_string(), APPLY_PATH);
        let body: Value =
            serde_json::from_slice(&request.into_body().collect_bytes().await.unwrap()).unwrap();
        assert_eq!(body, node_json(desired), "apply body");
        Self::reply(send, StatusCode::OK, &node_json(after));
    }

    /// Expects a JSON merge patch that removes exactly `keys` from the labels, and answers
    /// with a node carrying `after`.
    async fn expect_removal(&mut self, keys: &[&str], after: &BTreeMap<String, String>) {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::PATCH);
        assert_eq!(
            request.uri().to_string(),
            "/api/v1/nodes/gpu-node-1?&fieldManager=vramfit-agent"
        );
        assert_eq!(
            request.headers()["content-type"],
            "application/merge-patch+json"
        );
        let body: Value =
            serde_json::from_slice(&request.into_body().collect_bytes().await.unwrap()).unwrap();
        let nulls: serde_json::Map<String, Value> = keys
            .iter()
            .map(|key| (key.to_string(), Value::Null))
            .collect();
        assert_eq!(
            body,
            json!({ "metadata": { "labels": nulls } }),
            "removal body"
        );
        Self::reply(send, StatusCode::OK, &node_json(after));
    }

    /// Answers the next request with an API error; returns its method.
    async fn fail(&mut self, status: StatusCode) -> Method {
        let (request, send) = self.next().await;
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the server is unhappy", "reason": "ServiceUnavailable", "code": status.as_u16(),
        });
        Self::reply(send, status, &body);
        request.method().clone()
    }

    /// Once every client is gone, no request is left unanswered.
    async fn expect_no_more_requests(mut self) {
        if let Some((request, _)) = self.handle.next_request().await {
            panic!("unexpected request: {} {}", request.method(), request.uri());
        }
    }

    /// Nothing arrives during `period` (of paused, auto-advancing test time).
    async fn expect_silence_for(&mut self, period: Duration) {
        if let Ok(Some((request, _))) =
            tokio::time::timeout(period, self.handle.next_request()).await
        {
            panic!("unexpected request: {} {}", request.method(), request.uri());
        }
    }
}

#[tokio::test]
async fn first_sync_reads_the_node_then_applies_only_vramfit_labels() {
    let (client, mut server) = ApiServer::new();
    let desired = labels_of("a10g-x1.yaml");
    let expected = desired.clone();
    let api = tokio::spawn(async move {
        server.expect_get(&foreign_labels()).await;
        let applied = server.expect_apply(&foreign_labels()).await;
        assert_eq!(applied, expected);
        server.expect_no_more_requests().await;
    });
    let mut writer = NodeWriter::new(client, NODE);
    assert_eq!(writer.sync(&desired).await.unwrap(), SyncOutcome::Written);
    // Steady state: the same labels again send nothing at all.
    assert_eq!(
        writer.sync(&desired).await.unwrap(),
        SyncOutcome::AlreadyCurrent
    );
    assert_eq!(
        writer.sync(&desired).await.unwrap(),
        SyncOutcome::AlreadyCurrent
    );
    drop(writer);
    api.await.unwrap();
}

#[tokio::test]
async fn a_node_already_carrying_the_labels_gets_no_write() {
    let (client, mut server) = ApiServer::new();
    let desired = labels_of("h100-x8.yaml");
    let mut on_node = foreign_labels();
    on_node.extend(desired.clone());
    let api = tokio::spawn(async move {
        server.expect_get(&on_node).await;
        server.expect_no_more_requests().await;
    });
    let mut writer = NodeWriter::new(client, NODE);
    assert_eq!(
        writer.sync(&desired).await.unwrap(),
        SyncOutcome::AlreadyCurrent
    );
    assert_eq!(
        writer.sync(&desired).await.unwrap(),
        SyncOutcome::AlreadyCurrent
    );
    drop(writer);
    api.await.unwrap();
}

#[tokio::test]
async fn stale_own_keys_are_left_out_of_the_apply_so_the_server_removes_them() {
    let (client, mut server) = ApiServer::new();
    // The node still says "no GPU, nvml-unavailable" from before the driver came up.
    let before = labels_of("nvml-unavailable.yaml");
    let gpu = labels_of("a10g-x4.yaml");
    let no_gpu = labels_of("no-gpu.yaml");
    let mut on_node = foreign_labels();
    on_node.extend(before);
    let api = tokio::spawn(async move {
        server.expect_get(&on_node).await;
        let applied = server.expect_apply(&foreign_labels()).await;
        assert!(
            !applied.contains_key(keys::GPU_ABSENT_REASON),
            "stale absent-reason must not be applied"
        );
        assert_eq!(applied[keys::GPU_PRESENT], "true");
        assert_eq!(applied[keys::GPU_COUNT], "4");
        let applied = server.expect_apply(&foreign_labels()).await;
        for key in [
            keys::GPU_PRODUCT,
            keys::GPU_COUNT,
            keys::GPU_MEMORY_MIB,
            keys::GPU_TIER,
            keys::GPU_MIXED,
        ] {
            assert!(
                !applied.contains_key(key),
                "stale {key} must not be applied"
            );
        }
        assert_eq!(applied[keys::GPU_ABSENT_REASON], "no-gpus");
        server.expect_no_more_requests().await;
    });
    let mut writer = NodeWriter::new(client, NODE);
    assert_eq!(writer.sync(&gpu).await.unwrap(), SyncOutcome::Written);
    assert_eq!(writer.sync(&no_gpu).await.unwrap(), SyncOutcome::Written);
    drop(writer);
    api.await.unwrap();
}

#[tokio::test]
async fn mig_labels_of_slices_that_are_gone_are_left_out_of_the_apply() {
    let (client, mut server) = ApiServer::new();
    let partitioned = labels_of("a100-40gb-mig-1g.5gb.yaml");
    // The same GPU after `nvidia-smi -mig 0`: MIG capable, not partitioned.
    let unpartitioned = render(
        &vramfit_agent::gpu::fixture::FixtureFile::parse(
            "driverVersion: '550.54.15'\ncudaDriverVersion: 12040\ngpus: [{name: NVIDIA A100-SXM4-40GB, memoryMiB: 40960, computeCapability: '8.0', migMode: disabled}]\n",
            &fixture("inline.yaml"),
        )
        .unwrap()
        .to_probe(),
    );
    let mig_keys = [
        keys::mig_count_key("1g.5gb"),
        keys::mig_memory_key("1g.5gb"),
    ];
    let api = tokio::spawn(async move {
        server.expect_get(&foreign_labels()).await;
        let applied = server.expect_apply(&foreign_labels()).await;
        assert_eq!(applied[&mig_keys[0]], "7");
        assert_eq!(applied[&mig_keys[1]], "4864");
        assert_eq!(applied[keys::GPU_MIG], "enabled");
        let applied = server.expect_apply(&foreign_labels()).await;
        // Server-side apply removes the keys this manager no longer applies.
        let stale: Vec<&String> = applied
            .keys()
            .filter(|key| key.starts_with(keys::MIG_PREFIX))
            .collect();
        assert!(stale.is_empty(), "stale MIG labels applied: {stale:?}");
        assert_eq!(applied[keys::GPU_MIG], "disabled");
        assert_eq!(applied[keys::GPU_COUNT], "1");
        server.expect_no_more_requests().await;
    });
    let mut writer = NodeWriter::new(client, NODE);
    assert_eq!(
        writer.sync(&partitioned).await.unwrap(),
        SyncOutcome::Written
    );
    assert_eq!(
        writer.sync(&unpartitioned).await.unwrap(),
        SyncOutcome::Written
    );
    drop(writer);
    api.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn api_errors_are_retried_with_growing_backoff() {
    let (client, mut server) = ApiServer::new();
    let api = tokio::spawn(async move {
        let start = Instant::now();
        assert_eq!(
            server.fail(StatusCode::SERVICE_UNAVAILABLE).await,
            Method::GET
        );
        let first_failure = start.elapsed();
        server.expect_get(&foreign_labels()).await;
        let retried_get = start.elapsed();
        assert_eq!(
            server.fail(StatusCode::INTERNAL_SERVER_ERROR).await,
            Method::PATCH
        );
        server.expect_apply(&foreign_labels()).await;
        let retried_apply = start.elapsed();
        server.expect_no_more_requests().await;
        (first_failure, retried_get, retried_apply)
    });
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::new());
    let probe = FixtureProbe::open(fixture("t4-x1.yaml")).unwrap();
    let mut prober = Prober::new(Box::new(probe), metrics, readiness);
    let mut writer = NodeWriter::new(client, NODE);
    let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
    let outcome = write_once(&mut prober, &mut writer, 5, backoff)
        .await
        .unwrap();
    assert_eq!(outcome, SyncOutcome::Written);
    drop(writer);
    let (first_failure, retried_get, retried_apply) = api.await.unwrap();
    // First retry after ~1 s (minus at most 25 % jitter), the second after ~2 s more.
    let first_wait = retried_get - first_failure;
    assert!(
        first_wait >= Duration::from_millis(750) && first_wait <= Duration::from_secs(1),
        "{first_wait:?}"
    );
    let second_wait = retried_apply - retried_get;
    assert!(
        second_wait >= Duration::from_millis(1500) && second_wait <= Duration::from_secs(2),
        "{second_wait:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_persistently_failing_api_gives_an_error_not_a_crash() {
    let (client, mut server) = ApiServer::new();
    let api = tokio::spawn(async move {
        for _ in 0..3 {
            assert_eq!(
                server.fail(StatusCode::SERVICE_UNAVAILABLE).await,
                Method::GET
            );
        }
        server.expect_no_more_requests().await;
    });
    let probe = FixtureProbe::open(fixture("t4-x1.yaml")).unwrap();
    let mut prober = Prober::new(
        Box::new(probe),
        Arc::new(Metrics::new()),
        Arc::new(Readiness::new()),
    );
    let mut writer = NodeWriter::new(client, NODE);
    let error = write_once(&mut prober, &mut writer, 3, Backoff::default())
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("reading node gpu-node-1"),
        "{error}"
    );
    drop(writer);
    api.await.unwrap();
}

/// A fixture file the test may rewrite while the loop runs.
struct ScratchFixture(PathBuf);

impl ScratchFixture {
    fn new(name: &str, from: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("vramfit-agent-{}-{name}.yaml", std::process::id()));
        std::fs::copy(fixture(from), &path).unwrap();
        Self(path)
    }

    fn replace_with(&self, from: &str) {
        std::fs::copy(fixture(from), &self.0).unwrap();
    }
}

impl Drop for ScratchFixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test(start_paused = true)]
async fn the_refresh_loop_retries_stays_quiet_at_steady_state_and_follows_changes() {
    let scratch = ScratchFixture::new("loop", "nvml-unavailable.yaml");
    let (client, mut server) = ApiServer::new();
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::new());
    let probe = FixtureProbe::open(&scratch.0).unwrap();
    let refresh = RefreshLoop {
        prober: Prober::new(
            Box::new(probe),
            Arc::clone(&metrics),
            Arc::clone(&readiness),
        ),
        writer: NodeWriter::new(client, NODE),
        interval: Duration::from_secs(60),
        // Longer than the test's last step: the repairs have their own test.
        repair_interval: Duration::from_secs(86_400),
        backoff: Backoff::default(),
        metrics: Arc::clone(&metrics),
        readiness: Arc::clone(&readiness),
    };
    let (trigger, shutdown) = Shutdown::new();
    let agent = tokio::spawn(refresh.run(shutdown));

    // The API server is down at first: errors, retried, and not ready meanwhile.
    assert_eq!(
        server.fail(StatusCode::SERVICE_UNAVAILABLE).await,
        Method::GET
    );
    assert_eq!(
        server.fail(StatusCode::INTERNAL_SERVER_ERROR).await,
        Method::GET
    );
    server.expect_get(&foreign_labels()).await;
    assert!(!readiness.is_ready());
    let applied = server.expect_apply(&foreign_labels()).await;
    assert_eq!(applied[keys::GPU_ABSENT_REASON], "nvml-unavailable");

    // Steady state: an hour of refreshes, not one request.
    server.expect_silence_for(Duration::from_secs(3600)).await;
    assert!(readiness.is_ready());

    // The driver comes up: the next refresh applies the GPU labels, without the stale key.
    scratch.replace_with("a10g-x1.yaml");
    let applied = server.expect_apply(&foreign_labels()).await;
    assert_eq!(applied[keys::GPU_PRODUCT], "NVIDIA-A10G");
    assert!(!applied.contains_key(keys::GPU_ABSENT_REASON));
    server.expect_silence_for(Duration::from_secs(600)).await;

    // A change that cannot be written makes the agent unready until it is.
    scratch.replace_with("a10g-x4.yaml");
    assert_eq!(
        server.fail(StatusCode::SERVICE_UNAVAILABLE).await,
        Method::PATCH
    );
    server.expect_silence_for(Duration::from_millis(100)).await;
    assert!(!readiness.is_ready());
    assert_eq!(
        server.expect_apply(&foreign_labels()).await[keys::GPU_COUNT],
        "4"
    );
    server.expect_silence_for(Duration::from_secs(120)).await;
    assert!(readiness.is_ready());

    trigger.trigger();
    agent.await.unwrap();
    server.expect_no_more_requests().await;

    let text = metrics.encode().unwrap();
    assert!(
        text.contains("vramfit_agent_label_writes_total 3\n"),
        "{text}"
    );
    assert!(
        text.contains("vramfit_agent_label_write_errors_total 3\n"),
        "{text}"
    );
    // The quiet hour was not idle: it probed every minute and found nothing to write.
    let unavailable_probes: u64 = text
        .lines()
        .find_map(|line| {
            line.strip_prefix("vramfit_agent_probe_errors_total{reason=\"nvml-unavailable\"} ")
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no nvml-unavailable count in {text}"));
    assert!(
        unavailable_probes >= 60,
        "{unavailable_probes} probes in the quiet hour"
    );
    assert!(text.contains("vramfit_agent_gpus 4\n"), "{text}");
}

/// `foreign_labels()` plus `own`.
fn node_with(own: &NodeLabels) -> BTreeMap<String, String> {
    let mut labels = foreign_labels();
    labels.extend(own.clone());
    labels
}

#[tokio::test]
async fn a_repair_puts_back_labels_someone_else_changed_or_removed() {
    let (client, mut server) = ApiServer::new();
    let desired = labels_of("v100-32gb-x1.yaml");
    let mut tampered = desired.clone();
    // Someone claims bf16 on a V100 and drops the count.
    tampered.insert(keys::GPU_BF16.to_string(), "true".to_string());
    tampered.remove(keys::GPU_COUNT);
    let expected = desired.clone();
    let api = tokio::spawn(async move {
        server.expect_get(&node_with(&expected)).await;
        server.expect_get(&node_with(&tampered)).await;
        server
            .expect_apply_of(&expected, &node_with(&expected))
            .await;
        server.expect_no_more_requests().await;
    });
    let mut writer = NodeWriter::new(client, NODE);
    assert_eq!(
        writer.sync(&desired).await.unwrap(),
        SyncOutcome::AlreadyCurrent
    );
    assert_eq!(
        writer.repair(&desired).await.unwrap(),
        SyncOutcome::Repaired
    );
    // Repaired: the next syncs send nothing.
    assert_eq!(
        writer.sync(&desired).await.unwrap(),
        SyncOutcome::AlreadyCurrent
    );
    drop(writer);
    api.await.unwrap();
}

#[tokio::test]
async fn a_repair_of_an_unchanged_node_is_one_get_and_no_write() {
    let (client, mut server) = ApiServer::new();
    let desired = labels_of("a10g-x4.yaml");
    let on_node = node_with(&desired);
    let api = tokio::spawn(async move {
        // The first sync's GET, then one GET per repair: never a PATCH.
        for _ in 0..3 {
            server.expect_get(&on_node).await;
        }
        server.expect_no_more_requests().await;
    });
    let mut writer = NodeWriter::new(client, NODE);
    assert_eq!(
        writer.sync(&desired).await.unwrap(),
        SyncOutcome::AlreadyCurrent
    );
    for _ in 0..2 {
        assert_eq!(
            writer.repair(&desired).await.unwrap(),
            SyncOutcome::AlreadyCurrent
        );
    }
    drop(writer);
    api.await.unwrap();
}

#[tokio::test]
async fn vramfit_labels_someone_else_added_are_removed_after_the_apply() {
    let (client, mut server) = ApiServer::new();
    let desired = labels_of("a10g-x1.yaml");
    let fake_slices = keys::mig_count_key("3g.40gb");
    let mut with_fake = node_with(&desired);
    with_fake.insert(fake_slices.clone(), "7".to_string());
    let expected = desired.clone();
    let api = tokio::spawn(async move {
        server.expect_get(&node_with(&expected)).await;
        server.expect_get(&with_fake).await;
        // kubectl owns the key: the apply leaves it, the merge patch removes it.
        server.expect_apply_of(&expected, &with_fake).await;
        server
            .expect_removal(&[fake_slices.as_str()], &node_with(&expected))
            .await;
        // The next repair finds the node as the agent wants it: no write.
        server.expect_get(&node_with(&expected)).await;
        server.expect_no_more_requests().await;
    });
    let mut writer = NodeWriter::new(client, NODE);
    assert_eq!(
        writer.sync(&desired).await.unwrap(),
        SyncOutcome::AlreadyCurrent
    );
    assert_eq!(
        writer.repair(&desired).await.unwrap(),
        SyncOutcome::Repaired
    );
    assert_eq!(
        writer.repair(&desired).await.unwrap(),
        SyncOutcome::AlreadyCurrent
    );
    drop(writer);
    api.await.unwrap();
}

/// `step`, which must be done within `period` of (paused) test time: a request the agent
/// never sends fails the test instead of hanging it.
async fn within<T>(period: Duration, step: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(period, step)
        .await
        .unwrap_or_else(|_| panic!("no request within {period:?}"))
}

#[tokio::test(start_paused = true)]
async fn the_refresh_loop_repairs_on_its_slow_period_and_only_writes_what_differs() {
    let (client, mut server) = ApiServer::new();
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::new());
    let probe = FixtureProbe::open(fixture("a10g-x1.yaml")).unwrap();
    let desired = labels_of("a10g-x1.yaml");
    let refresh = RefreshLoop {
        prober: Prober::new(
            Box::new(probe),
            Arc::clone(&metrics),
            Arc::clone(&readiness),
        ),
        writer: NodeWriter::new(client, NODE),
        interval: Duration::from_secs(60),
        repair_interval: Duration::from_secs(600),
        backoff: Backoff::default(),
        metrics: Arc::clone(&metrics),
        readiness: Arc::clone(&readiness),
    };
    let (trigger, shutdown) = Shutdown::new();
    let start = Instant::now();
    let agent = tokio::spawn(refresh.run(shutdown));

    // Start: the node already carries the labels.
    server.expect_get(&node_with(&desired)).await;
    // Nine refreshes trust the writer's view; the tenth minute's is a repair: one GET.
    server.expect_silence_for(Duration::from_secs(590)).await;
    within(
        Duration::from_secs(20),
        server.expect_get(&node_with(&desired)),
    )
    .await;
    assert_eq!(start.elapsed(), Duration::from_secs(600));
    server.expect_silence_for(Duration::from_secs(590)).await;

    // Someone says the node has no GPU; the next repair puts the labels back.
    let mut tampered = desired.clone();
    tampered.insert(keys::GPU_PRESENT.to_string(), "false".to_string());
    within(
        Duration::from_secs(20),
        server.expect_get(&node_with(&tampered)),
    )
    .await;
    assert_eq!(start.elapsed(), Duration::from_secs(1200));
    server.expect_apply_of(&desired, &node_with(&desired)).await;
    server.expect_silence_for(Duration::from_secs(590)).await;
    within(
        Duration::from_secs(20),
        server.expect_get(&node_with(&desired)),
    )
    .await;

    trigger.trigger();
    agent.await.unwrap();
    server.expect_no_more_requests().await;
    let text = metrics.encode().unwrap();
    assert!(
        text.contains("vramfit_agent_label_writes_total 1\n"),
        "{text}"
    );
    assert!(
        text.contains("vramfit_agent_label_repairs_total 1\n"),
        "{text}"
    );
}
