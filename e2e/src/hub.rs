//! A local HTTP server playing the Hugging Face Hub for the operator's `--hub-endpoint`: it
//! serves a repository's `config.json` at `/<owner>/<name>/resolve/<revision>/config.json`,
//! answers a missing repository as the Hub does (404 with `X-Error-Code: RepoNotFound`),
//! keeps a private repository behind a token, can hold a repository's answers back (a slow
//! Hub), and records every request it was sent.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How a repository is served.
#[derive(Clone, Debug)]
pub struct HubRepo {
    /// `config.json` as served.
    pub config: String,
    /// The bearer token the repository wants (`None`: public).
    pub token: Option<String>,
    /// How long each answer is held back.
    pub delay: Duration,
}

/// A request the server was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubRequest {
    /// The request path.
    pub path: String,
    /// Its `Authorization` header, if any.
    pub authorization: Option<String>,
}

/// The running server; it stops when the suite's runtime does.
pub struct LocalHub {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    requests: Arc<Mutex<Vec<HubRequest>>>,
}

impl LocalHub {
    /// Serves `repos` (keyed by `owner/name`, at every revision) on a free loopback port.
    pub async fn start(repos: HashMap<String, HubRepo>) -> Result<LocalHub> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let repos = Arc::new(repos);
        let recorded = requests.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(answer(socket, repos.clone(), recorded.clone()));
            }
        });
        Ok(LocalHub { endpoint, requests })
    }

    /// The requests sent so far whose path starts with `/<repo>/`.
    pub fn requests_for(&self, repo: &str) -> Vec<HubRequest> {
        let prefix = format!("/{repo}/");
        self.requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|r| r.path.starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// How many times `<repo>`'s `config.json` was asked for.
    pub fn config_reads(&self, repo: &str) -> usize {
        self.requests_for(repo)
            .iter()
            .filter(|r| r.path.ends_with("/config.json"))
            .count()
    }
}

/// One request: read its head, record it, answer it, close.
async fn answer(
    mut socket: TcpStream,
    repos: Arc<HashMap<String, HubRepo>>,
    requests: Arc<Mutex<Vec<HubRequest>>>,
) {
    let Some(request) = read_head(&mut socket).await else {
        return;
    };
    requests
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(request.clone());
    let response = respond(&request, &repos).await;
    let _ = socket.write_all(response.as_bytes()).await;
    let _ = socket.shutdown().await;
}

/// The request line's path and the `Authorization` header (a GET has no body).
async fn read_head(socket: &mut TcpStream) -> Option<HubRequest> {
    let (path, headers) = read_request_head(socket).await?;
    let authorization = headers
        .into_iter()
        .find(|(name, _)| name == "authorization")
        .map(|(_, value)| value);
    Some(HubRequest {
        path,
        authorization,
    })
}

/// A request's path and headers (names lowercased), read up to the blank line (at most
/// 16 KiB): what both local Hubs read of a GET.
pub(crate) async fn read_request_head(
    socket: &mut TcpStream,
) -> Option<(String, Vec<(String, String)>)> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = socket.read(&mut buffer).await.ok()?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.lines();
    let path = lines.next()?.split_whitespace().nth(1)?.to_string();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some((path, headers))
}

/// What the Hub would answer: the repository's `config.json`, 401 without its token, 404
/// (`RepoNotFound`) for a repository it does not have, a plain 404 for any other file.
async fn respond(request: &HubRequest, repos: &HashMap<String, HubRepo>) -> String {
    let parts: Vec<&str> = request.path.trim_start_matches('/').split('/').collect();
    let (repo, file) = match parts.as_slice() {
        [owner, name, "resolve", _revision, file] => (format!("{owner}/{name}"), *file),
        _ => return reply("404 Not Found", &[], ""),
    };
    let Some(served) = repos.get(&repo) else {
        return reply("404 Not Found", &[("x-error-code", "RepoNotFound")], "");
    };
    tokio::time::sleep(served.delay).await;
    if let Some(token) = &served.token
        && request.authorization.as_deref() != Some(format!("Bearer {token}").as_str())
    {
        return reply("401 Unauthorized", &[("x-error-code", "RepoNotFound")], "");
    }
    match file {
        "config.json" => reply(
            "200 OK",
            &[("content-type", "application/json")],
            &served.config,
        ),
        _ => reply("404 Not Found", &[("x-error-code", "EntryNotFound")], ""),
    }
}

fn reply(status: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut response = format!("HTTP/1.1 {status}\r\n");
    for (name, value) in headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ));
    response
}

impl crate::Suite {
    /// Creates Secret `name` in the suite's namespace holding the Hub token `token` under
    /// `token` (what the operator's `--hub-token-secret` reads); `false` when one of that name
    /// was there already (left unchanged).
    pub async fn create_hub_token_secret(&self, name: &str, token: &str) -> Result<bool> {
        use anyhow::bail;
        use k8s_openapi::api::core::v1::Secret;
        use kube::api::{Api, PostParams};
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.ns);
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name},
            "stringData": {"token": token},
        }))?;
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => bail!("creating Secret {}/{name}: {e}", self.ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str, authorization: Option<&str>) -> HubRequest {
        HubRequest {
            path: path.into(),
            authorization: authorization.map(String::from),
        }
    }

    #[tokio::test]
    async fn answers_as_the_hub_does() {
        let repos = HashMap::from([
            (
                "open/model".to_string(),
                HubRepo {
                    config: "{}".into(),
                    token: None,
                    delay: Duration::ZERO,
                },
            ),
            (
                "closed/model".to_string(),
                HubRepo {
                    config: "{\"a\": 1}".into(),
                    token: Some("t".into()),
                    delay: Duration::ZERO,
                },
            ),
        ]);
        let open = respond(&get("/open/model/resolve/main/config.json", None), &repos).await;
        assert!(open.starts_with("HTTP/1.1 200 OK\r\n") && open.ends_with("\r\n\r\n{}"));
        let index = respond(
            &get(
                "/open/model/resolve/main/model.safetensors.index.json",
                None,
            ),
            &repos,
        )
        .await;
        assert!(index.starts_with("HTTP/1.1 404") && index.contains("EntryNotFound"));
        let missing = respond(&get("/no/model/resolve/main/config.json", None), &repos).await;
        assert!(missing.starts_with("HTTP/1.1 404") && missing.contains("RepoNotFound"));
        let path = "/closed/model/resolve/main/config.json";
        let refused = respond(&get(path, Some("Bearer wrong")), &repos).await;
        assert!(refused.starts_with("HTTP/1.1 401"));
        let granted = respond(&get(path, Some("Bearer t")), &repos).await;
        assert!(granted.starts_with("HTTP/1.1 200") && granted.ends_with("{\"a\": 1}"));
    }
}
