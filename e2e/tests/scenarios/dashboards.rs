//! The Grafana dashboards against a real Prometheus: it scrapes the operator and
//! long-running agents while jobs run, fail out of memory, report results, fine-tune (a step
//! down, a training result), serve (a replica Ready, out of memory, replaced), wait
//! unschedulable and meet a pod that holds their name, an autoscaled replica's metrics are
//! read, and a served replica waits for a node cache agent's download (the operator runs
//! with `--model-cache`; the agent, scraped too, downloads from a local Hub for one simulated
//! node); then every panel's query of
//! `charts/vramfit/dashboards/*.json` is evaluated through Prometheus's HTTP API as Grafana
//! would (range queries over the run, instant ones at its end) and must give a series with
//! the labels its legend shows and a number to draw. Needs a `prometheus` binary
//! (`PROMETHEUS`, or on `PATH`); skipped without.
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use vramfit_api::model_cache::{ModelCache, WeightsSource};
use vramfit_api::pod_keys::pod_name;
use vramfit_api::{GpuNodeClass, Phase};
use vramfit_e2e::dashboards::{Intervals, judge, panel_queries, read_dashboards};
use vramfit_e2e::model_hub::{ModelHub, ServedFile, ServedRepo};
use vramfit_e2e::prometheus::{Prometheus, SCRAPE_INTERVAL_SECONDS, prometheus_binary};
use vramfit_e2e::replica_metrics::ReplicaMetrics;
use vramfit_e2e::{
    CUDA_OOM_MESSAGE, CacheAgentRun, ChildProcess, SETTLE, Skipped, Suite, eventually, free_port,
    node_name, pinned_job, served_job, start_cache_agent,
};

const OPERATOR_JOB: &str = "vramfit-operator";
const AGENT_JOB: &str = "vramfit-agent";
const CACHE_AGENT_JOB: &str = "vramfit-cache-agent";
/// The model the cached replica serves, from the local Hub: Qwen3-8B's numbers.
const CACHED_REPO: &str = "e2e-dash/qwen3-8b";
const CACHED_CONFIG: &str =
    include_str!("../../../models/testdata/configs/Qwen/Qwen3-8B/config.json");
/// The class of the cached replica, and the suffix of its node (where the cache agent runs).
const CACHED_CLASS: &str = "a10g-x4";
const CACHED_NODE: &str = "a10gx4";
/// The class the worked job runs on, with an admin's price.
const PRICED_CLASS: &str = "a10g-x1";
/// The class of the served job's replica.
const SERVED_CLASS: &str = "h100-80gb-hbm3-x8";
/// The class of the autoscaled job's replica, and the address its metrics are served on.
const AUTOSCALED_CLASS: &str = "v100-sxm2-16gb-x4";
const AUTOSCALED_IP: &str = "127.0.0.5";
const RESULT: &str = r#"vramfit.io/v1 {"kind":"Result","items":120,"seconds":300,"itemsPerSecond":0.4,"peakGpuMemoryMib":[15000]}"#;

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub async fn dashboards_show_data(s: &mut Suite) -> Result<()> {
    let Some(binary) = prometheus_binary() else {
        return Err(Skipped(
            "no Prometheus: set PROMETHEUS to a prometheus binary or put one on PATH (Debian: apt install prometheus); see docs/monitoring.md"
                .into(),
        )
        .into());
    };
    // The model cache's panels: an operator of its own with the cache on, and a cache agent
    // for one simulated node, downloading from a local Hub.
    let cache_dir = s.logs.join("dashboards-cache");
    std::fs::create_dir_all(&cache_dir)?;
    let hub = serve_cached_model().await?;
    s.stop_operators();
    let root = cache_dir.display().to_string();
    let flags = [
        "--model-cache",
        "--model-cache-root",
        &root,
        "--hub-endpoint",
        &hub.endpoint,
        // The autoscaling row: read the autoscaled replica every second.
        "--autoscale-period-seconds",
        "1",
    ];
    let outcome = match s.start_operator("dashboards", &flags, true).await {
        Ok(()) => with_prometheus(s, &binary, &cache_dir, &hub).await,
        Err(e) => Err(e),
    };
    s.stop_operators();
    let restored = s.ensure_single_operator().await;
    let _ = std::fs::remove_dir_all(&cache_dir);
    outcome.and(restored)
}

/// The local Hub's repository: Qwen3-8B's `config.json` and a small file of weights.
async fn serve_cached_model() -> Result<ModelHub> {
    let hub = ModelHub::start("127.0.0.1:0").await?;
    hub.add(
        CACHED_REPO,
        ServedRepo {
            files: vec![
                ServedFile {
                    path: "config.json".into(),
                    bytes: Arc::new(CACHED_CONFIG.as_bytes().to_vec()),
                },
                ServedFile {
                    path: "weights.bin".into(),
                    bytes: Arc::new(vec![7; 4 << 20]),
                },
            ],
            token: None,
        },
    );
    Ok(hub)
}

async fn with_prometheus(
    s: &mut Suite,
    binary: &std::path::Path,
    cache_dir: &std::path::Path,
    hub: &ModelHub,
) -> Result<()> {
    let dir = s.logs.join("prometheus");
    let mut prometheus =
        Prometheus::start(binary, &dir, &[OPERATOR_JOB, AGENT_JOB, CACHE_AGENT_JOB])
            .await
            .with_context(|| format!("starting {}", binary.display()))?;
    println!(
        "     Prometheus {} on {} (config and log in {})",
        binary.display(),
        prometheus.addr,
        dir.display()
    );
    let start = unix_now();
    for addr in s
        .operators
        .iter()
        .map(|o| o.addr.clone())
        .collect::<Vec<_>>()
    {
        prometheus.scrape(OPERATOR_JOB, &addr).await?;
    }
    // Long-running agents, as the DaemonSet runs them: one on a GPU node, one whose NVML
    // fails (the probe-error panel's case), on the node without GPUs.
    let mut agents = Vec::new();
    for (fixture, suffix) in [("a10g-x1.yaml", "a10gx1"), ("nvml-error.yaml", "nogpu")] {
        let agent = start_agent(s, fixture, &node_name(&s.run, suffix))?;
        prometheus.scrape(AGENT_JOB, &agent.addr).await?;
        agents.push(agent);
    }
    let cache_node = node_name(&s.run, CACHED_NODE);
    let cache_agent = start_cache_agent(
        s,
        &CacheAgentRun {
            node: &cache_node,
            root: cache_dir,
            hub_endpoint: &hub.endpoint,
            budget_bytes: 1 << 30,
            extra: &[],
            log_name: "cache-agent-dashboards.log",
            serve_read_only: false,
        },
    )?;
    agents.push(cache_agent);
    let cache_agent = agents.last().context("the cache agent")?;
    prometheus
        .scrape(CACHE_AGENT_JOB, &cache_agent.addr)
        .await?;
    let cache_agent_pid = cache_agent.pid().context("the cache agent's pid")?;
    // A few scrapes of the quiet state first: a counter's later increase is then seen.
    tokio::time::sleep(Duration::from_secs(3 * SCRAPE_INTERVAL_SECONDS)).await;

    let outcome = drive_and_check(s, &prometheus, start, cache_agent_pid).await;
    for mut agent in agents {
        agent.kill();
    }
    // The node without GPUs gets its own labels back (the failing agent relabelled it).
    s.label_with_agent("no-gpu.yaml", &node_name(&s.run, "nogpu"))
        .await?;
    outcome.map_err(|e| anyhow::anyhow!("{e:#}\n     Prometheus log: {}", prometheus.log_tail(5)))
}

fn start_agent(s: &Suite, fixture: &str, node: &str) -> Result<ChildProcess> {
    let addr = format!("127.0.0.1:{}", free_port()?);
    let args = [
        "--fixture".to_string(),
        s.agent_fixture(fixture),
        "--node-name".into(),
        node.to_string(),
        "--listen".into(),
        addr.clone(),
        "--interval-seconds".into(),
        "1".into(),
    ];
    ChildProcess::spawn(
        &format!("agent {fixture}"),
        &s.bins.agent,
        &args,
        &[],
        s.logs.join(format!("agent-{node}.log")),
        addr,
    )
}

/// Jobs that make every panel's metric move, then every panel's query.
async fn drive_and_check(
    s: &mut Suite,
    prometheus: &Prometheus,
    start: f64,
    cache_agent_pid: u32,
) -> Result<()> {
    // Out of memory, a step down, then a result on a class an admin gave a price (a
    // discovered class has none: the cost panel needs one).
    let classes: Api<GpuNodeClass> = Api::all(s.client.clone());
    let priced: GpuNodeClass = serde_json::from_value(json!({
        "apiVersion": "vramfit.io/v1alpha1",
        "kind": "GpuNodeClass",
        "metadata": {"name": PRICED_CLASS},
        "spec": {"hourlyPriceCentsPerGpu": 60}
    }))?;
    s.cleanup
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .cluster_objects
        .push(("GpuNodeClass".into(), PRICED_CLASS.into()));
    classes.create(&PostParams::default(), &priced).await?;
    let worked = "dash-worked";
    s.apply_job(pinned_job(s, worked, &[PRICED_CLASS], "quality"))
        .await?;
    let (job, first) = s.wait_pod(worked, 1).await?;
    let price = job
        .status
        .and_then(|st| st.plan)
        .map(|p| p.hourly_price_cents);
    ensure!(
        price == Some(60),
        "the plan on {PRICED_CLASS} should carry the GpuNodeClass's price, 60 cents: {price:?}"
    );
    s.set_pod_running(&first).await?;
    s.wait_phase(worked, &[Phase::Running]).await?;
    s.set_pod_ended(&first, 1, "Error", CUDA_OOM_MESSAGE)
        .await?;
    let (_, second) = s.wait_pod(worked, 2).await?;
    s.set_pod_running(&second).await?;
    // A real job runs far longer than a scrape interval: by its end, its class's work
    // counters have been scraped at zero, so that the result counts as an increase.
    let zeros = format!(
        "vramfit_items_total{{node_class=\"{PRICED_CLASS}\"}} == 0 and on (node_class) vramfit_work_cost_cents_total == 0"
    );
    prometheus_sees(
        prometheus,
        "the placed job's class counters scraped at zero before its result",
        &zeros,
    )
    .await?;
    s.set_pod_ended(&second, 0, "Completed", RESULT).await?;
    s.wait_phase(worked, &[Phase::Succeeded]).await?;

    let tuned = "dash-tuned";
    tune_then_step_down(s, prometheus, tuned).await?;

    let served = "dash-served";
    serve_then_restart(s, prometheus, served).await?;

    let autoscaled = "dash-autoscaled";
    let _replica_metrics = autoscaled_and_read(s, prometheus, autoscaled).await?;

    let cached = "dash-cached";
    served_through_the_cache(s, prometheus, cached, cache_agent_pid).await?;

    // A job no class can run now (no node of its class).
    let waiting = "dash-unschedulable";
    s.apply_job(pinned_job(s, waiting, &["t4-x1"], "quality"))
        .await?;
    s.wait_phase(waiting, &[Phase::Unschedulable]).await?;

    // A pod that is not the job's holds the name of its first attempt: reconcile errors.
    let blocked = "dash-name-taken";
    let squatter: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(blocked, 1), "namespace": s.ns},
        "spec": {"containers": [{"name": "squatter", "image": "registry.invalid/squatter:1"}]}
    }))?;
    let pods = s.pods();
    pods.create(&PostParams::default(), &squatter).await?;
    s.apply_job(pinned_job(s, blocked, &["a10g-x4"], "quality"))
        .await?;
    prometheus_sees(
        prometheus,
        "a reconcile error counted by Prometheus",
        "vramfit_reconcile_errors_total > 0",
    )
    .await?;
    // A few scrapes after the last event, so that every rate window sees it.
    tokio::time::sleep(Duration::from_secs(5 * SCRAPE_INTERVAL_SECONDS)).await;
    let end = unix_now();

    let verdict = check_every_panel(s, prometheus, start, end).await;
    s.delete_jobs(&[
        worked.into(),
        tuned.into(),
        served.into(),
        autoscaled.into(),
        cached.into(),
        waiting.into(),
        blocked.into(),
    ])
    .await?;
    classes
        .delete(PRICED_CLASS, &DeleteParams::default())
        .await?;
    let _ = pods
        .delete(
            &pod_name(blocked, 1),
            &DeleteParams::default().grace_period(0),
        )
        .await;
    verdict
}

/// A fine-tuning job (the fine-tuning row) on the priced class: out of memory, a smaller
/// micro-batch, then a training result once its class's training counters were scraped at 0.
async fn tune_then_step_down(s: &Suite, prometheus: &Prometheus, name: &str) -> Result<()> {
    s.apply_job(crate::tuning::tuning_job(s, name, PRICED_CLASS))
        .await?;
    let (_, first) = s.wait_pod(name, 1).await?;
    s.set_pod_running(&first).await?;
    s.set_pod_ended(&first, 1, "Error", CUDA_OOM_MESSAGE)
        .await?;
    let (_, second) = s.wait_pod(name, 2).await?;
    s.set_pod_running(&second).await?;
    let zeros = format!(
        "vramfit_training_tokens_total{{node_class=\"{PRICED_CLASS}\"}} == 0 and on (node_class) vramfit_training_cost_cents_total == 0"
    );
    prometheus_sees(
        prometheus,
        "the tuning job's class training counters scraped at zero before its result",
        &zeros,
    )
    .await?;
    s.set_pod_ended(&second, 0, "Completed", crate::tuning::TRAINED)
        .await?;
    s.wait_phase(name, &[Phase::Succeeded]).await?;
    Ok(())
}

/// A served job (the serving row): its replica Ready, then out of memory once Prometheus has
/// scraped the restart counter (at 0 from the operator's start, or what the earlier scenarios
/// left), then its next pod Ready.
async fn serve_then_restart(s: &Suite, prometheus: &Prometheus, name: &str) -> Result<()> {
    s.apply_job(served_job(s, name, 1, &[SERVED_CLASS])).await?;
    let (_, pods) = s.wait_replicas(name, 1).await?;
    let first = pods
        .first()
        .cloned()
        .context("the served job's replica pod")?;
    s.set_pod_serving(&first, true).await?;
    prometheus_sees(
        prometheus,
        "a ready replica, and its restart counter scraped",
        &format!(
            "vramfit_serving_ready_replicas{{node_class=\"{SERVED_CLASS}\"}} > 0 and on () vramfit_serving_replica_restarts_total{{reason=\"OutOfMemory\"}}"
        ),
    )
    .await?;
    s.set_pod_ended(&first, 1, "Error", CUDA_OOM_MESSAGE)
        .await?;
    let next = eventually("the replica's next pod", SETTLE, || async {
        let (_, pods) = s.wait_replicas(name, 1).await?;
        let pod = pods.first().cloned().context("no replica pod")?;
        ensure!(
            pod.name_any() != first.name_any(),
            "still pod {}",
            pod.name_any()
        );
        Ok(pod)
    })
    .await?;
    s.set_pod_serving(&next, true).await?;
    // As the restarts panel counts it (increase() over 4 s windows): the first restart shows.
    prometheus_sees(
        prometheus,
        "the replica's restart in the panel's increase(), and its next pod ready",
        "max_over_time(increase(vramfit_serving_replica_restarts_total{reason=\"OutOfMemory\"}[4s])[2m:1s]) > 0 and on () vramfit_serving_ready_replicas > 0",
    )
    .await
}

/// An autoscaled served job (the autoscaling row) on its own class: its one replica serves
/// vLLM's metrics (from the suite, on a loopback address) at half the concurrency planned for
/// it, and the operator's load reader reads it every second. Returns the endpoint, to keep it
/// serving until the panels are checked.
async fn autoscaled_and_read(
    s: &Suite,
    prometheus: &Prometheus,
    name: &str,
) -> Result<ReplicaMetrics> {
    let port = free_port()?;
    let mut job = served_job(s, name, 1, &[AUTOSCALED_CLASS]);
    job["spec"]["serve"]["port"] = json!(port);
    job["spec"]["serve"]["autoscaling"] =
        json!({"minReplicas": 1, "maxReplicas": 2, "targetUtilizationPercent": 70});
    s.apply_job(job).await?;
    let (_, pods) = s.wait_replicas(name, 1).await?;
    let pod = pods.first().cloned().context("the autoscaled replica")?;
    let planned: u32 = pod
        .labels()
        .get("vramfit.io/concurrency")
        .context("the replica's vramfit.io/concurrency label")?
        .parse()
        .context("vramfit.io/concurrency")?;
    let metrics = ReplicaMetrics::start(AUTOSCALED_IP, port, planned.div_ceil(2), 0).await?;
    s.set_pod_serving_at(&pod, true, AUTOSCALED_IP).await?;
    prometheus_sees(
        prometheus,
        "the autoscaled job's load and replicas",
        "vramfit_autoscaler_utilization_percent > 0 and on () vramfit_autoscaler_desired_replicas > 0 and on () increase(vramfit_autoscaler_metric_reads_total{result=\"read\"}[4s]) > 0",
    )
    .await?;
    Ok(metrics)
}

/// A served job whose model is on the local Hub (the model cache row): its replica waits
/// for the cache agent of its class's node to download the model, then mounts it
/// (`FetchedByNode`); Prometheus sees the wait, the download and the replica's weights
/// counted. The agent is paused (SIGSTOP) while the replica waits, so that the wait lasts
/// until Prometheus has scraped it, however fast the download.
async fn served_through_the_cache(
    s: &Suite,
    prometheus: &Prometheus,
    name: &str,
    cache_agent_pid: u32,
) -> Result<()> {
    let mut job = served_job(s, name, 1, &[CACHED_CLASS]);
    job["spec"]["model"] = json!({"huggingFace": {"repo": CACHED_REPO}, "contextLimit": 8192});
    job["spec"]["args"] = json!([]);
    job["spec"]["batchSize"] = json!(1);
    job["spec"]["gpus"] = json!({"min": 1, "max": 1});
    // The agent reports before it is paused: placement waits only for a node whose agent's
    // heartbeat it has seen.
    let caches: Api<ModelCache> = Api::all(s.client.clone());
    let node = node_name(&s.run, CACHED_NODE);
    eventually(
        "the cache agent to report in its ModelCache",
        Duration::from_secs(60),
        || async {
            let cache = caches.get_opt(&node).await?;
            ensure!(
                cache
                    .as_ref()
                    .and_then(|c| c.status.as_ref())
                    .and_then(|st| st.heartbeat_time.as_ref())
                    .is_some(),
                "ModelCache {node}: {cache:?}"
            );
            Ok(())
        },
    )
    .await?;
    signal(cache_agent_pid, "STOP")?;
    let waited = match s.apply_job(job).await {
        Ok(_) => {
            prometheus_sees(
                prometheus,
                "a replica waiting for its model",
                "vramfit_replicas_waiting_for_model > 0",
            )
            .await
        }
        Err(e) => Err(e),
    };
    // Resumed whatever happened: the replica needs the download.
    signal(cache_agent_pid, "CONT")?;
    if let Err(e) = waited {
        let status = s.job(name).await.ok().and_then(|j| j.status);
        let lines = status.as_ref().map(|st| &st.replica_statuses);
        let conditions = status.as_ref().map(|st| &st.conditions);
        return Err(e.context(format!(
            "job {name}: replicas {lines:?}, conditions {conditions:?}"
        )));
    }
    let (job, pods) = s.wait_replicas(name, 1).await?;
    let source = job
        .status
        .as_ref()
        .and_then(|st| st.replica_statuses.first())
        .and_then(|line| line.weights.as_ref())
        .map(|w| w.source);
    ensure!(
        source == Some(WeightsSource::FetchedByNode),
        "the cached replica's weights: {source:?} (want FetchedByNode)"
    );
    let pod = pods
        .first()
        .cloned()
        .context("the cached job's replica pod")?;
    s.set_pod_serving(&pod, true).await?;
    prometheus_sees(
        prometheus,
        "the node's download and the replica's weights, scraped",
        "vramfit_model_cache_fetch_seconds_count > 0 and on () vramfit_replica_weights_total{source=\"FetchedByNode\"} > 0",
    )
    .await
}

/// Sends `SIG<name>` to process `pid`.
fn signal(pid: u32, name: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill -{name} {pid}: {status}");
    Ok(())
}

/// Waits until `expr` gives Prometheus a series.
async fn prometheus_sees(prometheus: &Prometheus, what: &str, expr: &str) -> Result<()> {
    eventually(what, Duration::from_secs(60), || async {
        ensure!(
            !prometheus.query(expr, None).await?.is_empty(),
            "{expr}: no series yet"
        );
        Ok(())
    })
    .await
}

/// Every target of every dashboard, evaluated as Grafana would over `[start, end]`.
async fn check_every_panel(s: &Suite, prometheus: &Prometheus, start: f64, end: f64) -> Result<()> {
    let step = 1;
    // Whole seconds, as Grafana's `$__range` is; `end − start` rounded down keeps every
    // window inside what Prometheus scraped.
    let range = (end - start).floor() as u64;
    let intervals = Intervals::grafana(SCRAPE_INTERVAL_SECONDS, step, range);
    let mut checked = 0;
    let mut failures = Vec::new();
    for (name, json) in read_dashboards(&s.root.join("charts/vramfit/dashboards"))? {
        for query in panel_queries(&name, &json) {
            checked += 1;
            let expr = match vramfit_e2e::dashboards::substitute(&query.expr, intervals) {
                Ok(expr) => expr,
                Err(why) => {
                    failures.push(format!("{}: {why}", query.describe()));
                    continue;
                }
            };
            let answer = if query.instant {
                prometheus.query(&expr, Some(end)).await
            } else {
                prometheus.query_range(&expr, start, end, step).await
            };
            let verdict = answer
                .map_err(|e| format!("{e:#}"))
                .and_then(|result| judge(&result, &query.legend_labels, end).map(|()| result));
            match verdict {
                Ok(result) => println!(
                    "     ok   {} ({} series; last: {})",
                    query.describe(),
                    result.len(),
                    last_sample(&result)
                ),
                Err(why) => {
                    println!("     FAIL {}: {why}", query.describe());
                    failures.push(format!("{}: {expr}: {why}", query.describe()));
                }
            }
        }
    }
    if checked == 0 {
        bail!("no panel query found under charts/vramfit/dashboards");
    }
    if !failures.is_empty() {
        bail!(
            "{} of {checked} panel queries show nothing:\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
    println!("     {checked} panel queries return series with their legend's labels");
    Ok(())
}

/// The last value of the first series, with its labels: `{node_class="a10g-x1"} 1440`.
fn last_sample(result: &[serde_json::Value]) -> String {
    let Some(series) = result.first() else {
        return "-".into();
    };
    let value = series["value"][1]
        .as_str()
        .or_else(|| {
            series["values"]
                .as_array()
                .and_then(|v| v.last())
                .and_then(|v| v[1].as_str())
        })
        .unwrap_or("-");
    format!("{} {value}", series["metric"])
}
