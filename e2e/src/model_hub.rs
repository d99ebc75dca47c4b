//! A local Hub that serves whole repositories, for the model-cache scenarios: the file listing
//! (`/api/models/<repo>/tree/<revision>`, each file with its size and, as an LFS file, its
//! SHA-256), the files (`/<repo>/resolve/<revision>/<path>`, with `Range`), a private
//! repository behind a token (its own, sent as `Authorization: Bearer`), and faults armed once: a body cut off after some bytes (the
//! download must resume), a byte flipped in transit (the file must be fetched again). It
//! records every request.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Result;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// One file of a repository.
#[derive(Clone, Debug)]
pub struct ServedFile {
    /// Its path in the repository.
    pub path: String,
    /// Its bytes.
    pub bytes: Arc<Vec<u8>>,
}

/// A repository: its files, and the token it wants (`None`: public).
#[derive(Clone, Debug, Default)]
pub struct ServedRepo {
    /// The files.
    pub files: Vec<ServedFile>,
    /// The bearer token a private repository wants.
    pub token: Option<String>,
}

/// A request the server was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRequest {
    /// The path.
    pub path: String,
    /// Its `Range` header.
    pub range: Option<String>,
    /// The bearer token it carried.
    pub bearer: Option<String>,
}

/// A fault, armed for the next download of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The body stops after this many bytes and the connection closes.
    CutAfter(usize),
    /// One byte of the body is changed.
    Corrupt,
}

#[derive(Default)]
struct State {
    repos: HashMap<String, ServedRepo>,
    faults: HashMap<String, Fault>,
    requests: Vec<ModelRequest>,
}

/// The running server; it stops with the suite's runtime.
#[derive(Clone)]
pub struct ModelHub {
    /// `http://<address>:<port>`.
    pub endpoint: String,
    state: Arc<Mutex<State>>,
}

impl ModelHub {
    /// Listens on `bind` (`127.0.0.1:0`, or `0.0.0.0:0` for pods to reach it).
    pub async fn start(bind: &str) -> Result<ModelHub> {
        let listener = TcpListener::bind(bind).await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(answer(socket, shared.clone()));
            }
        });
        Ok(ModelHub { endpoint, state })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves `repo` (`owner/name`, at every revision).
    pub fn add(&self, repo: &str, served: ServedRepo) {
        self.state().repos.insert(repo.to_string(), served);
    }

    /// Arms `fault` for the next download of `path` of `repo`.
    pub fn arm(&self, repo: &str, path: &str, fault: Fault) {
        self.state().faults.insert(format!("{repo}/{path}"), fault);
    }

    /// Every request for `repo`: its listings and its files.
    pub fn requests_for(&self, repo: &str) -> Vec<ModelRequest> {
        let (file, listing) = (format!("/{repo}/"), format!("/api/models/{repo}/"));
        self.state()
            .requests
            .iter()
            .filter(|r| r.path.starts_with(&file) || r.path.starts_with(&listing))
            .cloned()
            .collect()
    }

    /// The requests for `repo`'s file `path` (downloads, from byte 0 or resumed).
    pub fn downloads(&self, repo: &str, path: &str) -> Vec<ModelRequest> {
        let suffix = format!("/{path}");
        let prefix = format!("/{repo}/resolve/");
        self.state()
            .requests
            .iter()
            .filter(|r| r.path.starts_with(&prefix) && r.path.ends_with(&suffix))
            .cloned()
            .collect()
    }
}

async fn answer(mut socket: TcpStream, state: Arc<Mutex<State>>) {
    let Some(request) = read_head(&mut socket).await else {
        return;
    };
    let response = {
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        state.requests.push(request.clone());
        respond(&request, &mut state)
    };
    let _ = socket.write_all(response.head.as_bytes()).await;
    if let Some((bytes, start, end)) = response.body {
        let _ = socket.write_all(&bytes[start..end]).await;
    }
    let _ = socket.shutdown().await;
}

async fn read_head(socket: &mut TcpStream) -> Option<ModelRequest> {
    let (path, headers) = crate::hub::read_request_head(socket).await?;
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    Some(ModelRequest {
        path,
        range: header("range"),
        bearer: header("authorization")
            .and_then(|v| v.strip_prefix("Bearer ").map(|t| t.trim().to_string())),
    })
}

struct Response {
    head: String,
    /// The bytes and the slice of them to send.
    body: Option<(Arc<Vec<u8>>, usize, usize)>,
}

fn status(line: &str, headers: &[(&str, String)], body: &str) -> Response {
    let mut head = format!("HTTP/1.1 {line}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ));
    Response { head, body: None }
}

fn respond(request: &ModelRequest, state: &mut State) -> Response {
    let path = request.path.split('?').next().unwrap_or_default();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (repo, file, listing) = match parts.as_slice() {
        ["api", "models", owner, name, "tree", _revision] => {
            (format!("{owner}/{name}"), String::new(), true)
        }
        [owner, name, "resolve", _revision, rest @ ..] if !rest.is_empty() => {
            (format!("{owner}/{name}"), rest.join("/"), false)
        }
        _ => return status("404 Not Found", &[], ""),
    };
    let Some(served) = state.repos.get(&repo).cloned() else {
        return status(
            "404 Not Found",
            &[("x-error-code", "RepoNotFound".into())],
            "",
        );
    };
    // A private repository answers only its own token (a wrong one is refused as none is).
    if served.token.is_some() && request.bearer != served.token {
        return status(
            "401 Unauthorized",
            &[("x-error-code", "GatedRepo".into())],
            "",
        );
    }
    if listing {
        return status(
            "200 OK",
            &[("content-type", "application/json".into())],
            &tree(&served),
        );
    }
    let Some(found) = served.files.iter().find(|f| f.path == file) else {
        return status(
            "404 Not Found",
            &[("x-error-code", "EntryNotFound".into())],
            "",
        );
    };
    let len = found.bytes.len();
    let start = request
        .range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.split('-').next())
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(0)
        .min(len);
    let mut bytes = found.bytes.clone();
    let mut end = len;
    match state.faults.remove(&format!("{repo}/{file}")) {
        Some(Fault::CutAfter(n)) => end = (start + n).min(len),
        Some(Fault::Corrupt) if len > start => {
            let mut changed = bytes.as_ref().clone();
            changed[(start + len) / 2] ^= 0xff;
            bytes = Arc::new(changed);
        }
        _ => {}
    }
    let (line, range) = if request.range.is_some() {
        (
            "206 Partial Content",
            Some(format!("bytes {start}-{}/{len}", len.saturating_sub(1))),
        )
    } else {
        ("200 OK", None)
    };
    let mut head = format!(
        "HTTP/1.1 {line}\r\ncontent-length: {}\r\ncontent-type: application/octet-stream\r\nconnection: close\r\n",
        len - start
    );
    if let Some(range) = range {
        head.push_str(&format!("content-range: {range}\r\n"));
    }
    head.push_str("\r\n");
    Response {
        head,
        body: Some((bytes, start, end)),
    }
}

/// The listing as the Hub gives it: every file an LFS file with its SHA-256.
fn tree(repo: &ServedRepo) -> String {
    let entries: Vec<serde_json::Value> = repo
        .files
        .iter()
        .map(|f| {
            let digest = ring::digest::digest(&ring::digest::SHA256, &f.bytes);
            let oid: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
            serde_json::json!({
                "type": "file", "path": f.path, "size": f.bytes.len(),
                "oid": "0000000000000000000000000000000000000000",
                "lfs": {"oid": oid, "size": f.bytes.len(), "pointerSize": 134},
            })
        })
        .collect();
    serde_json::Value::Array(entries).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str, range: Option<&str>) -> ModelRequest {
        ModelRequest {
            path: path.into(),
            range: range.map(String::from),
            bearer: None,
        }
    }

    fn state() -> State {
        let mut state = State::default();
        state.repos.insert(
            "o/m".into(),
            ServedRepo {
                files: vec![ServedFile {
                    path: "w.gguf".into(),
                    bytes: Arc::new((0..100u8).collect()),
                }],
                token: None,
            },
        );
        state
    }

    #[test]
    fn serves_the_listing_ranges_and_one_shot_faults() {
        let mut state = state();
        let listing = respond(
            &get("/api/models/o/m/tree/main?recursive=true", None),
            &mut state,
        );
        assert!(listing.head.contains("\"size\":100") && listing.head.contains("\"lfs\""));
        let ranged = respond(
            &get("/o/m/resolve/main/w.gguf", Some("bytes=40-")),
            &mut state,
        );
        assert!(ranged.head.starts_with("HTTP/1.1 206") && ranged.head.contains("bytes 40-99/100"));
        assert_eq!(ranged.body.as_ref().map(|b| (b.1, b.2)), Some((40, 100)));
        state
            .faults
            .insert("o/m/w.gguf".into(), Fault::CutAfter(10));
        let cut = respond(&get("/o/m/resolve/main/w.gguf", None), &mut state);
        assert!(cut.head.contains("content-length: 100"));
        assert_eq!(cut.body.as_ref().map(|b| (b.1, b.2)), Some((0, 10)));
        let whole = respond(&get("/o/m/resolve/main/w.gguf", None), &mut state);
        assert_eq!(whole.body.as_ref().map(|b| (b.1, b.2)), Some((0, 100)));
        state.faults.insert("o/m/w.gguf".into(), Fault::Corrupt);
        let corrupt = respond(&get("/o/m/resolve/main/w.gguf", None), &mut state);
        assert_ne!(corrupt.body.map(|b| b.0[50]), Some(50));
        state.repos.get_mut("o/m").unwrap().token = Some("t".into());
        let refused = respond(&get("/o/m/resolve/main/w.gguf", None), &mut state);
        assert!(refused.head.starts_with("HTTP/1.1 401"));
        let wrong = ModelRequest {
            bearer: Some("not-t".into()),
            ..get("/o/m/resolve/main/w.gguf", None)
        };
        assert!(respond(&wrong, &mut state).head.starts_with("HTTP/1.1 401"));
        let right = ModelRequest {
            bearer: Some("t".into()),
            ..get("/o/m/resolve/main/w.gguf", None)
        };
        assert!(respond(&right, &mut state).head.starts_with("HTTP/1.1 200"));
    }
}
