//! What the model cache sync's pure step costs: `wanted_models`, the models every GPU node
//! should hold, computed from every job that wants its model cached, the pods that mount one,
//! every node's cache and free GPUs. Prints p50 / p99 / max per cluster size (wall time, and
//! time on a CPU, which a shared machine's wait for a core does not inflate), next to the
//! leader lease's renewal period (the sync runs on a blocking thread, so it can never hold the
//! runtime thread that renews the lease; the figure shows how far below the period it stays).
//!
//! `cargo bench -p vramfit-operator --features fixtures --bench model_cache_sync`
//! (env `VRAMFIT_BENCH_ITERATIONS` overrides the runs per size, default 100).
// Benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use vramfit_api::Runtime;
use vramfit_api::model_cache::{CachedModel, CachedModelPhase, MAX_MODELS};
use vramfit_operator::leader::{LEASE_DURATION_SECONDS, LEASE_GRACE_SECONDS};
use vramfit_operator::model_cache::job_model::JobModel;
use vramfit_operator::model_cache::view::NodeCache;
use vramfit_operator::model_cache::wanted::{JobWant, MountingPod, WantedInput, wanted_models};

/// The classes of the reconcile harness: (share of the nodes in percent, GPUs per node).
const CLASSES: [(usize, u32); 7] = [
    (25, 4),
    (10, 1),
    (15, 4),
    (10, 4),
    (15, 8),
    (15, 8),
    (10, 8),
];
const NAMESPACES: usize = 10;

/// A small deterministic generator (no dependency, the same inputs on every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// Skewed toward 0: a few models most jobs want, a long tail.
    fn skewed(&mut self, n: usize) -> usize {
        self.below(n).min(self.below(n))
    }
}

/// Owned inputs of one cluster.
struct Cluster {
    jobs: Vec<JobWant>,
    mounting: Vec<MountingPod>,
    class_nodes: BTreeMap<String, Vec<String>>,
    caches: BTreeMap<String, NodeCache>,
    free: BTreeMap<(String, String), u32>,
}

fn model(index: usize) -> JobModel {
    let repo = format!("org-{}/model-{index:03}", index % 7);
    JobModel {
        key: format!("{repo}@main"),
        repo,
        revision: "main".to_string(),
        file: None,
        runtime: Runtime::Vllm,
    }
}

/// `nodes` GPU nodes in the harness's seven classes, each with a live agent listing three in
/// four of the `models` (most Ready, some downloading or failed) and some GPUs free; `jobs` jobs
/// (a skewed mix of models, 10 namespaces), 60 % with a pod on a node of their class (half of
/// those mount their model), 5 % groups of 2–4 pods.
fn cluster(nodes: usize, jobs: usize, models: usize) -> Cluster {
    let mut rng = Lcg(0x5eed);
    let mut class_nodes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut class_gpus = BTreeMap::new();
    let mut caches = BTreeMap::new();
    let mut free = BTreeMap::new();
    let mut index = 0;
    for (c, (share, gpus)) in CLASSES.iter().enumerate() {
        let class = format!("class-{c}");
        class_gpus.insert(class.clone(), *gpus);
        let count = (nodes * share).div_ceil(100);
        for _ in 0..count {
            let node = format!("gpu-{index:05}");
            index += 1;
            // A model in three of four, as the agent lists them: each once, at most 64.
            let listed: Vec<usize> = (0..models)
                .filter(|_| rng.below(4) != 0)
                .take(MAX_MODELS)
                .collect();
            let held: Vec<CachedModel> = listed
                .into_iter()
                .map(|index| {
                    let m = model(index);
                    let phase = match rng.below(10) {
                        0 => CachedModelPhase::Fetching,
                        1 => CachedModelPhase::Pending,
                        2 => CachedModelPhase::Failed,
                        _ => CachedModelPhase::Ready,
                    };
                    CachedModel {
                        repo: m.repo,
                        revision: m.revision,
                        phase,
                        bytes: 15 << 30,
                        total_bytes: 15 << 30,
                        public: true,
                        ..Default::default()
                    }
                })
                .collect();
            let wanted = held.iter().map(CachedModel::key).collect();
            // A budget of 1 TiB, each listed model 15 GiB of it.
            let free_bytes = (1u64 << 40).saturating_sub((15 << 30) * held.len() as u64);
            caches.insert(
                node.clone(),
                NodeCache {
                    held,
                    wanted,
                    live: true,
                    free_bytes,
                },
            );
            free.insert(
                (class.clone(), node.clone()),
                rng.below(*gpus as usize + 1) as u32,
            );
            class_nodes.entry(class.clone()).or_default().push(node);
        }
    }
    let class_names: Vec<String> = class_nodes.keys().cloned().collect();
    let mut mounting = Vec::new();
    let jobs = (0..jobs)
        .map(|_| {
            let class = class_names[rng.below(class_names.len())].clone();
            let members = &class_nodes[&class];
            let gpus = class_gpus[&class];
            let model = model(rng.skewed(models));
            let namespace = format!("team-{}", rng.below(NAMESPACES));
            let mut pod_nodes = Vec::new();
            if rng.below(10) < 6 {
                let node = members[rng.below(members.len())].clone();
                if rng.below(2) == 0 {
                    mounting.push(MountingPod {
                        node: node.clone(),
                        namespace: namespace.clone(),
                        key: model.key.clone(),
                    });
                }
                pod_nodes.push(node);
            }
            JobWant {
                namespace,
                model,
                pod_nodes,
                classes: vec![class],
                nodes_per_class: if rng.below(20) == 0 {
                    2 + rng.below(3)
                } else {
                    0
                },
                gpus_per_pod: 1 << rng.below(gpus.trailing_zeros() as usize + 1),
            }
        })
        .collect();
    Cluster {
        jobs,
        mounting,
        class_nodes,
        caches,
        free,
    }
}

/// The time this thread has spent on a CPU (`/proc/thread-self/schedstat`, Linux): a shared
/// machine's wait for a core is not counted. `None` where it is not readable.
fn on_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() {
    let iterations = std::env::var("VRAMFIT_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100usize)
        .max(1);
    let renew = Duration::from_secs(LEASE_DURATION_SECONDS - LEASE_GRACE_SECONDS);
    println!(
        "vramfit model cache sync, pure step (wanted_models): {iterations} runs per size; \
         the lease is renewed every {} s",
        renew.as_secs()
    );
    println!(
        "{:>6} {:>6} {:>6}  {:>10} {:>10} {:>10}  {:>10} {:>10}  {:>7} {:>8}  {:>9}",
        "nodes",
        "jobs",
        "models",
        "p50",
        "p99",
        "max",
        "cpu p50",
        "cpu p99",
        "nodes+",
        "entries",
        "p99/renew"
    );
    for (nodes, jobs, models) in [(300, 2_000, 8), (300, 2_000, 64), (1_000, 5_000, 64)] {
        let cluster = cluster(nodes, jobs, models);
        let input = WantedInput {
            jobs: &cluster.jobs,
            mounting: &cluster.mounting,
            class_nodes: &cluster.class_nodes,
            caches: &cluster.caches,
            free: &cluster.free,
            prefetch_nodes: 4,
        };
        let mut times = Vec::with_capacity(iterations);
        let mut cpu = Vec::with_capacity(iterations);
        let mut shape = (0, 0);
        for _ in 0..iterations {
            let cpu_before = on_cpu();
            let started = Instant::now();
            let wanted = std::hint::black_box(wanted_models(std::hint::black_box(&input)));
            times.push(started.elapsed());
            if let (Some(before), Some(after)) = (cpu_before, on_cpu()) {
                cpu.push(after.saturating_sub(before));
            }
            shape = (wanted.len(), wanted.values().map(Vec::len).sum::<usize>());
        }
        times.sort();
        cpu.sort();
        let p99 = percentile(&times, 0.99);
        let cpu_at = |p: f64| {
            if cpu.is_empty() {
                "-".to_string()
            } else {
                format!("{:.2?}", percentile(&cpu, p))
            }
        };
        println!(
            "{nodes:>6} {jobs:>6} {models:>6}  {:>10.2?} {:>10.2?} {:>10.2?}  {:>10} {:>10}  {:>7} {:>8}  {:>8.3}%",
            percentile(&times, 0.50),
            p99,
            times[times.len() - 1],
            cpu_at(0.50),
            cpu_at(0.99),
            shape.0,
            shape.1,
            100.0 * p99.as_secs_f64() / renew.as_secs_f64(),
        );
    }
}
