//! The resolver against a local HTTP server playing the Hub: a repository is read in the
//! background and then answered from the cache; a 404 and a malformed config.json become
//! conditions with backoff, never a panic; the manifest's own numbers win. A whole read has a
//! deadline, namespaces take turns, the token reads only for the namespaces it is mapped to,
//! and a number past a CRD bound is refused with the field named.
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use vramfit_api::InferenceJob;
use vramfit_api::conditions::Reason;

use super::resolver::{HubResolver, HubSettings, retry_delay};
use super::token_scope::TokenScope;
use super::{HubStep, prepare};

const CONFIG: &str = include_str!("../../../models/testdata/configs/Qwen/Qwen3-8B/config.json");

/// The commit `moving/model`'s `main` names.
const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

/// What the fake Hub was asked: the path and the `Authorization` header.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// Serves `config.json` of `good/model`, a malformed one for `bad/model`, one with 5,000 layers
/// for `deep/model`, `private/model` only with `Bearer secret` (else 401 `RepoNotFound`, as
/// the Hub answers), `moving/model` whose `main` names commit [`SHA`] in its model info (and
/// holds other files by name), holds every `slow/*` request for a minute, 404 otherwise (no
/// other model info); counts requests.
async fn hub() -> (String, Arc<AtomicUsize>) {
    let (endpoint, _, requests) = fake_hub().await;
    (endpoint, requests)
}

/// The same Hub, recording each request's path and `Authorization` header.
async fn recording_hub() -> (String, Seen) {
    let (endpoint, seen, _) = fake_hub().await;
    (endpoint, seen)
}

async fn fake_hub() -> (String, Seen, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let recorded = seen.clone();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            let recorded = recorded.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 4096];
                let n = socket.read(&mut buffer).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buffer[..n]).to_string();
                let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
                let authorization = request
                    .lines()
                    .find_map(|l| l.strip_prefix("authorization: "))
                    .map(str::to_string);
                let authorized = authorization.as_deref() == Some("Bearer secret");
                recorded.lock().unwrap().push((path.clone(), authorization));
                if path.starts_with("/slow/") || path.starts_with("/api/models/slow/") {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                let deep =
                    CONFIG.replace("\"num_hidden_layers\": 36", "\"num_hidden_layers\": 5000");
                let (status, code, body) = match path.as_str() {
                    "/good/model/resolve/main/config.json" => ("200 OK", "", CONFIG.to_string()),
                    "/private/model/resolve/main/config.json" if authorized => {
                        ("200 OK", "", CONFIG.to_string())
                    }
                    "/private/model/resolve/main/config.json" => {
                        ("401 Unauthorized", "RepoNotFound", String::new())
                    }
                    "/deep/model/resolve/main/config.json" => ("200 OK", "", deep),
                    "/api/models/moving/model/revision/main" => (
                        "200 OK",
                        "",
                        format!(r#"{{"id":"moving/model","sha":"{SHA}"}}"#),
                    ),
                    p if p == format!("/moving/model/resolve/{SHA}/config.json") => {
                        ("200 OK", "", CONFIG.to_string())
                    }
                    // What `main` holds by the time its files are asked for by name.
                    "/moving/model/resolve/main/config.json" => ("200 OK", "", deep),
                    "/bad/model/resolve/main/config.json" => {
                        ("200 OK", "", "{\"num_hidden_layers\": \"many\"".to_string())
                    }
                    _ => ("404 Not Found", "", String::new()),
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\nx-error-code: {code}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    (format!("http://{address}"), seen, requests)
}

fn settings(endpoint: String) -> HubSettings {
    HubSettings {
        namespace: "vramfit".into(),
        timeout: Duration::from_secs(5),
        read_deadline: Duration::from_secs(3),
        ..HubSettings::new(endpoint)
    }
}

fn resolver(endpoint: String) -> Arc<HubResolver> {
    HubResolver::new(settings(endpoint), None)
}

fn job(model: &str) -> InferenceJob {
    job_in("n", "j", model)
}

fn job_in(namespace: &str, name: &str, model: &str) -> InferenceJob {
    serde_yaml::from_str(&format!(
        "apiVersion: vramfit.io/v1alpha1\nkind: InferenceJob\nmetadata: {{name: {name}, namespace: {namespace}, generation: 1}}\nspec: {{runtime: vllm, image: x, model: {model}}}\n"
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

/// A branch is read as the commit it names, and the numbers at that commit; both recorded, and
/// the job the later steps see already carries them (its pods take the model at that commit).
#[tokio::test]
async fn a_branch_is_read_at_the_commit_it_names() {
    let (endpoint, _) = hub().await;
    let hub = resolver(endpoint);
    let job = job("{huggingFace: {repo: moving/model}}");
    let HubStep::Ready(filled, resolved) = settled(&job, &hub).await else {
        panic!("read");
    };
    assert_eq!(resolved.source, "moving/model@main");
    assert_eq!(resolved.commit.as_deref(), Some(SHA));
    assert_eq!(
        resolved.layers, 36,
        "the numbers at the commit, not what `main` holds by name"
    );
    assert_eq!(
        filled.status.as_ref().unwrap().resolved_model.as_ref(),
        Some(&resolved)
    );
    let model = crate::model_cache::job_model::job_model(&filled).unwrap();
    assert_eq!(model.key, format!("moving/model@{SHA}"));
    // A repository whose endpoint gives no model info: its numbers, and no commit.
    let HubStep::Ready(_, plain) =
        settled(&self::job("{huggingFace: {repo: good/model}}"), &hub).await
    else {
        panic!("read");
    };
    assert_eq!(plain.commit, None);
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

#[tokio::test]
async fn a_read_past_its_deadline_fails_with_the_reason() {
    let (endpoint, _) = hub().await;
    let hub = HubResolver::new(
        HubSettings {
            read_deadline: Duration::from_millis(300),
            ..settings(endpoint)
        },
        None,
    );
    // Each file may take 5 s; the whole read only 0.3 s.
    let HubStep::Wait {
        reason, message, ..
    } = settled(&job("{huggingFace: {repo: slow/model}}"), &hub).await
    else {
        panic!("timed out");
    };
    assert_eq!(reason, Reason::HubTimeout);
    assert!(
        message.contains(
            "no complete read within 0.3s (config.json, the index and every header together)"
        ),
        "{message}"
    );
}

#[tokio::test]
async fn a_namespace_flooding_with_jobs_does_not_starve_another() {
    let (endpoint, seen) = recording_hub().await;
    let hub = HubResolver::new(
        HubSettings {
            read_deadline: Duration::from_secs(1),
            ..settings(endpoint)
        },
        None,
    );
    for i in 0..10 {
        let flood = job_in(
            "flood",
            &format!("j{i}"),
            &format!("{{huggingFace: {{repo: slow/m{i}}}}}"),
        );
        assert!(matches!(
            prepare(&flood, &hub),
            HubStep::Wait {
                reason: Reason::ModelResolving,
                ..
            }
        ));
    }
    let quiet = job_in("quiet", "j", "{huggingFace: {repo: slow/q}}");
    assert!(matches!(
        prepare(&quiet, &hub),
        HubStep::Wait {
            reason: Reason::ModelResolving,
            ..
        }
    ));
    for _ in 0..100 {
        if seen.lock().unwrap().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Longer than it takes to start a read: nothing else starts while both are held.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked: BTreeSet<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(
        asked,
        BTreeSet::from([
            "/api/models/slow/m0/revision/main".to_string(),
            "/api/models/slow/q/revision/main".to_string(),
        ]),
        "one read per namespace: the quiet namespace's job is read beside the flood's first"
    );
}

#[tokio::test]
async fn the_cache_bound_covers_queued_reads() {
    let (endpoint, _) = recording_hub().await;
    let hub = HubResolver::new(
        HubSettings {
            read_deadline: Duration::from_secs(1),
            max_entries: 8,
            ..settings(endpoint)
        },
        None,
    );
    for i in 0..40 {
        let flood = job_in(
            "flood",
            &format!("j{i}"),
            &format!("{{huggingFace: {{repo: slow/m{i}}}}}"),
        );
        let _ = prepare(&flood, &hub);
    }
    assert!(hub.entries() <= 8, "{} entries", hub.entries());
}

#[tokio::test]
async fn only_a_mapped_namespace_reads_with_the_token() {
    let (endpoint, seen) = recording_hub().await;
    let hub = HubResolver::with_token(
        HubSettings {
            token_scope: TokenScope::new(["team-a".to_string()], ["private/*".to_string()])
                .unwrap(),
            ..settings(endpoint)
        },
        "secret",
    );
    let mapped = job_in("team-a", "j", "{huggingFace: {repo: private/model}}");
    assert!(matches!(settled(&mapped, &hub).await, HubStep::Ready(..)));
    // Another namespace: anonymous, and not answered from what the token read.
    let other = job_in("team-b", "j", "{huggingFace: {repo: private/model}}");
    let HubStep::Wait { reason, .. } = settled(&other, &hub).await else {
        panic!("the token's result leaked to another namespace");
    };
    assert_eq!(reason, Reason::HubNotFound);
    // A repository outside the mapping, from the mapped namespace: anonymous too.
    let _ = settled(
        &job_in("team-a", "k", "{huggingFace: {repo: good/model}}"),
        &hub,
    )
    .await;
    // Each read asks for config.json, then the index and a single-file checkpoint's header.
    let configs: Vec<(String, Option<String>)> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(path, _)| path.ends_with("/config.json"))
        .cloned()
        .collect();
    let config = |repo: &str| format!("/{repo}/resolve/main/config.json");
    assert_eq!(
        configs,
        [
            (config("private/model"), Some("Bearer secret".to_string())),
            (config("private/model"), None),
            (config("good/model"), None),
        ]
    );
}

#[tokio::test]
async fn an_invalid_repository_is_not_read_again_until_the_job_changes() {
    let (endpoint, requests) = hub().await;
    let hub = resolver(endpoint);
    let bad = job("{huggingFace: {repo: bad/model}}");
    let HubStep::Wait {
        reason,
        message,
        retry_in,
    } = settled(&bad, &hub).await
    else {
        panic!("malformed");
    };
    assert_eq!(reason, Reason::HubInvalid);
    assert_eq!(retry_in, None, "{message}");
    assert!(
        message.ends_with("read again when the job changes"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let asked = requests.load(Ordering::SeqCst);
    let mut changed = bad.clone();
    changed.metadata.generation = Some(2);
    let HubStep::Wait { retry_in, .. } = prepare(&changed, &hub) else {
        panic!("still invalid");
    };
    assert!(
        retry_in.is_some(),
        "a changed job is read again after the backoff"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        requests.load(Ordering::SeqCst),
        asked,
        "not before the backoff"
    );
}

#[tokio::test]
async fn a_hub_number_past_a_crd_bound_is_refused_with_the_field_named() {
    let (endpoint, _) = hub().await;
    let hub = resolver(endpoint);
    let HubStep::Wait {
        reason,
        message,
        retry_in,
    } = settled(&job("{huggingFace: {repo: deep/model}}"), &hub).await
    else {
        panic!("5,000 layers planned");
    };
    assert_eq!(reason, Reason::HubInvalid);
    assert_eq!(retry_in, None);
    // The line `vramfit plan --model-from` prints for the same number (cli/tests/admission.rs
    // shows the format).
    assert!(
        message.contains("deep/model@main holds numbers the InferenceJob schema refuses: spec.model.layers: 5000 is above the maximum 1024"),
        "{message}"
    );
}
