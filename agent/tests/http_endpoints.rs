//! `/healthz`, `/readyz` and `/metrics` over a real socket, wired as `app.rs` wires the
//! shared admin server: the agent's readiness and metrics.
// Test and benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vramfit_agent::metrics::Metrics;
use vramfit_agent::readiness::Readiness;
use vramfit_runtime::admin_server::{AdminRoutes, serve};
use vramfit_runtime::shutdown::Shutdown;

async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_string())
}

#[tokio::test]
async fn readiness_means_probed_and_labels_current() {
    let readiness = Arc::new(Readiness::new());
    let metrics = Arc::new(Metrics::new());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (trigger, mut shutdown) = Shutdown::new();
    let app = AdminRoutes::new(readiness.clone(), metrics.clone()).router();
    let server = tokio::spawn(serve(listener, app, async move { shutdown.wait().await }));

    let (status, _, body) = get(addr, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, _, body) = get(addr, "/readyz").await;
    assert_eq!(
        (status, body.as_str()),
        (503, "not ready: no probe yet, or labels not written\n")
    );
    readiness.set_probed();
    assert_eq!(
        get(addr, "/readyz").await.0,
        503,
        "probed but labels not written"
    );
    readiness.set_labels_current(true);
    let (status, _, body) = get(addr, "/readyz").await;
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    // Liveness stays independent of readiness.
    readiness.set_labels_current(false);
    assert_eq!(get(addr, "/readyz").await.0, 503);
    assert_eq!(get(addr, "/healthz").await.0, 200);

    metrics.count_label_write();
    let (status, head, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        head.contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(
        body.contains("vramfit_agent_label_writes_total 1\n"),
        "{body}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert_eq!(get(addr, "/nope").await.0, 404);

    trigger.trigger();
    server.await.unwrap().unwrap();
}
