//! What the operator's `/readyz` means (caches synced and, with leader election, the lease
//! held: only a ready replica writes), and the hook that refreshes the store-derived gauges
//! before a `/metrics` scrape. The server itself is `vramfit_runtime::admin_server`.
use std::borrow::Cow;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use vramfit_runtime::admin_server::ReadinessSource;

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

    /// Refreshes the store-derived gauges, once a controller has set their source (the
    /// admin server's hook before each scrape).
    pub fn refresh_gauges(&self) {
        if let Some(refresh) = self.gauge_source.get() {
            refresh();
        }
    }
}

impl ReadinessSource for Health {
    /// `Ok` when ready, else why not.
    fn readiness(&self) -> Result<(), Cow<'static, str>> {
        if self.leader_election && !self.leader.load(Ordering::Acquire) {
            return Err(Cow::Borrowed("standby: another replica holds the lease"));
        }
        if !self.synced.load(Ordering::Acquire) {
            return Err(Cow::Borrowed("caches not synced yet"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use vramfit_runtime::admin_server::{self, AdminRoutes};
    use vramfit_runtime::shutdown::Shutdown;

    use super::*;
    use crate::metrics::Metrics;

    #[test]
    fn readiness_needs_the_caches_and_the_lease() {
        let health = Health::new(true);
        assert_eq!(
            health.readiness(),
            Err("standby: another replica holds the lease".into())
        );
        health.set_leader(true);
        assert_eq!(health.readiness(), Err("caches not synced yet".into()));
        health.set_synced(true);
        assert_eq!(health.readiness(), Ok(()));
        assert!(Health::new(false).readiness().is_err());
    }

    #[test]
    fn the_gauge_source_is_set_once() {
        let health = Health::new(false);
        health.refresh_gauges(); // no source yet: nothing to do
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let first = calls.clone();
        health.set_gauge_source(Box::new(move || {
            first.fetch_add(1, Ordering::Relaxed);
        }));
        health.set_gauge_source(Box::new(|| panic!("a second source replaced the first")));
        health.refresh_gauges();
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    /// The routes as `app.rs` wires them, over a real socket.
    #[tokio::test]
    async fn routes_serve_health_and_metrics() {
        async fn get(addr: SocketAddr, path: &str) -> String {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).await.unwrap();
            response
        }
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::new(false));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (trigger, mut shutdown) = Shutdown::new();
        let hook_health = health.clone();
        let router = AdminRoutes::new(health.clone(), metrics.clone())
            .before_scrape(move || hook_health.refresh_gauges())
            .router();
        let task = tokio::spawn(admin_server::serve(listener, router, async move {
            shutdown.wait().await
        }));
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let not_ready = get(addr, "/readyz").await;
        assert!(not_ready.starts_with("HTTP/1.1 503"), "{not_ready}");
        assert!(
            not_ready.ends_with("\r\n\r\nnot ready: caches not synced yet\n"),
            "{not_ready}"
        );
        health.set_synced(true);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        let refreshed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = refreshed.clone();
        health.set_gauge_source(Box::new(move || seen.store(true, Ordering::Relaxed)));
        let text = get(addr, "/metrics").await;
        assert!(text.contains("vramfit_unschedulable_jobs"), "{text}");
        assert!(
            refreshed.load(Ordering::Relaxed),
            "the scrape refreshed the gauges"
        );
        trigger.trigger();
        task.await.unwrap().unwrap();
    }
}
