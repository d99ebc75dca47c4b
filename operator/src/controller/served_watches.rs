//! The watches of served jobs' Services and PodDisruptionBudgets, and of groups' Services and
//! NetworkPolicies (label `vramfit.io/job`):
//! they fill [`crate::serving_state::ServingStores`], and a change or deletion of one reconciles the
//! job that controls it, once the store holds it — so an edited or deleted Service is put
//! back. With `--watch-namespaces`, one watch per namespace, merged as the job pods' are.
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::warn;
use vramfit_api::pod_keys::JOB_LABEL;

use crate::serving_state::ServingWriters;
use crate::stores::namespaces::{WatchNamespaces, watch_namespaces};
use crate::stores::reflectors::list_config;
use crate::stores::watch_retry::with_backoff;
use crate::stores::{JobRef, owning_job};

/// Runs the three watches; each change is sent on `changes` as the job that controls the object.
pub async fn drive_serving_watches(
    client: Client,
    writers: ServingWriters,
    namespaces: WatchNamespaces,
    changes: UnboundedSender<JobRef>,
) {
    let ServingWriters {
        services,
        pdbs,
        network_policies,
    } = writers;
    let services = watch::<Service>(&client, services, &namespaces, changes.clone(), "services");
    let pdbs = watch::<PodDisruptionBudget>(
        &client,
        pdbs,
        &namespaces,
        changes.clone(),
        "poddisruptionbudgets",
    );
    let network_policies = watch::<NetworkPolicy>(
        &client,
        network_policies,
        &namespaces,
        changes,
        "networkpolicies",
    );
    futures::join!(services, pdbs, network_policies);
}

async fn watch<K>(
    client: &Client,
    writer: Writer<K>,
    namespaces: &WatchNamespaces,
    changes: UnboundedSender<JobRef>,
    name: &'static str,
) where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let config = list_config().labels(JOB_LABEL);
    let events = match namespaces.listed() {
        None => with_backoff(name, watcher(Api::<K>::all(client.clone()), config)).boxed(),
        Some(listed) => watch_namespaces(client, listed, &config, writer.as_reader(), name).boxed(),
    };
    events
        .modify(trim)
        .reflect(writer)
        .for_each(move |event| {
            match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => {
                    if let Some(job) = owning_job(&object) {
                        // Fails only once the controller has stopped.
                        let _ = changes.unbounded_send(job);
                    }
                }
                Ok(_) => {}
                Err(error) => warn!(watch = name, %error, "watch failed; retrying"),
            }
            futures::future::ready(())
        })
        .await;
}

/// Keeps what the comparison reads: no managed fields nor annotations.
fn trim<K: ResourceExt>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
}
