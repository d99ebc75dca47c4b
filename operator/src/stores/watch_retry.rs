//! How the watches retry after an error.
//!
//! kube's watcher leaves the pause after an error to the caller; `default_backoff` is
//! client-go's (0.8 s doubling to 30 s, reset after 2 quiet minutes). But a watch that ends in
//! `410 Expired` has only lost its place: the API server (restarted, or compacted) no longer
//! has the events since its resource version, and the fix is a fresh list. client-go's reflector
//! relists at once; behind kube's backoff the relist waited up to 30 s more, after an outage
//! that had already grown the backoff to its maximum, while the jobs' pods had moved on.
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt, future};
use kube::runtime::{WatchStreamExt, watcher};
use tracing::info;

/// A second `410` sooner than this after the first is backed off as any other error, so a
/// server that keeps answering `410` is not listed in a loop.
pub const EXPIRED_GRACE: Duration = Duration::from_secs(10);

/// `watcher` with kube's default backoff, except that a `410 Expired` relists at once.
pub fn with_backoff<K>(
    watch: &'static str,
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: Send,
{
    relist_expired_at_once(watch, events).default_backoff()
}

/// Drops a `410 Expired` error (the watcher is already set to list again), unless the last one
/// was less than [`EXPIRED_GRACE`] ago; every other item passes.
pub fn relist_expired_at_once<T: Send>(
    watch: &'static str,
    events: impl Stream<Item = watcher::Result<T>> + Send,
) -> impl Stream<Item = watcher::Result<T>> + Send {
    let mut last_expired: Option<Instant> = None;
    events.filter(move |event| {
        let expired =
            matches!(event, Err(watcher::Error::WatchError(status)) if status.code == 410);
        let at_once = expired && last_expired.is_none_or(|at| at.elapsed() >= EXPIRED_GRACE);
        if expired {
            last_expired = Some(Instant::now());
        }
        if at_once {
            info!(watch, "watch expired (410 Expired); listing again now");
        }
        future::ready(!at_once)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn error(code: u16) -> watcher::Result<u32> {
        let mut status = Status::failure("too old resource version: 1 (2)", "Expired");
        status.code = code;
        Err(watcher::Error::WatchError(Box::new(status)))
    }

    #[tokio::test]
    async fn an_expired_watch_relists_at_once_but_not_in_a_loop() {
        let events = futures::stream::iter(vec![Ok(1), error(410), Ok(2), error(410), error(500)]);
        let passed: Vec<String> = relist_expired_at_once("test", events)
            .map(|event| match event {
                Ok(n) => n.to_string(),
                Err(watcher::Error::WatchError(status)) => status.code.to_string(),
                Err(other) => other.to_string(),
            })
            .collect()
            .await;
        // The first 410 is dropped (no backoff before the relist), the second one so soon after
        // it goes to the backoff, as does any other error.
        assert_eq!(passed, ["1", "2", "410", "500"]);
    }
}
