//! A simulated replica's metrics endpoint: the Prometheus text a vLLM server serves on its
//! `/metrics`, on the address the suite gives the replica's pod (`127.0.0.x`, any port), with
//! the load the scenario sets. The operator's autoscaler reads it as it reads a real server.
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// A running endpoint; it stops when the suite's runtime does.
#[derive(Clone)]
pub struct ReplicaMetrics {
    text: Arc<Mutex<String>>,
    reads: Arc<Mutex<u64>>,
}

impl ReplicaMetrics {
    /// Serves `GET /metrics` on `ip:port` with `running` and `waiting` requests.
    pub async fn start(ip: &str, port: u16, running: u32, waiting: u32) -> Result<Self> {
        let listener = TcpListener::bind((ip, port))
            .await
            .with_context(|| format!("binding {ip}:{port} for a replica's metrics"))?;
        let metrics = ReplicaMetrics {
            text: Arc::new(Mutex::new(String::new())),
            reads: Arc::new(Mutex::new(0)),
        };
        metrics.set(running, waiting);
        let served = metrics.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let served = served.clone();
                tokio::spawn(async move {
                    if crate::hub::read_request_head(&mut socket).await.is_none() {
                        return;
                    }
                    *served.reads.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    let body = served
                        .text
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone();
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Ok(metrics)
    }

    /// Sets the load: vLLM 0.11's gauges, labelled as vLLM labels them.
    pub fn set(&self, running: u32, waiting: u32) {
        let text = format!(
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
             # TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{{engine=\"0\",model_name=\"e2e\"}} {running}.0\n\
             # HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
             # TYPE vllm:num_requests_waiting gauge\n\
             vllm:num_requests_waiting{{engine=\"0\",model_name=\"e2e\"}} {waiting}.0\n"
        );
        *self.text.lock().unwrap_or_else(|e| e.into_inner()) = text;
    }

    /// How many times it was read.
    pub fn reads(&self) -> u64 {
        *self.reads.lock().unwrap_or_else(|e| e.into_inner())
    }
}
