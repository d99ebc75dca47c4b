//! `--serve-replicas R --autoscale`: the served jobs with `serve.autoscaling` (R to R + 1
//! replicas, 70 %), every replica's metrics answered by one [`FleetMetrics`] on its own
//! address of 198.18.0.0/15 (the benchmark's kubelet gives each pod one; the range must be
//! routed to this machine), at 50 % of the concurrency planned for it through creation and
//! the roll. Then, with the operator's default read
//! period:
//!
//! 1. **Steady**: 60 s at 50 %: the reads per second the replicas served, the operator's
//!    count of reads (read / failed), its load reader's mean pass, its CPU and its API writes
//!    (a steady load writes nothing).
//! 2. **Step**: every replica to 100 % at once: for each job the time until the benchmark's
//!    watch sees `spec.serve.replicas` raised (the decision latency: up to one read period,
//!    the pass, the reconcile and the scale write), the scale writes, and, once the new
//!    replicas are Ready and the operator quiet, its peak RSS.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use kube::Client;
use vramfit_e2e::replica_metrics::{FLEET_CUSTOM_METRIC, FleetMetrics};
use vramfit_e2e::{ChildProcess, RequestTotals, WRITE_VERBS, http_get, proc_cpu_seconds, quantile};

use super::{scrape, seconds};

/// Load through creation, the roll and the steady window, percent of each replica's
/// concurrency (below the 70 % target: no scaling).
pub const STEADY_LOAD_PERCENT: u32 = 50;
/// Load of the step (above the target: every job wants more replicas).
const STEP_LOAD_PERCENT: u32 = 100;
/// Length of the steady window.
const STEADY: Duration = Duration::from_secs(60);

/// `serve.autoscaling` (and the serving port) of job `manifest` with `replicas` replicas.
/// Each job batches 4 requests, so that every replica is planned for at least 4 sequences
/// and 50 % of it is a whole number of requests below the target (half of a one-sequence
/// replica would read as one request: 100 %).
pub fn autoscaled(manifest: &mut serde_json::Value, replicas: usize, port: u16) {
    manifest["spec"]["batchSize"] = serde_json::json!(4);
    manifest["spec"]["serve"]["port"] = serde_json::json!(port);
    let mut autoscaling = serde_json::json!({
        "minReplicas": replicas,
        "maxReplicas": replicas + 1,
        "targetUtilizationPercent": 70,
    });
    if manifest["spec"]["runtime"] == "transformers" {
        autoscaling["metric"] = serde_json::json!({"name": FLEET_CUSTOM_METRIC});
    }
    manifest["spec"]["serve"]["autoscaling"] = autoscaling;
}

/// The figures of the autoscaling phases.
#[derive(Debug, Default)]
pub struct Figures {
    pub jobs: usize,
    pub steady: Duration,
    pub served_reads: u64,
    pub operator_reads: (f64, f64),
    pub pass_mean: Duration,
    pub steady_cpu: f64,
    pub steady_writes: u64,
    pub scaled: usize,
    pub decision: Vec<Duration>,
    pub scale_writes: u64,
    pub hwm_kib: u64,
}

/// The operator's own counters that the phases read.
struct OperatorCounters {
    read: f64,
    failed: f64,
    pass_sum: f64,
    pass_count: f64,
}

async fn operator_counters(operator: &ChildProcess) -> Result<OperatorCounters> {
    let (_, text) = http_get(&operator.addr, "/metrics").await?;
    let value = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(OperatorCounters {
        read: value("vramfit_autoscaler_metric_reads_total{result=\"read\"}"),
        failed: value("vramfit_autoscaler_metric_reads_total{result=\"failed\"}"),
        pass_sum: value("vramfit_autoscaler_read_pass_seconds_sum"),
        pass_count: value("vramfit_autoscaler_read_pass_seconds_count"),
    })
}

/// The steady window: what reading every replica costs when nothing changes. `writes` counts
/// the operator's writes among the server's requests.
pub async fn steady(
    fleet: &FleetMetrics,
    operator: &ChildProcess,
    client: &Client,
    writes: impl Fn(&RequestTotals) -> u64,
    figures: &mut Figures,
) -> Result<()> {
    eprintln!(
        "operator-scale:     autoscaling, steady: {} s at {STEADY_LOAD_PERCENT} % of every replica's concurrency",
        STEADY.as_secs()
    );
    let pid = operator.pid().unwrap_or(0);
    let (reads, counters, cpu, totals) = (
        fleet.reads(),
        operator_counters(operator).await?,
        proc_cpu_seconds(pid).unwrap_or(0.0),
        scrape(client).await?,
    );
    let started = Instant::now();
    tokio::time::sleep(STEADY).await;
    figures.steady = started.elapsed();
    let after = operator_counters(operator).await?;
    figures.served_reads = fleet.reads() - reads;
    figures.operator_reads = (after.read - counters.read, after.failed - counters.failed);
    let passes = after.pass_count - counters.pass_count;
    if passes > 0.0 {
        figures.pass_mean = Duration::from_secs_f64((after.pass_sum - counters.pass_sum) / passes);
    }
    figures.steady_cpu = proc_cpu_seconds(pid).unwrap_or(0.0) - cpu;
    let delta = scrape(client).await?.since(&totals);
    figures.steady_writes = writes(&delta) + scale_writes(&delta);
    Ok(())
}

/// The step: every replica to 100 %; returns when every job was scaled or 120 s passed
/// without one more.
pub async fn step(
    fleet: &FleetMetrics,
    scaled: impl Fn() -> HashMap<String, Instant>,
    jobs: usize,
    operator: &mut ChildProcess,
    figures: &mut Figures,
) -> Result<Instant> {
    eprintln!(
        "operator-scale:     autoscaling, step: every replica to {STEP_LOAD_PERCENT} % at once"
    );
    let started = Instant::now();
    fleet.set_load(STEP_LOAD_PERCENT);
    let (mut last, mut last_print) = ((0, Instant::now()), Instant::now());
    loop {
        operator.check_alive()?;
        let done = scaled().len();
        if done >= jobs {
            break;
        }
        if done > last.0 {
            last = (done, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(120) {
            eprintln!("operator-scale:     no job scaled for 120 s: {done} of {jobs}");
            break;
        }
        if last_print.elapsed() >= Duration::from_secs(5) {
            last_print = Instant::now();
            eprintln!(
                "operator-scale:     {:.0} s: {done} of {jobs} jobs scaled up",
                started.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let scaled = scaled();
    figures.scaled = scaled.len();
    let mut decision: Vec<Duration> = scaled
        .values()
        .map(|at| at.saturating_duration_since(started))
        .collect();
    decision.sort();
    figures.decision = decision;
    Ok(started)
}

/// Writes of `inferencejobs/scale` (the autoscaler's).
pub fn scale_writes(totals: &RequestTotals) -> u64 {
    totals.count(&WRITE_VERBS, "inferencejobs", "scale")
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let window = self.steady.as_secs_f64().max(1e-9);
        let p = |q: f64| seconds(quantile(&self.decision, q));
        writeln!(
            f,
            "| autoscaling, steady {:.0} s at {STEADY_LOAD_PERCENT} %: replica metrics reads | {:.1}/s served; the operator counted {:.0} read, {:.0} failed |",
            window,
            self.served_reads as f64 / window,
            self.operator_reads.0,
            self.operator_reads.1
        )?;
        writeln!(
            f,
            "| autoscaling, steady: load reader pass (mean), operator CPU, operator writes | {:.0} ms; {:.1} % of one core; {} |",
            self.pass_mean.as_secs_f64() * 1000.0,
            100.0 * self.steady_cpu / window,
            self.steady_writes
        )?;
        writeln!(
            f,
            "| autoscaling, step to {STEP_LOAD_PERCENT} %: jobs scaled up; load step → spec.serve.replicas raised p50 / p99 / max | {} of {}; {} / {} / {} |",
            self.scaled,
            self.jobs,
            p(0.5),
            p(0.99),
            p(1.0)
        )?;
        writeln!(
            f,
            "| autoscaling, step: scale writes; operator peak RSS (VmHWM) after the new replicas are Ready | {}; {:.1} MiB |",
            self.scale_writes,
            self.hwm_kib as f64 / 1024.0
        )
    }
}
