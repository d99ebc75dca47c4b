//! Leader election with a `coordination.k8s.io` Lease (kube-lease-manager): several replicas
//! may run; only the holder of the lease runs the controller and writes. A replica that loses
//! the lease stops its controller and exits non-zero, so that Kubernetes restarts it as a
//! standby (it never keeps writing on a lease it does not hold).
use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::info;

use crate::error::Error;

/// Lease validity after a renewal, in seconds: a standby takes over at most this long after
/// the leader stops renewing.
pub const LEASE_DURATION_SECONDS: u64 = 15;
/// The holder renews this many seconds before expiry (the tolerated clock skew).
pub const LEASE_GRACE_SECONDS: u64 = 5;

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
}

/// Waits until this replica holds the lease, or until `stop` turns true (`Ok(None)`).
pub async fn acquire(
    client: Client,
    config: &LeaseConfig,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<Leadership>, Error> {
    let manager = LeaseManagerBuilder::new(client, config.name.clone())
        .with_namespace(config.namespace.clone())
        .with_identity(config.identity.clone())
        .with_duration(LEASE_DURATION_SECONDS)
        .with_grace(LEASE_GRACE_SECONDS)
        .build()
        .await
        .map_err(|e| Error::Lease(e.to_string()))?;
    let (mut state, task) = manager.watch().await;
    info!(lease = %config.name, namespace = %config.namespace, identity = %config.identity, "waiting for the lease");
    loop {
        if *state.borrow_and_update() {
            info!(lease = %config.name, "holding the lease: this replica leads");
            return Ok(Some(Leadership { state, task }));
        }
        tokio::select! {
            changed = state.changed() => if changed.is_err() {
                return Err(Error::Lease("the lease manager stopped".into()));
            },
            _ = stop.wait_for(|stopped| *stopped) => {
                drop(state);
                let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
                return Ok(None);
            }
        }
    }
}

impl Leadership {
    /// Resolves when the lease is lost (or its manager stops).
    pub async fn lost(&mut self) {
        loop {
            if !*self.state.borrow_and_update() {
                return;
            }
            if self.state.changed().await.is_err() {
                return;
            }
        }
    }

    /// Gives the lease up so that a standby takes over at once.
    pub async fn release(self) {
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
