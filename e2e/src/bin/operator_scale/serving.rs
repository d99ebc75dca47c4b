//! `--serve-replicas R`: the job phase with served jobs (`spec.serve.replicas: R`) instead of
//! batch jobs. The benchmark is the kubelet: each replica pod bound to a fake node is written
//! Running with a pod IP and `Ready=True`, and each pod the operator deletes is confirmed
//! (force-deleted). Measured: time until every replica is Ready after the jobs are created,
//! and after one spec change to every job (a rolling update); the operator's writes per
//! replica in each; its peak memory; and a restart (resync without writes).
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use vramfit_api::InferenceJob;
use vramfit_api::pod_keys::JOB_LABEL;
use vramfit_e2e::replica_metrics::FleetMetrics;
use vramfit_e2e::{
    ChildProcess, RequestTotals, WRITE_VERBS, free_port, pod_ip, pod_serving_status,
    proc_cpu_seconds, proc_status_kib, quantile,
};

use super::autoscale;
use super::goals::{Figure, Goal, Sizes};
use super::measure::{last, latencies, stamp_all};
use super::{
    Args, count_events, job_manifest, job_name, reconciles, scrape, seconds, start_operator,
    wait_ready, wait_resynced,
};

/// The figures of the served-job phase.
#[derive(Debug, Default)]
pub struct Figures {
    replicas: usize,
    jobs: usize,
    created_wall: Duration,
    /// Jobs whose every replica was seen Ready, and when (from the first create).
    all_ready: usize,
    ready_wall: Duration,
    /// Job created → all its replicas Ready.
    job_to_ready: Vec<Duration>,
    writes: RequestTotals,
    kubelet: (u64, u64),
    kubelet_load: KubeletLoad,
    scheduler_events: u64,
    operator_events: u64,
    rolled: usize,
    roll_wall: Duration,
    job_to_rolled: Vec<Duration>,
    roll_writes: RequestTotals,
    roll_kubelet: (u64, u64),
    roll_scheduler_events: u64,
    roll_operator_events: u64,
    in_place: u64,
    operator_cpu: f64,
    hwm_kib: u64,
    restart_ready: Duration,
    restart_resynced: Duration,
    restart_reconciles: f64,
    restart_writes: RequestTotals,
    restart_hwm_kib: u64,
    /// With `--autoscale`.
    autoscale: Option<autoscale::Figures>,
}

/// Job `i` of the mix, served: `replicas` replicas, every runtime probed on `/health`;
/// autoscaled when `metrics_port` is given (the port the fleet's metrics answer on).
fn served_manifest(i: usize, replicas: usize, metrics_port: Option<u16>) -> serde_json::Value {
    let mut manifest = job_manifest(i);
    manifest["spec"]["serve"] = json!({"replicas": replicas, "healthPath": "/health"});
    if let Some(port) = metrics_port {
        super::autoscale::autoscaled(&mut manifest, replicas, port);
    }
    manifest
}

/// What the benchmark's kubelet wrote: pod statuses and confirmed deletions; and how long its
/// writes took (it makes at most `--kubelet-concurrency` at once, where a cluster has one
/// kubelet per node: when the writes are slow, pods wait in its queue).
#[derive(Default)]
pub(super) struct Kubelet {
    statuses: AtomicU64,
    deletions: AtomicU64,
    write_micros: AtomicU64,
    in_flight: AtomicU64,
    most_in_flight: AtomicU64,
    done: Mutex<HashSet<String>>,
}

/// The benchmark's kubelet's writes: how many, their mean time, the most at once.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct KubeletLoad {
    pub writes: u64,
    pub mean: Duration,
    pub most_at_once: u64,
    pub concurrency: usize,
}

impl std::fmt::Display for KubeletLoad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} writes, {:.0} ms each on average, at most {} at once (--kubelet-concurrency {})",
            self.writes,
            self.mean.as_secs_f64() * 1000.0,
            self.most_at_once,
            self.concurrency
        )
    }
}

impl Kubelet {
    pub(super) fn counts(&self) -> (u64, u64) {
        (
            self.statuses.load(Ordering::Relaxed),
            self.deletions.load(Ordering::Relaxed),
        )
    }

    /// Its writes so far: count, mean time, the most at once.
    pub(super) fn load(&self, concurrency: usize) -> KubeletLoad {
        let (statuses, deletions) = self.counts();
        let writes = statuses + deletions;
        let micros = self.write_micros.load(Ordering::Relaxed);
        KubeletLoad {
            writes,
            mean: Duration::from_micros(micros.checked_div(writes).unwrap_or(0)),
            most_at_once: self.most_in_flight.load(Ordering::Relaxed),
            concurrency,
        }
    }

    /// Times one write (counted whether or not it succeeds).
    async fn timed<T>(&self, write: impl std::future::Future<Output = T>) -> T {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.most_in_flight.fetch_max(now, Ordering::Relaxed);
        let started = Instant::now();
        let out = write.await;
        self.write_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        out
    }

    fn first(&self, key: String) -> bool {
        self.done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key)
    }
}

/// The benchmark as kubelet: bound replica pods become Ready, deleted ones go.
pub(super) async fn kubelet(
    clients: Vec<Client>,
    ns: String,
    seen: Arc<Kubelet>,
    concurrency: usize,
    fleet: Option<FleetMetrics>,
) {
    let pods = watcher(
        Api::<Pod>::namespaced(clients[0].clone(), &ns),
        watcher::Config::default().labels(JOB_LABEL),
    )
    .default_backoff()
    .applied_objects();
    let turn = AtomicU64::new(0);
    pods.for_each_concurrent(concurrency.max(1), |pod| {
        let client = clients[turn.fetch_add(1, Ordering::Relaxed) as usize % clients.len()].clone();
        let (ns, seen, fleet) = (ns.clone(), seen.clone(), fleet.clone());
        async move {
            let Ok(pod) = pod else { return };
            let name = pod.name_any();
            let api: Api<Pod> = Api::namespaced(client, &ns);
            if pod.metadata.deletion_timestamp.is_some() {
                if seen.first(format!("delete {name}")) {
                    let params = DeleteParams::default().grace_period(0);
                    if seen.timed(api.delete(&name, &params)).await.is_ok() {
                        seen.deletions.fetch_add(1, Ordering::Relaxed);
                    }
                }
                return;
            }
            let bound = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some();
            let started = pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_ref())
                .is_some();
            if bound && !started && seen.first(format!("run {name}")) {
                let image = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.image.clone())
                    .unwrap_or_default();
                let now = k8s_openapi::jiff::Timestamp::now().to_string();
                let ip = match &fleet {
                    // Its own address, where the fleet answers with its load.
                    Some(fleet) => {
                        let planned = pod
                            .labels()
                            .get("vramfit.io/concurrency")
                            .and_then(|c| c.parse().ok())
                            .unwrap_or(1);
                        fleet.assign(&name, planned).to_string()
                    }
                    None => pod_ip(&name),
                };
                let status = pod_serving_status("inference", &image, &now, &ip, true);
                if seen
                    .timed(api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)))
                    .await
                    .is_ok()
                {
                    seen.statuses.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    })
    .await;
}

/// When each job was first seen with every replica Ready, and with every replica Ready on
/// generation 2.
#[derive(Default)]
struct Progress {
    ready: HashMap<String, Instant>,
    rolled: HashMap<String, Instant>,
    /// Seen with more replicas than created with (the autoscaler's scale-up).
    scaled: HashMap<String, Instant>,
}

async fn watch_jobs(client: Client, ns: String, replicas: usize, progress: Arc<Mutex<Progress>>) {
    watcher(
        Api::<InferenceJob>::namespaced(client, &ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .applied_objects()
    .for_each(move |job| {
        if let Ok(job) = job {
            let status = job.status.clone().unwrap_or_default();
            let lines = &status.replica_statuses;
            let all_ready = status.ready_replicas == Some(replicas as u32)
                && lines.len() == replicas
                && lines.iter().all(|l| l.ready && l.surge.is_none());
            let mut seen = progress.lock().unwrap_or_else(|e| e.into_inner());
            if job
                .spec
                .serve
                .as_ref()
                .is_some_and(|s| s.replicas as usize > replicas)
            {
                seen.scaled
                    .entry(job.name_any())
                    .or_insert_with(Instant::now);
            }
            if all_ready {
                seen.ready
                    .entry(job.name_any())
                    .or_insert_with(Instant::now);
                let current = job.metadata.generation == Some(2)
                    && status.observed_generation == Some(2)
                    && lines.iter().all(|l| l.updated);
                if current {
                    seen.rolled
                        .entry(job.name_any())
                        .or_insert_with(Instant::now);
                }
            }
        }
        futures::future::ready(())
    })
    .await;
}

/// Waits until `count(progress) == jobs`, or 120 s pass with no progress.
async fn wait_for(
    progress: &Arc<Mutex<Progress>>,
    operator: &mut ChildProcess,
    jobs: usize,
    what: &str,
    count: impl Fn(&Progress) -> usize,
) -> Result<usize> {
    let (started, mut last, mut last_print) = (Instant::now(), (0, Instant::now()), Instant::now());
    loop {
        operator.check_alive()?;
        let done = count(&progress.lock().unwrap_or_else(|e| e.into_inner()));
        if done >= jobs {
            return Ok(done);
        }
        if done > last.0 {
            last = (done, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(120) {
            eprintln!("operator-scale:     no progress for 120 s: {done} of {jobs} {what}");
            return Ok(done);
        }
        if last_print.elapsed() >= Duration::from_secs(5) {
            last_print = Instant::now();
            eprintln!(
                "operator-scale:     {:.0} s: {done} of {jobs} jobs {what}",
                started.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Prints up to 5 jobs that `done` does not list, with why (conditions, replica lines).
async fn explain_missing(client: &Client, ns: &str, done: &HashMap<String, Instant>) -> Result<()> {
    let jobs: Api<InferenceJob> = Api::namespaced(client.clone(), ns);
    let list = jobs.list(&kube::api::ListParams::default()).await?;
    for job in list
        .items
        .iter()
        .filter(|j| !done.contains_key(&j.name_any()))
        .take(5)
    {
        let status = job.status.clone().unwrap_or_default();
        let conditions: Vec<String> = status
            .conditions
            .iter()
            .filter(|c| c.type_ == "Scheduled" || c.type_ == "Degraded" || c.type_ == "Progressing")
            .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
            .collect();
        let lines: Vec<String> = status
            .replica_statuses
            .iter()
            .map(|l| format!("{} {}", l.pod_name, l.message.clone().unwrap_or_default()))
            .collect();
        eprintln!(
            "operator-scale:     not done: {} ({}): {conditions:?} {lines:?}",
            job.name_any(),
            status.ready.unwrap_or_default()
        );
    }
    Ok(())
}

/// The writes the operator makes for served jobs and groups: pods (less the kubelet's
/// confirmed deletions), job status, events, Services, PodDisruptionBudgets, NetworkPolicies.
pub(super) fn operator_writes(totals: &RequestTotals, kubelet_deletions: u64) -> u64 {
    totals
        .count(&WRITE_VERBS, "pods", "")
        .saturating_sub(kubelet_deletions)
        + totals.count(&WRITE_VERBS, "inferencejobs", "status")
        + totals.count(&WRITE_VERBS, "events", "")
        + totals.count(&WRITE_VERBS, "services", "")
        + totals.count(&WRITE_VERBS, "poddisruptionbudgets", "")
        + totals.count(&WRITE_VERBS, "networkpolicies", "")
}

/// `operator_writes` with the events the operator is listed as reporting (`own_events`:
/// objects and series repeats) in place of every event write: kube-scheduler's events, and
/// late ones about the raw pods, are event writes too.
pub(super) fn operator_writes_own_events(
    totals: &RequestTotals,
    kubelet_deletions: u64,
    own_events: u64,
) -> u64 {
    operator_writes(totals, kubelet_deletions).saturating_sub(totals.count(
        &WRITE_VERBS,
        "events",
        "",
    )) + own_events
}

/// Waits until the operator's writes stop for 3 s (at most 5 minutes).
pub(super) async fn wait_quiet(
    client: &Client,
    operator: &mut ChildProcess,
    before: &RequestTotals,
    kubelet: &Kubelet,
) -> Result<()> {
    let started = Instant::now();
    let mut last = u64::MAX;
    let mut quiet_since = Instant::now();
    loop {
        operator.check_alive()?;
        let writes = operator_writes(&scrape(client).await?.since(before), kubelet.counts().1);
        if writes != last {
            last = writes;
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= Duration::from_secs(3) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("writes did not stop within 5 minutes");
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
}

/// The served-job phase and the restart; returns the figures and the operator, stopped.
pub async fn run(
    args: &Args,
    client: &Client,
    clients: &[Client],
    ns: &str,
    operator_bin: &std::path::Path,
    logs: &std::path::Path,
) -> Result<Figures> {
    let replicas = args.serve_replicas;
    let mut figures = Figures {
        replicas,
        jobs: args.jobs,
        ..Figures::default()
    };
    let progress = Arc::new(Mutex::new(Progress::default()));
    let kubelet_seen = Arc::new(Kubelet::default());
    let (fleet, metrics_port) = if args.autoscale {
        let port = free_port()?;
        let fleet = FleetMetrics::start(port, autoscale::STEADY_LOAD_PERCENT).await?;
        fleet.check_reachable(port).await?;
        (Some(fleet), Some(port))
    } else {
        (None, None)
    };
    let watches = tokio::spawn(watch_jobs(
        client.clone(),
        ns.to_string(),
        replicas,
        progress.clone(),
    ));
    let kubelet_task = tokio::spawn(kubelet(
        clients.to_vec(),
        ns.to_string(),
        kubelet_seen.clone(),
        args.kubelet_concurrency,
        fleet.clone(),
    ));
    let mut operator = start_operator(operator_bin, args, logs, "operator-1")?;
    wait_ready(&mut operator, Duration::from_secs(120)).await?;
    let pid = operator.pid().unwrap_or(0);
    let cpu_before = proc_cpu_seconds(pid).unwrap_or(0.0);

    // Creation: every replica Ready.
    let before = scrape(client).await?;
    let events_before = count_events(client, ns).await?;
    let started = Instant::now();
    let created = stamp_all(clients, args.jobs, |i, client| async move {
        let jobs: Api<InferenceJob> = Api::namespaced(client, ns);
        let job: InferenceJob = serde_json::from_value(served_manifest(i, replicas, metrics_port))?;
        jobs.create(&PostParams::default(), &job).await?;
        Ok(())
    })
    .await
    .context("creating the served jobs")?;
    figures.created_wall = started.elapsed();
    eprintln!(
        "operator-scale:     {} served jobs × {replicas} replicas created in {:.1} s",
        args.jobs,
        figures.created_wall.as_secs_f64()
    );
    figures.all_ready = wait_for(
        &progress,
        &mut operator,
        args.jobs,
        "with every replica Ready",
        |p| p.ready.len(),
    )
    .await?;
    if figures.all_ready < args.jobs {
        let done = progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ready
            .clone();
        explain_missing(client, ns, &done).await?;
    }
    wait_quiet(client, &mut operator, &before, &kubelet_seen).await?;
    figures.writes = scrape(client).await?.since(&before);
    figures.kubelet = kubelet_seen.counts();
    let events = count_events(client, ns).await?;
    (figures.operator_events, figures.scheduler_events) = event_delta(&events_before, &events);
    {
        let progress = progress.lock().unwrap_or_else(|e| e.into_inner());
        figures.ready_wall = last(&progress.ready, started);
        figures.job_to_ready = latencies(&progress.ready, &created);
    }

    // One spec change to every job: a rolling update of every replica.
    eprintln!("operator-scale:     rolling update: a new image for every job");
    let before = scrape(client).await?;
    let kubelet_before = kubelet_seen.counts();
    let events_before = events;
    let started = Instant::now();
    let changed = stamp_all(clients, args.jobs, |i, client| async move {
        let jobs: Api<InferenceJob> = Api::namespaced(client, ns);
        let patch = json!({"spec": {"image": "ghcr.io/example/served:rolled"}});
        jobs.patch(&job_name(i), &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    })
    .await
    .context("changing the served jobs")?;
    figures.rolled = wait_for(
        &progress,
        &mut operator,
        args.jobs,
        "rolled onto the new spec",
        |p| p.rolled.len(),
    )
    .await?;
    if figures.rolled < args.jobs {
        let done = progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .rolled
            .clone();
        explain_missing(client, ns, &done).await?;
    }
    wait_quiet(client, &mut operator, &before, &kubelet_seen).await?;
    figures.roll_writes = scrape(client).await?.since(&before);
    let now = kubelet_seen.counts();
    figures.roll_kubelet = (now.0 - kubelet_before.0, now.1 - kubelet_before.1);
    let events = count_events(client, ns).await?;
    (figures.roll_operator_events, figures.roll_scheduler_events) =
        event_delta(&events_before, &events);
    figures.in_place = in_place_updates(client, ns).await?;
    {
        let progress = progress.lock().unwrap_or_else(|e| e.into_inner());
        figures.roll_wall = last(&progress.rolled, started);
        figures.job_to_rolled = latencies(&progress.rolled, &changed);
    }
    figures.operator_cpu = proc_cpu_seconds(pid).unwrap_or(0.0) - cpu_before;
    figures.hwm_kib = proc_status_kib(pid, "VmHWM").unwrap_or(0);
    figures.kubelet_load = kubelet_seen.load(args.kubelet_concurrency);

    if let Some(fleet) = &fleet {
        figures.autoscale = Some(
            autoscaled_phases(args, client, fleet, &progress, &mut operator, &kubelet_seen).await?,
        );
    }

    // Restart: every served job reconciled again, nothing written.
    eprintln!("operator-scale: 4/4 restart: kill the operator, start it again");
    let before = scrape(client).await?;
    let kubelet_before = kubelet_seen.counts();
    operator.kill();
    let started = Instant::now();
    let mut operator = start_operator(operator_bin, args, logs, "operator-2")?;
    wait_ready(&mut operator, Duration::from_secs(300)).await?;
    figures.restart_ready = started.elapsed();
    figures.restart_resynced = wait_resynced(&mut operator, args.jobs, started).await?;
    figures.restart_reconciles = reconciles(&operator).await.unwrap_or(0.0);
    wait_quiet(client, &mut operator, &before, &kubelet_seen).await?;
    figures.restart_writes = scrape(client).await?.since(&before);
    let kubelet_after = kubelet_seen.counts();
    if kubelet_after != kubelet_before {
        eprintln!(
            "operator-scale:     the kubelet wrote during the restart: {kubelet_before:?} → {kubelet_after:?}"
        );
    }
    if let Some(pid) = operator.pid() {
        figures.restart_hwm_kib = proc_status_kib(pid, "VmHWM").unwrap_or(0);
    }
    operator.kill();
    kubelet_task.abort();
    watches.abort();
    Ok(figures)
}

/// The autoscaling phases (steady, then a step up), after the roll.
async fn autoscaled_phases(
    args: &Args,
    client: &Client,
    fleet: &FleetMetrics,
    progress: &Arc<Mutex<Progress>>,
    operator: &mut ChildProcess,
    kubelet_seen: &Kubelet,
) -> Result<autoscale::Figures> {
    let mut figures = autoscale::Figures {
        jobs: args.jobs,
        ..autoscale::Figures::default()
    };
    let writes = |delta: &RequestTotals| operator_writes(delta, 0);
    autoscale::steady(fleet, operator, client, writes, &mut figures).await?;
    let before = scrape(client).await?;
    let scaled = || {
        progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .scaled
            .clone()
    };
    autoscale::step(fleet, scaled, args.jobs, operator, &mut figures).await?;
    wait_quiet(client, operator, &before, kubelet_seen).await?;
    figures.scale_writes = autoscale::scale_writes(&scrape(client).await?.since(&before));
    figures.hwm_kib = operator
        .pid()
        .and_then(|pid| proc_status_kib(pid, "VmHWM"))
        .unwrap_or(0);
    Ok(figures)
}

/// Operator and other controllers' event writes (objects + series repeats) between two counts.
pub(super) fn event_delta(
    before: &(super::EventCounts, BTreeMap<String, super::EventCounts>),
    after: &(super::EventCounts, BTreeMap<String, super::EventCounts>),
) -> (u64, u64) {
    let total = |c: &super::EventCounts| c.objects + c.repeats;
    let others = |m: &BTreeMap<String, super::EventCounts>| m.values().map(total).sum::<u64>();
    (
        total(&after.0).saturating_sub(total(&before.0)),
        others(&after.1).saturating_sub(others(&before.1)),
    )
}

/// `InPlaceUpdate` events in the namespace (replicas replaced in place for lack of room).
async fn in_place_updates(client: &Client, ns: &str) -> Result<u64> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let list = events
        .list(&kube::api::ListParams::default().fields("reason=InPlaceUpdate"))
        .await?;
    Ok(list.items.len() as u64)
}

impl Figures {
    /// Replicas per job.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// The goals table's figures: writes per replica until Ready (≤ 4, at 3 replicas) and
    /// the rolling update (≤ 60 s at 500 jobs × 3 replicas), then for context the times until
    /// Ready, the roll's writes and the memory.
    pub fn key_figures(&self, sizes: &Sizes) -> Vec<Figure> {
        let total = (self.jobs * self.replicas).max(1) as f64;
        let p = |v: &[Duration], q: f64| seconds(quantile(v, q));
        let (per, _) = self.per_replica(&self.writes, self.kubelet.1, self.operator_events);
        let parts = |writes: &RequestTotals, deletions: u64, events: u64| {
            format!(
                "pods {:.2}, status {:.2}, Service {:.2}, PDB {:.2}, events {:.2}",
                writes
                    .count(&WRITE_VERBS, "pods", "")
                    .saturating_sub(deletions) as f64
                    / total,
                writes.count(&WRITE_VERBS, "inferencejobs", "status") as f64 / total,
                writes.count(&WRITE_VERBS, "services", "") as f64 / total,
                writes.count(&WRITE_VERBS, "poddisruptionbudgets", "") as f64 / total,
                events as f64 / total,
            )
        };
        let (roll_per, _) = self.per_replica(
            &self.roll_writes,
            self.roll_kubelet.1,
            self.roll_operator_events,
        );
        let rolled_all = self.rolled >= self.jobs;
        let roll_secs = self.roll_wall.as_secs_f64();
        vec![
            Figure::new(
                "operator writes per replica until Ready",
                Some(Goal::at_most(
                    4.0,
                    "",
                    Some("3 replicas"),
                    sizes.serve_replicas == 3,
                )),
                Some(per),
                format!(
                    "{per:.2} ({})",
                    parts(&self.writes, self.kubelet.1, self.operator_events)
                ),
            ),
            Figure::new(
                format!(
                    "rolling update of {} jobs × {} replicas: all rolled and Ready after",
                    self.jobs, self.replicas
                ),
                Some(Goal::at_most(
                    60.0,
                    " s",
                    Some("500 jobs × 3 replicas"),
                    sizes.jobs == 500 && sizes.serve_replicas == 3,
                )),
                Some(if rolled_all { roll_secs } else { f64::INFINITY }),
                if rolled_all {
                    format!("{roll_secs:.1} s")
                } else {
                    format!(
                        "{} of {} jobs after {roll_secs:.1} s",
                        self.rolled, self.jobs
                    )
                },
            ),
            Figure::shown(
                "operator writes per replica for the roll",
                format!(
                    "{roll_per:.2} ({})",
                    parts(
                        &self.roll_writes,
                        self.roll_kubelet.1,
                        self.roll_operator_events
                    )
                ),
            ),
            Figure::shown(
                "job changed → all its replicas rolled, p50 / p99",
                format!(
                    "{} / {}",
                    p(&self.job_to_rolled, 0.5),
                    p(&self.job_to_rolled, 0.99)
                ),
            ),
            Figure::shown(
                "every replica Ready (from the first create); job created → Ready p50 / p99",
                format!(
                    "{} of {} jobs after {:.1} s; {} / {}",
                    self.all_ready,
                    self.jobs,
                    self.ready_wall.as_secs_f64(),
                    p(&self.job_to_ready, 0.5),
                    p(&self.job_to_ready, 0.99)
                ),
            ),
            Figure::shown(
                "operator peak RSS (VmHWM)",
                format!("{:.1} MiB", self.hwm_kib as f64 / 1024.0),
            ),
            Figure::shown(
                "the benchmark's kubelet (creation and roll)",
                self.kubelet_load.to_string(),
            ),
        ]
    }

    fn per_replica(&self, writes: &RequestTotals, deletions: u64, events: u64) -> (f64, String) {
        let replicas = (self.jobs * self.replicas).max(1) as f64;
        let pods = writes
            .count(&WRITE_VERBS, "pods", "")
            .saturating_sub(deletions);
        let status = writes.count(&WRITE_VERBS, "inferencejobs", "status");
        let services = writes.count(&WRITE_VERBS, "services", "");
        let pdbs = writes.count(&WRITE_VERBS, "poddisruptionbudgets", "");
        (
            operator_writes_own_events(writes, deletions, events) as f64 / replicas,
            format!(
                "pods {:.2} ({} less {deletions} the kubelet's), job status {:.2}, Services {:.2}, PDBs {:.2}",
                pods as f64 / replicas,
                super::Report::by_verb(writes, "pods", ""),
                status as f64 / replicas,
                services as f64 / replicas,
                pdbs as f64 / replicas
            ),
        )
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total = self.jobs * self.replicas;
        let p = |v: &[Duration], q: f64| seconds(quantile(v, q));
        let mib = |kib: u64| kib as f64 / 1024.0;
        let (per, parts) = self.per_replica(&self.writes, self.kubelet.1, self.operator_events);
        let events = |operator: u64, total_events: u64| {
            format!(
                "events {:.2} (the scheduler's {:.2})",
                operator.min(total_events) as f64 / total.max(1) as f64,
                self.scheduler_events as f64 / total.max(1) as f64
            )
        };
        writeln!(
            f,
            "| served jobs × replicas | {} × {} = {total} replicas |",
            self.jobs, self.replicas
        )?;
        writeln!(
            f,
            "| jobs created | in {:.1} s |",
            self.created_wall.as_secs_f64()
        )?;
        writeln!(
            f,
            "| every replica Ready (from the first create) | {} of {} jobs, after {:.1} s |",
            self.all_ready,
            self.jobs,
            self.ready_wall.as_secs_f64()
        )?;
        writeln!(
            f,
            "| job created → all its replicas Ready, p50 / p99 | {} / {} |",
            p(&self.job_to_ready, 0.5),
            p(&self.job_to_ready, 0.99)
        )?;
        writeln!(
            f,
            "| operator writes per replica until Ready | {per:.2}: {parts}, {} |",
            events(self.operator_events, self.operator_events)
        )?;
        writeln!(
            f,
            "| the kubelet's writes (pod status, confirmed deletions) | {} , {} |",
            self.kubelet.0, self.kubelet.1
        )?;
        writeln!(
            f,
            "| the benchmark's kubelet, creation and roll | {} |",
            self.kubelet_load
        )?;
        let (roll_per, roll_parts) = self.per_replica(
            &self.roll_writes,
            self.roll_kubelet.1,
            self.roll_operator_events,
        );
        writeln!(
            f,
            "| one spec change to every job: every replica rolled and Ready | {} of {} jobs, after {:.1} s; {} replicas replaced in place (no room for a surge pod) |",
            self.rolled,
            self.jobs,
            self.roll_wall.as_secs_f64(),
            self.in_place
        )?;
        writeln!(
            f,
            "| job changed → all its replicas rolled, p50 / p99 | {} / {} |",
            p(&self.job_to_rolled, 0.5),
            p(&self.job_to_rolled, 0.99)
        )?;
        writeln!(
            f,
            "| operator writes per replica for the roll | {roll_per:.2}: {roll_parts}, events {:.2} |",
            self.roll_operator_events as f64 / total.max(1) as f64
        )?;
        writeln!(
            f,
            "| operator CPU (creation and roll) | {:.1} s |",
            self.operator_cpu
        )?;
        writeln!(
            f,
            "| operator peak RSS (VmHWM) | {:.1} MiB |",
            mib(self.hwm_kib)
        )?;
        if let Some(autoscale) = &self.autoscale {
            write!(f, "{autoscale}")?;
        }
        let restart = operator_writes(&self.restart_writes, 0);
        writeln!(
            f,
            "| restart: /readyz 200; every job reconciled | {:.2} s; {:.2} s ({} reconciles), {restart} operator writes (VmHWM {:.1} MiB) |",
            self.restart_ready.as_secs_f64(),
            self.restart_resynced.as_secs_f64(),
            self.restart_reconciles,
            mib(self.restart_hwm_kib)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operators_writes_count_its_own_events_not_the_schedulers() {
        let line = |resource: &str, sub: &str, verb: &str, n: u32| {
            format!(
                "apiserver_request_total{{code=\"201\",group=\"\",resource=\"{resource}\",subresource=\"{sub}\",verb=\"{verb}\"}} {n}\n"
            )
        };
        let text = [
            line("pods", "", "POST", 8),
            line("pods", "", "DELETE", 3),
            line("pods", "binding", "POST", 8),
            line("pods", "status", "PATCH", 8),
            line("inferencejobs", "status", "APPLY", 5),
            line("services", "", "POST", 2),
            line("networkpolicies", "", "POST", 2),
            line("events", "", "POST", 12),
        ]
        .concat();
        let totals = RequestTotals::parse(&text);
        // Pods less the kubelet's 2 confirmed deletions, status, Services, NetworkPolicies and
        // every event write: 9 + 5 + 2 + 2 + 12.
        assert_eq!(operator_writes(&totals, 2), 30);
        // 4 of the 12 events are the operator's (8 kube-scheduler's): 9 + 5 + 2 + 2 + 4.
        assert_eq!(operator_writes_own_events(&totals, 2, 4), 22);
    }
}
