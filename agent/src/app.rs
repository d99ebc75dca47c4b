//! What the binary does for each mode: `--once --print`, `--once`, or the long-running
//! DaemonSet agent with its HTTP server.
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tracing::{info, warn};
use vramfit_runtime::admin_server::{self, AdminRoutes};
use vramfit_runtime::shutdown::{Shutdown, trigger_on_signals};

use crate::backoff::Backoff;
use crate::cli::Args;
use crate::gpu::GpuProbe;
use crate::gpu::fixture::{FixtureError, FixtureProbe};
use crate::gpu::nvml::NvmlProbe;
use crate::labels::to_lines;
use crate::metrics::Metrics;
use crate::node_writer::{NodeWriter, SyncOutcome};
use crate::readiness::Readiness;
use crate::refresh::{Prober, RefreshError, RefreshLoop, write_once};

/// How many times `--once` tries to write before giving up.
pub const ONCE_WRITE_ATTEMPTS: u32 = 5;

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Writing labels needs a node name.
    #[error(
        "no node name: pass --node-name or set NODE_NAME (in a DaemonSet, from the downward API field spec.nodeName)"
    )]
    MissingNodeName,
    /// The fixture file is unreadable or malformed.
    #[error(transparent)]
    Fixture(#[from] FixtureError),
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
    /// `--once` could not probe or write.
    #[error("{0}")]
    Once(#[from] RefreshError),
    /// Writing the printed labels failed (closed stdout).
    #[error("cannot print the labels: {0}")]
    Print(#[source] std::io::Error),
}

impl AgentError {
    /// The process exit code: 2 for a problem with what the user gave, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            AgentError::MissingNodeName | AgentError::Fixture(_) => 2,
            _ => 1,
        }
    }
}

/// Runs the agent as `args` asks.
pub async fn run(args: Args) -> Result<(), AgentError> {
    let node_name = match (args.print, args.node_name()) {
        (true, _) => None,
        (false, Some(name)) => Some(name.to_string()),
        (false, None) => return Err(AgentError::MissingNodeName),
    };
    let backend = backend(&args)?;
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::new());
    let mut prober = Prober::new(backend, Arc::clone(&metrics), Arc::clone(&readiness));

    let Some(node_name) = node_name else {
        // --once --print: no cluster needed.
        let labels = prober.labels().await.map_err(RefreshError::from)?;
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(to_lines(&labels).as_bytes())
            .and_then(|()| stdout.flush())
            .map_err(AgentError::Print)?;
        return Ok(());
    };

    let client = kube::Client::try_default()
        .await
        .map_err(AgentError::KubeClient)?;
    let mut writer = NodeWriter::new(client, node_name);

    if args.once {
        let outcome = write_once(
            &mut prober,
            &mut writer,
            ONCE_WRITE_ATTEMPTS,
            Backoff::default(),
        )
        .await?;
        match outcome {
            SyncOutcome::Written | SyncOutcome::Repaired => {
                info!(node = %writer.node_name(), "labels written")
            }
            SyncOutcome::AlreadyCurrent => {
                info!(node = %writer.node_name(), "labels already current")
            }
        }
        return Ok(());
    }

    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|source| AgentError::Listen {
            addr: args.listen,
            source,
        })?;
    info!(listen = %args.listen, "serving /healthz, /readyz and /metrics");
    let (trigger, shutdown) = Shutdown::new();
    tokio::spawn(trigger_on_signals(trigger));

    let router = AdminRoutes::new(readiness.clone(), metrics.clone()).router();
    let mut server_shutdown = shutdown.clone();
    let server = tokio::spawn(admin_server::serve(listener, router, async move {
        server_shutdown.wait().await
    }));

    let refresh = RefreshLoop {
        prober,
        writer,
        interval: Duration::from_secs(args.interval_seconds),
        repair_interval: args.repair_interval.0,
        backoff: Backoff::default(),
        metrics,
        readiness,
    };
    refresh.run(shutdown).await;

    match server.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(AgentError::Serve(error)),
        Err(error) => {
            warn!(%error, "HTTP server task ended abnormally");
            Ok(())
        }
    }
}

fn backend(args: &Args) -> Result<Box<dyn GpuProbe>, AgentError> {
    Ok(match &args.fixture {
        Some(path) => {
            let probe = FixtureProbe::open(path)?;
            info!(fixture = %path.display(), "reading GPUs from a fixture, not NVML");
            Box::new(probe)
        }
        None => Box::new(NvmlProbe::new()),
    })
}
