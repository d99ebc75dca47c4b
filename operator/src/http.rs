//! `/healthz` (the process answers), `/readyz` (caches synced and, with leader election, the
//! lease held: only a ready replica writes) and `/metrics` (Prometheus text).
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::watch;

use crate::error::StartupError;
use crate::metrics::Metrics;

/// What `/readyz` and `/metrics` report.
pub struct Health {
    synced: AtomicBool,
    leader_election: bool,
    leader: AtomicBool,
    gauge_source: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Health {
    /// Health of a replica; `leader_election`: readiness also needs the lease.
    pub fn new(leader_election: bool) -> Self {
        Self {
            synced: AtomicBool::new(false),
            leader_election,
            leader: AtomicBool::new(false),
            gauge_source: OnceLock::new(),
        }
    }

    /// The caches have (or no longer have) their first full list.
    pub fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::Release);
    }

    /// This replica holds (or lost) the lease.
    pub fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::Release);
    }

    /// Sets the function that refreshes the store-derived gauges before a scrape.
    pub fn set_gauge_source(&self, source: Box<dyn Fn() + Send + Sync>) {
        // Set once per process; a second controller run keeps the first source.
        let _ = self.gauge_source.set(source);
    }

    /// `Ok` when ready, else why not.
    pub fn readiness(&self) -> Result<(), &'static str> {
        if self.leader_election && !self.leader.load(Ordering::Acquire) {
            return Err("standby: another replica holds the lease");
        }
        if !self.synced.load(Ordering::Acquire) {
            return Err("caches not synced yet");
        }
        Ok(())
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// The routes.
pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState { metrics, health })
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.health.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    if let Some(refresh) = state.health.gauge_source.get() {
        refresh();
    }
    match state.metrics.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

/// Binds `addr` (failing at once when it cannot) and serves until `stop` turns true.
pub async fn bind(
    addr: SocketAddr,
    router: Router,
    mut stop: watch::Receiver<bool>,
) -> Result<impl std::future::Future<Output = ()>, StartupError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| StartupError::Http {
            addr: addr.to_string(),
            source,
        })?;
    Ok(async move {
        let serve = axum::serve(listener, router).with_graceful_shutdown(async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        });
        if let Err(error) = serve.await {
            tracing::error!(%error, "metrics server failed");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn readiness_needs_the_caches_and_the_lease() {
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::new(true));
        let (stop_tx, stop) = watch::channel(false);
        let server = bind(
            "127.0.0.1:0".parse().unwrap(),
            router(metrics, health.clone()),
            stop,
        )
        .await;
        assert!(server.is_ok());
        assert_eq!(
            health.readiness(),
            Err("standby: another replica holds the lease")
        );
        health.set_leader(true);
        assert_eq!(health.readiness(), Err("caches not synced yet"));
        health.set_synced(true);
        assert_eq!(health.readiness(), Ok(()));
        assert!(Health::new(false).readiness().is_err());
        let _ = stop_tx.send(true);
    }

    #[tokio::test]
    async fn routes_serve_health_and_metrics() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::new(false));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let (stop_tx, stop) = watch::channel(false);
        let server = bind(addr, router(metrics, health.clone()), stop)
            .await
            .unwrap();
        let task = tokio::spawn(server);
        let get = |path: &'static str| async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).await.unwrap();
            response
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/readyz").await.starts_with("HTTP/1.1 503"));
        health.set_synced(true);
        assert!(get("/readyz").await.starts_with("HTTP/1.1 200"));
        let text = get("/metrics").await;
        assert!(text.contains("vramfit_unschedulable_jobs"), "{text}");
        let _ = stop_tx.send(true);
        let _ = task.await;
    }
}
