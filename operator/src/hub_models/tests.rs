//! The resolver against a local HTTP server playing the Hub: a repository is read in the
//! background and then answered from the cache; a 404 and a malformed config.json become
//! conditions with backoff, never a panic; the manifest's own numbers win.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use vramfit_api::InferenceJob;
use vramfit_api::conditions::Reason;

use super::resolver::{HubResolver, HubSettings, retry_delay};
use super::{HubStep, prepare};

const CONFIG: &str = include_str!("../../../models/testdata/configs/Qwen/Qwen3-8B/config.json");

/// Serves `config.json` of `good/model`, a malformed one for `bad/model`, 404 otherwise;
/// counts requests.
async fn hub() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 4096];
                let n = socket.read(&mut buffer).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buffer[..n]).to_string();
                let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
                let (status, body) = if path == "/good/model/resolve/main/config.json" {
                    ("200 OK", CONFIG.to_string())
                } else if path == "/bad/model/resolve/main/config.json" {
                    ("200 OK", "{\"num_hidden_layers\": \"many\"".to_string())
                } else {
                    ("404 Not Found", String::new())
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    (format!("http://{address}"), requests)
}

fn resolver(endpoint: String) -> Arc<HubResolver> {
    HubResolver::new(
        HubSettings {
            endpoint,
            token_secret: None,
            namespace: "vramfit".into(),
            timeout: Duration::from_secs(5),
        },
        None,
    )
}

fn job(model: &str) -> InferenceJob {
    serde_yaml::from_str(&format!(
        "apiVersion: vramfit.io/v1alpha1\nkind: InferenceJob\nmetadata: {{name: j, namespace: n}}\nspec: {{runtime: vllm, image: x, model: {model}}}\n"
    ))
    .unwrap()
}

/// `prepare` until it stops answering "reading".
async fn settled(job: &InferenceJob, hub: &Arc<HubResolver>) -> HubStep {
    for _ in 0..200 {
        match prepare(job, hub) {
            HubStep::Wait {
                reason: Reason::ModelResolving,
                ..
            } => tokio::time::sleep(Duration::from_millis(20)).await,
            step => return step,
        }
    }
    panic!("still reading after 4 s");
}

#[tokio::test]
async fn a_repository_is_read_once_then_answered_from_the_cache_and_explicit_numbers_win() {
    let (endpoint, requests) = hub().await;
    let hub = resolver(endpoint);
    let job = job("{huggingFace: {repo: good/model}, contextLimit: 2048}");
    // The first look starts a read and answers at once.
    assert!(matches!(
        prepare(&job, &hub),
        HubStep::Wait {
            reason: Reason::ModelResolving,
            retry_in: Some(_),
            ..
        }
    ));
    let HubStep::Ready(filled, resolved) = settled(&job, &hub).await else {
        panic!("read");
    };
    assert_eq!(filled.spec.model.layers, Some(36));
    assert_eq!(filled.spec.model.name.as_deref(), Some("good/model"));
    assert_eq!(
        filled.spec.model.context_limit,
        Some(2048),
        "the manifest wins"
    );
    assert_eq!(
        resolved.context_limit,
        Some(40_960),
        "status shows what was read"
    );
    assert_eq!(resolved.source, "good/model@main");
    let after_read = requests.load(Ordering::SeqCst);
    for _ in 0..5 {
        assert!(matches!(prepare(&job, &hub), HubStep::Ready(..)));
    }
    assert_eq!(requests.load(Ordering::SeqCst), after_read, "cached");
}

#[tokio::test]
async fn what_status_recorded_plans_the_job_while_the_hub_is_away() {
    let (endpoint, _) = hub().await;
    let HubStep::Ready(_, read) = settled(
        &job("{huggingFace: {repo: good/model}}"),
        &resolver(endpoint),
    )
    .await
    else {
        panic!("read");
    };
    // A restarted operator (an empty cache) whose Hub is down.
    let down = resolver("http://127.0.0.1:9".into());
    let mut recorded = job("{huggingFace: {repo: good/model}, kvHeads: 4}");
    recorded.status = Some(vramfit_api::InferenceJobStatus {
        resolved_model: Some(read.clone()),
        ..Default::default()
    });
    let HubStep::Ready(filled, resolved) = prepare(&recorded, &down) else {
        panic!("planned from status, without the Hub");
    };
    assert_eq!(resolved, read);
    assert_eq!(filled.spec.model.layers, Some(36));
    assert_eq!(filled.spec.model.name.as_deref(), Some("good/model"));
    assert_eq!(
        filled.spec.model.kv_heads,
        Some(4),
        "the manifest still wins"
    );
    // Recorded for another revision: read again.
    let mut moved = recorded.clone();
    moved.spec.model.hugging_face = serde_yaml::from_str("{repo: good/model, revision: v2}").ok();
    assert!(matches!(
        prepare(&moved, &down),
        HubStep::Wait {
            reason: Reason::ModelResolving,
            ..
        }
    ));
}

#[tokio::test]
async fn a_missing_or_malformed_repository_is_a_condition_with_backoff() {
    let (endpoint, _) = hub().await;
    let hub = resolver(endpoint);
    let HubStep::Wait {
        reason,
        message,
        retry_in,
    } = settled(&job("{huggingFace: {repo: missing/model}}"), &hub).await
    else {
        panic!("not found");
    };
    assert_eq!(reason, Reason::HubNotFound);
    assert!(message.contains("missing/model@main"), "{message}");
    assert!(retry_in.is_some_and(|d| d <= retry_delay(1)));
    let HubStep::Wait { reason, .. } =
        settled(&job("{huggingFace: {repo: bad/model}}"), &hub).await
    else {
        panic!("malformed");
    };
    assert_eq!(reason, Reason::HubInvalid);
    // Nobody listens here: unavailable, retried later.
    let down = resolver("http://127.0.0.1:9".into());
    let HubStep::Wait { reason, .. } =
        settled(&job("{huggingFace: {repo: good/model}}"), &down).await
    else {
        panic!("down");
    };
    assert_eq!(reason, Reason::HubUnavailable);
}

#[test]
fn backoff_doubles_up_to_five_minutes() {
    assert_eq!(retry_delay(1), Duration::from_secs(5));
    assert_eq!(retry_delay(2), Duration::from_secs(10));
    assert_eq!(retry_delay(40), Duration::from_secs(300));
}

#[test]
fn a_job_without_a_repository_is_left_alone() {
    let hub = resolver("http://127.0.0.1:9".into());
    assert!(matches!(
        prepare(&job("{preset: qwen3-8b}"), &hub),
        HubStep::NotNamed
    ));
}
