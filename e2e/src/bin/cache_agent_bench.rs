//! `cache-agent-bench`: the node cache agent's memory and CPU while it downloads, against the
//! API server in `KUBECONFIG`.
//!
//! A local Hub (the suite's, on loopback) serves one repository holding a file of `--model-mib`
//! MiB; a `ModelCache` named like a node asks for it; `vramfit-cache-agent` (the binary under
//! test) runs for that "node" with a fresh cache folder and downloads it. Every
//! `--sample-ms` the agent's resident memory (`VmRSS`) is read from `/proc`; at the end its
//! peak (`VmHWM`), its CPU seconds (user + system), the download's time and rate are printed,
//! with the agent's memory before and after. Everything it creates (the ModelCache, the cache
//! folder; the CRDs if it installed them) is removed at the end. It exits non-zero only on
//! errors, never because a figure is high.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use vramfit_api::model_cache::{CachedModelPhase, ModelCache};
use vramfit_e2e::model_hub::{ModelHub, ServedFile, ServedRepo};
use vramfit_e2e::{
    ChildProcess, crds, free_port, proc_cpu_seconds, proc_status_kib, run_id, target_dir,
    workspace_root,
};

const REPO: &str = "bench-org/bench-model";

#[derive(Parser, Debug)]
#[command(
    name = "cache-agent-bench",
    about = "The node cache agent's memory and CPU while it downloads a model"
)]
struct Args {
    /// Size of the model's one file, in MiB.
    #[arg(long, default_value_t = 1024)]
    model_mib: u64,
    /// How often the agent's memory is sampled, in milliseconds.
    #[arg(long, default_value_t = 100)]
    sample_ms: u64,
    /// The agent binary (default: target/release/vramfit-cache-agent).
    #[arg(long, env = "VRAMFIT_CACHE_AGENT_BIN")]
    cache_agent: Option<PathBuf>,
    /// Longest the download may take.
    #[arg(long, default_value_t = 900)]
    timeout_secs: u64,
}

const NEEDS_KUBECONFIG: &str = "cache-agent-bench needs KUBECONFIG: the agent reads its \
ModelCache from a real API server; nothing was run";

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if std::env::var_os("KUBECONFIG").is_none() {
        eprintln!("{NEEDS_KUBECONFIG}");
        return ExitCode::from(2);
    }
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cache-agent-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<()> {
    let client = Client::try_default().await?;
    let root = workspace_root();
    let mut installed = Vec::new();
    crds::install(&client, &root, |name| installed.push(name.to_string())).await?;
    let node = format!("vramfit-bench-{}", run_id());
    let dir = target_dir().join("cache-agent-bench").join(&node);
    std::fs::create_dir_all(&dir)?;
    let outcome = measure(&args, &client, &node, &dir).await;
    let caches: Api<ModelCache> = Api::all(client.clone());
    let _ = caches.delete(&node, &DeleteParams::default()).await;
    let _ = std::fs::remove_dir_all(&dir);
    let mut problems = Vec::new();
    crds::remove(&client, &installed, &mut problems).await;
    outcome
}

async fn measure(args: &Args, client: &Client, node: &str, dir: &std::path::Path) -> Result<()> {
    let bytes = args.model_mib << 20;
    // Incompressible bytes, as weights are.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let hub = ModelHub::start("127.0.0.1:0").await?;
    hub.add(
        REPO,
        ServedRepo {
            files: vec![ServedFile {
                path: "model.safetensors".into(),
                bytes: Arc::new(data),
            }],
            token: None,
        },
    );
    let caches: Api<ModelCache> = Api::all(client.clone());
    let object: ModelCache = serde_json::from_value(json!({
        "apiVersion": "vramfit.io/v1alpha1", "kind": "ModelCache",
        "metadata": {"name": node},
        "spec": {"models": [{"repo": REPO, "revision": "main"}]},
    }))?;
    caches.create(&PostParams::default(), &object).await?;

    let binary = args
        .cache_agent
        .clone()
        .unwrap_or_else(|| target_dir().join("release").join("vramfit-cache-agent"));
    let addr = format!("127.0.0.1:{}", free_port()?);
    let cache_root = dir.join("cache");
    let agent_args: Vec<String> = [
        "--node-name",
        node,
        "--cache-root",
        &cache_root.display().to_string(),
        "--budget-bytes",
        &(bytes * 2).to_string(),
        "--hub-endpoint",
        &hub.endpoint,
        "--metrics-addr",
        &addr,
        "--resync-seconds",
        "5",
    ]
    .map(String::from)
    .to_vec();
    let mut agent = ChildProcess::spawn(
        "cache-agent",
        &binary,
        &agent_args,
        &[("RUST_LOG", "warn".to_string())],
        dir.join("cache-agent.log"),
        addr,
    )?;
    let pid = agent.pid().context("the agent has no pid")?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.timeout_secs);
    let mut first_rss = None;
    let mut samples = Vec::new();
    let mut done = None;
    while Instant::now() < deadline {
        agent.check_alive()?;
        // Zero until the child has exec'd the agent.
        if let Some(rss) = proc_status_kib(pid, "VmRSS").filter(|&kib| kib > 0) {
            first_rss.get_or_insert(rss);
            samples.push(rss);
        }
        let cache = caches.get(node).await?;
        let ready = cache.status.as_ref().is_some_and(|s| {
            s.models
                .iter()
                .any(|m| m.repo == REPO && m.phase == CachedModelPhase::Ready)
        });
        if ready {
            done = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(args.sample_ms)).await;
    }
    let Some(took) = done else {
        bail!(
            "ModelCache {node}: the model was not Ready within {} s; agent log: {}",
            args.timeout_secs,
            agent.log.display()
        );
    };
    let cpu = proc_cpu_seconds(pid).unwrap_or(0.0);
    let peak = proc_status_kib(pid, "VmHWM").unwrap_or(0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = proc_status_kib(pid, "VmRSS").unwrap_or(0);
    agent.kill();
    let mib = |kib: u64| kib as f64 / 1024.0;
    let sampled_peak = samples.iter().copied().max().unwrap_or(0);
    println!(
        "cache-agent-bench: {} MiB downloaded and verified from a loopback Hub",
        args.model_mib
    );
    println!(
        "  time to Ready        {:.1} s ({:.0} MiB/s)",
        took.as_secs_f64(),
        args.model_mib as f64 / took.as_secs_f64()
    );
    println!(
        "  CPU (user + system)  {cpu:.2} s ({:.2} s per GiB)",
        cpu * 1024.0 / args.model_mib as f64
    );
    println!(
        "  resident memory      {:.1} MiB at start, {:.1} MiB sampled peak, {:.1} MiB VmHWM, {:.1} MiB after",
        mib(first_rss.unwrap_or(0)),
        mib(sampled_peak),
        mib(peak),
        mib(after)
    );
    Ok(())
}
