//! A stand-in Kubernetes API server with one node, enough for the agent binary: GET and
//! server-side apply of `/api/v1/nodes/{name}`. The apply replaces the node's `vramfit.io/`
//! labels with the applied ones, as the real server does for the keys one manager owns.
//! Shared by the binary tests and `examples/fake_apiserver.rs` (the benchmark's cluster).
// Each includer uses a different part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

/// What the fake server saw and holds.
#[derive(Clone, Default)]
pub struct Recorded {
    /// `METHOD /path?query` of every request, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
    /// The node's labels.
    pub labels: Arc<Mutex<BTreeMap<String, String>>>,
}

impl Recorded {
    /// The requests so far.
    pub fn requests(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The node's labels now.
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Serves one node named `node` (with `labels`) on 127.0.0.1 at `port` (0: any free port).
pub async fn start(
    node: &str,
    port: u16,
    labels: BTreeMap<String, String>,
) -> std::io::Result<(SocketAddr, Recorded)> {
    let recorded = Recorded::default();
    *recorded
        .labels
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = labels;
    let state = (node.to_string(), recorded.clone());
    let app = Router::new()
        .route(
            "/api/v1/nodes/{name}",
            get(node_request).patch(node_request),
        )
        .with_state(state);
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((addr, recorded))
}

/// Writes a kubeconfig that points at the fake server.
pub fn write_kubeconfig(path: &Path, addr: SocketAddr) -> std::io::Result<()> {
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{addr}\nusers:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\n"
    );
    std::fs::write(path, yaml)
}

async fn node_request(
    State((node, recorded)): State<(String, Recorded)>,
    method: Method,
    uri: axum::http::Uri,
    UrlPath(name): UrlPath<String>,
    body: Bytes,
) -> Response {
    recorded
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(format!("{method} {uri}"));
    if name != node {
        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "NotFound", "code": 404, "message": format!("nodes \"{name}\" not found")});
        return (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/json")],
            status.to_string(),
        )
            .into_response();
    }
    let mut labels = recorded
        .labels
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if method == Method::PATCH {
        let applied: serde_json::Value = match serde_json::from_slice(&body) {
            Ok(value) => value,
            Err(error) => return (StatusCode::BAD_REQUEST, error.to_string()).into_response(),
        };
        labels.retain(|key, _| !key.starts_with("vramfit.io/"));
        if let Some(map) = applied["metadata"]["labels"].as_object() {
            for (key, value) in map {
                labels.insert(key.clone(), value.as_str().unwrap_or_default().to_string());
            }
        }
    }
    let node = serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": *labels}});
    (
        [(header::CONTENT_TYPE, "application/json")],
        node.to_string(),
    )
        .into_response()
}
