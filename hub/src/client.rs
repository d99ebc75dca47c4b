//! The HTTP client: GETs with a `Range` for safetensors headers, a byte limit on every body,
//! redirects followed (the Hub answers 302 to its CDN for large files) without the token
//! leaving the endpoint's origin, and one timeout per file.
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, LOCATION, RANGE, USER_AGENT};
use http::{HeaderMap, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use vramfit_models::Checkpoint;
use vramfit_models::limits::Limit;
use vramfit_models::source::{
    CheckpointError, FileSource, Range, SourceError, SourceErrorKind, read_checkpoint,
};

use crate::repo::{DEFAULT_ENDPOINT, RepoRef};

/// How to reach the Hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubConfig {
    /// The Hub or a mirror (`HF_ENDPOINT`): `https://huggingface.co`, an air-gapped proxy.
    pub endpoint: String,
    /// A bearer token for private and gated models; sent to the endpoint's origin only.
    pub token: Option<String>,
    /// Longest one file may take: connecting, redirects and body.
    pub timeout: Duration,
    /// Redirects followed per file.
    pub max_redirects: u8,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            endpoint: DEFAULT_ENDPOINT.to_string(),
            token: None,
            timeout: Duration::from_secs(30),
            max_redirects: 5,
        }
    }
}

/// A client that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HubError {
    /// The endpoint is not an http(s) URL.
    #[error("hub endpoint {0:?} is not an http:// or https:// URL without query")]
    Endpoint(String),
    /// No TLS roots for an https endpoint.
    #[error("hub endpoint {endpoint}: no TLS root certificates on this system: {why}")]
    Tls {
        /// The endpoint.
        endpoint: String,
        /// What rustls-native-certs said.
        why: String,
    },
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// A Hub client; cheap to clone (one connection pool).
#[derive(Clone)]
pub struct HubClient {
    http: HttpClient,
    config: Arc<HubConfig>,
    origin: Origin,
}

impl std::fmt::Debug for HubClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("HubClient")
            .field("endpoint", &self.config.endpoint)
            .field("token", &self.config.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// Scheme, host and port: the token goes to the endpoint's origin only.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Origin(String, String, u16);

impl Origin {
    fn of(uri: &Uri) -> Option<Origin> {
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        Some(Origin(scheme, uri.host()?.to_ascii_lowercase(), port))
    }
}

impl HubClient {
    /// A client for `config`'s endpoint.
    pub fn new(config: HubConfig) -> Result<HubClient, HubError> {
        let endpoint = config.endpoint.trim_end_matches('/').to_string();
        let uri: Uri = endpoint
            .parse()
            .map_err(|_| HubError::Endpoint(config.endpoint.clone()))?;
        let origin = Origin::of(&uri)
            .filter(|o| o.0 == "http" || o.0 == "https")
            .filter(|_| uri.query().is_none())
            .ok_or_else(|| HubError::Endpoint(config.endpoint.clone()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder =
            match HttpsConnectorBuilder::new().with_provider_and_native_roots(provider.clone()) {
                Ok(builder) => builder,
                Err(why) if origin.0 == "https" => {
                    return Err(HubError::Tls {
                        endpoint,
                        why: why.to_string(),
                    });
                }
                // A plain-http mirror needs no roots; an https redirect from it then fails clearly.
                Err(_) => HttpsConnectorBuilder::new().with_tls_config(
                    rustls::ClientConfig::builder_with_provider(provider)
                        .with_safe_default_protocol_versions()
                        .map_err(|e| HubError::Tls {
                            endpoint: endpoint.clone(),
                            why: e.to_string(),
                        })?
                        .with_root_certificates(rustls::RootCertStore::empty())
                        .with_no_client_auth(),
                ),
            };
        let connector = builder.https_or_http().enable_http1().build();
        let http = Client::builder(TokioExecutor::new()).build(connector);
        Ok(HubClient {
            http,
            config: Arc::new(HubConfig { endpoint, ..config }),
            origin,
        })
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> &str {
        &self.config.endpoint
    }

    /// One repository's files.
    pub fn model(&self, repo: RepoRef) -> HubModel {
        HubModel {
            client: self.clone(),
            repo,
        }
    }

    /// The model's numbers: `config.json`, the safetensors index and headers.
    pub async fn read_checkpoint(&self, repo: &RepoRef) -> Result<Checkpoint, CheckpointError> {
        read_checkpoint(&self.model(repo.clone())).await
    }

    /// The commit `repo`'s revision names now: the `sha` of the Hub's model info at that
    /// revision (a full commit hash as revision is its own answer, with no request). `None`
    /// where the endpoint has no model info (a plain 404: a mirror that serves files only).
    /// One timeout, and at most [`MAX_INFO_BYTES`] of the answer read.
    pub async fn read_commit(&self, repo: &RepoRef) -> Result<Option<String>, SourceError> {
        if let Some(commit) = repo.pinned_commit() {
            return Ok(Some(commit));
        }
        let model = self.model(repo.clone());
        let url = repo.info_url(self.endpoint());
        model
            .timed("model info", async {
                let response = self.get(&url, None).await?;
                if let Some(refused) = refusal(response.status(), response.headers()) {
                    return Err(refused);
                }
                if response.status() == StatusCode::NOT_FOUND {
                    return Ok(None);
                }
                let bytes = body(response, 0, MAX_INFO_BYTES + 1)
                    .await
                    .map_err(|e| (SourceErrorKind::Unavailable, e))?;
                if bytes.len() as u64 > MAX_INFO_BYTES {
                    return Err((
                        SourceErrorKind::TooLarge,
                        format!("more than the {MAX_INFO_BYTES} bytes vramfit reads"),
                    ));
                }
                commit_of_info(&bytes).map(Some)
            })
            .await
    }

    /// GET `url`, following redirects with the token sent to the endpoint's origin only; the
    /// final response, its body unread. `range` is a `Range` header value (`bytes=100-`) sent
    /// on every hop. For callers that read whole files (a node's model cache); no timeout here:
    /// the caller bounds the wait and the body.
    pub async fn get_following_redirects(
        &self,
        url: &str,
        range: Option<&str>,
    ) -> Result<http::Response<Incoming>, SourceError> {
        self.get(url, range)
            .await
            .map_err(|(kind, why)| SourceError {
                kind,
                message: format!("{url}: {why}"),
            })
    }

    /// GET `url` (with a `Range` header value when asked), following redirects; the final
    /// response.
    async fn get(
        &self,
        url: &str,
        range: Option<&str>,
    ) -> Result<http::Response<Incoming>, (SourceErrorKind, String)> {
        let mut uri: Uri = url
            .parse()
            .map_err(|_| (SourceErrorKind::Invalid, format!("bad URL {url}")))?;
        for _ in 0..=self.config.max_redirects {
            let mut request = Request::get(uri.clone())
                .header(USER_AGENT, concat!("vramfit/", env!("CARGO_PKG_VERSION")));
            if let Some(range) = range {
                request = request.header(RANGE, range);
            }
            if let Some(token) = &self.config.token
                && Origin::of(&uri).as_ref() == Some(&self.origin)
            {
                request = request.header(AUTHORIZATION, format!("Bearer {token}"));
            }
            let request = request
                .body(Empty::new())
                .map_err(|e| (SourceErrorKind::Invalid, e.to_string()))?;
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| (SourceErrorKind::Unavailable, chain(&e)))?;
            if !response.status().is_redirection() {
                return Ok(response);
            }
            let location = response
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| {
                    (
                        SourceErrorKind::Invalid,
                        format!("HTTP {} without a Location", response.status().as_u16()),
                    )
                })?;
            uri = redirect_target(&uri, location).ok_or_else(|| {
                (
                    SourceErrorKind::Invalid,
                    format!("redirect to {location:?}, not an http(s) URL"),
                )
            })?;
        }
        Err((
            SourceErrorKind::Invalid,
            format!("more than {} redirects", self.config.max_redirects),
        ))
    }
}

/// The most of a model info answer read (its file list grows with the repository).
pub const MAX_INFO_BYTES: u64 = 16 * 1024 * 1024;

/// The commit in a model info answer: its `sha`, a full commit hash (lowercased).
fn commit_of_info(bytes: &[u8]) -> Result<String, (SourceErrorKind, String)> {
    let invalid = |why: &str| (SourceErrorKind::Invalid, format!("model info: {why}"));
    let info: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(&format!("not JSON: {e}")))?;
    let sha = info
        .get("sha")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| invalid("no `sha`"))?;
    if !crate::repo::is_commit(sha) {
        return Err(invalid(&format!("`sha` {sha:?} is not a commit hash")));
    }
    Ok(sha.to_ascii_lowercase())
}

/// Where a `Location` points, absolute or relative to the current origin.
fn redirect_target(current: &Uri, location: &str) -> Option<Uri> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.parse().ok();
    }
    if location.starts_with('/') {
        let mut parts = current.clone().into_parts();
        parts.path_and_query = Some(location.parse().ok()?);
        return Uri::from_parts(parts).ok();
    }
    None
}

/// An error and its causes on one line (hyper's errors say "client error (Connect)" and keep
/// the reason in their sources).
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Why a status means the file cannot be read; `None` for success and for the 404 of an
/// absent file (the repository and revision exist).
pub fn refusal(status: StatusCode, headers: &HeaderMap) -> Option<(SourceErrorKind, String)> {
    if status.is_success() {
        return None;
    }
    // The Hub says which thing is missing: the repository, the revision, or the file.
    let code = headers
        .get("x-error-code")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (kind, why) = match (status.as_u16(), code) {
        (404, "RepoNotFound") => (SourceErrorKind::NotFound, "no such repository (HTTP 404)"),
        (404, "RevisionNotFound") => (SourceErrorKind::NotFound, "no such revision (HTTP 404)"),
        (404, _) => return None,
        (401, "GatedRepo") | (403, "GatedRepo") => (
            SourceErrorKind::Forbidden,
            "a gated model: accept its licence on the Hub with the token's account",
        ),
        (401, "RepoNotFound") => (
            SourceErrorKind::NotFound,
            "no such repository, or a private one and no token given (HTTP 401)",
        ),
        (401, _) => (
            SourceErrorKind::Unauthorized,
            "the Hub wants a valid token (HTTP 401)",
        ),
        (403, _) => (
            SourceErrorKind::Forbidden,
            "the token has no access to this model (HTTP 403)",
        ),
        (429, _) => (
            SourceErrorKind::Unavailable,
            "rate limited by the Hub (HTTP 429)",
        ),
        (s, _) if s >= 500 => {
            return Some((
                SourceErrorKind::Unavailable,
                format!("HTTP {s} from the Hub"),
            ));
        }
        (s, _) => return Some((SourceErrorKind::Invalid, format!("unexpected HTTP {s}"))),
    };
    Some((kind, why.to_string()))
}

/// `bytes start-end/total` (or `bytes */total`): the start and the total.
fn content_range(headers: &HeaderMap) -> Option<(Option<u64>, Option<u64>)> {
    let value = headers.get(CONTENT_RANGE)?.to_str().ok()?;
    let (range, total) = value.strip_prefix("bytes ")?.split_once('/')?;
    let start = range
        .split_once('-')
        .and_then(|(s, _)| s.trim().parse().ok());
    Some((start, total.trim().parse().ok()))
}

/// Up to `take` bytes of the body after the first `skip`; the rest is never read (dropping the
/// body closes the connection).
async fn body(response: http::Response<Incoming>, skip: u64, take: u64) -> Result<Vec<u8>, String> {
    let mut body = response.into_body();
    let mut out = Vec::new();
    let mut skipped = 0u64;
    while (out.len() as u64) < take {
        let Some(frame) = body.frame().await else {
            break;
        };
        let frame = frame.map_err(|e| chain(&e))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let mut data = &data[..];
        if skipped < skip {
            let n = (skip - skipped).min(data.len() as u64) as usize;
            skipped += n as u64;
            data = &data[n..];
        }
        let room = (take - out.len() as u64).min(data.len() as u64) as usize;
        out.extend_from_slice(&data[..room]);
    }
    Ok(out)
}

/// One repository's files on the Hub.
#[derive(Clone, Debug)]
pub struct HubModel {
    client: HubClient,
    repo: RepoRef,
}

/// A server that ignores `Range` sends the whole file: skipping this much of it to reach the
/// range is accepted (safetensors headers start at byte 8).
const MAX_SKIP_WITHOUT_RANGE: u64 = 1024 * 1024;

impl HubModel {
    fn error(&self, file: &str, (kind, why): (SourceErrorKind, String)) -> SourceError {
        SourceError {
            kind,
            message: format!("{} ({}): {file}: {why}", self.repo, self.client.endpoint()),
        }
    }

    async fn timed<T>(
        &self,
        file: &str,
        work: impl Future<Output = Result<T, (SourceErrorKind, String)>>,
    ) -> Result<T, SourceError> {
        let timeout = self.client.config.timeout;
        match tokio::time::timeout(timeout, work).await {
            Ok(result) => result.map_err(|e| self.error(file, e)),
            Err(_) => Err(self.error(
                file,
                (
                    SourceErrorKind::Timeout,
                    format!("no complete answer within {}s", timeout.as_secs_f32()),
                ),
            )),
        }
    }
}

impl FileSource for HubModel {
    fn describe(&self) -> String {
        format!("{} ({})", self.repo, self.client.endpoint())
    }

    async fn read_file(&self, name: &str, limit: Limit) -> Result<Option<Vec<u8>>, SourceError> {
        let url = self.repo.resolve_url(self.client.endpoint(), name);
        self.timed(name, async {
            let response = self.client.get(&url, None).await?;
            if let Some(refused) = refusal(response.status(), response.headers()) {
                return Err(refused);
            }
            if response.status() == StatusCode::NOT_FOUND {
                return Ok(None);
            }
            let too_large = |size: u64| {
                (
                    SourceErrorKind::TooLarge,
                    format!("{size} bytes, more than the {limit} vramfit reads"),
                )
            };
            let announced = response
                .headers()
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if let Some(size) = announced.filter(|&s| s > limit.value) {
                return Err(too_large(size));
            }
            let bytes = body(response, 0, limit.value + 1)
                .await
                .map_err(|e| (SourceErrorKind::Unavailable, e))?;
            if bytes.len() as u64 > limit.value {
                return Err(too_large(bytes.len() as u64));
            }
            Ok(Some(bytes))
        })
        .await
    }

    async fn read_range(
        &self,
        name: &str,
        start: u64,
        len: u64,
    ) -> Result<Option<Range>, SourceError> {
        let url = self.repo.resolve_url(self.client.endpoint(), name);
        self.timed(name, async {
            if len == 0 {
                return Ok(Some(Range { bytes: Vec::new(), file_len: None }));
            }
            let range = format!("bytes={start}-{}", start + len - 1);
            let response = self.client.get(&url, Some(&range)).await?;
            let status = response.status();
            if status == StatusCode::RANGE_NOT_SATISFIABLE {
                // The file ends before `start`.
                let file_len = content_range(response.headers()).and_then(|(_, total)| total);
                return Ok(Some(Range { bytes: Vec::new(), file_len }));
            }
            if let Some(refused) = refusal(status, response.headers()) {
                return Err(refused);
            }
            match status {
                StatusCode::NOT_FOUND => Ok(None),
                StatusCode::PARTIAL_CONTENT => {
                    let (first, file_len) = content_range(response.headers()).unwrap_or((None, None));
                    if first != Some(start) {
                        return Err((
                            SourceErrorKind::Invalid,
                            format!("asked for bytes from {start}, the answer's Content-Range starts elsewhere"),
                        ));
                    }
                    let bytes = body(response, 0, len).await.map_err(|e| (SourceErrorKind::Unavailable, e))?;
                    Ok(Some(Range { bytes, file_len }))
                }
                StatusCode::OK if start <= MAX_SKIP_WITHOUT_RANGE => {
                    let file_len = response
                        .headers()
                        .get(CONTENT_LENGTH)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse().ok());
                    let bytes = body(response, start, len).await.map_err(|e| (SourceErrorKind::Unavailable, e))?;
                    Ok(Some(Range { bytes, file_len }))
                }
                StatusCode::OK => Err((
                    SourceErrorKind::Invalid,
                    "the server ignores Range requests; vramfit does not download the weights".to_string(),
                )),
                other => Err((SourceErrorKind::Invalid, format!("unexpected HTTP {}", other.as_u16()))),
            }
        })
        .await
    }
}
