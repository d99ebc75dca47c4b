//! Removing everything a run created, whether it passed, failed or panicked.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Client, ResourceExt as _};
use vramfit_api::GpuNodeClass;

use crate::RUN_LABEL;
use crate::crds::{self, is_not_found};
use crate::namespaces;

/// What cleanup removes; filled in as setup creates things.
#[derive(Debug, Default)]
pub struct CleanupPlan {
    pub run: String,
    pub namespace: Option<String>,
    /// More namespaces a scenario created.
    pub namespaces: Vec<String>,
    pub nodes: Vec<String>,
    pub crds: Vec<String>,
    /// Cluster-scoped objects (kind, name) a scenario created: RBAC, PersistentVolumes,
    /// GpuNodeClasses.
    pub cluster_objects: Vec<(String, String)>,
    /// Real nodes (not the suite's) the agent labelled from a fixture: their `vramfit.io/`
    /// GPU labels are removed, the nodes kept.
    pub labelled_nodes: Vec<String>,
}

/// Removes everything in the plan on drop, with its own thread, runtime and client, so it
/// runs whether the suite passed, failed or panicked.
pub struct CleanupGuard(pub Arc<Mutex<CleanupPlan>>);

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        let plan = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        if std::env::var_os("VRAMFIT_E2E_KEEP").is_some() {
            eprintln!("e2e: VRAMFIT_E2E_KEEP is set, leaving {plan:?}");
            return;
        }
        let result = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(cleanup(plan))
        })
        .join();
        match result {
            Ok(Ok(())) => eprintln!("e2e: cleanup done"),
            Ok(Err(e)) => eprintln!("e2e: CLEANUP INCOMPLETE: {e:#}"),
            Err(_) => eprintln!("e2e: CLEANUP PANICKED"),
        }
    }
}

/// Removes what `plan` lists, with a client of its own; what it could not remove is the error.
pub async fn cleanup(plan: CleanupPlan) -> Result<()> {
    let client = Client::try_default().await?;
    let mut problems = vec![];
    for ns in plan.namespace.iter().chain(&plan.namespaces) {
        if let Err(e) = namespaces::remove(&client, ns, Duration::from_secs(60)).await {
            problems.push(format!("{e:#}"));
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    for node in &plan.nodes {
        if let Err(e) = nodes.delete(node, &DeleteParams::default()).await
            && !is_not_found(&e)
        {
            problems.push(format!("node {node}: {e}"));
        }
        let _ = leases.delete(node, &DeleteParams::default()).await;
    }
    if !plan.run.is_empty() {
        // Anything labelled with this run that the plan missed.
        let selector = format!("{RUN_LABEL}={}", plan.run);
        if let Ok(list) = nodes.list(&ListParams::default().labels(&selector)).await {
            for node in list {
                let _ = nodes
                    .delete(&node.name_any(), &DeleteParams::default())
                    .await;
            }
        }
    }
    for (kind, name) in &plan.cluster_objects {
        let params = DeleteParams::default();
        let deleted = match kind.as_str() {
            "ClusterRole" => Api::<ClusterRole>::all(client.clone())
                .delete(name, &params)
                .await
                .map(|_| ()),
            "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(client.clone())
                .delete(name, &params)
                .await
                .map(|_| ()),
            "GpuNodeClass" => Api::<GpuNodeClass>::all(client.clone())
                .delete(name, &params)
                .await
                .map(|_| ()),
            _ => Api::<PersistentVolume>::all(client.clone())
                .delete(name, &params)
                .await
                .map(|_| ()),
        };
        if let Err(e) = deleted
            && !is_not_found(&e)
        {
            problems.push(format!("{kind} {name}: {e}"));
        }
    }
    for node in &plan.labelled_nodes {
        if let Err(e) = crate::real_node::remove_gpu_labels(&client, node).await {
            problems.push(format!("{e:#}"));
        }
    }
    crds::remove(&client, &plan.crds, &mut problems).await;
    if problems.is_empty() {
        Ok(())
    } else {
        bail!("{}", problems.join("; "))
    }
}
