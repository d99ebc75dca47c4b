//! The ModelCache reflector (`--model-cache` only): every node's cache object, cluster-scoped,
//! managed fields dropped. Placement reads which node holds which model; the sync task
//! compares the wanted specs with the stored ones ([`crate::cache_sync`]).
use std::sync::Arc;

use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;
use tracing::warn;
use vramfit_api::ModelCache;

use super::listed::{Listed, Listing};
use super::reflectors::list_config;
use super::watch_retry::with_backoff;

/// Fills `writer` with every ModelCache until the watch ends; each change, once stored,
/// notifies `changed` (the sync task looks again) and `wake` (the jobs that wait, among them
/// the served jobs whose replicas wait for a model, are reconciled) when `matters` says it may
/// change a decision (a bare heartbeat does not). The first full list is marked in `listed`.
pub async fn drive_model_cache_reflector(
    client: Client,
    writer: Writer<ModelCache>,
    changed: Arc<Notify>,
    wake: Arc<Notify>,
    listed: Listed,
    mut matters: impl FnMut(&watcher::Event<ModelCache>) -> bool + Send + 'static,
) {
    with_backoff(
        "modelcaches",
        watcher(Api::<ModelCache>::all(client), list_config()),
    )
    .modify(|cache| cache.metadata.managed_fields = None)
    .reflect(writer)
    .for_each(move |event| {
        match event {
            Ok(event) => {
                if matches!(event, watcher::Event::InitDone) {
                    listed.mark(Listing::ModelCaches);
                }
                if matters(&event) {
                    changed.notify_one();
                    wake.notify_one();
                }
            }
            Err(error) => warn!(%error, "ModelCache watch failed; retrying"),
        }
        futures::future::ready(())
    })
    .await;
}
