//! The leader fences itself. kube-lease-manager keeps saying "leader" while its renewals fail
//! (it retries with backoff and reports a change only once a read shows another holder), so
//! a leader cut off from the API server, or one whose renewals keep failing, would go on
//! writing after its lease expired on the server and a standby took over. The fence reads
//! the Lease itself and ends leadership [`MARGIN`] before the last renewal it saw can
//! expire.
use std::future::Future;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio::time::Instant;

/// How often the Lease is read.
pub const POLL: Duration = Duration::from_secs(2);
/// How long before the lease could expire the leader stops writing.
pub const MARGIN: Duration = Duration::from_secs(3);

/// What one read of the Lease says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseRead {
    /// This replica holds it, last renewed then (by this replica's clock: it wrote the time).
    Held {
        /// `spec.renewTime`.
        renewed: SystemTime,
    },
    /// Someone else holds it, or nobody.
    NotHeld,
    /// It could not be read (the API server is away or slow).
    Unreadable,
}

/// The instant leadership must end after a renewal at `renewed`, for a lease of `duration`.
pub fn deadline_after(renewed: SystemTime, duration: Duration) -> Instant {
    let now = Instant::now();
    let valid_until = renewed + duration.saturating_sub(MARGIN);
    match valid_until.duration_since(SystemTime::now()) {
        Ok(left) => now + left,
        Err(_) => now,
    }
}

/// Resolves when leadership must end: a read shows another holder, or no renewal was seen for
/// so long that the lease could expire within [`MARGIN`]. `acquired` is when the lease was
/// taken (a renewal at that moment).
pub async fn fenced<F, Fut>(mut read: F, duration: Duration, acquired: SystemTime)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = LeaseRead>,
{
    let mut deadline = deadline_after(acquired, duration);
    loop {
        tokio::time::sleep_until((Instant::now() + POLL).min(deadline)).await;
        if Instant::now() >= deadline {
            return;
        }
        // A read that hangs past the deadline is no renewal.
        match tokio::time::timeout_at(deadline, read()).await {
            Ok(LeaseRead::Held { renewed }) => {
                deadline = deadline.max(deadline_after(renewed, duration));
            }
            Ok(LeaseRead::NotHeld) => return,
            Ok(LeaseRead::Unreadable) => {}
            Err(_) => return,
        }
    }
}

/// Reads the Lease `namespace/name` as `identity` sees it.
pub async fn read_lease(client: &Client, namespace: &str, name: &str, identity: &str) -> LeaseRead {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match leases.get_opt(name).await {
        Ok(Some(lease)) => {
            let spec = lease.spec.unwrap_or_default();
            match (spec.holder_identity.as_deref(), spec.renew_time) {
                (Some(holder), Some(renewed)) if holder == identity => LeaseRead::Held {
                    renewed: SystemTime::from(renewed.0),
                },
                _ => LeaseRead::NotHeld,
            }
        }
        Ok(None) => LeaseRead::NotHeld,
        Err(_) => LeaseRead::Unreadable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DURATION: Duration = Duration::from_secs(15);

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_cannot_read_its_lease_stops_before_it_can_expire() {
        let started = Instant::now();
        fenced(async || LeaseRead::Unreadable, DURATION, SystemTime::now()).await;
        let took = started.elapsed();
        assert!(took < DURATION, "stopped after {took:?}");
        assert!(
            took >= DURATION - MARGIN - Duration::from_millis(10),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_keep_the_fence_open() {
        // Paused time: the wall clock stands still, so every read shows a fresh renewal.
        let kept = tokio::time::timeout(
            Duration::from_secs(120),
            fenced(
                async || LeaseRead::Held {
                    renewed: SystemTime::now(),
                },
                DURATION,
                SystemTime::now(),
            ),
        )
        .await;
        assert!(kept.is_err(), "the fence closed while renewals were seen");
    }

    #[tokio::test(start_paused = true)]
    async fn another_holder_ends_leadership_at_the_next_read() {
        let started = Instant::now();
        fenced(async || LeaseRead::NotHeld, DURATION, SystemTime::now()).await;
        assert_eq!(started.elapsed(), POLL);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_hangs_is_no_renewal() {
        let started = Instant::now();
        fenced(
            async || {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                LeaseRead::Unreadable
            },
            DURATION,
            SystemTime::now(),
        )
        .await;
        assert!(started.elapsed() < DURATION);
    }

    #[test]
    fn an_old_renewal_leaves_no_time() {
        let long_ago = SystemTime::now() - Duration::from_secs(60);
        assert!(deadline_after(long_ago, DURATION) <= Instant::now());
    }
}
