//! Cost of the agent's refresh loop without the API: probe (read and parse the fixture, as
//! the agent does every refresh) → render → compare with the last rendering. Prints CPU
//! time per loop and the process's resident memory.
//!
//! `cargo bench -p vramfit-agent --bench refresh_loop` (add `-- 200000` for more loops).
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use vramfit_agent::gpu::GpuProbe;
use vramfit_agent::gpu::fixture::FixtureProbe;
use vramfit_agent::labels::{NodeLabels, render};
use vramfit_agent::metrics::Metrics;
use vramfit_agent::readiness::Readiness;
use vramfit_agent::refresh::Prober;

const FIXTURES: &[&str] = &[
    "a10g-x1.yaml",
    "h100-x8.yaml",
    "mixed-a10g-t4.yaml",
    "nvml-unavailable.yaml",
];

/// CPU time this thread has used, in nanoseconds (first field of schedstat).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// User + system CPU time of the whole process, in nanoseconds (assumes 100 ticks/s).
fn process_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the ")" that closes the command name; utime and stime are 14 and 15.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) * 10_000_000
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| {
            line.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn report(what: &str, loops: u32, cpu_ns: u64, wall_ns: u128) {
    println!(
        "{what:<48} {loops:>7} loops  {:>8.2} µs CPU/loop  {:>8.2} µs wall/loop",
        cpu_ns as f64 / f64::from(loops) / 1000.0,
        wall_ns as f64 / f64::from(loops) / 1000.0,
    );
}

fn main() {
    let loops: u32 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(50_000);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    println!("refresh loop without API, {loops} loops per case");

    for name in FIXTURES {
        let mut probe = FixtureProbe::open(dir.join(name)).expect("shipped fixture");
        let mut last: Option<NodeLabels> = None;
        let mut changes = 0u32;
        let (cpu0, wall0) = (thread_cpu_ns(), Instant::now());
        for _ in 0..loops {
            let labels = render(&probe.probe().expect("shipped fixture"));
            if last.as_ref() != Some(&labels) {
                changes += 1;
                last = Some(labels);
            }
        }
        report(
            &format!("probe+render+compare  {name}"),
            loops,
            thread_cpu_ns() - cpu0,
            wall0.elapsed().as_nanos(),
        );
        assert_eq!(
            changes, 1,
            "a fixed fixture renders the same labels every time"
        );
    }

    // The pure part alone: rendering an 8-GPU reading.
    let reading = FixtureProbe::open(dir.join("h100-x8.yaml"))
        .expect("shipped fixture")
        .load()
        .expect("valid")
        .to_probe();
    let (cpu0, wall0) = (thread_cpu_ns(), Instant::now());
    for _ in 0..loops {
        black_box(render(black_box(&reading)));
    }
    report(
        "render only           h100-x8.yaml",
        loops,
        thread_cpu_ns() - cpu0,
        wall0.elapsed().as_nanos(),
    );

    // The agent's own path: the prober on a current-thread runtime, probing on a blocking
    // thread, updating metrics; CPU of the whole process, since two threads take part.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let async_loops = loops / 10;
    let (cpu0, wall0) = (process_cpu_ns(), Instant::now());
    runtime.block_on(async {
        let probe = FixtureProbe::open(dir.join("h100-x8.yaml")).expect("shipped fixture");
        let mut prober = Prober::new(
            Box::new(probe),
            Arc::new(Metrics::new()),
            Arc::new(Readiness::new()),
        );
        let mut last = None;
        for _ in 0..async_loops {
            let labels = prober.labels().await.expect("shipped fixture");
            if last.as_ref() != Some(&labels) {
                last = Some(labels);
            }
        }
    });
    report(
        "agent Prober (spawn_blocking) h100-x8.yaml",
        async_loops,
        process_cpu_ns() - cpu0,
        wall0.elapsed().as_nanos(),
    );

    println!(
        "resident memory: VmRSS {} KiB, VmHWM (peak) {} KiB",
        status_kib("VmRSS:"),
        status_kib("VmHWM:")
    );
}
