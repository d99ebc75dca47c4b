//! The long-running agent: its flags turned into settings, the admin server, the watch of
//! its ModelCache and the cache loop, until SIGTERM. `/healthz` answers while the process
//! runs; the loop runs in the main task, so the process ends (and the kubelet restarts it)
//! if the loop ever stops.
use std::path::Path;
use std::sync::Arc;

use kube::Api;
use tokio::net::TcpListener;
use tracing::{info, warn};
use vramfit_api::model_cache::ModelCache;
use vramfit_cache::CacheConfig;
use vramfit_hub::{BadRepoPattern, TokenScope};
use vramfit_runtime::admin_server::{self, AdminRoutes};
use vramfit_runtime::shutdown::{Shutdown, trigger_on_signals};

use crate::cache_loop::{CacheAgent, Settings};
use crate::cli::{Args, Owner};
use crate::metrics::Metrics;
use crate::readiness::Readiness;
use crate::status_writer::StatusWriter;
use crate::watch::spawn_watch;

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A `--hub-token-repos` entry is malformed.
    #[error(transparent)]
    RepoPattern(#[from] BadRepoPattern),
    /// No kubeconfig or in-cluster configuration.
    #[error("cannot create a Kubernetes client: {0}")]
    KubeClient(#[source] kube::Error),
    /// The HTTP server could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP server failed.
    #[error("HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
    /// `--prepare-root` could not create or chown the cache root.
    #[error("cannot prepare the cache root {path}: {source}")]
    PrepareRoot {
        /// The cache root.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl AgentError {
    /// The process exit code: 2 for a problem with what the user gave, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            AgentError::RepoPattern(_) => 2,
            _ => 1,
        }
    }
}

/// The settings `args` give.
pub fn settings(args: &Args) -> Result<Settings, BadRepoPattern> {
    let token_scope = TokenScope::new(
        args.hub_token_namespaces
            .iter()
            .map(|n| n.trim().to_string()),
        args.hub_token_repos.iter().cloned(),
    )?;
    let mut cache = CacheConfig::new(&args.cache_root, args.budget_bytes);
    cache.endpoint = args.hub_endpoint.trim_end_matches('/').to_string();
    cache.deadline = std::time::Duration::from_secs(args.fetch_deadline_seconds);
    Ok(Settings {
        cache,
        token_file: args.hub_token_file.clone(),
        token_scope,
        resync: args.resync(),
        reverify_every: args.reverify_every(),
    })
}

/// Creates the cache root if needed and gives the folder itself (not its contents) to
/// `owner`.
pub fn prepare_root(root: &Path, owner: Owner) -> Result<(), AgentError> {
    let error = |source| AgentError::PrepareRoot {
        path: root.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(root).map_err(error)?;
    std::os::unix::fs::chown(root, Some(owner.uid), Some(owner.gid)).map_err(error)?;
    info!(root = %root.display(), uid = owner.uid, gid = owner.gid, "cache root owned");
    Ok(())
}

/// Runs the agent until SIGTERM or SIGINT (or, with `--prepare-root`, prepares the cache
/// root and returns).
pub async fn run(args: Args) -> Result<(), AgentError> {
    if let Some(owner) = args.prepare_root {
        return prepare_root(&args.cache_root, owner);
    }
    let settings = settings(&args)?;
    match (&settings.token_file, settings.token_scope.is_empty()) {
        (Some(_), true) => warn!(
            "--hub-token-file is set but --hub-token-namespaces is empty: the token is never used"
        ),
        (None, false) => warn!(
            "--hub-token-namespaces is set but there is no --hub-token-file: every download is anonymous"
        ),
        _ => {}
    }
    let client = kube::Client::try_default()
        .await
        .map_err(AgentError::KubeClient)?;
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::new());

    let listener = TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|source| AgentError::Listen {
            addr: args.metrics_addr,
            source,
        })?;
    info!(listen = %args.metrics_addr, "serving /healthz, /readyz and /metrics");
    let (trigger, shutdown) = Shutdown::new();
    tokio::spawn(trigger_on_signals(trigger));
    let router = AdminRoutes::new(readiness.clone(), metrics.clone()).router();
    let mut server_shutdown = shutdown.clone();
    let server = tokio::spawn(admin_server::serve(listener, router, async move {
        server_shutdown.wait().await
    }));

    info!(
        node = %args.node_name,
        root = %settings.cache.root.display(),
        budget_bytes = settings.cache.budget_bytes,
        endpoint = %settings.cache.endpoint,
        "node model cache"
    );
    let observed = spawn_watch(Api::<ModelCache>::all(client.clone()), &args.node_name);
    let writer = StatusWriter::new(client, args.node_name.clone());
    CacheAgent::new(settings, writer, metrics, readiness)
        .run(observed, shutdown)
        .await;

    match server.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(AgentError::Serve(error)),
        Err(error) => {
            warn!(%error, "HTTP server task ended abnormally");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn prepare_root_creates_the_folder_and_gives_it_to_the_owner() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("cache");
        let meta = std::fs::metadata(parent.path()).unwrap();
        // Our own ids: chown to them needs no privilege.
        let owner = Owner {
            uid: meta.uid(),
            gid: meta.gid(),
        };
        prepare_root(&root, owner).unwrap();
        let made = std::fs::metadata(&root).unwrap();
        assert!(made.is_dir());
        assert_eq!((made.uid(), made.gid()), (owner.uid, owner.gid));
        // Again: nothing to create, same owner.
        prepare_root(&root, owner).unwrap();
    }

    #[test]
    fn settings_follow_the_flags() {
        let args = <Args as clap::Parser>::try_parse_from([
            "vramfit-cache-agent",
            "--node-name=n",
            "--budget-bytes=5",
            "--hub-endpoint=https://mirror.example/",
            "--hub-token-file=/t",
            "--hub-token-namespaces=team-a",
            "--fetch-deadline-seconds=90",
        ])
        .unwrap();
        let settings = settings(&args).unwrap();
        assert_eq!(settings.cache.deadline, std::time::Duration::from_secs(90));
        assert_eq!(
            settings.reverify_every,
            Some(std::time::Duration::from_secs(24 * 3600))
        );
        assert_eq!(settings.cache.endpoint, "https://mirror.example");
        assert_eq!(settings.cache.budget_bytes, 5);
        assert!(!settings.token_scope.is_empty());
        assert_eq!(settings.token_file.as_deref(), Some(Path::new("/t")));
    }
}
