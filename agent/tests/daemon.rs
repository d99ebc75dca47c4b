//! The real binary against a stand-in API server: `--once` labels a simulated node through
//! the kubeconfig, and the long-running agent serves its endpoints, writes once, stays
//! quiet, and stops cleanly on SIGTERM.
// Test and benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
mod support {
    pub mod fake_apiserver;
}

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::fake_apiserver::{self, Recorded};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_vramfit-agent");
const NODE: &str = "sim-h100";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

fn foreign() -> BTreeMap<String, String> {
    BTreeMap::from([("kubernetes.io/hostname".to_string(), NODE.to_string())])
}

async fn cluster(test: &str) -> (Recorded, PathBuf) {
    let (addr, recorded) = fake_apiserver::start(NODE, 0, foreign()).await.unwrap();
    let kubeconfig = std::env::temp_dir().join(format!(
        "vramfit-agent-{test}-{}.kubeconfig",
        std::process::id()
    ));
    fake_apiserver::write_kubeconfig(&kubeconfig, addr).unwrap();
    (recorded, kubeconfig)
}

fn agent(kubeconfig: &PathBuf, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("RUST_LOG", "info");
    command
}

/// `GET path` over plain HTTP/1.1: status and body, or `None` if nothing listens yet.
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_labels_a_simulated_node_then_finds_it_current() {
    let (recorded, kubeconfig) = cluster("once").await;
    let h100 = fixture("h100-x8.yaml");
    let args = [
        "--once",
        "--fixture",
        h100.to_str().unwrap(),
        "--node-name",
        NODE,
    ];
    let run = || {
        let mut command = agent(&kubeconfig, &args);
        tokio::task::spawn_blocking(move || command.output().unwrap())
    };
    let output = run().await.unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let labels = recorded.labels();
    assert_eq!(labels["vramfit.io/gpu.product"], "NVIDIA-H100-80GB-HBM3");
    assert_eq!(labels["vramfit.io/gpu.count"], "8");
    assert_eq!(
        labels["kubernetes.io/hostname"], NODE,
        "foreign labels stay"
    );
    assert_eq!(
        recorded.requests(),
        [
            format!("GET /api/v1/nodes/{NODE}"),
            format!("PATCH /api/v1/nodes/{NODE}?&force=true&fieldManager=vramfit-agent"),
        ]
    );

    // Run again: one GET, labels found current, no write.
    let output = run().await.unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(recorded.requests().len(), 3, "{:?}", recorded.requests());
    let _ = std::fs::remove_file(&kubeconfig);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_serves_its_endpoints_writes_once_and_stops_on_sigterm() {
    let (recorded, kubeconfig) = cluster("daemon").await;
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let a10g = fixture("a10g-x4.yaml");
    let child = agent(
        &kubeconfig,
        &[
            "--fixture",
            a10g.to_str().unwrap(),
            "--node-name",
            NODE,
            "--listen",
            &listen.to_string(),
            "--interval-seconds",
            "1",
            "--log-format",
            "json",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((200, body)) = http_get(listen, "/readyz").await {
            assert_eq!(body, "ready\n");
            break;
        }
        assert!(Instant::now() < deadline, "never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        http_get(listen, "/healthz").await,
        Some((200, "ok\n".to_string()))
    );
    let (status, metrics) = http_get(listen, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(metrics.contains("vramfit_agent_gpus 4\n"), "{metrics}");
    assert!(
        metrics.contains("vramfit_agent_gpu_memory_mib{gpu=\"3\",product=\"NVIDIA-A10G\"} 23028\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("vramfit_agent_label_writes_total 1\n"),
        "{metrics}"
    );
    assert_eq!(recorded.labels()["vramfit.io/gpu.count"], "4");

    // Several refreshes later (1 s interval), still exactly one GET and one apply.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(recorded.requests().len(), 2, "{:?}", recorded.requests());

    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("SIGTERM received"), "{stderr}");
    // JSON logs: every line is one object.
    for line in stderr.lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "not JSON: {line}"
        );
    }
    let _ = std::fs::remove_file(&kubeconfig);
}
