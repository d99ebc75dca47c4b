//! The node cache agent (`vramfit-cache-agent`) as a child process, for the model-cache
//! scenarios and the dashboard check: run for one node (real or simulated), its cache folder
//! on this machine's disk, downloading from a local Hub.
use std::path::Path;

use anyhow::{Context as _, Result, ensure};

use crate::processes::{ChildProcess, free_port};
use crate::suite::Suite;

/// How the agent is run.
pub struct CacheAgentRun<'a> {
    /// The node it reports for (its ModelCache).
    pub node: &'a str,
    /// `--cache-root`.
    pub root: &'a Path,
    /// `--hub-endpoint`.
    pub hub_endpoint: &'a str,
    /// `--budget-bytes`.
    pub budget_bytes: u64,
    /// More flags (the Hub token's).
    pub extra: &'a [String],
    /// Its log's file name under the suite's log folder.
    pub log_name: &'a str,
    /// Make `<root>/served` the read-only bind mount of `<root>/models` first, as the chart's
    /// init container does (`--serve-read-only`, as root), and take it off when the agent is
    /// killed: a real kubelet mounts models from there. Simulated nodes mount nothing.
    pub serve_read_only: bool,
}

/// Starts the agent (metrics on a free loopback port, a pass every 5 seconds), after its
/// `--serve-read-only` mount when `run` asks for it.
pub fn start_cache_agent(s: &Suite, run: &CacheAgentRun<'_>) -> Result<ChildProcess> {
    if run.serve_read_only {
        serve_read_only(s, run)?;
    }
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut args: Vec<String> = [
        "--node-name",
        run.node,
        "--cache-root",
        &run.root.display().to_string(),
        "--budget-bytes",
        &run.budget_bytes.to_string(),
        "--hub-endpoint",
        run.hub_endpoint,
        "--metrics-addr",
        &addr,
        "--resync-seconds",
        "5",
        "--log-format",
        "text",
    ]
    .map(String::from)
    .to_vec();
    args.extend(run.extra.iter().cloned());
    let env = [(
        "RUST_LOG",
        std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
    )];
    let agent = ChildProcess::spawn(
        "cache-agent",
        &s.bins.cache_agent,
        &args,
        &env,
        s.logs.join(run.log_name),
        addr,
    );
    match agent {
        Ok(agent) if run.serve_read_only => Ok(agent.unserve_on_kill(run.root)),
        Ok(agent) => Ok(agent),
        Err(error) => {
            if run.serve_read_only {
                let _ = vramfit_cache_agent::serve_mount::unserve(run.root);
            }
            Err(error)
        }
    }
}

/// Runs the agent binary in its `--serve-read-only` mode (the chart's `serve-read-only` init
/// container), and checks that `<root>/served` is read-only afterwards.
fn serve_read_only(s: &Suite, run: &CacheAgentRun<'_>) -> Result<()> {
    let root = run.root.display().to_string();
    let budget = run.budget_bytes.to_string();
    let output = std::process::Command::new(&s.bins.cache_agent)
        .args(["--node-name", run.node, "--cache-root", &root])
        .args(["--budget-bytes", &budget, "--serve-read-only"])
        .output()
        .context("running the cache agent's --serve-read-only")?;
    ensure!(
        output.status.success(),
        "the cache agent's --serve-read-only failed ({}; the suite runs it as root, as the \
         chart's privileged init container): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let served = run.root.join("served");
    ensure!(
        vramfit_cache_agent::serve_mount::is_read_only(&served)?,
        "{} is not read-only after --serve-read-only",
        served.display()
    );
    Ok(())
}
