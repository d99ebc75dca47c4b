//! What one `/metrics` scrape costs as the number of jobs grows: the job gauges are copied
//! from counts kept per phase and class (`job_gauges.rs`), so a scrape should cost the same at
//! 100 jobs and at 100,000. Prints, per job count, the time to take the job events in (once)
//! and the time of one scrape (refresh the gauges and encode the text), next to what the walk
//! over every cached job that a scrape did before took.
//!
//! `cargo bench -p vramfit-operator --features fixtures --bench metrics_scrape`
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::runtime::watcher;
use vramfit_api::{InferenceJobStatus, Phase};
use vramfit_operator::fixtures;
use vramfit_operator::job_gauges::JobGauges;
use vramfit_operator::metrics::Metrics;
use vramfit_operator::stores::cached_job::CachedJob;

const PHASES: [Phase; 4] = [
    Phase::Scheduled,
    Phase::Running,
    Phase::Succeeded,
    Phase::Unschedulable,
];
const CLASSES: [&str; 4] = ["a10g-x1", "a10g-x4", "h100-80gb-hbm3-x8", "l40s-x1"];
const SCRAPES: u32 = 2_000;

fn main() {
    println!("vramfit /metrics scrape: {SCRAPES} scrapes per job count");
    println!(
        "{:>8}  {:>16}  {:>14}  {:>18}  {:>10}",
        "jobs", "events in (once)", "scrape mean", "walk every job", "text bytes"
    );
    for jobs in [100usize, 10_000, 100_000] {
        let gauges = JobGauges::default();
        let metrics = Metrics::new();
        let template = fixtures::job("job", fixtures::vllm_mistral_spec());
        let events: Vec<watcher::Event<CachedJob>> = (0..jobs)
            .map(|i| {
                let mut job = template.clone();
                job.metadata.name = Some(format!("job-{i:06}"));
                job.status = Some(InferenceJobStatus {
                    phase: Some(PHASES[i % PHASES.len()]),
                    node_class: Some(CLASSES[i % CLASSES.len()].to_string()),
                    ..InferenceJobStatus::default()
                });
                watcher::Event::Apply(CachedJob::of(&job))
            })
            .collect();
        let started = Instant::now();
        for event in &events {
            gauges.apply(event);
        }
        let taken_in = started.elapsed();
        let mut bytes = 0;
        let started = Instant::now();
        for _ in 0..SCRAPES {
            metrics.observe_job_totals(gauges.totals());
            bytes = metrics.encode().map(|text| text.len()).unwrap_or_default();
        }
        let mean = started.elapsed() / SCRAPES;
        // What a scrape did before the counts: walk every cached job (its phase and class).
        let cached: Vec<&CachedJob> = events
            .iter()
            .filter_map(|e| match e {
                watcher::Event::Apply(job) => Some(job),
                _ => None,
            })
            .collect();
        let walks = (SCRAPES / 20).max(1);
        let started = Instant::now();
        for _ in 0..walks {
            let mut totals: BTreeMap<(Phase, String), i64> = BTreeMap::new();
            for job in &cached {
                let key = (
                    job.phase().unwrap_or(Phase::Pending),
                    job.node_class().unwrap_or_default().to_string(),
                );
                *totals.entry(key).or_default() += 1;
            }
            std::hint::black_box(&totals);
        }
        let walk = started.elapsed() / walks;
        println!(
            "{jobs:>8}  {:>16}  {:>14}  {:>18}  {bytes:>10}",
            format_duration(taken_in),
            format_duration(mean),
            format_duration(walk)
        );
    }
}

fn format_duration(d: Duration) -> String {
    if d >= Duration::from_millis(1) {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.1} µs", d.as_secs_f64() * 1e6)
    }
}
