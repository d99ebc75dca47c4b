//! The agent's own ModelCache, watched: a watcher limited to the object named after the node
//! (field selector `metadata.name=<node>`), its latest state kept in a `tokio::sync::watch`
//! channel the loop reads. Watch errors are logged and retried with the watcher's backoff.
use std::sync::Arc;

use futures::StreamExt;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tracing::warn;
use vramfit_api::model_cache::ModelCache;

/// What the agent knows of its ModelCache.
#[derive(Clone, Debug, Default)]
pub enum Observed {
    /// Not listed yet.
    #[default]
    Unknown,
    /// Listed: there is none (the operator has not created it yet).
    Absent,
    /// The latest version.
    Present(Arc<ModelCache>),
}

/// Applies one watcher event to what is known; `pending` holds the objects of a relist until
/// it is done.
pub fn apply_event(
    current: &Observed,
    pending: &mut Option<Arc<ModelCache>>,
    event: Event<ModelCache>,
) -> Option<Observed> {
    match event {
        Event::Init => {
            *pending = None;
            None
        }
        Event::InitApply(object) => {
            *pending = Some(Arc::new(object));
            None
        }
        Event::InitDone => Some(match pending.take() {
            Some(object) => Observed::Present(object),
            None => Observed::Absent,
        }),
        Event::Apply(object) => Some(Observed::Present(Arc::new(object))),
        Event::Delete(_) => Some(match current {
            Observed::Unknown => Observed::Unknown,
            _ => Observed::Absent,
        }),
    }
}

/// Watches the ModelCache named `node_name` until the receiver is dropped.
pub fn spawn_watch(api: Api<ModelCache>, node_name: &str) -> watch::Receiver<Observed> {
    let (sender, receiver) = watch::channel(Observed::Unknown);
    let config = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    tokio::spawn(async move {
        let mut events = watcher::watcher(api, config).default_backoff().boxed();
        let mut pending = None;
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    let next = apply_event(&sender.borrow(), &mut pending, event);
                    if let Some(next) = next
                        && sender.send(next).is_err()
                    {
                        return;
                    }
                }
                Err(error) => warn!(%error, "watching the ModelCache failed; retrying"),
            }
        }
    });
    receiver
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_api::model_cache::ModelCacheSpec;

    fn cache() -> ModelCache {
        ModelCache::new("gpu-1", ModelCacheSpec::default())
    }

    #[test]
    fn a_relist_without_the_object_says_absent_and_with_it_present() {
        let mut pending = None;
        let current = Observed::Unknown;
        assert!(apply_event(&current, &mut pending, Event::Init).is_none());
        let done = apply_event(&current, &mut pending, Event::InitDone);
        assert!(matches!(done, Some(Observed::Absent)));

        assert!(apply_event(&current, &mut pending, Event::Init).is_none());
        assert!(apply_event(&current, &mut pending, Event::InitApply(cache())).is_none());
        let done = apply_event(&current, &mut pending, Event::InitDone);
        assert!(
            matches!(done, Some(Observed::Present(c)) if c.metadata.name.as_deref() == Some("gpu-1"))
        );
    }

    #[test]
    fn changes_and_deletions_follow_the_object() {
        let mut pending = None;
        let present = apply_event(&Observed::Absent, &mut pending, Event::Apply(cache())).unwrap();
        assert!(matches!(present, Observed::Present(_)));
        let gone = apply_event(&present, &mut pending, Event::Delete(cache()));
        assert!(matches!(gone, Some(Observed::Absent)));
    }
}
