//! The admin HTTP server of a long-running binary: `/healthz` (the process answers),
//! `/readyz` (what the binary's [`ReadinessSource`] says) and `/metrics` (OpenMetrics text
//! from its [`MetricsSource`], after an optional hook that refreshes derived gauges).
//!
//! ```text
//! GET /healthz  200 "ok\n"
//! GET /readyz   200 "ready\n" | 503 "not ready: {why}\n"
//! GET /metrics  200 OpenMetrics text | 500 "cannot encode metrics\n"
//! ```
use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// The content type `prometheus-client`'s text encoding is served with.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What `/readyz` answers. Each binary gives readiness its own meaning (the agent: labels
/// current; the operator: caches synced and, with leader election, the lease held).
pub trait ReadinessSource: Send + Sync {
    /// `Ok` when ready, else why not (served as `not ready: {why}`).
    fn readiness(&self) -> Result<(), Cow<'static, str>>;
}

/// What `/metrics` serves.
pub trait MetricsSource: Send + Sync {
    /// The OpenMetrics text exposition.
    fn encode_metrics(&self) -> Result<String, std::fmt::Error>;
}

impl MetricsSource for Registry {
    fn encode_metrics(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        encode(&mut text, self)?;
        Ok(text)
    }
}

/// A hook run before each scrape.
type Hook = Arc<dyn Fn() + Send + Sync>;

/// The three routes and what they read; [`AdminRoutes::router`] builds the [`Router`].
#[derive(Clone)]
pub struct AdminRoutes {
    readiness: Arc<dyn ReadinessSource>,
    metrics: Arc<dyn MetricsSource>,
    before_scrape: Option<Hook>,
}

impl AdminRoutes {
    /// Routes that answer `/readyz` from `readiness` and `/metrics` from `metrics`.
    pub fn new(readiness: Arc<dyn ReadinessSource>, metrics: Arc<dyn MetricsSource>) -> Self {
        Self {
            readiness,
            metrics,
            before_scrape: None,
        }
    }

    /// Runs `hook` before each `/metrics` scrape (to refresh gauges derived from state that
    /// is cheaper to read on demand than to keep current).
    pub fn before_scrape(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.before_scrape = Some(Arc::new(hook));
        self
    }

    /// The router serving `/healthz`, `/readyz` and `/metrics`.
    pub fn router(self) -> Router {
        Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .with_state(self)
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then finishes the requests in
/// flight.
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

async fn readyz(State(routes): State<AdminRoutes>) -> Response {
    match routes.readiness.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

async fn metrics(State(routes): State<AdminRoutes>) -> Response {
    if let Some(hook) = &routes.before_scrape {
        hook();
    }
    match routes.metrics.encode_metrics() {
        Ok(text) => ([(header::CONTENT_TYPE, OPENMETRICS_TEXT)], text).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Mutex;

    use prometheus_client::metrics::counter::Counter;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::shutdown::Shutdown;

    /// A readiness whose answer the test sets.
    #[derive(Default)]
    struct Settable(Mutex<Option<&'static str>>);

    impl Settable {
        fn set(&self, why: Option<&'static str>) {
            *self.0.lock().unwrap() = why;
        }
    }

    impl ReadinessSource for Settable {
        fn readiness(&self) -> Result<(), Cow<'static, str>> {
            match *self.0.lock().unwrap() {
                None => Ok(()),
                Some(why) => Err(Cow::Borrowed(why)),
            }
        }
    }

    struct Failing;

    impl MetricsSource for Failing {
        fn encode_metrics(&self) -> Result<String, std::fmt::Error> {
            Err(std::fmt::Error)
        }
    }

    struct Reply {
        status: u16,
        /// Lower-cased.
        head: String,
        body: String,
    }

    async fn get(addr: SocketAddr, path: &str) -> Reply {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        Reply {
            status,
            head: head.to_ascii_lowercase(),
            body: body.to_string(),
        }
    }

    /// Serves `routes` on 127.0.0.1 until the returned trigger fires.
    async fn start(
        routes: AdminRoutes,
    ) -> (
        SocketAddr,
        crate::shutdown::ShutdownTrigger,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (trigger, mut shutdown) = Shutdown::new();
        let server = tokio::spawn(serve(listener, routes.router(), async move {
            shutdown.wait().await
        }));
        (addr, trigger, server)
    }

    #[tokio::test]
    async fn healthz_and_readyz_answer_with_their_bodies() {
        let readiness = Arc::new(Settable::default());
        readiness.set(Some("caches not synced yet"));
        let routes = AdminRoutes::new(readiness.clone(), Arc::new(Registry::default()));
        let (addr, trigger, server) = start(routes).await;

        let healthz = get(addr, "/healthz").await;
        assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok\n"));
        assert!(
            healthz
                .head
                .contains("content-type: text/plain; charset=utf-8"),
            "{}",
            healthz.head
        );

        let readyz = get(addr, "/readyz").await;
        assert_eq!(
            (readyz.status, readyz.body.as_str()),
            (503, "not ready: caches not synced yet\n")
        );
        assert!(
            readyz
                .head
                .contains("content-type: text/plain; charset=utf-8"),
            "{}",
            readyz.head
        );

        readiness.set(None);
        let readyz = get(addr, "/readyz").await;
        assert_eq!((readyz.status, readyz.body.as_str()), (200, "ready\n"));
        // Liveness stays independent of readiness.
        readiness.set(Some("standby"));
        assert_eq!(get(addr, "/readyz").await.status, 503);
        assert_eq!(get(addr, "/healthz").await.status, 200);

        assert_eq!(get(addr, "/nope").await.status, 404);
        trigger.trigger();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn metrics_are_openmetrics_text_refreshed_by_the_hook() {
        let mut registry = Registry::with_prefix("test");
        let scrapes: Counter = Counter::default();
        registry.register("scrapes", "Scrapes seen by the hook", scrapes.clone());
        let hook_count = scrapes.clone();
        let routes = AdminRoutes::new(Arc::new(Settable::default()), Arc::new(registry))
            .before_scrape(move || {
                hook_count.inc();
            });
        let (addr, trigger, server) = start(routes).await;

        let first = get(addr, "/metrics").await;
        assert_eq!(first.status, 200);
        assert!(
            first.head.contains(
                "content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"
            ),
            "{}",
            first.head
        );
        // The hook ran before the text was encoded.
        assert!(
            first.body.contains("test_scrapes_total 1\n"),
            "{}",
            first.body
        );
        assert!(first.body.ends_with("# EOF\n"), "{}", first.body);
        let second = get(addr, "/metrics").await;
        assert!(
            second.body.contains("test_scrapes_total 2\n"),
            "{}",
            second.body
        );
        assert_eq!(scrapes.get(), 2);

        trigger.trigger();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn metrics_that_cannot_be_encoded_are_a_500() {
        let routes = AdminRoutes::new(Arc::new(Settable::default()), Arc::new(Failing));
        let (addr, trigger, server) = start(routes).await;
        let response = get(addr, "/metrics").await;
        assert_eq!(
            (response.status, response.body.as_str()),
            (500, "cannot encode metrics\n")
        );
        trigger.trigger();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn serve_returns_once_shutdown_completes() {
        let (addr, trigger, server) = start(AdminRoutes::new(
            Arc::new(Settable::default()),
            Arc::new(Registry::default()),
        ))
        .await;
        assert_eq!(get(addr, "/healthz").await.status, 200);
        trigger.trigger();
        let stopped = tokio::time::timeout(std::time::Duration::from_secs(10), server).await;
        assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
        assert!(TcpStream::connect(addr).await.is_err(), "still listening");
    }
}
