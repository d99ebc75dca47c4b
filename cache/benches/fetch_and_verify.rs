//! What the cache costs in time, bytes written and memory, printed as figures
//! (docs/model-cache.md): a fetch of many small files (time, and the bytes its records
//! write), a re-verification of a complete model (full and cheap), and the peak memory of the
//! largest listing allowed. Each runs in its own runtime, in one process; the listing goes
//! first because its figure is the process's peak resident memory, which the 512 MiB of
//! weights the re-verification writes would otherwise set. Name some of `listing`, `fetch`,
//! `reverify` to run only those.
//!
//! `cargo bench -p vramfit-cache --bench fetch_and_verify`
// A bench: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use ring::digest::{SHA1_FOR_LEGACY_USE_ONLY, SHA256, digest};
use vramfit_cache::layout::Layout;
use vramfit_cache::manifest::{ManifestLimits, list_manifest};
use vramfit_cache::reverify::{Depth, reverify};
use vramfit_cache::store::{Access, ModelRecord, Store};
use vramfit_cache::{CacheConfig, fetch_model};
use vramfit_hub::{HubClient, HubConfig, RepoRef};

fn main() {
    // `cargo bench` passes `--bench`; any other argument names a measurement to run.
    let names: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |name: &str| names.is_empty() || names.iter().any(|n| n == name);
    println!("vramfit-cache fetch and verify (release build, one process)");
    if wanted("listing") {
        run(the_largest_listing_allowed());
    }
    if wanted("fetch") {
        run(a_fetch_of_4000_small_files());
    }
    if wanted("reverify") {
        run(reverify_a_complete_model());
    }
}

/// Runs one measurement on a runtime of its own (one thread, as the tests it replaces had), so
/// that the Hub it starts ends with it.
fn run(measurement: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(measurement);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn git_blob_hex(bytes: &[u8]) -> String {
    let mut blob = format!("blob {}\0", bytes.len()).into_bytes();
    blob.extend_from_slice(bytes);
    hex(digest(&SHA1_FOR_LEGACY_USE_ONLY, &blob).as_ref())
}

/// Bytes this process has written through `write` calls (`wchar` of `/proc/self/io`).
fn written_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/io").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Peak resident memory of this process (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

struct Files {
    listing: String,
    bytes: Vec<u8>,
}

/// A Hub of one repository, `org/many` at `main`, of `count` files of the same bytes.
async fn start_hub(count: usize, size: usize) -> String {
    let bytes = vec![b'x'; size];
    let blob = git_blob_hex(&bytes);
    let entries: Vec<String> = (0..count)
        .map(|i| {
            format!(
                r#"{{"type":"file","oid":"{blob}","size":{size},"path":"tokenizer/part-{i:05}.json"}}"#
            )
        })
        .collect();
    let files = Arc::new(Files {
        listing: format!("[{}]", entries.join(",")),
        bytes,
    });
    async fn serve(State(files): State<Arc<Files>>, request: Request) -> Response {
        if request.uri().path().starts_with("/api/models/") {
            files.listing.clone().into_response()
        } else {
            files.bytes.clone().into_response()
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(serve).with_state(files);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

/// A fetch of 4,000 files of 1 KiB from a local Hub: its time, and what it writes beyond the
/// files (records and listing).
async fn a_fetch_of_4000_small_files() {
    let (count, size) = (4000, 1024);
    let endpoint = start_hub(count, size).await;
    let root = tempfile::tempdir().unwrap();
    let mut config = CacheConfig::new(root.path(), 1 << 30);
    config.endpoint = endpoint;
    let repo = RepoRef::parse("org/many").unwrap();
    let before = written_bytes();
    let started = Instant::now();
    let fetched = fetch_model(&config, &repo, None, &BTreeSet::new())
        .await
        .unwrap();
    let seconds = started.elapsed().as_secs_f64();
    let written = written_bytes() - before;
    let files = (count * size) as u64;
    let record = std::fs::metadata(Layout::new(root.path()).record_path(&repo))
        .unwrap()
        .len();
    assert_eq!(
        fetched.downloaded.len(),
        count,
        "the fetch downloaded {} files of {count}",
        fetched.downloaded.len()
    );
    println!(
        "4000 files of 1 KiB: {seconds:.2} s; {written} bytes written ({files} of files, {} of records and listing); final record {record} bytes",
        written.saturating_sub(files)
    );
}

/// A complete model of `large` files of `large_bytes` and `small` files of `small_bytes`,
/// written as a fetch leaves it.
async fn complete_model(
    store: &Store,
    large: usize,
    large_bytes: usize,
    small: usize,
    small_bytes: usize,
) -> ModelRecord {
    let repo = RepoRef::parse("org/big").unwrap();
    let mut record = ModelRecord::new(&repo, Access::Public, 1);
    let mut add = |path: String, bytes: &[u8]| {
        let file = store.layout().file_path(&repo, &path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, bytes).unwrap();
        record.verified.insert(
            path.clone(),
            format!("sha256:{}", hex(digest(&SHA256, bytes).as_ref())),
        );
        record.sizes.insert(path, bytes.len() as u64);
        record.bytes += bytes.len() as u64;
    };
    let weights: Vec<u8> = (0..large_bytes).map(|i| (i % 251) as u8).collect();
    for i in 0..large {
        add(format!("model-{i:05}.safetensors"), &weights);
    }
    let small_file = vec![b'{'; small_bytes];
    for i in 0..small {
        add(format!("code/module_{i:05}.py"), &small_file);
    }
    record.total_bytes = record.bytes;
    record.complete = true;
    store.write(&record).await.unwrap();
    record
}

/// A full and a cheap re-verification of a complete model, from a warm page cache.
async fn reverify_a_complete_model() {
    let root = tempfile::tempdir().unwrap();
    let store = Store::new(Layout::new(root.path()));
    // 2 GiB of weights in 4 files, and 1,000 small files of 4 KiB.
    let record = complete_model(&store, 4, 512 << 20, 1000, 4096).await;
    let gib = record.bytes as f64 / f64::from(1u32 << 30);
    // Read once so that both figures are of a warm page cache (a cold disk adds its read time).
    reverify(store.layout(), &record, Depth::Full, None, None)
        .await
        .unwrap();
    let started = Instant::now();
    let full = reverify(store.layout(), &record, Depth::Full, None, None)
        .await
        .unwrap();
    let full_s = started.elapsed().as_secs_f64();
    assert!(full.intact(), "the full re-verification found damage");
    let started = Instant::now();
    let cheap = reverify(store.layout(), &record, Depth::Cheap, None, None)
        .await
        .unwrap();
    let cheap_s = started.elapsed().as_secs_f64();
    assert!(cheap.intact(), "the cheap re-verification found damage");
    println!(
        "full: {gib:.2} GiB, {} files in {full_s:.2} s ({:.2} s per GiB); cheap: {} files hashed of {} in {:.0} ms",
        full.hashed_files,
        full_s / gib,
        cheap.hashed_files,
        record.verified.len(),
        cheap_s * 1000.0
    );
    // A slice cut at a deadline stops between files.
    let cut = reverify(
        store.layout(),
        &record,
        Depth::Full,
        None,
        Some(Instant::now() + Duration::from_millis(1)),
    )
    .await
    .unwrap();
    assert!(
        cut.resume_at.is_some(),
        "a full re-verification cut at a 1 ms deadline did not stop between files"
    );
}

/// The peak memory of the largest listing the limits allow, its record and the record's JSON.
async fn the_largest_listing_allowed() {
    // As many files as the limit allows, whose paths add up to just under the limit on their
    // bytes: served in pages of 10,000 entries.
    let limits = ManifestLimits::default();
    let count = limits.max_files;
    let path_len = (limits.max_path_bytes as usize / count) - 1;
    let sha = "a".repeat(64);
    let pages: Vec<String> = (0..count / 10_000)
        .map(|page| {
            let entries: Vec<String> = (0..10_000)
                .map(|i| {
                    let n = page * 10_000 + i;
                    let name = format!("{n:06}-{}", "p".repeat(path_len - 7));
                    format!(
                        r#"{{"type":"file","oid":"{}","size":1,"path":"{name}","lfs":{{"oid":"{sha}","size":1}}}}"#,
                        "1".repeat(40)
                    )
                })
                .collect();
            format!("[{}]", entries.join(","))
        })
        .collect();
    let pages = Arc::new(pages);
    async fn serve(State(pages): State<Arc<Vec<String>>>, request: Request) -> Response {
        let page: usize = request
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("page=")))
            .map_or(0, |p| p.parse().unwrap());
        let mut response = pages[page].clone().into_response();
        if page + 1 < pages.len() {
            let next = format!(
                "</api/models/org/many/tree/main?recursive=true&page={}>; rel=\"next\"",
                page + 1
            );
            response.headers_mut().insert("link", next.parse().unwrap());
        }
        response
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .fallback(serve)
        .with_state(pages.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let served: usize = pages.iter().map(String::len).sum();
    let before = peak_rss();
    let client = HubClient::new(HubConfig {
        endpoint: base,
        ..HubConfig::default()
    })
    .unwrap();
    let repo = RepoRef::parse("org/many").unwrap();
    let manifest = list_manifest(&client, &repo, limits).await.unwrap();
    // What a fetch then keeps beside it: the record, every file verified, and its JSON.
    let mut record = ModelRecord::new(&repo, Access::Public, 1);
    for file in &manifest.files {
        record
            .verified
            .insert(file.path.clone(), file.fingerprint());
        record.sizes.insert(file.path.clone(), file.size);
    }
    let json = serde_json::to_vec_pretty(&record).unwrap();
    let after = peak_rss();
    println!(
        "listing of {} files, {} MiB of paths ({} MiB of pages served from this process): peak resident {} MiB before, {} MiB with the listing, the record and its {} MiB of JSON",
        manifest.files.len(),
        manifest.files.iter().map(|f| f.path.len()).sum::<usize>() >> 20,
        served >> 20,
        before >> 20,
        after >> 20,
        json.len() >> 20
    );
}
