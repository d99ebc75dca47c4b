//! The agent's passes against kube's mock API service (the exact status applies it sends)
//! and a tiny local Hub (the model really downloaded into a temporary cache root).
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use http::Method;
use kube::Client;
use kube::client::Body;
use ring::digest::{SHA1_FOR_LEGACY_USE_ONLY, digest};
use serde_json::{Value, json};
use tower_test::mock;
use vramfit_api::model_cache::{
    CachedModelPhase, ModelCache, ModelCacheSpec, ModelCacheStatus, WantedModel,
};
use vramfit_cache::CacheConfig;
use vramfit_cache_agent::cache_loop::{CacheAgent, PassOutcome, Settings};
use vramfit_cache_agent::metrics::Metrics;
use vramfit_cache_agent::readiness::Readiness;
use vramfit_cache_agent::status_writer::{FIELD_MANAGER, StatusWriter, apply_body};
use vramfit_hub::TokenScope;

const NODE: &str = "gpu-1";
/// What kube sends for a forced server-side apply of the status subresource.
const STATUS_APPLY: &str = "/apis/vramfit.io/v1alpha1/modelcaches/gpu-1/status?&force=true&fieldManager=vramfit-cache-agent";
const CONFIG: &[u8] = b"{\"model_type\": \"tiny\"}";

type Handle = mock::Handle<http::Request<Body>, http::Response<Body>>;

fn mock_api() -> (Client, Handle) {
    let (service, handle) = mock::pair::<http::Request<Body>, http::Response<Body>>();
    (Client::new(service, "default"), handle)
}

/// Expects a status apply, answers 200, and returns its body.
async fn expect_status_apply(handle: &mut Handle) -> Value {
    let (request, send) = handle.next_request().await.expect("no request");
    assert_eq!(request.method(), Method::PATCH);
    assert_eq!(request.uri().to_string(), STATUS_APPLY);
    assert_eq!(
        request.headers()["content-type"],
        "application/apply-patch+yaml"
    );
    let body: Value =
        serde_json::from_slice(&request.into_body().collect_bytes().await.unwrap()).unwrap();
    // The object after the apply: the operator's spec and the applied status.
    let mut after = body.clone();
    after["spec"] = json!({});
    let reply = http::Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&after).unwrap()))
        .unwrap();
    send.send_response(reply);
    body
}

/// Answers the next `count` status applies; the last one's body.
fn answer_applies(mut handle: Handle, count: usize) -> tokio::task::JoinHandle<Value> {
    tokio::spawn(async move {
        let mut last = Value::Null;
        for _ in 0..count {
            last = expect_status_apply(&mut handle).await;
        }
        last
    })
}

fn git_blob_hex(bytes: &[u8]) -> String {
    let mut blob = format!("blob {}\0", bytes.len()).into_bytes();
    blob.extend_from_slice(bytes);
    digest(&SHA1_FOR_LEGACY_USE_ONLY, &blob)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A Hub with one repository, `org/tiny` at `main`, of one small file kept in git;
/// `org/slow`, the same served slowly; `org/twin`, the same again; `private/tiny`, the same for the token `hf_secret`
/// only. Every other repository is not found.
async fn start_hub() -> String {
    async fn serve(request: Request) -> Response {
        let asked = request.uri().path();
        if asked.contains("/org/slow/") && asked.contains("/resolve/") {
            // `org/slow`: the same files, each answered after a pause.
            tokio::time::sleep(Duration::from_millis(900)).await;
        }
        let token = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if asked.contains("/private/") && token != Some("Bearer hf_secret") {
            // `private/tiny`: the same files, for the token only.
            return (StatusCode::UNAUTHORIZED, [("x-error-code", "RepoNotFound")]).into_response();
        }
        let path = asked
            .replace("/org/slow/", "/org/tiny/")
            .replace("/private/tiny/", "/org/tiny/")
            .replace("/org/twin/", "/org/tiny/");
        match path.as_str() {
            "/api/models/org/tiny/tree/main" => {
                let listing = format!(
                    r#"[{{"type":"file","oid":"{}","size":{},"path":"config.json"}}]"#,
                    git_blob_hex(CONFIG),
                    CONFIG.len()
                );
                listing.into_response()
            }
            "/org/tiny/resolve/main/config.json" => CONFIG.into_response(),
            _ => (StatusCode::NOT_FOUND, [("x-error-code", "RepoNotFound")]).into_response(),
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(serve);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

fn wanted(repo: &str, in_use: bool) -> WantedModel {
    WantedModel {
        repo: repo.to_string(),
        revision: "main".to_string(),
        namespaces: vec!["team-a".to_string()],
        in_use,
    }
}

fn model_cache(models: Vec<WantedModel>) -> ModelCache {
    let mut cache = ModelCache::new(NODE, ModelCacheSpec { models });
    cache.metadata.generation = Some(2);
    cache
}

fn agent(
    root: &std::path::Path,
    endpoint: &str,
    client: Client,
) -> (CacheAgent, Arc<Metrics>, Arc<Readiness>) {
    agent_with_resync(root, endpoint, client, Duration::from_secs(60))
}

fn agent_with_resync(
    root: &std::path::Path,
    endpoint: &str,
    client: Client,
    resync: Duration,
) -> (CacheAgent, Arc<Metrics>, Arc<Readiness>) {
    agent_with_settings(plain_settings(root, endpoint, 1 << 20, resync), client)
}

/// A first agent's pass fetches `org/tiny` into the cache at `root`; the spec that wants it.
async fn tiny_fetched(root: &std::path::Path, endpoint: &str) -> ModelCache {
    let cache = model_cache(vec![wanted("org/tiny", false)]);
    let (client, handle) = mock_api();
    let (mut agent, _, _) = agent(root, endpoint, client);
    let api = answer_applies(handle, 2);
    assert_eq!(agent.pass(&cache).await, PassOutcome::Fetched);
    api.await.unwrap();
    cache
}

/// An agent whose cache has room for one model (of `CONFIG`).
fn agent_with_room_for_one(root: &std::path::Path, endpoint: &str, client: Client) -> CacheAgent {
    let budget = CONFIG.len() as u64;
    let settings = plain_settings(root, endpoint, budget, Duration::from_secs(60));
    agent_with_settings(settings, client).0
}

/// Whether the cache at `root` holds `org/<name>`'s config file.
fn holds(root: &std::path::Path, name: &str) -> bool {
    root.join(format!("models/org--{name}/main/config.json"))
        .exists()
}

/// A cache of `budget` bytes at `root` reading `endpoint` without a token.
fn plain_settings(
    root: &std::path::Path,
    endpoint: &str,
    budget: u64,
    resync: Duration,
) -> Settings {
    let mut cache = CacheConfig::new(root, budget);
    cache.endpoint = endpoint.to_string();
    Settings {
        cache,
        token_file: None,
        token_scope: TokenScope::default(),
        resync,
        reverify_every: None,
    }
}

fn agent_with_settings(
    settings: Settings,
    client: Client,
) -> (CacheAgent, Arc<Metrics>, Arc<Readiness>) {
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::new());
    let agent = CacheAgent::new(
        settings,
        StatusWriter::new(client, NODE),
        metrics.clone(),
        readiness.clone(),
    );
    (agent, metrics, readiness)
}

fn status_of(body: &Value) -> ModelCacheStatus {
    assert_eq!(body["apiVersion"], "vramfit.io/v1alpha1");
    assert_eq!(body["kind"], "ModelCache");
    assert_eq!(body["metadata"], json!({ "name": NODE }));
    assert!(
        body.get("spec").is_none(),
        "the spec is the operator's: {body}"
    );
    serde_json::from_value(body["status"].clone()).unwrap()
}

#[tokio::test]
async fn the_status_is_a_forced_apply_of_the_status_subresource_and_nothing_else() {
    let (client, handle) = mock_api();
    let status = ModelCacheStatus {
        budget_bytes: 100,
        used_bytes: 7,
        ..ModelCacheStatus::default()
    };
    let writer = StatusWriter::new(client, NODE);
    let expected = apply_body(NODE, &status);
    let api = answer_applies(handle, 1);
    writer.write(&status).await.unwrap();
    let body = api.await.unwrap();
    assert_eq!(body, expected);
    assert_eq!(status_of(&body), status);
    assert_eq!(FIELD_MANAGER, "vramfit-cache-agent");
}

#[tokio::test]
async fn passes_fetch_each_wanted_model_and_report_ready_and_failed() {
    let hub = start_hub().await;
    let root = tempfile::tempdir().unwrap();
    let (client, mut handle) = mock_api();
    let (mut agent, metrics, readiness) = agent(root.path(), &hub, client);
    let cache = model_cache(vec![wanted("org/tiny", true), wanted("org/missing", false)]);

    let api = tokio::spawn(async move {
        let mut bodies = Vec::new();
        for _ in 0..4 {
            bodies.push(expect_status_apply(&mut handle).await);
        }
        (bodies, handle)
    });
    assert!(!readiness.is_ready());
    assert_eq!(agent.pass(&cache).await, PassOutcome::Fetched);
    assert!(readiness.is_ready());
    assert_eq!(agent.pass(&cache).await, PassOutcome::Fetched);
    let (bodies, mut handle) = api.await.unwrap();
    let statuses: Vec<ModelCacheStatus> = bodies.iter().map(status_of).collect();

    // Before the download: Fetching, and the next one Pending.
    assert_eq!(statuses[0].fetching.as_deref(), Some("org/tiny@main"));
    assert_eq!(statuses[0].models[0].phase, CachedModelPhase::Fetching);
    assert_eq!(statuses[0].models[1].phase, CachedModelPhase::Pending);
    assert_eq!(statuses[0].observed_generation, Some(2));
    assert!(statuses[0].heartbeat_time.is_some());
    // After: Ready with its bytes, public (read without a token).
    let ready = &statuses[1];
    assert_eq!(ready.fetching, None);
    assert_eq!(ready.models[0].key(), "org/tiny@main");
    assert_eq!(ready.models[0].phase, CachedModelPhase::Ready);
    assert_eq!(ready.models[0].bytes, CONFIG.len() as u64);
    assert_eq!(ready.models[0].total_bytes, CONFIG.len() as u64);
    assert!(ready.models[0].public);
    assert!(ready.models[0].mountable_by("anyone"));
    assert!(ready.models[0].download_seconds.is_some());
    assert_eq!(ready.used_bytes, CONFIG.len() as u64);
    assert_eq!(ready.budget_bytes, 1 << 20);
    // The file is in the cache's layout.
    let on_disk = root.path().join("models/org--tiny/main/config.json");
    assert_eq!(std::fs::read(on_disk).unwrap(), CONFIG);
    // The second pass: the missing repository fails, with why.
    assert_eq!(statuses[2].fetching.as_deref(), Some("org/missing@main"));
    let failed = &statuses[3].models[1];
    assert_eq!(failed.phase, CachedModelPhase::Failed);
    assert!(
        failed.message.as_deref().unwrap().contains("org/missing"),
        "{failed:?}"
    );
    assert_eq!(statuses[3].models[0].phase, CachedModelPhase::Ready);

    // Nothing left to fetch (the failure waits its backoff), nothing changed, the heartbeat
    // is fresh: no request at all.
    let idle = tokio::spawn(async move {
        let next = tokio::time::timeout(Duration::from_millis(300), handle.next_request()).await;
        assert!(next.is_err(), "unexpected request");
    });
    assert_eq!(agent.pass(&cache).await, PassOutcome::Idle);
    idle.await.unwrap();
    assert!(agent.idle_wait() <= Duration::from_secs(30));

    let text = metrics.encode().unwrap();
    for line in [
        "vramfit_model_cache_fetches_total{result=\"downloaded\"} 1\n",
        "vramfit_model_cache_fetches_total{result=\"failed\"} 1\n",
        "vramfit_model_cache_models{phase=\"Ready\"} 1\n",
        "vramfit_model_cache_models{phase=\"Failed\"} 1\n",
        "vramfit_model_cache_fetch_seconds_count 2\n",
    ] {
        assert!(text.contains(line), "{line:?} not in {text}");
    }
    assert!(
        text.contains(&format!(
            "vramfit_model_cache_downloaded_bytes_total {}\n",
            CONFIG.len()
        )),
        "{text}"
    );
}

#[tokio::test]
async fn after_a_restart_a_complete_model_is_a_hit_and_is_not_downloaded_again() {
    let hub = start_hub().await;
    let root = tempfile::tempdir().unwrap();
    let cache = tiny_fetched(root.path(), &hub).await;
    let (client, handle) = mock_api();
    let (mut agent, metrics, _) = agent(root.path(), &hub, client);
    let api = answer_applies(handle, 1);
    assert_eq!(agent.pass(&cache).await, PassOutcome::Idle);
    let status = status_of(&api.await.unwrap());
    assert_eq!(status.fetching, None);
    assert_eq!(status.models[0].phase, CachedModelPhase::Ready);
    let text = metrics.encode().unwrap();
    assert!(
        text.contains("vramfit_model_cache_fetches_total{result=\"hit\"} 1\n"),
        "{text}"
    );
    assert!(!text.contains("result=\"downloaded\""), "{text}");
}

#[tokio::test]
async fn a_failed_status_write_is_retried_by_the_next_pass() {
    let hub = start_hub().await;
    let root = tempfile::tempdir().unwrap();
    let (client, mut handle) = mock_api();
    let (mut agent, metrics, readiness) = agent(root.path(), &hub, client);
    let cache = model_cache(vec![]);
    let api = tokio::spawn(async move {
        let (_, send) = handle.next_request().await.unwrap();
        let failure = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "unavailable", "reason": "ServiceUnavailable", "code": 503,
        });
        send.send_response(
            http::Response::builder()
                .status(503)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&failure).unwrap()))
                .unwrap(),
        );
        expect_status_apply(&mut handle).await
    });
    assert_eq!(agent.pass(&cache).await, PassOutcome::Idle);
    assert!(!readiness.is_ready());
    assert_eq!(agent.pass(&cache).await, PassOutcome::Idle);
    assert!(readiness.is_ready());
    let status = status_of(&api.await.unwrap());
    assert!(status.models.is_empty());
    let text = metrics.encode().unwrap();
    assert!(
        text.contains("vramfit_model_cache_status_write_errors_total 1\n"),
        "{text}"
    );
}

#[tokio::test]
async fn a_long_download_keeps_the_heartbeat() {
    let hub = start_hub().await;
    let root = tempfile::tempdir().unwrap();
    let (client, mut handle) = mock_api();
    let (mut agent, _, _) =
        agent_with_resync(root.path(), &hub, client, Duration::from_millis(200));
    let cache = model_cache(vec![wanted("org/slow", false)]);
    let api = tokio::spawn(async move {
        let mut statuses = Vec::new();
        loop {
            let status = status_of(&expect_status_apply(&mut handle).await);
            let done = status.fetching.is_none();
            statuses.push(status);
            if done {
                return statuses;
            }
        }
    });
    assert_eq!(agent.pass(&cache).await, PassOutcome::Fetched);
    let statuses = api.await.unwrap();
    // Fetching before, at least one heartbeat while the file was on its way, Ready after.
    assert!(statuses.len() >= 3, "{statuses:?}");
    for during in &statuses[..statuses.len() - 1] {
        assert_eq!(during.fetching.as_deref(), Some("org/slow@main"));
        assert_eq!(during.models[0].phase, CachedModelPhase::Fetching);
    }
    assert_eq!(
        statuses.last().unwrap().models[0].phase,
        CachedModelPhase::Ready
    );
}

#[tokio::test]
async fn the_token_reads_a_private_model_only_for_the_namespaces_it_serves() {
    let hub = start_hub().await;
    let root = tempfile::tempdir().unwrap();
    let token_file = root.path().join("token");
    std::fs::write(&token_file, "hf_secret\n").unwrap();
    let settings = |scope: &str| {
        let mut cache = CacheConfig::new(root.path().join("cache"), 1 << 20);
        cache.endpoint = hub.clone();
        Settings {
            cache,
            token_file: Some(token_file.clone()),
            token_scope: TokenScope::new([scope.to_string()], ["private/*".to_string()]).unwrap(),
            resync: Duration::from_secs(60),
            reverify_every: None,
        }
    };
    let cache = model_cache(vec![wanted("private/tiny", false)]);

    // The token serves team-b, not team-a (the namespace that wants it): anonymous, refused.
    let (client, handle) = mock_api();
    let (mut agent, _, _) = agent_with_settings(settings("team-b"), client);
    let api = answer_applies(handle, 2);
    assert_eq!(agent.pass(&cache).await, PassOutcome::Fetched);
    let refused = status_of(&api.await.unwrap());
    assert_eq!(refused.models[0].phase, CachedModelPhase::Failed);
    assert!(
        !root
            .path()
            .join("cache/models/private--tiny/main/config.json")
            .exists()
    );

    // The token serves team-a: read with it, mountable by team-a only.
    let (client, handle) = mock_api();
    let (mut agent, _, _) = agent_with_settings(settings("team-a"), client);
    let api = answer_applies(handle, 2);
    assert_eq!(agent.pass(&cache).await, PassOutcome::Fetched);
    let ready = status_of(&api.await.unwrap());
    let model = &ready.models[0];
    assert_eq!(model.phase, CachedModelPhase::Ready, "{model:?}");
    assert!(!model.public);
    assert_eq!(model.namespaces, ["team-a"]);
    assert!(model.mountable_by("team-a") && !model.mountable_by("team-b"));
}

#[tokio::test]
async fn a_less_needed_model_never_evicts_a_more_needed_one() {
    let hub = start_hub().await;
    let root = tempfile::tempdir().unwrap();
    let (client, handle) = mock_api();
    let mut agent = agent_with_room_for_one(root.path(), &hub, client);
    // Room for one of them: the first listed is the more needed.
    let spec = model_cache(vec![wanted("org/tiny", false), wanted("org/twin", false)]);
    let api = answer_applies(handle, 4);
    assert_eq!(agent.pass(&spec).await, PassOutcome::Fetched);
    assert_eq!(agent.pass(&spec).await, PassOutcome::Fetched);
    let status = status_of(&api.await.unwrap());
    assert_eq!(status.models[0].phase, CachedModelPhase::Ready);
    assert_eq!(status.models[1].phase, CachedModelPhase::Failed);
    assert!(
        status.models[1]
            .message
            .as_deref()
            .unwrap()
            .contains("org/twin"),
        "{:?}",
        status.models[1]
    );
    assert!(holds(root.path(), "tiny"));
    assert!(!holds(root.path(), "twin"));
}

#[tokio::test]
async fn the_loop_waits_for_its_model_cache_then_reports_and_stops_on_shutdown() {
    use vramfit_cache_agent::watch::Observed;
    use vramfit_runtime::shutdown::Shutdown;

    let hub = start_hub().await;
    let root = tempfile::tempdir().unwrap();
    let (client, mut handle) = mock_api();
    let (agent, _, readiness) = agent(root.path(), &hub, client);
    let (sender, receiver) = tokio::sync::watch::channel(Observed::Unknown);
    let (trigger, shutdown) = Shutdown::new();
    let running = tokio::spawn(agent.run(receiver, shutdown));

    // Not listed yet: not ready. Listed absent: ready, nothing written.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!readiness.is_ready());
    sender.send(Observed::Absent).unwrap();
    for _ in 0..100 {
        if readiness.is_ready() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(readiness.is_ready());

    // Created: its status is written at once.
    sender
        .send(Observed::Present(Arc::new(model_cache(vec![]))))
        .unwrap();
    let status = status_of(
        &tokio::time::timeout(Duration::from_secs(5), expect_status_apply(&mut handle))
            .await
            .expect("no status written"),
    );
    assert_eq!(status.observed_generation, Some(2));
    assert!(status.models.is_empty());

    trigger.trigger();
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the loop did not stop")
        .unwrap();
}

#[tokio::test]
async fn a_served_file_changed_or_a_link_planted_is_caught_and_fetched_again() {
    let hub = start_hub().await;
    let root = tempfile::tempdir().unwrap();
    let cache = tiny_fetched(root.path(), &hub).await;
    // A pod that could write the folder: the same size, other bytes; and a link to a file
    // outside the folder.
    let folder = root.path().join("models/org--tiny/main");
    let config = folder.join("config.json");
    std::fs::write(&config, b"{\"model_type\": \"evil\"}").unwrap();
    assert_eq!(
        std::fs::metadata(&config).unwrap().len(),
        CONFIG.len() as u64
    );
    let outside = root.path().join("outside.py");
    std::fs::write(&outside, b"kept").unwrap();
    std::os::unix::fs::symlink(&outside, folder.join("modeling.py")).unwrap();

    // The agent starts again (a node restart): its first pass re-verifies, finds both, says
    // why while it fetches the model again, then serves it verified.
    let (client, mut handle) = mock_api();
    let (mut agent, _, _) = agent(root.path(), &hub, client);
    let api = tokio::spawn(async move {
        let fetching = status_of(&expect_status_apply(&mut handle).await);
        let ready = status_of(&expect_status_apply(&mut handle).await);
        (fetching, ready)
    });
    assert_eq!(agent.pass(&cache).await, PassOutcome::Fetched);
    let (fetching, ready) = api.await.unwrap();
    assert_eq!(fetching.models[0].phase, CachedModelPhase::Fetching);
    let message = fetching.models[0].message.clone().unwrap();
    assert!(message.contains("re-verification failed"), "{message}");
    assert!(message.contains("config.json"), "{message}");
    assert!(message.contains("modeling.py"), "{message}");
    assert_eq!(ready.models[0].phase, CachedModelPhase::Ready);
    assert_eq!(ready.models[0].message, None);
    assert_eq!(std::fs::read(&config).unwrap(), CONFIG);
    assert!(std::fs::symlink_metadata(folder.join("modeling.py")).is_err());
    assert_eq!(std::fs::read(&outside).unwrap(), b"kept");
}

#[tokio::test]
async fn a_narrowed_token_scope_takes_readers_away_at_once() {
    let hub = start_hub().await;
    let root = tempfile::tempdir().unwrap();
    let token_file = root.path().join("token");
    std::fs::write(&token_file, "hf_secret\n").unwrap();
    let settings = |namespaces: &[&str]| {
        let mut cache = CacheConfig::new(root.path().join("cache"), 1 << 20);
        cache.endpoint = hub.clone();
        Settings {
            cache,
            token_file: Some(token_file.clone()),
            token_scope: TokenScope::new(
                namespaces.iter().map(|n| n.to_string()),
                ["private/*".to_string()],
            )
            .unwrap(),
            resync: Duration::from_secs(60),
            reverify_every: None,
        }
    };
    let cache = model_cache(vec![wanted("private/tiny", false)]);
    let (client, handle) = mock_api();
    let (mut agent, _, _) = agent_with_settings(settings(&["team-a", "team-b"]), client);
    let api = answer_applies(handle, 2);
    assert_eq!(agent.pass(&cache).await, PassOutcome::Fetched);
    let ready = status_of(&api.await.unwrap());
    assert_eq!(ready.models[0].namespaces, ["team-a", "team-b"]);

    // The scope no longer names team-a: its pods may no longer mount the model, and the
    // status says so on the first pass, with no fetch.
    let (client, handle) = mock_api();
    let (mut agent, _, _) = agent_with_settings(settings(&["team-b"]), client);
    let api = answer_applies(handle, 1);
    assert_eq!(agent.pass(&cache).await, PassOutcome::Idle);
    let narrowed = status_of(&api.await.unwrap());
    let model = &narrowed.models[0];
    assert_eq!(model.phase, CachedModelPhase::Ready);
    assert_eq!(model.namespaces, ["team-b"]);
    assert!(!model.mountable_by("team-a") && model.mountable_by("team-b"));

    // No token any more: nobody.
    let mut without = settings(&["team-b"]);
    without.token_file = None;
    let (client, handle) = mock_api();
    let (mut agent, _, _) = agent_with_settings(without, client);
    let api = answer_applies(handle, 1);
    agent.pass(&cache).await;
    let none = status_of(&api.await.unwrap());
    let model = none
        .models
        .iter()
        .find(|m| m.repo == "private/tiny")
        .unwrap();
    assert!(!model.public && model.namespaces.is_empty(), "{model:?}");
}

#[tokio::test]
async fn one_unreadable_record_never_stops_the_cache() {
    let hub = start_hub().await;
    let root = tempfile::tempdir().unwrap();
    let bad_record = root.path().join("records/org--twin/main.json");
    std::fs::create_dir_all(bad_record.parent().unwrap()).unwrap();
    std::fs::write(&bad_record, b"{ truncated").unwrap();
    let bad_folder = root.path().join("models/org--twin/main");
    std::fs::create_dir_all(&bad_folder).unwrap();
    std::fs::write(bad_folder.join("config.json"), b"?").unwrap();

    let (client, handle) = mock_api();
    let (mut agent, _, readiness) = agent(root.path(), &hub, client);
    let cache = model_cache(vec![wanted("org/tiny", false), wanted("org/twin", false)]);
    let api = answer_applies(handle, 2);
    assert_eq!(agent.pass(&cache).await, PassOutcome::Fetched);
    let status = status_of(&api.await.unwrap());
    assert!(readiness.is_ready());
    assert_eq!(status.models[0].phase, CachedModelPhase::Ready);
    // The unreadable one is forgotten (record and folder), so it is fetched like any other.
    assert!(!bad_record.exists() && !bad_folder.exists());
    assert_eq!(status.models[1].phase, CachedModelPhase::Pending);
}

#[tokio::test]
async fn eviction_reads_what_is_in_use_from_the_spec_as_it_is_when_the_fetch_evicts() {
    let hub = start_hub().await;
    let root = tempfile::tempdir().unwrap();
    let (client, handle) = mock_api();
    let mut agent = agent_with_room_for_one(root.path(), &hub, client);
    let api = answer_applies(handle, 4);
    // Room for one model: tiny is cached first.
    let first = model_cache(vec![wanted("org/tiny", false)]);
    assert_eq!(agent.pass(&first).await, PassOutcome::Fetched);
    // The pass starts from a spec that wants twin only; by the time its fetch evicts, the
    // watch holds a newer one in which a pod mounts tiny.
    let started_from = model_cache(vec![wanted("org/twin", false)]);
    let latest = model_cache(vec![wanted("org/tiny", true), wanted("org/twin", false)]);
    let (_sender, receiver) = tokio::sync::watch::channel(
        vramfit_cache_agent::watch::Observed::Present(Arc::new(latest)),
    );
    agent.follow(receiver);
    assert_eq!(agent.pass(&started_from).await, PassOutcome::Fetched);
    let status = status_of(&api.await.unwrap());
    assert_eq!(status.models[0].phase, CachedModelPhase::Failed);
    assert!(holds(root.path(), "tiny"), "a model in use now was evicted");
    assert!(!holds(root.path(), "twin"));
}
