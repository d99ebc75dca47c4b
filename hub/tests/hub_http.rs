//! The Hub client against a local HTTP server that plays the Hub (and its CDN): committed
//! config files, safetensors files written here and served with range support, a redirect to
//! another origin, 404s with the Hub's error codes, a gated and a private model, a slow answer,
//! a malformed file, a server that ignores `Range`, and a redirect loop.
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use vramfit_hub::{HubClient, HubConfig, RepoRef};
use vramfit_models::source::{CheckpointError, SourceErrorKind};

/// What the server saw of each request.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    range: Option<String>,
    authorization: Option<String>,
}

#[derive(Clone, Default)]
struct Hub {
    /// Files by request path.
    files: Arc<HashMap<String, Vec<u8>>>,
    /// Redirects by request path.
    redirects: Arc<HashMap<String, String>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

fn config(repo: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../models/testdata/configs/{repo}/config.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A safetensors file: header naming `tensors` (name, dtype, shape), then `padding` bytes of
/// data beyond the tensors (the weights vramfit must never download).
fn safetensors(tensors: &[(&str, &str, &[u64])], padding: usize) -> (Vec<u8>, u64) {
    let mut offset = 0u64;
    let mut entries = Vec::new();
    let mut elements = 0u64;
    for (name, dtype, shape) in tensors {
        let n: u64 = shape.iter().product();
        let bytes = n * if *dtype == "BF16" { 2 } else { 4 };
        entries.push(format!(
            r#""{name}":{{"dtype":"{dtype}","shape":{shape:?},"data_offsets":[{offset},{}]}}"#,
            offset + bytes
        ));
        offset += bytes;
        elements += n;
    }
    let header = format!(
        r#"{{"__metadata__":{{"format":"pt"}},{}}}"#,
        entries.join(",")
    );
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    file.resize(file.len() + offset as usize + padding, 7);
    (file, elements)
}

/// Serves `hub.files` with `Range` support, `hub.redirects`, and the special repositories.
async fn serve(State(hub): State<Hub>, request: Request) -> Response {
    let path = request.uri().path().to_string();
    let headers = request.headers();
    let text = |h: &HeaderMap, name| {
        h.get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .map(str::to_string)
    };
    hub.seen.lock().unwrap().push(Seen {
        path: path.clone(),
        range: text(headers, header::RANGE),
        authorization: text(headers, header::AUTHORIZATION),
    });
    let error_code =
        |status: StatusCode, code: &'static str| (status, [("x-error-code", code)]).into_response();
    if path.starts_with("/org/slow/") {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    if path.starts_with("/org/missing/") {
        return error_code(StatusCode::UNAUTHORIZED, "RepoNotFound");
    }
    if path.starts_with("/org/gated/") {
        return error_code(StatusCode::FORBIDDEN, "GatedRepo");
    }
    if path.starts_with("/org/private/")
        && text(headers, header::AUTHORIZATION).as_deref() != Some("Bearer secret")
    {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if path.starts_with("/org/loop/") {
        return (StatusCode::FOUND, [(header::LOCATION, path.clone())]).into_response();
    }
    if let Some(target) = hub.redirects.get(&path) {
        return (StatusCode::FOUND, [(header::LOCATION, target.clone())]).into_response();
    }
    let Some(file) = hub.files.get(&path) else {
        return error_code(StatusCode::NOT_FOUND, "EntryNotFound");
    };
    let range = text(headers, header::RANGE).filter(|_| !path.starts_with("/org/norange/"));
    let Some(range) = range else {
        return Response::new(Body::from(file.clone()));
    };
    let (start, end) = range
        .strip_prefix("bytes=")
        .unwrap()
        .split_once('-')
        .unwrap();
    let (start, end): (usize, usize) = (start.parse().unwrap(), end.parse().unwrap());
    if start >= file.len() {
        return (
            StatusCode::RANGE_NOT_SATISFIABLE,
            [(header::CONTENT_RANGE, format!("bytes */{}", file.len()))],
        )
            .into_response();
    }
    let end = end.min(file.len() - 1);
    (
        StatusCode::PARTIAL_CONTENT,
        [(
            header::CONTENT_RANGE,
            format!("bytes {start}-{end}/{}", file.len()),
        )],
        file[start..=end].to_vec(),
    )
        .into_response()
}

async fn start(hub: Hub) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(serve).with_state(hub);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

const SHARD1: &str = "model-00001-of-00002.safetensors";
/// The commit `main` of `org/sharded` names (its model info's `sha`).
const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const SHARD2: &str = "model-00002-of-00002.safetensors";

/// The Hub on one port and its "CDN" on another (another origin), and their request logs.
async fn hub_and_cdn() -> (String, Hub, Hub, u64) {
    let (shard1, n1) = safetensors(
        &[
            ("model.embed_tokens.weight", "BF16", &[64, 32]),
            ("model.norm.weight", "F32", &[32]),
        ],
        1 << 20,
    );
    let (shard2, n2) = safetensors(&[("lm_head.weight", "BF16", &[64, 32])], 1 << 20);
    let index = format!(
        r#"{{"metadata":{{"total_size":12416}},"weight_map":{{"model.embed_tokens.weight":"{SHARD1}","model.norm.weight":"{SHARD1}","lm_head.weight":"{SHARD2}"}}}}"#
    );
    let cdn = Hub {
        files: Arc::new(HashMap::from([("/cdn/shard2".to_string(), shard2)])),
        ..Hub::default()
    };
    let cdn_addr = start(cdn.clone()).await;
    let mut files = HashMap::new();
    let qwen = config("Qwen/Qwen3-8B");
    for repo in ["sharded", "norange", "private"] {
        files.insert(
            format!("/org/{repo}/resolve/main/config.json"),
            qwen.clone(),
        );
        files.insert(
            format!("/org/{repo}/resolve/main/model.safetensors.index.json"),
            index.clone().into_bytes(),
        );
        files.insert(format!("/org/{repo}/resolve/main/{SHARD1}"), shard1.clone());
        files.insert(format!("/org/{repo}/resolve/main/{SHARD2}"), vec![]);
    }
    files.insert(
        "/org/config-only/resolve/refs%2Fpr%2F1/config.json".into(),
        config("google/gemma-3-4b-it"),
    );
    files.insert(
        "/org/malformed/resolve/main/config.json".into(),
        b"{\"num_hidden_layers\": 32,".to_vec(),
    );
    files.insert(
        "/api/models/org/sharded/revision/main".into(),
        format!(
            r#"{{"_id":"1","id":"org/sharded","sha":"{}","siblings":[{{"rfilename":"config.json"}}]}}"#,
            SHA.to_ascii_uppercase()
        )
        .into_bytes(),
    );
    files.insert(
        "/api/models/org/malformed/revision/main".into(),
        br#"{"id":"org/malformed","sha":"main"}"#.to_vec(),
    );
    let (bad, _) = safetensors(&[("w", "BF16", &[4])], 0);
    let mut bad = bad;
    bad[0..8].copy_from_slice(&u64::MAX.to_le_bytes());
    files.insert(
        "/org/bad-header/resolve/main/config.json".into(),
        qwen.clone(),
    );
    files.insert("/org/bad-header/resolve/main/model.safetensors".into(), bad);
    let mut redirects = HashMap::new();
    for repo in ["sharded", "private"] {
        redirects.insert(
            format!("/org/{repo}/resolve/main/{SHARD2}"),
            format!("http://{cdn_addr}/cdn/shard2"),
        );
    }
    redirects.insert(
        format!("/org/norange/resolve/main/{SHARD2}"),
        format!("/org/norange/resolve/main/{SHARD1}"),
    );
    let hub = Hub {
        files: Arc::new(files),
        redirects: Arc::new(redirects),
        ..Hub::default()
    };
    let addr = start(hub.clone()).await;
    (format!("http://{addr}"), hub, cdn, n1 + n2)
}

fn client(endpoint: &str, token: Option<&str>) -> HubClient {
    HubClient::new(HubConfig {
        endpoint: endpoint.to_string(),
        token: token.map(str::to_string),
        timeout: Duration::from_secs(2),
        ..HubConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn reads_config_index_and_headers_with_ranges_never_the_weights() {
    let (endpoint, hub, cdn, elements) = hub_and_cdn().await;
    let c = client(&endpoint, Some("secret"))
        .read_checkpoint(&RepoRef::parse("org/sharded").unwrap())
        .await
        .unwrap();
    assert_eq!(c.layers.value, 36, "config.json");
    assert_eq!(c.parameters.as_ref().unwrap().value, elements);
    assert_eq!(
        c.parameters.as_ref().unwrap().from.to_string(),
        "tensor elements summed from 2 safetensors headers"
    );
    let weights = c.weights.as_ref().unwrap();
    assert_eq!(weights.bytes.value, 64 * 32 * 2 * 2 + 32 * 4);
    assert_eq!(weights.by_dtype["F32"], 128);

    let seen = hub.seen.lock().unwrap().clone();
    let shard1: Vec<_> = seen.iter().filter(|s| s.path.ends_with(SHARD1)).collect();
    let header_len = {
        let (file, _) = safetensors(
            &[
                ("model.embed_tokens.weight", "BF16", &[64, 32]),
                ("model.norm.weight", "F32", &[32]),
            ],
            0,
        );
        u64::from_le_bytes(file[..8].try_into().unwrap())
    };
    assert_eq!(
        shard1
            .iter()
            .map(|s| s.range.clone().unwrap())
            .collect::<Vec<_>>(),
        vec![
            "bytes=0-7".to_string(),
            format!("bytes=8-{}", 8 + header_len - 1)
        ],
        "the length, then the header, never the data"
    );
    assert!(
        seen.iter()
            .all(|s| s.authorization.as_deref() == Some("Bearer secret"))
    );
    // The CDN is another origin: it got the ranges but never the token.
    let cdn_seen = cdn.seen.lock().unwrap().clone();
    assert_eq!(cdn_seen.len(), 2);
    assert!(
        cdn_seen
            .iter()
            .all(|s| s.range.is_some() && s.authorization.is_none()),
        "{cdn_seen:?}"
    );
}

/// A branch is read as the commit it names now (the model info's `sha`); a full commit hash
/// is its own answer, with no request; a mirror with no model info gives none; an answer
/// whose `sha` is no commit hash is refused.
#[tokio::test]
async fn the_commit_a_revision_names_is_read_from_the_model_info() {
    let (endpoint, hub, _, _) = hub_and_cdn().await;
    let c = client(&endpoint, None);
    let commit = |repo: &str| RepoRef::parse(repo).unwrap();
    assert_eq!(
        c.read_commit(&commit("org/sharded")).await.unwrap(),
        Some(SHA.to_string())
    );
    let pinned = format!("org/sharded@{}", SHA.to_ascii_uppercase());
    let before = hub.seen.lock().unwrap().len();
    assert_eq!(
        c.read_commit(&commit(&pinned)).await.unwrap(),
        Some(SHA.to_string())
    );
    assert_eq!(hub.seen.lock().unwrap().len(), before, "no request");
    assert_eq!(
        c.read_commit(&commit("org/config-only@refs/pr/1"))
            .await
            .unwrap(),
        None,
        "a mirror that serves files only"
    );
    assert!(
        hub.seen
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.path == "/api/models/org/config-only/revision/refs%2Fpr%2F1"),
        "the revision is one encoded path segment"
    );
    let refused = c.read_commit(&commit("org/malformed")).await.unwrap_err();
    assert_eq!(refused.kind, SourceErrorKind::Invalid, "{refused}");
}

#[tokio::test]
async fn a_pinned_revision_and_a_mirror_path_are_in_the_url() {
    let (endpoint, hub, _, _) = hub_and_cdn().await;
    // A mirror that serves the Hub under a path prefix would be `{endpoint}/prefix`; here the
    // revision is the part that must survive encoding.
    let c = client(&format!("{endpoint}/"), None)
        .read_checkpoint(&RepoRef::parse("org/config-only@refs/pr/1").unwrap())
        .await
        .unwrap();
    assert_eq!(c.architecture.value, "Gemma3ForConditionalGeneration");
    assert!(
        c.weights.is_none(),
        "no index and no model.safetensors: numbers from config.json only"
    );
    let seen = hub.seen.lock().unwrap().clone();
    assert_eq!(
        seen[0].path,
        "/org/config-only/resolve/refs%2Fpr%2F1/config.json"
    );
    assert!(
        seen.iter()
            .any(|s| s.path.ends_with("/model.safetensors")
                && s.range.as_deref() == Some("bytes=0-7"))
    );
}

async fn failure(endpoint: &str, repo: &str, token: Option<&str>) -> CheckpointError {
    client(endpoint, token)
        .read_checkpoint(&RepoRef::parse(repo).unwrap())
        .await
        .unwrap_err()
}

fn kind(e: &CheckpointError) -> Option<SourceErrorKind> {
    match e {
        CheckpointError::Source(s) => Some(s.kind),
        _ => None,
    }
}

#[tokio::test]
async fn refusals_and_missing_things_give_one_clear_line() {
    let (endpoint, _, _, _) = hub_and_cdn().await;
    let e = failure(&endpoint, "org/missing", None).await;
    assert_eq!(kind(&e), Some(SourceErrorKind::NotFound));
    assert_eq!(
        e.to_string(),
        format!(
            "org/missing@main ({endpoint}): config.json: no such repository, or a private one and no token given (HTTP 401)"
        )
    );
    let e = failure(&endpoint, "org/gated", Some("secret")).await;
    assert_eq!(kind(&e), Some(SourceErrorKind::Forbidden));
    assert!(e.to_string().ends_with(
        "config.json: a gated model: accept its licence on the Hub with the token's account"
    ));
    let e = failure(&endpoint, "org/private", None).await;
    assert_eq!(kind(&e), Some(SourceErrorKind::Unauthorized));
    assert!(
        failure(&endpoint, "org/private", Some("wrong"))
            .await
            .to_string()
            .contains("HTTP 401")
    );
    let e = failure(&endpoint, "org/nothing-here", None).await;
    assert_eq!(
        e.to_string(),
        format!(
            "org/nothing-here@main ({endpoint}): no config.json (not a Hugging Face model folder or repository)"
        )
    );
    let e = failure(&endpoint, "org/malformed", None).await;
    assert!(matches!(e, CheckpointError::File { .. }));
    assert!(
        e.to_string().starts_with(&format!(
            "org/malformed@main ({endpoint}): config.json: not valid JSON: EOF"
        )),
        "{e}"
    );
    let e = failure(&endpoint, "org/bad-header", None).await;
    assert!(
        e.to_string().contains(&format!(
            "model.safetensors: the header is 18446744073709551615, more than the {}",
            vramfit_models::limits::SAFETENSORS_HEADER
        )),
        "{e}"
    );
    let e = failure(&endpoint, "org/loop", None).await;
    assert_eq!(kind(&e), Some(SourceErrorKind::Invalid));
    assert!(
        e.to_string()
            .ends_with("config.json: more than 5 redirects")
    );
    let e = failure("http://127.0.0.1:9", "org/any", None).await;
    assert_eq!(kind(&e), Some(SourceErrorKind::Unavailable));
    assert!(
        e.to_string()
            .contains("config.json: client error (Connect)"),
        "{e}"
    );
    assert!(!e.to_string().contains('\n'));
}

#[tokio::test]
async fn a_slow_hub_times_out_and_a_server_without_ranges_still_works() {
    let (endpoint, _, _, _) = hub_and_cdn().await;
    let started = Instant::now();
    let e = failure(&endpoint, "org/slow", None).await;
    assert_eq!(kind(&e), Some(SourceErrorKind::Timeout));
    assert!(
        e.to_string()
            .ends_with("config.json: no complete answer within 2s"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(4));
    // A server that answers every range with the whole file: the client reads the prefix it
    // needs and drops the rest (here the second shard redirects to the first: its tensors are
    // counted once, in the shard the index puts them in).
    let c = client(&endpoint, None)
        .read_checkpoint(&RepoRef::parse("org/norange").unwrap())
        .await
        .unwrap();
    assert_eq!(c.parameters.as_ref().unwrap().value, 64 * 32 + 32);
}

#[test]
fn endpoints_must_be_http_urls() {
    for bad in ["ftp://hub", "huggingface.co", "https://hub/?x=1", ""] {
        let e = HubClient::new(HubConfig {
            endpoint: bad.into(),
            ..HubConfig::default()
        })
        .unwrap_err();
        assert!(
            e.to_string().contains("is not an http:// or https:// URL"),
            "{bad}: {e}"
        );
    }
    let debug = format!("{:?}", client("http://127.0.0.1:1", Some("hf_secret")));
    assert!(!debug.contains("hf_secret"), "{debug}");
}
