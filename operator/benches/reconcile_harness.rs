//! Reconcile harness: N InferenceJobs over M simulated nodes of mixed GPU classes, with the
//! real `reconcile` against an in-process fake API server (a tower service that answers every
//! apply, patch and event and counts them; no network).
//!
//! Phases, as a job lives them when nothing fails:
//! 1. create: each job is reconciled once (plan, pod apply, status write);
//! 2. resync: the watch has caught up (status and Pending pods in the stores); each job is
//!    reconciled again (nothing should be written);
//! 3. running: a simulated scheduler binds each pod to a node of its class and starts it;
//! 4. succeeded: every pod completes; jobs left Unschedulable in 1 now find room.
//!
//! `cargo bench -p vramfit-operator --bench reconcile_harness` (env `VRAMFIT_BENCH_JOBS`,
//! `VRAMFIT_BENCH_NODES`, `VRAMFIT_BENCH_CONCURRENCY` override 5000, 1000, 16).
// Test and benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use http::{Method, Request, Response};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::client::Body;
use vramfit_api::pod_keys::NODE_CLASS_LABEL;
use vramfit_api::{InferenceJob, InferenceJobSpec, Phase, Preference};
use vramfit_operator::fixtures;
use vramfit_operator::metrics::Metrics;
use vramfit_operator::settings::Settings;
use vramfit_operator::stores::cached_job::CachedJob;
use vramfit_operator::stores::gpu_resources::pod_gpu_request;
use vramfit_operator::stores::{StoreWriters, Stores};
use vramfit_operator::{Context, reconcile};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Writes and events the fake API answered.
#[derive(Default)]
struct Counts {
    pod_applies: AtomicU64,
    status_patches: AtomicU64,
    pod_deletes: AtomicU64,
    events: AtomicU64,
    other: AtomicU64,
    /// Object writes (pods and status) per job name.
    per_job: Mutex<HashMap<String, u32>>,
    /// The last applied pod and status of each job.
    pods: Mutex<HashMap<String, Vec<u8>>>,
    statuses: Mutex<HashMap<String, Vec<u8>>>,
}

impl Counts {
    fn writes(&self) -> u64 {
        self.pod_applies.load(Ordering::Relaxed)
            + self.status_patches.load(Ordering::Relaxed)
            + self.pod_deletes.load(Ordering::Relaxed)
    }

    fn count_job(&self, job: &str) {
        let mut per_job = self.per_job.lock().unwrap();
        *per_job.entry(job.to_string()).or_default() += 1;
    }
}

/// The job a pod belongs to: `<job>-<attempt>`.
fn job_of_pod(pod: &str) -> &str {
    pod.rsplit_once('-').map_or(pod, |(job, _)| job)
}

/// Answers every request of the client; counts and keeps what was written.
fn fake_api(counts: Arc<Counts>) -> Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            let path = request.uri().path().to_string();
            let body = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default()
                .to_vec();
            let segments: Vec<&str> = path.split('/').collect();
            let (status, answer) =
                if method == Method::PATCH && path.starts_with("/api/v1/namespaces/") {
                    counts.pod_applies.fetch_add(1, Ordering::Relaxed);
                    let pod = segments.last().copied().unwrap_or_default();
                    let job = format!("{}/{}", segments[4], job_of_pod(pod));
                    counts.count_job(&job);
                    counts
                        .pods
                        .lock()
                        .unwrap()
                        .insert(format!("{}/{}", segments[4], pod), body.clone());
                    (200, body)
                } else if method == Method::PATCH && path.ends_with("/status") {
                    counts.status_patches.fetch_add(1, Ordering::Relaxed);
                    let job = format!("{}/{}", segments[5], segments[7]);
                    counts.count_job(&job);
                    let answer = serde_json::to_vec(&serde_json::json!({
                        "apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob",
                        "metadata": { "name": segments[7], "namespace": segments[5] }
                    }))
                    .unwrap();
                    counts.statuses.lock().unwrap().insert(job, body);
                    (200, answer)
                } else if method == Method::DELETE {
                    counts.pod_deletes.fetch_add(1, Ordering::Relaxed);
                    (
                        200,
                        br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"}}"#.to_vec(),
                    )
                } else if path.starts_with("/apis/events.k8s.io/") {
                    counts.events.fetch_add(1, Ordering::Relaxed);
                    (201, body)
                } else {
                    counts.other.fetch_add(1, Ordering::Relaxed);
                    (
                        404,
                        br#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}"#
                            .to_vec(),
                    )
                };
            let response = Response::builder()
                .status(status)
                .body(Body::from(answer))
                .unwrap();
            send.send_response(response);
        }
    });
    Client::new(service, "default")
}

/// Node shapes: (GPU kind, GPUs per node, share of the nodes, price per GPU-hour in cents).
const SHAPES: &[(&str, u32, f64, u32)] = &[
    ("a10g", 4, 0.25, 60),
    ("a10g", 1, 0.10, 60),
    ("l40s", 4, 0.15, 180),
    ("t4", 4, 0.10, 35),
    ("v100", 8, 0.15, 120),
    ("a100", 8, 0.15, 400),
    ("h100", 8, 0.10, 650),
];

struct Cluster {
    /// Free GPUs per node, and the class of each node, for the simulated scheduler.
    free: HashMap<String, u32>,
    nodes_of_class: HashMap<String, Vec<String>>,
}

fn build_cluster(nodes: usize, writers: &mut StoreWriters) -> Cluster {
    let mut free = HashMap::new();
    let mut nodes_of_class: HashMap<String, Vec<String>> = HashMap::new();
    let mut index = 0;
    for (shape, &(kind, gpus, share, cents)) in SHAPES.iter().enumerate() {
        let count = if shape + 1 == SHAPES.len() {
            nodes - index
        } else {
            (nodes as f64 * share).round() as usize
        };
        let class = fixtures::class(kind, gpus).name;
        writers.apply_node_class((*fixtures::gpu_node_class_override(&class, cents)).clone());
        for _ in 0..count {
            let name = format!("node-{index:05}");
            writers.apply_node(fixtures::gpu_node(&name, kind, gpus, gpus));
            // One node in ten runs another workload on two of its GPUs.
            let taken = if index % 10 == 0 { gpus.min(2) } else { 0 };
            if taken > 0 {
                writers.apply_pod(fixtures::gpu_pod(
                    "other",
                    &format!("train-{index}"),
                    Some(&name),
                    taken,
                ));
            }
            free.insert(name.clone(), gpus - taken);
            nodes_of_class.entry(class.clone()).or_default().push(name);
            index += 1;
        }
    }
    writers.mark_ready();
    Cluster {
        free,
        nodes_of_class,
    }
}

impl Cluster {
    /// Best fit on a node of the pod's class, as kube-scheduler would (roughly).
    fn bind(&mut self, pod: &Pod) -> Option<String> {
        let class = pod.metadata.labels.as_ref()?.get(NODE_CLASS_LABEL)?;
        let gpus = pod_gpu_request(pod);
        let node = self
            .nodes_of_class
            .get(class)?
            .iter()
            .filter(|n| self.free[*n] >= gpus)
            .min_by_key(|n| self.free[*n])?
            .clone();
        if let Some(free) = self.free.get_mut(&node) {
            *free -= gpus;
        }
        Some(node)
    }

    fn release(&mut self, node: &str, gpus: u32) {
        if let Some(free) = self.free.get_mut(node) {
            *free += gpus;
        }
    }
}

fn job_spec(i: usize) -> InferenceJobSpec {
    match i % 10 {
        0..=3 => fixtures::vllm_mistral_spec(),
        4 | 5 => InferenceJobSpec {
            preference: Preference::Economy,
            ..fixtures::vllm_mistral_spec()
        },
        6 | 7 => fixtures::internvl_spec(),
        8 => fixtures::llamacpp_spec(),
        _ => fixtures::bf16_pinned_spec(),
    }
}

fn make_job(i: usize) -> InferenceJob {
    let mut job = fixtures::job(&format!("job-{i:05}"), job_spec(i));
    job.metadata.namespace = Some(format!("team-{}", i % 10));
    job
}

struct PhaseResult {
    name: &'static str,
    reconciles: usize,
    wall: Duration,
    latencies: Vec<Duration>,
    writes: u64,
    events: u64,
}

async fn run_phase(
    name: &'static str,
    jobs: &[InferenceJob],
    ctx: &Arc<Context>,
    counts: &Counts,
    concurrency: usize,
) -> PhaseResult {
    let (writes_before, events_before) = (counts.writes(), counts.events.load(Ordering::Relaxed));
    let started = Instant::now();
    let latencies: Vec<Duration> = futures::stream::iter(jobs.iter().cloned())
        .map(|job| {
            let ctx = ctx.clone();
            async move {
                let t = Instant::now();
                let result = reconcile(Arc::new(CachedJob::of(&job)), ctx).await;
                if let Err(error) = result {
                    eprintln!("reconcile failed: {error}");
                }
                t.elapsed()
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    PhaseResult {
        name,
        reconciles: jobs.len(),
        wall: started.elapsed(),
        latencies,
        writes: counts.writes() - writes_before,
        events: counts.events.load(Ordering::Relaxed) - events_before,
    }
}

/// A pod reduced to what the simulated watches need: metadata and one container with its GPUs.
fn compact(pod: Pod) -> Pod {
    let gpus = pod_gpu_request(&pod);
    let mut small = fixtures::gpu_pod("x", "x", None, gpus);
    small.metadata = pod.metadata;
    small.status = pod.status;
    small
}

/// Gives the jobs the statuses the fake API received (what the watch would deliver).
fn catch_up(jobs: &mut [InferenceJob], counts: &Counts) {
    let statuses = std::mem::take(&mut *counts.statuses.lock().unwrap());
    for job in jobs {
        let key = format!(
            "{}/{}",
            job.metadata.namespace.as_deref().unwrap_or_default(),
            job.metadata.name.as_deref().unwrap_or_default()
        );
        if let Some(body) = statuses.get(&key) {
            let value: serde_json::Value = serde_json::from_slice(body).unwrap();
            job.status = Some(serde_json::from_value(value["status"].clone()).unwrap());
            // As the API server does on every write.
            let version: u64 = job
                .metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            job.metadata.resource_version = Some((version + 1).to_string());
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn vm_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

fn vm_rss_kib() -> u64 {
    vm_status_kib("VmRSS:")
}

fn phase_counts(jobs: &[InferenceJob]) -> HashMap<Phase, usize> {
    let mut counts = HashMap::new();
    for job in jobs {
        let phase = job
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or(Phase::Pending);
        *counts.entry(phase).or_default() += 1;
    }
    counts
}

fn main() {
    let jobs_n = env_usize("VRAMFIT_BENCH_JOBS", 5000);
    let nodes_n = env_usize("VRAMFIT_BENCH_NODES", 1000);
    let concurrency = env_usize("VRAMFIT_BENCH_CONCURRENCY", 16);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench(jobs_n, nodes_n, concurrency));
}

async fn bench(jobs_n: usize, nodes_n: usize, concurrency: usize) {
    let counts = Arc::new(Counts::default());
    let client = fake_api(counts.clone());
    let (stores, mut writers) = Stores::writable();
    let mut cluster = build_cluster(nodes_n, &mut writers);
    let settings = Settings {
        // No watch feeds the stores during phase 1: reservations must outlive it.
        reservation_ttl: Duration::from_secs(3600),
        ..Settings::default()
    };
    let ctx = Arc::new(Context::new(
        client,
        Arc::new(Metrics::new()),
        stores.clone(),
        settings,
        Some("bench".into()),
    ));
    let gpus: u32 = cluster.free.values().sum();
    println!(
        "vramfit reconcile harness: {jobs_n} jobs, {nodes_n} nodes ({} classes, {gpus} free GPUs), concurrency {concurrency}",
        ctx.inventory().classes.len()
    );
    let total = Instant::now();
    let mut jobs: Vec<InferenceJob> = (0..jobs_n).map(make_job).collect();
    // The job store, as the controller's reflector fills it: an unbound pod holds room in its
    // class only for a job the store holds.
    for job in &jobs {
        writers.apply_job(job);
    }
    let mut rss = vec![("setup", vm_rss_kib())];

    // 0. one job on an idle operator: the latency a single `kubectl apply` sees.
    let mut single = make_job(jobs_n);
    single.metadata.name = Some("single".into());
    let mut results = vec![run_phase("0 one job alone", &[single], &ctx, &counts, 1).await];
    counts.pods.lock().unwrap().clear();
    counts.statuses.lock().unwrap().clear();

    // 1. create
    results.push(run_phase("1 create", &jobs, &ctx, &counts, concurrency).await);
    catch_up(&mut jobs, &counts);
    // What the watches would deliver: each applied pod, created and Pending. The harness keeps
    // only the pod's metadata and GPU count from here on, so that the figures below are the
    // operator's more than the harness's.
    let applied: Vec<Pod> = std::mem::take(&mut *counts.pods.lock().unwrap())
        .into_values()
        .map(|body| {
            let pod = fixtures::created(serde_json::from_slice(&body).unwrap());
            writers.apply_pod(pod.clone());
            compact(pod)
        })
        .collect();
    let placed_in_1: Vec<String> = jobs
        .iter()
        .filter(|j| j.status.as_ref().is_some_and(|s| s.pod_name.is_some()))
        .map(|j| {
            format!(
                "{}/{}",
                j.metadata.namespace.as_deref().unwrap_or_default(),
                j.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect();
    let after_1 = phase_counts(&jobs);
    rss.push(("1 create", vm_rss_kib()));

    // 2. resync
    results.push(run_phase("2 resync", &jobs, &ctx, &counts, concurrency).await);
    catch_up(&mut jobs, &counts);
    rss.push(("2 resync", vm_rss_kib()));

    // 3. the scheduler binds and starts every pod it can
    let mut bound: Vec<(usize, String)> = Vec::new();
    for (index, pod) in applied.iter().enumerate() {
        if let Some(node) = cluster.bind(pod) {
            writers.apply_pod(fixtures::as_running(pod.clone(), &node));
            bound.push((index, node));
        }
    }
    results.push(run_phase("3 running", &jobs, &ctx, &counts, concurrency).await);
    catch_up(&mut jobs, &counts);
    rss.push(("3 running", vm_rss_kib()));

    // 4. every running pod completes
    for (index, node) in &bound {
        let pod = &applied[*index];
        writers.apply_pod(fixtures::as_succeeded(pod.clone(), node));
        cluster.release(node, pod_gpu_request(pod));
    }
    drop(applied);
    results.push(run_phase("4 succeeded", &jobs, &ctx, &counts, concurrency).await);
    catch_up(&mut jobs, &counts);
    rss.push(("4 succeeded", vm_rss_kib()));
    let wall = total.elapsed();

    println!(
        "\n| phase | reconciles | wall | reconciles/s | object writes | writes/job | events | p50 | p99 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        let mut sorted = r.latencies.clone();
        sorted.sort();
        println!(
            "| {} | {} | {:.2} s | {:.0} | {} | {:.2} | {} | {:.2} ms | {:.2} ms |",
            r.name,
            r.reconciles,
            r.wall.as_secs_f64(),
            r.reconciles as f64 / r.wall.as_secs_f64(),
            r.writes,
            r.writes as f64 / r.reconciles as f64,
            r.events,
            percentile(&sorted, 0.50).as_secs_f64() * 1e3,
            percentile(&sorted, 0.99).as_secs_f64() * 1e3,
        );
    }
    // Phase 0 is a probe; the totals are over the N jobs.
    let results = &results[1..];
    let mut all: Vec<Duration> = results
        .iter()
        .flat_map(|r| r.latencies.iter().copied())
        .collect();
    all.sort();
    let reconciles: usize = results.iter().map(|r| r.reconciles).sum();
    let busy: f64 = results.iter().map(|r| r.wall.as_secs_f64()).sum();
    println!(
        "| all | {reconciles} | {busy:.2} s | {:.0} | {} | {:.2} | {} | {:.2} ms | {:.2} ms |",
        reconciles as f64 / busy,
        results.iter().map(|r| r.writes).sum::<u64>(),
        results.iter().map(|r| r.writes).sum::<u64>() as f64 / jobs_n as f64,
        results.iter().map(|r| r.events).sum::<u64>(),
        percentile(&all, 0.50).as_secs_f64() * 1e3,
        percentile(&all, 0.99).as_secs_f64() * 1e3,
    );

    let per_job = counts.per_job.lock().unwrap();
    let lifecycle: Vec<u32> = placed_in_1
        .iter()
        .map(|k| per_job.get(k).copied().unwrap_or(0))
        .collect();
    let mean = lifecycle.iter().map(|&w| f64::from(w)).sum::<f64>() / lifecycle.len().max(1) as f64;
    let max = lifecycle.iter().copied().max().unwrap_or(0);
    let final_phases = phase_counts(&jobs);
    println!(
        "\njobs placed in phase 1: {} (Unschedulable: {}, Pending: {})",
        placed_in_1.len(),
        after_1.get(&Phase::Unschedulable).copied().unwrap_or(0),
        after_1.get(&Phase::Pending).copied().unwrap_or(0)
    );
    println!(
        "object writes per placed job, create → Succeeded: mean {mean:.2}, max {max} (pod apply + status on create, Running, Succeeded)"
    );
    let mut finals: Vec<_> = final_phases
        .iter()
        .map(|(p, n)| format!("{} {n}", p.as_str()))
        .collect();
    finals.sort();
    println!("phases at the end: {}", finals.join(", "));
    println!(
        "other requests: {}; reservations held: {}",
        counts.other.load(Ordering::Relaxed),
        ctx.reservations.len()
    );
    println!("wall time (setup included): {:.2} s", wall.as_secs_f64());
    let rss: Vec<String> = rss
        .iter()
        .map(|(at, kib)| format!("{at} {:.0} MiB", *kib as f64 / 1024.0))
        .collect();
    println!("RSS after each phase (VmRSS): {}", rss.join(", "));
    println!(
        "RSS high-water mark (VmHWM, harness included): {:.1} MiB",
        vm_status_kib("VmHWM:") as f64 / 1024.0
    );
}
