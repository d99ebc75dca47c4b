//! The suite every scenario runs in: its client, run id and namespace, the binaries under
//! test, the operators it started, and the set-up that creates all of it.
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, ensure};
use kube::Client;

use crate::cleanup::CleanupPlan;
use crate::nodes::{SIM_NODES, heartbeat, node_manifest, node_status_patch, register_node};
use crate::processes::{Binaries, ChildProcess};
use crate::{PREFIX, crds, namespaces, now, run_id, target_dir, workspace_root};

/// What the scenarios share; each gets it `&mut`, one after the other.
pub struct Suite {
    pub client: Client,
    pub run: String,
    pub ns: String,
    pub root: PathBuf,
    pub bins: Binaries,
    pub logs: PathBuf,
    pub operators: Vec<ChildProcess>,
    pub(crate) started: u32,
    pub(crate) heartbeat: Option<tokio::task::JoinHandle<()>>,
    pub example_jobs: Vec<String>,
    /// What cleanup removes, for scenarios that create cluster-scoped objects.
    pub cleanup: Arc<Mutex<CleanupPlan>>,
}

/// A scenario that could not run here, and why (reported as SKIP, not as a pass).
#[derive(Debug)]
pub struct Skipped(pub String);

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Skipped {}

impl Drop for Suite {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        for op in &mut self.operators {
            op.kill();
        }
    }
}

impl Suite {
    /// Builds or locates the binaries, installs the CRDs, creates the test namespace and the
    /// simulated nodes, and starts their heartbeat. Everything it creates goes into `plan`
    /// before it exists, for cleanup.
    pub async fn setup(plan: Arc<Mutex<CleanupPlan>>) -> Result<Suite> {
        let cleanup = plan.clone();
        let root = workspace_root();
        let bins = Binaries::locate()?;
        let client = Client::try_default()
            .await
            .context("connecting with KUBECONFIG")?;
        let version = client
            .apiserver_version()
            .await
            .context("reading the API server version")?;
        println!(
            "e2e: API server {}.{} ({})",
            version.major, version.minor, version.git_version
        );
        let run = run_id();
        let ns = format!("{PREFIX}{run}");
        plan.lock().unwrap_or_else(|e| e.into_inner()).run = run.clone();

        // CRDs (server-side apply); remember those that were not there, to remove them later.
        let applied = crds::install(&client, &root, |name| {
            plan.lock()
                .unwrap_or_else(|e| e.into_inner())
                .crds
                .push(name.to_string());
        })
        .await?;
        ensure!(
            applied.all.iter().any(|n| n == "inferencejobs.vramfit.io"),
            "crds/ has no inferencejobs.vramfit.io"
        );

        // Test namespace.
        namespaces::create(&client, &ns, &run)
            .await
            .context("creating the test namespace")?;
        plan.lock().unwrap_or_else(|e| e.into_inner()).namespace = Some(ns.clone());

        // Simulated GPU nodes.
        for sim in SIM_NODES {
            register_node(
                &client,
                &plan,
                &node_manifest(&sim, &run),
                &node_status_patch(&sim, &now()),
            )
            .await?;
        }
        let heartbeat = tokio::spawn(heartbeat(client.clone(), run.clone()));

        let logs = target_dir().join("e2e-logs").join(&run);
        Ok(Suite {
            client,
            run,
            ns,
            root,
            bins,
            logs,
            operators: vec![],
            started: 0,
            heartbeat: Some(heartbeat),
            example_jobs: vec![],
            cleanup,
        })
    }

    /// Creates the namespace `<suite namespace>-<suffix>` of this run, listed for cleanup
    /// before it exists; returns its name.
    pub async fn other_namespace(&self, suffix: &str) -> Result<String> {
        let name = format!("{}-{suffix}", self.ns);
        self.cleanup
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .namespaces
            .push(name.clone());
        namespaces::create(&self.client, &name, &self.run).await?;
        Ok(name)
    }
}
