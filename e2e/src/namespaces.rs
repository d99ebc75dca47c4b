//! A run's namespaces: creating them, and removing them from a cluster with no kubelet.
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::crds::is_not_found;
use crate::{RUN_LABEL, eventually};

/// Creates namespace `ns`, labelled with the run id `run`.
pub async fn create(client: &Client, ns: &str, run: &str) -> Result<()> {
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {"name": ns, "labels": {RUN_LABEL: run}}
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    Ok(())
}

/// Deletes namespace `ns` and waits up to `timeout` until it is gone. Pods bound to
/// simulated nodes have no kubelet to confirm their deletion, so they are force-deleted,
/// again on every poll (a late write or the garbage collector may leave more).
pub async fn remove(client: &Client, ns: &str, timeout: Duration) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let force_pods = || async {
        pods.delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await
    };
    force_pods()
        .await
        .map_err(|e| anyhow!("pods of {ns}: {e}"))?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.delete(ns, &DeleteParams::background()).await {
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => bail!("namespace {ns}: {e}"),
        Ok(_) => {}
    }
    eventually(&format!("namespace {ns} to be gone"), timeout, || async {
        let _ = force_pods().await;
        match namespaces.get_opt(ns).await? {
            None => Ok(()),
            Some(n) => bail!("phase {:?}", n.status.and_then(|s| s.phase)),
        }
    })
    .await
}
