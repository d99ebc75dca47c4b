//! The node cache agent (`vramfit-cache-agent`) as a child process, for the model-cache
//! scenarios and the dashboard check: run for one node (real or simulated), its cache folder
//! on this machine's disk, downloading from a local Hub.
use std::path::Path;

use anyhow::Result;

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
}

/// Starts the agent (metrics on a free loopback port, a pass every 5 seconds).
pub fn start_cache_agent(s: &Suite, run: &CacheAgentRun<'_>) -> Result<ChildProcess> {
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
    ChildProcess::spawn(
        "cache-agent",
        &s.bins.cache_agent,
        &args,
        &env,
        s.logs.join(run.log_name),
        addr,
    )
}
