//! The model cache against a local HTTP server that plays the Hub and its CDN (one server on
//! two ports: two origins): a paged tree listing, files served with `Range` support, LFS files
//! redirected to the CDN, a private and a gated repository, a download cut off mid-body, bytes
//! corrupted in transit, and a listing with a path that leaves the model's folder.
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use ring::digest::{SHA1_FOR_LEGACY_USE_ONLY, SHA256, digest};
use vramfit_cache::download::{DownloadError, DownloadLimits, download_file};
use vramfit_cache::layout::{Layout, partial_path};
use vramfit_cache::manifest::{ManifestError, ManifestLimits, list_manifest, resolve_url};
use vramfit_cache::store::{Access, Store};
use vramfit_cache::verify::Mismatch;
use vramfit_cache::{CacheConfig, Credential, FetchError, Fetched, fetch_model};
use vramfit_hub::{HubClient, HubConfig, RepoRef};

/// What the server saw of one request.
#[derive(Clone, Debug)]
struct Seen {
    /// `hub` or `cdn`: which origin was asked.
    origin: &'static str,
    path: String,
    query: Option<String>,
    range: Option<String>,
    authorization: Option<String>,
}

/// A file of a repository: its bytes, and whether it is an LFS file (listed with a SHA-256,
/// served through the CDN).
#[derive(Clone)]
struct File {
    path: String,
    bytes: Vec<u8>,
    lfs: bool,
}

#[derive(Default)]
struct Hub {
    /// Files by repository id (`org/name`), revision `main` (a branch: it may move).
    repos: Mutex<HashMap<String, Vec<File>>>,
    /// Extra raw entries appended to a repository's listing (a hostile mirror).
    extra_entries: HashMap<String, String>,
    /// Entries per page of the listing.
    page_size: usize,
    hub_base: String,
    cdn_base: String,
    /// Resolve paths whose next answer stops after this many bytes of the body.
    cut_after: Mutex<HashMap<String, usize>>,
    /// Resolve paths whose next answer has the right size and the wrong bytes.
    corrupt_once: Mutex<HashSet<String>>,
    /// Resolve paths that always answer with the wrong bytes.
    corrupt_always: HashSet<String>,
    seen: Mutex<Vec<Seen>>,
}

type Shared = Arc<Hub>;

impl Hub {
    /// Serves `files` as repository `name` at `main`.
    fn add(&self, name: &str, files: Vec<File>) {
        self.repos.lock().unwrap().insert(name.to_string(), files);
    }
}

fn header_text(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(digest(&SHA256, bytes).as_ref())
}

fn git_blob_hex(bytes: &[u8]) -> String {
    let mut blob = format!("blob {}\0", bytes.len()).into_bytes();
    blob.extend_from_slice(bytes);
    hex(digest(&SHA1_FOR_LEGACY_USE_ONLY, &blob).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The listing of `repo` as the Hub writes it: a directory entry per folder, then the files.
fn entries(hub: &Hub, repo: &str) -> Vec<String> {
    let files = hub.repos.lock().unwrap()[repo].clone();
    let mut out = Vec::new();
    let folders: BTreeSet<&str> = files
        .iter()
        .filter_map(|f| f.path.rsplit_once('/').map(|(dir, _)| dir))
        .collect();
    for folder in folders {
        out.push(format!(
            r#"{{"type":"directory","oid":"{}","size":0,"path":"{folder}"}}"#,
            "0".repeat(40)
        ));
    }
    for file in &files {
        let size = file.bytes.len();
        if file.lfs {
            out.push(format!(
                r#"{{"type":"file","oid":"{}","size":{size},"path":"{}","lfs":{{"oid":"{}","size":{size},"pointerSize":134}}}}"#,
                "1".repeat(40),
                file.path,
                sha256_hex(&file.bytes)
            ));
        } else {
            out.push(format!(
                r#"{{"type":"file","oid":"{}","size":{size},"path":"{}"}}"#,
                git_blob_hex(&file.bytes),
                file.path
            ));
        }
    }
    if let Some(extra) = hub.extra_entries.get(repo) {
        out.push(extra.clone());
    }
    out
}

/// `bytes=<start>-` or `bytes=<start>-<end>`: the first byte asked for.
fn range_start(range: &str) -> usize {
    range
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .and_then(|(start, _)| start.parse().ok())
        .unwrap()
}

/// A file's bytes from `start`, as 200 or 206, cut or corrupted when the test asks.
fn serve_file(hub: &Hub, key: &str, bytes: &[u8], range: Option<&str>) -> Response {
    let mut body = bytes.to_vec();
    let corrupt = hub.corrupt_always.contains(key) || hub.corrupt_once.lock().unwrap().remove(key);
    if corrupt {
        for b in &mut body {
            *b = b.wrapping_add(1);
        }
    }
    // A server that ignores `Range` answers 200 with the whole file.
    let range = range.filter(|_| !key.starts_with("/org/norange/"));
    let start = range.map_or(0, range_start);
    if start >= body.len() && !body.is_empty() {
        return (
            StatusCode::RANGE_NOT_SATISFIABLE,
            [(header::CONTENT_RANGE, format!("bytes */{}", body.len()))],
        )
            .into_response();
    }
    let total = body.len();
    let rest = body[start..].to_vec();
    let status = if range.is_some() {
        StatusCode::PARTIAL_CONTENT
    } else {
        StatusCode::OK
    };
    let mut response = match hub.cut_after.lock().unwrap().remove(key) {
        Some(cut) => {
            // The first `cut` bytes, a pause so that they reach the client, then the connection
            // breaks (the body errors before its announced length).
            let first: Vec<u8> = rest[..cut].to_vec();
            let stream = futures::stream::iter([Ok::<_, std::io::Error>(first)]).chain(
                futures::stream::once(async {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Err(std::io::Error::other("cut"))
                }),
            );
            let mut response = Response::new(Body::from_stream(stream));
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, rest.len().into());
            response
        }
        None => Response::new(Body::from(rest)),
    };
    *response.status_mut() = status;
    if range.is_some() {
        response.headers_mut().insert(
            header::CONTENT_RANGE,
            format!("bytes {start}-{}/{total}", total - 1)
                .parse()
                .unwrap(),
        );
    }
    response
}

async fn serve(State(hub): State<Shared>, request: Request) -> Response {
    let headers = request.headers();
    let host = header_text(headers, header::HOST).unwrap_or_default();
    let origin = if hub.cdn_base.ends_with(&host) {
        "cdn"
    } else {
        "hub"
    };
    let path = request.uri().path().to_string();
    let query = request.uri().query().map(str::to_string);
    let range = header_text(headers, header::RANGE);
    let authorization = header_text(headers, header::AUTHORIZATION);
    hub.seen.lock().unwrap().push(Seen {
        origin,
        path: path.clone(),
        query: query.clone(),
        range: range.clone(),
        authorization: authorization.clone(),
    });
    let error_code =
        |status: StatusCode, code: &'static str| (status, [("x-error-code", code)]).into_response();
    let token_ok = authorization.as_deref() == Some("Bearer secret");

    if origin == "cdn" {
        // `/cdn/<org>/<name>/<path>`: no token needed (the Hub signs its CDN URLs).
        let rest = path.trim_start_matches("/cdn/");
        let mut parts = rest.splitn(3, '/');
        let (org, name, file) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let repo = format!("{org}/{name}");
        let files = hub.repos.lock().unwrap()[&repo].clone();
        let Some(found) = files.iter().find(|f| f.path == file) else {
            return StatusCode::NOT_FOUND.into_response();
        };
        let key = format!("/{repo}/resolve/main/{file}");
        return serve_file(&hub, &key, &found.bytes, range.as_deref());
    }

    if let Some(rest) = path.strip_prefix("/api/models/") {
        let repo = rest.split("/tree/").next().unwrap().to_string();
        if !hub.repos.lock().unwrap().contains_key(&repo) {
            return error_code(StatusCode::NOT_FOUND, "RepoNotFound");
        }
        if repo.starts_with("org/private") && !token_ok {
            return error_code(StatusCode::UNAUTHORIZED, "RepoNotFound");
        }
        let all = entries(&hub, &repo);
        let cursor: usize = query
            .as_deref()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("cursor=")))
            .map_or(0, |c| c.parse().unwrap());
        let end = (cursor + hub.page_size).min(all.len());
        let body = format!("[{}]", all[cursor..end].join(","));
        let mut response = Response::new(Body::from(body));
        if end < all.len() {
            response.headers_mut().insert(
                header::LINK,
                format!(
                    r#"<{}/api/models/{repo}/tree/main?recursive=true&cursor={end}>; rel="next""#,
                    hub.hub_base
                )
                .parse()
                .unwrap(),
            );
        }
        return response;
    }

    // `/<org>/<name>/resolve/main/<path>`
    let Some((repo, file)) = path.trim_start_matches('/').split_once("/resolve/main/") else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Some(files) = hub.repos.lock().unwrap().get(repo).cloned() else {
        return error_code(StatusCode::NOT_FOUND, "RepoNotFound");
    };
    if repo.starts_with("org/private") && !token_ok {
        return error_code(StatusCode::UNAUTHORIZED, "RepoNotFound");
    }
    if repo.starts_with("org/slow") {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    if repo.starts_with("org/gated") && !token_ok {
        return error_code(StatusCode::FORBIDDEN, "GatedRepo");
    }
    let Some(found) = files.iter().find(|f| f.path == file) else {
        return error_code(StatusCode::NOT_FOUND, "EntryNotFound");
    };
    if found.lfs {
        return (
            StatusCode::FOUND,
            [(
                header::LOCATION,
                format!("{}/cdn/{repo}/{file}", hub.cdn_base),
            )],
        )
            .into_response();
    }
    serve_file(&hub, &path, &found.bytes, range.as_deref())
}

/// Starts the Hub and its CDN; `setup` fills the state once both addresses are known.
async fn start(setup: impl FnOnce(&mut Hub)) -> Shared {
    let hub_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cdn_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut hub = Hub {
        page_size: 1000,
        hub_base: format!("http://{}", hub_listener.local_addr().unwrap()),
        cdn_base: format!("http://{}", cdn_listener.local_addr().unwrap()),
        ..Hub::default()
    };
    setup(&mut hub);
    let hub = Arc::new(hub);
    for listener in [hub_listener, cdn_listener] {
        let app = axum::Router::new().fallback(serve).with_state(hub.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    }
    hub
}

/// Bytes that differ from file to file.
fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A model of a config file, a tokenizer in a folder and one LFS weights file.
fn model(seed: u8, weights: usize) -> Vec<File> {
    vec![
        File {
            path: "config.json".into(),
            bytes: format!("{{\"seed\": {seed}}}").into_bytes(),
            lfs: false,
        },
        File {
            path: "tokenizer/tokenizer.json".into(),
            bytes: bytes(seed, 1000),
            lfs: false,
        },
        File {
            path: "model.safetensors".into(),
            bytes: bytes(seed.wrapping_add(1), weights),
            lfs: true,
        },
    ]
}

fn config(hub: &Hub, root: &std::path::Path, budget: u64) -> CacheConfig {
    CacheConfig {
        endpoint: hub.hub_base.clone(),
        download: DownloadLimits {
            request_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(5),
        },
        ..CacheConfig::new(root, budget)
    }
}

fn client(hub: &Hub, token: Option<&str>) -> HubClient {
    HubClient::new(HubConfig {
        endpoint: hub.hub_base.clone(),
        token: token.map(str::to_string),
        ..HubConfig::default()
    })
    .unwrap()
}

fn credential(namespace: &str, token: &str) -> Credential {
    Credential {
        token: token.into(),
        namespaces: BTreeSet::from([namespace.to_string()]),
    }
}

/// The listing of `name` at `main`, read anonymously.
async fn listed(hub: &Hub, name: &str) -> vramfit_cache::manifest::Manifest {
    list_manifest(&client(hub, None), &repo(name), ManifestLimits::default())
        .await
        .unwrap()
}

fn repo(text: &str) -> RepoRef {
    RepoRef::parse(text).unwrap()
}

/// A Hub serving `org/<name>` for each of `names`, models of 10,000 bytes of weights seeded
/// `first_seed` on.
async fn start_models(first_seed: u8, names: &[&str]) -> Shared {
    start(|hub| {
        for (i, name) in names.iter().enumerate() {
            hub.add(&format!("org/{name}"), model(first_seed + i as u8, 10_000));
        }
    })
    .await
}

/// Fetches `name` without a token, no model in use.
async fn fetch(cfg: &CacheConfig, name: &str) -> Result<Fetched, FetchError> {
    fetch_model(cfg, &repo(name), None, &BTreeSet::new()).await
}

/// Fetches `name` into the cache at `root` without a budget; its size in bytes.
async fn model_bytes(hub: &Hub, root: &std::path::Path, name: &str) -> u64 {
    fetch(&config(hub, root, 1 << 30), name)
        .await
        .unwrap()
        .record
        .total_bytes
}

/// With `org/a` cached, fetches `org/b` under a budget of two models and a half (models of
/// `one` byte each), and makes `org/b` the more recently used; that config and the store.
async fn b_cached_after_a(hub: &Hub, root: &std::path::Path, one: u64) -> (CacheConfig, Store) {
    let cfg = config(hub, root, one * 5 / 2);
    fetch(&cfg, "org/b").await.unwrap();
    let store = Store::new(Layout::new(root));
    store.touch(&repo("org/a"), 100).await.unwrap();
    store.touch(&repo("org/b"), 200).await.unwrap();
    (cfg, store)
}

/// The cached file's bytes.
fn cached(root: &std::path::Path, model: &str, path: &str) -> Vec<u8> {
    std::fs::read(Layout::new(root).file_path(&repo(model), path)).unwrap()
}

#[tokio::test]
async fn the_listing_follows_its_pages_and_refuses_a_path_out_of_the_folder() {
    let hub = start(|hub| {
        hub.page_size = 1;
        hub.add("org/paged", model(1, 100));
        hub.add("org/hostile", model(2, 100));
        hub.extra_entries.insert(
            "org/hostile".into(),
            r#"{"type":"file","oid":"x","size":4,"path":"../../escape"}"#.into(),
        );
    })
    .await;
    let manifest = listed(&hub, "org/paged").await;
    let paths: Vec<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "config.json",
            "tokenizer/tokenizer.json",
            "model.safetensors"
        ]
    );
    assert_eq!(
        manifest.files[2].sha256.as_deref(),
        Some(sha256_hex(&bytes(2, 100)).as_str())
    );
    // One folder and three files, one a page: four pages, the later ones by their Link.
    let queries: Vec<Option<String>> = hub
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.query.clone())
        .collect();
    assert_eq!(
        queries,
        [
            Some("recursive=true".to_string()),
            Some("recursive=true&cursor=1".to_string()),
            Some("recursive=true&cursor=2".to_string()),
            Some("recursive=true&cursor=3".to_string()),
        ]
    );

    let root = tempfile::tempdir().unwrap();
    let error = fetch(&config(&hub, root.path(), 1 << 30), "org/hostile")
        .await
        .unwrap_err();
    match &error {
        FetchError::Manifest(ManifestError::Invalid { message, .. }) => {
            assert!(message.contains("\"../../escape\" is refused"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(
        !root.path().join("models").exists(),
        "nothing written: {error}"
    );
    let limits = ManifestLimits {
        max_pages: 3,
        ..ManifestLimits::default()
    };
    let too_many = list_manifest(&client(&hub, None), &repo("org/paged"), limits).await;
    assert!(
        matches!(&too_many, Err(ManifestError::Invalid { message, .. }) if message.contains("more than 3 pages")),
        "{too_many:?}"
    );
}

#[tokio::test]
async fn an_interrupted_download_resumes_with_a_range_request_and_ends_verified() {
    const CUT: usize = 100_000;
    let hub = start(|hub| {
        hub.add("org/big", model(3, 300_000));
        hub.cut_after
            .lock()
            .unwrap()
            .insert("/org/big/resolve/main/model.safetensors".into(), CUT);
    })
    .await;
    let root = tempfile::tempdir().unwrap();
    let fetched = fetch(&config(&hub, root.path(), 1 << 30), "org/big")
        .await
        .unwrap();
    let weights: Vec<Seen> = hub
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.origin == "cdn")
        .cloned()
        .collect();
    let ranges: Vec<Option<String>> = weights.iter().map(|s| s.range.clone()).collect();
    assert_eq!(ranges, [None, Some(format!("bytes={CUT}-"))], "{weights:?}");
    assert_eq!(
        cached(root.path(), "org/big", "model.safetensors"),
        bytes(4, 300_000)
    );
    let dest = Layout::new(root.path()).file_path(&repo("org/big"), "model.safetensors");
    assert!(!partial_path(&dest).exists());
    assert!(fetched.record.complete);
    assert_eq!(
        fetched.record.verified["model.safetensors"],
        format!("sha256:{}", sha256_hex(&bytes(4, 300_000)))
    );
    assert_eq!(fetched.record.bytes, fetched.record.total_bytes);
    assert_eq!(fetched.record.access, Access::Public);
}

#[tokio::test]
async fn bytes_corrupted_in_transit_are_deleted_and_fetched_again_never_served() {
    let key = "/org/noisy/resolve/main/tokenizer/tokenizer.json";
    let hub = start(|hub| {
        hub.add("org/noisy", model(5, 5000));
        hub.add("org/broken", model(6, 5000));
        hub.corrupt_once.lock().unwrap().insert(key.into());
        hub.corrupt_always
            .insert("/org/broken/resolve/main/model.safetensors".into());
    })
    .await;
    let root = tempfile::tempdir().unwrap();

    // One download: the same size, other bytes → rejected, and nothing left on disk.
    let manifest = listed(&hub, "org/noisy").await;
    let file = &manifest.files[1];
    let dest = Layout::new(root.path()).file_path(&repo("org/noisy"), &file.path);
    let url = resolve_url(&hub.hub_base, &repo("org/noisy"), &file.path);
    let error = download_file(
        &client(&hub, None),
        &url,
        &dest,
        file,
        DownloadLimits::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            &error,
            DownloadError::Mismatch {
                mismatch: Mismatch::Hash { .. },
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!dest.exists() && !partial_path(&dest).exists());

    // The same file corrupted once more: `fetch_model` fetches it again from 0.
    hub.corrupt_once.lock().unwrap().insert(key.into());
    let fetched = fetch(&config(&hub, root.path(), 1 << 30), "org/noisy")
        .await
        .unwrap();
    assert!(fetched.record.complete);
    assert_eq!(
        cached(root.path(), "org/noisy", "tokenizer/tokenizer.json"),
        bytes(5, 1000)
    );
    let asked = hub
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.path == key)
        .map(|s| s.range.clone())
        .collect::<Vec<_>>();
    assert_eq!(asked, [None, None, None], "the first try, then two from 0");

    // Corrupt on every try: the fetch fails and the model is never mountable.
    let error = fetch(&config(&hub, root.path(), 1 << 30), "org/broken")
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("model.safetensors: the download does not match"),
        "{error}"
    );
    let store = Store::new(Layout::new(root.path()));
    assert_eq!(
        store.mountable(&repo("org/broken"), "any").await.unwrap(),
        None
    );
    let weights = Layout::new(root.path()).file_path(&repo("org/broken"), "model.safetensors");
    assert!(!weights.exists() && !partial_path(&weights).exists());
}

#[tokio::test]
async fn a_truncated_or_unverified_corrupt_file_in_place_is_fetched_again() {
    let hub = start(|hub| {
        hub.add("org/m", model(7, 20_000));
    })
    .await;
    let root = tempfile::tempdir().unwrap();
    let cfg = config(&hub, root.path(), 1 << 30);
    fetch(&cfg, "org/m").await.unwrap();
    let weights = Layout::new(root.path()).file_path(&repo("org/m"), "model.safetensors");

    // Nothing to do when every file is in place.
    let again = fetch(&cfg, "org/m").await.unwrap();
    assert!(again.downloaded.is_empty());

    // Truncated on disk: the size check catches it.
    let full = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &full[..1000]).unwrap();
    let again = fetch(&cfg, "org/m").await.unwrap();
    assert_eq!(again.downloaded, ["model.safetensors"]);
    assert_eq!(std::fs::read(&weights).unwrap(), full);

    // The same size, other bytes, and the record does not say the file was verified (a
    // crash between the rename and the record): hashed again, caught, fetched again.
    let store = Store::new(Layout::new(root.path()));
    let mut record = store.read(&repo("org/m")).await.unwrap().unwrap();
    record.verified.remove("model.safetensors");
    store.write(&record).await.unwrap();
    let mut corrupt = full.clone();
    corrupt[10] ^= 0xff;
    std::fs::write(&weights, &corrupt).unwrap();
    let again = fetch(&cfg, "org/m").await.unwrap();
    assert_eq!(again.downloaded, ["model.safetensors"]);
    assert_eq!(std::fs::read(&weights).unwrap(), full);
    assert!(again.record.verified.contains_key("model.safetensors"));
}

#[tokio::test]
async fn a_redirect_to_another_origin_does_not_carry_the_token() {
    let hub = start(|hub| {
        hub.add("org/private", model(8, 3000));
        hub.add("org/open", model(9, 3000));
    })
    .await;
    let root = tempfile::tempdir().unwrap();
    let cfg = config(&hub, root.path(), 1 << 30);
    let fetched = fetch_model(
        &cfg,
        &repo("org/private"),
        Some(&credential("team-a", "secret")),
        &BTreeSet::new(),
    )
    .await
    .unwrap();
    let seen = hub.seen.lock().unwrap().clone();
    let cdn: Vec<&Seen> = seen.iter().filter(|s| s.origin == "cdn").collect();
    assert_eq!(cdn.len(), 1, "{seen:?}");
    assert_eq!(cdn[0].authorization, None, "the token went to the CDN");
    let resolve_with_token = seen
        .iter()
        .filter(|s| s.origin == "hub" && s.path.contains("/resolve/"))
        .filter(|s| s.authorization.as_deref() == Some("Bearer secret"))
        .count();
    assert_eq!(resolve_with_token, 3, "{seen:?}");

    // Read only with the token: only its namespaces may mount it.
    assert_eq!(
        fetched.record.access,
        Access::Namespaces(BTreeSet::from(["team-a".to_string()]))
    );
    let store = Store::new(Layout::new(root.path()));
    assert!(
        store
            .mountable(&repo("org/private"), "team-a")
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store
            .mountable(&repo("org/private"), "team-b")
            .await
            .unwrap(),
        None
    );

    // A public model fetched with a token is readable without one: every namespace.
    let open = fetch_model(
        &cfg,
        &repo("org/open"),
        Some(&credential("team-a", "secret")),
        &BTreeSet::new(),
    )
    .await
    .unwrap();
    assert_eq!(open.record.access, Access::Public);
}

#[tokio::test]
async fn a_cached_gated_model_is_granted_only_to_tokens_that_read_it() {
    let hub = start(|hub| {
        hub.add("org/gated", model(10, 3000));
    })
    .await;
    let root = tempfile::tempdir().unwrap();
    let cfg = config(&hub, root.path(), 1 << 30);
    let none = BTreeSet::new();
    fetch_model(
        &cfg,
        &repo("org/gated"),
        Some(&credential("team-a", "secret")),
        &none,
    )
    .await
    .unwrap();
    // The listing of a gated model is public; its files are not: this token is refused, and
    // the model stays team-a's.
    let error = fetch_model(
        &cfg,
        &repo("org/gated"),
        Some(&credential("team-b", "other")),
        &none,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error, FetchError::Access { message, .. } if message.contains("gated")),
        "{error:?}"
    );
    let store = Store::new(Layout::new(root.path()));
    assert_eq!(
        store.mountable(&repo("org/gated"), "team-b").await.unwrap(),
        None
    );
    assert!(
        store
            .mountable(&repo("org/gated"), "team-a")
            .await
            .unwrap()
            .is_some(),
        "a refused token leaves the cached model as it was"
    );
    // A token that reads it adds its namespaces.
    let granted = fetch_model(
        &cfg,
        &repo("org/gated"),
        Some(&credential("team-b", "secret")),
        &none,
    )
    .await
    .unwrap();
    assert!(granted.downloaded.is_empty());
    assert_eq!(
        granted.record.access,
        Access::Namespaces(BTreeSet::from(["team-a".to_string(), "team-b".to_string()]))
    );
}

#[tokio::test]
async fn the_budget_evicts_the_least_recently_used_model_not_in_use() {
    let hub = start_models(20, &["a", "b", "c", "d"]).await;
    let root = tempfile::tempdir().unwrap();
    let one = model_bytes(&hub, root.path(), "org/a").await;
    // Room for two models and a half.
    let (cfg, store) = b_cached_after_a(&hub, root.path(), one).await;

    // "a" is the least recently used, but a pod runs it: "b" goes.
    let in_use = BTreeSet::from(["org/a@main".to_string()]);
    let fetched = fetch_model(&cfg, &repo("org/c"), None, &in_use)
        .await
        .unwrap();
    assert_eq!(fetched.evicted, ["org/b@main"]);
    assert!(!Layout::new(root.path()).model_dir(&repo("org/b")).exists());
    assert_eq!(store.read(&repo("org/b")).await.unwrap(), None);
    assert!(store.read(&repo("org/a")).await.unwrap().unwrap().complete);

    // Both cached models in use: nothing can go, and nothing does.
    let in_use = BTreeSet::from(["org/a@main".to_string(), "org/c@main".to_string()]);
    let error = fetch_model(&cfg, &repo("org/d"), None, &in_use)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("held by models running pods use"),
        "{error}"
    );
    let keys: Vec<String> = store
        .list()
        .await
        .unwrap()
        .iter()
        .map(|r| r.key())
        .collect();
    assert_eq!(keys, ["org/a@main", "org/c@main"]);
}

#[tokio::test]
async fn a_branch_that_moved_is_brought_to_its_new_files() {
    let hub = start(|hub| {
        hub.add("org/moving", model(30, 4000));
    })
    .await;
    let root = tempfile::tempdir().unwrap();
    let cfg = config(&hub, root.path(), 1 << 30);
    fetch(&cfg, "org/moving").await.unwrap();

    // `main` moves: the weights change (same size, other bytes), the tokenizer goes, a
    // generation config comes.
    let mut moved = model(30, 4000);
    moved[2].bytes = bytes(99, 4000);
    moved.remove(1);
    moved.push(File {
        path: "generation_config.json".into(),
        bytes: b"{}".to_vec(),
        lfs: false,
    });
    hub.repos.lock().unwrap().insert("org/moving".into(), moved);
    let fetched = fetch(&cfg, "org/moving").await.unwrap();
    assert_eq!(
        fetched.downloaded,
        ["model.safetensors", "generation_config.json"]
    );
    assert_eq!(
        cached(root.path(), "org/moving", "model.safetensors"),
        bytes(99, 4000)
    );
    assert!(!fetched.model_dir.join("tokenizer/tokenizer.json").exists());
    assert_eq!(fetched.record.bytes, fetched.record.total_bytes);
    assert!(
        !fetched
            .record
            .verified
            .contains_key("tokenizer/tokenizer.json")
    );
}

#[tokio::test]
async fn a_server_that_ignores_range_restarts_the_file_from_its_first_byte() {
    let hub = start(|hub| {
        hub.add("org/norange", model(40, 8000));
    })
    .await;
    let root = tempfile::tempdir().unwrap();
    let manifest = listed(&hub, "org/norange").await;
    let file = &manifest.files[2];
    let dest = Layout::new(root.path()).file_path(&repo("org/norange"), &file.path);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(partial_path(&dest), vec![0u8; 3000]).unwrap();
    let url = resolve_url(&hub.hub_base, &repo("org/norange"), &file.path);
    let done = download_file(
        &client(&hub, None),
        &url,
        &dest,
        file,
        DownloadLimits::default(),
    )
    .await
    .unwrap();
    assert_eq!(done.resumed_from, 3000, "the partial file was offered");
    assert_eq!(done.received, 8000, "the whole file came back");
    assert_eq!(std::fs::read(&dest).unwrap(), bytes(41, 8000));
    let ranges: Vec<Option<String>> = hub
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.origin == "cdn")
        .map(|s| s.range.clone())
        .collect();
    assert_eq!(ranges, [Some("bytes=3000-".to_string())]);
}

/// Every entry under `dir` that is not a real folder or a regular file.
fn links_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(folder).unwrap() {
            let entry = entry.unwrap();
            let kind = std::fs::symlink_metadata(entry.path()).unwrap().file_type();
            if kind.is_dir() {
                folders.push(entry.path());
            } else if !kind.is_file() {
                out.push(entry.path());
            }
        }
    }
    out
}

#[tokio::test]
async fn links_planted_in_a_model_folder_are_removed_never_followed_and_the_other_model_is_untouched()
 {
    let hub = start(|hub| {
        hub.add("org/a", model(40, 20_000));
        hub.add("org/b", model(50, 5_000));
    })
    .await;
    let root = tempfile::tempdir().unwrap();
    let cfg = config(&hub, root.path(), 1 << 30);
    fetch(&cfg, "org/a").await.unwrap();
    fetch(&cfg, "org/b").await.unwrap();
    let layout = Layout::new(root.path());
    let a = layout.model_dir(&repo("org/a"));
    let b = layout.model_dir(&repo("org/b"));
    let b_before: Vec<Vec<u8>> = model(50, 5_000)
        .iter()
        .map(|f| cached(root.path(), "org/b", &f.path))
        .collect();

    // A pod that can write a's folder plants links to b's files and folder: a partial
    // download (a resumed download would append to its target), a listed file, and a folder
    // (a re-download would delete and replace the file inside it).
    std::fs::remove_file(a.join("model.safetensors")).unwrap();
    std::os::unix::fs::symlink(
        b.join("model.safetensors"),
        a.join("model.safetensors.partial"),
    )
    .unwrap();
    std::fs::remove_file(a.join("config.json")).unwrap();
    std::os::unix::fs::symlink(b.join("config.json"), a.join("config.json")).unwrap();
    std::fs::remove_dir_all(a.join("tokenizer")).unwrap();
    std::os::unix::fs::symlink(b.join("tokenizer"), a.join("tokenizer")).unwrap();

    let fetched = fetch(&cfg, "org/a").await.unwrap();
    let mut downloaded = fetched.downloaded.clone();
    downloaded.sort();
    assert_eq!(
        downloaded,
        [
            "config.json",
            "model.safetensors",
            "tokenizer/tokenizer.json"
        ]
    );
    assert_eq!(links_under(&a), Vec::<std::path::PathBuf>::new());
    for file in model(40, 20_000) {
        assert_eq!(cached(root.path(), "org/a", &file.path), file.bytes);
    }
    let b_after: Vec<Vec<u8>> = model(50, 5_000)
        .iter()
        .map(|f| cached(root.path(), "org/b", &f.path))
        .collect();
    assert_eq!(b_after, b_before, "b's files changed");
    assert_eq!(links_under(&b), Vec::<std::path::PathBuf>::new());
}

#[tokio::test]
async fn eviction_protects_what_is_in_use_when_it_evicts_not_when_the_fetch_started() {
    let hub = start_models(60, &["a", "b", "c"]).await;
    let root = tempfile::tempdir().unwrap();
    let one = model_bytes(&hub, root.path(), "org/a").await;
    let (cfg, store) = b_cached_after_a(&hub, root.path(), one).await;

    // Nothing is in use when the fetch of c starts; a pod starts mounting a while c is being
    // listed. Asked at eviction time, the set protects a: b goes instead.
    let listed_c = || {
        hub.seen
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.path.starts_with("/api/models/org/c/"))
    };
    let in_use = || {
        if listed_c() {
            BTreeSet::from(["org/a@main".to_string()])
        } else {
            BTreeSet::new()
        }
    };
    let fetched = fetch_model(&cfg, &repo("org/c"), None, &in_use)
        .await
        .unwrap();
    assert_eq!(fetched.evicted, ["org/b@main"]);
    assert!(store.read(&repo("org/a")).await.unwrap().unwrap().complete);
}

#[tokio::test]
async fn partial_downloads_count_against_the_budget() {
    let hub = start_models(70, &["a", "b"]).await;
    let root = tempfile::tempdir().unwrap();
    let one = model_bytes(&hub, root.path(), "org/a").await;
    // An interrupted download of another model: its record holds no file in place, its
    // partial file a whole model's bytes.
    let store = Store::new(Layout::new(root.path()));
    let other = repo("org/interrupted");
    let mut record = vramfit_cache::store::ModelRecord::new(&other, Access::Public, 1);
    record.total_bytes = one;
    store.write(&record).await.unwrap();
    let dir = store.layout().model_dir(&other);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("model.safetensors.partial"),
        vec![0u8; one as usize],
    )
    .unwrap();

    // Room for two models and a half: a and the partial hold two, b needs one more.
    let cfg = config(&hub, root.path(), one * 5 / 2);
    let fetched = fetch(&cfg, "org/b").await.unwrap();
    assert_eq!(fetched.evicted, ["org/interrupted@main"]);
    assert!(!dir.exists());
}

#[tokio::test]
async fn an_unreadable_record_is_a_model_not_cached_and_is_fetched_again() {
    let hub = start_models(80, &["a", "b"]).await;
    let root = tempfile::tempdir().unwrap();
    let cfg = config(&hub, root.path(), 1 << 30);
    fetch(&cfg, "org/a").await.unwrap();
    let layout = Layout::new(root.path());
    std::fs::write(layout.record_path(&repo("org/a")), b"{ not json").unwrap();

    // Another model's fetch goes on (and forgets the unreadable one's folder).
    fetch(&cfg, "org/b").await.unwrap();
    // Its own fetch starts a new record: every file is checked again, and it is complete.
    let fetched = fetch(&cfg, "org/a").await.unwrap();
    assert!(fetched.record.complete);
    for file in model(80, 10_000) {
        assert_eq!(cached(root.path(), "org/a", &file.path), file.bytes);
    }
}

#[tokio::test]
async fn a_fetch_past_its_deadline_fails_and_the_next_one_resumes() {
    let hub = start(|hub| {
        hub.add("org/slow", model(90, 10_000));
    })
    .await;
    let root = tempfile::tempdir().unwrap();
    let cfg = CacheConfig {
        deadline: Duration::from_millis(500),
        ..config(&hub, root.path(), 1 << 30)
    };
    let started = std::time::Instant::now();
    let error = fetch(&cfg, "org/slow").await.unwrap_err();
    assert!(matches!(error, FetchError::Deadline { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let store = Store::new(Layout::new(root.path()));
    assert!(
        !store
            .read(&repo("org/slow"))
            .await
            .unwrap()
            .unwrap()
            .complete
    );
    // The lock was released with the fetch.
    let cfg = config(&hub, root.path(), 1 << 30);
    let fetched = fetch(&cfg, "org/slow").await.unwrap();
    assert!(fetched.record.complete);
}

#[tokio::test]
async fn a_listing_is_bounded_in_path_bytes_and_names_each_file_once() {
    let hub = start(|hub| {
        hub.add("org/m", model(3, 100));
        hub.add("org/twice", model(4, 100));
        hub.extra_entries.insert(
            "org/twice".into(),
            format!(
                r#"{{"type":"file","oid":"{}","size":4,"path":"config.json"}}"#,
                "0".repeat(40)
            ),
        );
    })
    .await;
    // config.json, tokenizer/tokenizer.json, model.safetensors: 52 bytes of paths.
    let limits = |max_path_bytes| ManifestLimits {
        max_path_bytes,
        ..ManifestLimits::default()
    };
    let client = client(&hub, None);
    assert!(
        list_manifest(&client, &repo("org/m"), limits(52))
            .await
            .is_ok()
    );
    let over = list_manifest(&client, &repo("org/m"), limits(51)).await;
    assert!(
        matches!(&over, Err(ManifestError::Invalid { message, .. }) if message.contains("more than 51 bytes of paths")),
        "{over:?}"
    );
    let twice = list_manifest(&client, &repo("org/twice"), ManifestLimits::default()).await;
    assert!(
        matches!(&twice, Err(ManifestError::Invalid { message, .. }) if message.contains("\"config.json\" listed twice")),
        "{twice:?}"
    );
}
