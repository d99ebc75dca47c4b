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

/// Many simulated replicas' metrics on one port of every local address: each replica (the
/// address the benchmark gives its pod, [`FleetMetrics::assign`]) answers with its own
/// planned concurrency times the load the benchmark sets, in the gauges of every runtime
/// vramfit reads: vLLM's, llama-server's and [`FLEET_CUSTOM_METRIC`] (what a `transformers`
/// or `custom` job names).
#[derive(Clone, Default)]
pub struct FleetMetrics {
    concurrency: Arc<Mutex<std::collections::HashMap<std::net::IpAddr, u32>>>,
    assigned: Arc<Mutex<std::collections::HashMap<String, std::net::Ipv4Addr>>>,
    load_percent: Arc<std::sync::atomic::AtomicU32>,
    reads: Arc<std::sync::atomic::AtomicU64>,
}

/// The gauge a job of another runtime names (`serve.autoscaling.metric.name`).
pub const FLEET_CUSTOM_METRIC: &str = "inflight_requests";

/// The range the fleet's pod addresses come from: 198.18.0.0/15, set aside for benchmarks
/// (RFC 2544). Not loopback, which an EndpointSlice refuses; it reaches this machine once
/// routed locally: `ip route add local 198.18.0.0/15 dev lo`.
pub const FLEET_RANGE: &str = "198.18.0.0/15";

impl FleetMetrics {
    /// Serves `GET` on `0.0.0.0:port` (every local address), at `load_percent` of each
    /// replica's concurrency.
    pub async fn start(port: u16, load_percent: u32) -> Result<Self> {
        let listener = TcpListener::bind(("0.0.0.0", port))
            .await
            .with_context(|| format!("binding 0.0.0.0:{port} for the replicas' metrics"))?;
        let fleet = FleetMetrics::default();
        fleet.set_load(load_percent);
        let served = fleet.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let served = served.clone();
                tokio::spawn(async move {
                    let Ok(local) = socket.local_addr() else {
                        return;
                    };
                    if crate::hub::read_request_head(&mut socket).await.is_none() {
                        return;
                    }
                    served
                        .reads
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let body = served.text(local.ip());
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Ok(fleet)
    }

    /// Whether [`FLEET_RANGE`] reaches this machine (`GET` on its first address answers).
    pub async fn check_reachable(&self, port: u16) -> Result<()> {
        let probe = format!("{}:{port}", Self::address(0));
        crate::http_get(&probe, "/metrics").await.with_context(|| {
            format!(
                "{probe} does not reach this machine: the replicas' metrics are served on {FLEET_RANGE}; route it locally first (Linux: ip route add local {FLEET_RANGE} dev lo)"
            )
        })?;
        Ok(())
    }

    /// The address of pod `name` (the same on every call, another for every pod), where
    /// the fleet answers for it with `concurrency`.
    pub fn assign(&self, name: &str, concurrency: u32) -> std::net::Ipv4Addr {
        let address = {
            let mut assigned = self.assigned.lock().unwrap_or_else(|e| e.into_inner());
            let next = assigned.len() as u32 + 1;
            *assigned
                .entry(name.to_string())
                .or_insert_with(|| Self::address(next))
        };
        self.add(std::net::IpAddr::V4(address), concurrency);
        address
    }

    /// The `index`th address of [`FLEET_RANGE`] (index 0 is the probe's).
    fn address(index: u32) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 18, 0, 1)) + index)
    }

    /// Registers the replica serving on `ip`, planned for `concurrency` sequences.
    pub fn add(&self, ip: std::net::IpAddr, concurrency: u32) {
        self.concurrency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ip, concurrency);
    }

    /// Sets every replica's load, percent of its concurrency.
    pub fn set_load(&self, percent: u32) {
        self.load_percent
            .store(percent, std::sync::atomic::Ordering::Relaxed);
    }

    /// Reads served so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn text(&self, ip: std::net::IpAddr) -> String {
        let concurrency = self
            .concurrency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&ip)
            .copied()
            .unwrap_or(1);
        let percent = self.load_percent.load(std::sync::atomic::Ordering::Relaxed);
        let running = (concurrency * percent).div_ceil(100);
        format!(
            "# TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} {running}.0\n\
             # TYPE vllm:num_requests_waiting gauge\n\
             vllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} 0.0\n\
             # TYPE llamacpp:requests_processing gauge\n\
             llamacpp:requests_processing {running}\n\
             # TYPE llamacpp:requests_deferred gauge\n\
             llamacpp:requests_deferred 0\n\
             # TYPE {FLEET_CUSTOM_METRIC} gauge\n\
             {FLEET_CUSTOM_METRIC} {running}\n"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_fleet_answers_each_address_with_its_own_concurrency_at_the_load() {
        let port = crate::free_port().unwrap();
        let fleet = FleetMetrics::start(port, 50).await.unwrap();
        // Loopback stands in for the benchmark's range, which needs a route.
        fleet.add("127.3.4.5".parse().unwrap(), 8);
        let (code, text) = crate::http_get(&format!("127.3.4.5:{port}"), "/metrics")
            .await
            .unwrap();
        assert_eq!(code, 200);
        assert!(text.contains("vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 4.0"));
        assert!(text.contains("llamacpp:requests_processing 4\n"));
        assert!(text.contains(&format!("{FLEET_CUSTOM_METRIC} 4\n")));
        fleet.set_load(100);
        let (_, text) = crate::http_get(&format!("127.3.4.5:{port}"), "/metrics")
            .await
            .unwrap();
        assert!(text.contains("llamacpp:requests_processing 8\n"), "{text}");
        // An address nobody registered answers for one sequence.
        let (_, text) = crate::http_get(&format!("127.9.9.9:{port}"), "/metrics")
            .await
            .unwrap();
        assert!(text.contains("llamacpp:requests_processing 1\n"), "{text}");
        assert_eq!(fleet.reads(), 3);
    }

    #[test]
    fn every_pod_gets_its_own_address_in_the_range_and_keeps_it() {
        let fleet = FleetMetrics::default();
        let mut seen = std::collections::HashSet::new();
        for i in 0..70_000 {
            let address = fleet.assign(&format!("pod-{i}"), 4);
            assert!(seen.insert(address), "{address} given twice");
            let [a, b, ..] = address.octets();
            assert!(
                a == 198 && (b == 18 || b == 19),
                "{address} is outside {FLEET_RANGE}"
            );
        }
        assert_eq!(fleet.assign("pod-7", 4), fleet.assign("pod-7", 8));
        assert_ne!(
            fleet.assign("pod-0", 4),
            FleetMetrics::address(0),
            "the probe's"
        );
    }
}
