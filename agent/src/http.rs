//! The agent's HTTP endpoints: `/healthz` (the process answers), `/readyz` (labels are
//! current, see [`Readiness`]) and `/metrics` (Prometheus text).
use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use crate::metrics::Metrics;
use crate::readiness::Readiness;

/// The content type `prometheus-client`'s text encoding is served with.
const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the handlers read.
#[derive(Clone)]
pub struct HttpState {
    /// Set by the refresh loop.
    pub readiness: Arc<Readiness>,
    /// Updated by the refresh loop.
    pub metrics: Arc<Metrics>,
}

/// The routes.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<HttpState>) -> (StatusCode, &'static str) {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no probe yet, or labels not written\n",
        )
    }
}

async fn metrics(State(state): State<HttpState>) -> Response {
    match state.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, OPENMETRICS_TEXT)], text).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "metrics could not be encoded\n",
        )
            .into_response(),
    }
}
