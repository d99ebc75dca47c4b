//! Leader election with a `coordination.k8s.io` Lease (kube-lease-manager): several replicas
//! may run; only the holder of the lease runs the controller and writes. A replica that loses
//! the lease stops its controller and exits non-zero, so that Kubernetes restarts it as a
//! standby (it never keeps writing on a lease it does not hold), and so does one that cannot
//! renew: it stops [`lease_fence::MARGIN`] before its lease could expire.
use std::time::{Duration, SystemTime};

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::error::StartupError;
use crate::lease_fence;

/// Lease validity after a renewal, in seconds: a standby takes over at most this long after
/// the leader stops renewing.
pub const LEASE_DURATION_SECONDS: u64 = 20;
/// The holder renews this many seconds before expiry: every 12 s, which leaves the fence
/// (renewal + 17 s, [`lease_fence::MARGIN`]) two reads to see each renewal.
pub const LEASE_GRACE_SECONDS: u64 = 8;

/// Which lease, and who we are.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This replica's identity (its pod name).
    pub identity: String,
}

/// A held lease; dropping it without [`Leadership::release`] leaves it to expire.
pub struct Leadership {
    state: watch::Receiver<bool>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
    /// Resolves when the lease could expire without a renewal seen (see [`lease_fence`]).
    fence: JoinHandle<()>,
}

/// Waits until this replica holds the lease, or until `stop` turns true (`Ok(None)`).
pub async fn acquire(
    client: Client,
    config: &LeaseConfig,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<Leadership>, StartupError> {
    let manager = LeaseManagerBuilder::new(client.clone(), config.name.clone())
        .with_namespace(config.namespace.clone())
        .with_identity(config.identity.clone())
        .with_duration(LEASE_DURATION_SECONDS)
        .with_grace(LEASE_GRACE_SECONDS)
        .build()
        .await
        .map_err(|e| StartupError::Lease(e.to_string()))?;
    let (mut state, task) = manager.watch().await;
    info!(lease = %config.name, namespace = %config.namespace, identity = %config.identity, "waiting for the lease");
    loop {
        if *state.borrow_and_update() {
            info!(lease = %config.name, "holding the lease: this replica leads");
            let fence = tokio::spawn(fence(client.clone(), config.clone()));
            return Ok(Some(Leadership { state, task, fence }));
        }
        tokio::select! {
            changed = state.changed() => if changed.is_err() {
                return Err(StartupError::Lease("the lease manager stopped".into()));
            },
            _ = stop.wait_for(|stopped| *stopped) => {
                drop(state);
                let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
                return Ok(None);
            }
        }
    }
}

async fn fence(client: Client, config: LeaseConfig) {
    let read =
        || lease_fence::read_lease(&client, &config.namespace, &config.name, &config.identity);
    lease_fence::fenced(
        read,
        Duration::from_secs(LEASE_DURATION_SECONDS),
        SystemTime::now(),
    )
    .await;
    warn!(
        lease = %config.name,
        "no renewal of the lease seen in time: stopping before it can expire"
    );
}

impl Leadership {
    /// Resolves when the lease is lost, its manager stops, or its renewals were not seen in
    /// time for it to be still ours ([`lease_fence`]).
    pub async fn lost(&mut self) {
        let state = &mut self.state;
        let reported = async {
            loop {
                if !*state.borrow_and_update() {
                    return;
                }
                if state.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::select! {
            _ = reported => {}
            _ = &mut self.fence => {}
        }
    }

    /// Gives the lease up so that a standby takes over at once.
    pub async fn release(self) {
        self.fence.abort();
        drop(self.state);
        match tokio::time::timeout(Duration::from_secs(5), self.task).await {
            Ok(Ok(Ok(_))) => info!("released the lease"),
            Ok(Ok(Err(error))) => {
                tracing::warn!(%error, "could not release the lease; it will expire")
            }
            Ok(Err(error)) => tracing::warn!(%error, "lease task failed"),
            Err(_) => tracing::warn!("releasing the lease timed out; it will expire"),
        }
    }
}

/// This replica's identity: `POD_NAME`, else the host name, else a name with the process id.
pub fn identity() -> String {
    std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("vramfit-operator-{}", std::process::id()))
}
