//! The comparison report for a fixed set of results (three classes, two runs each: one class
//! optimized-only, one failed run, one unfinished), reviewed by hand and committed: table,
//! Markdown, JSON and chart. After an intended change:
//! `UPDATE_GOLDEN=1 cargo test -p vramfit-cli --test golden_compare`, then review the diff.
// Test and benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;
use std::path::Path;

use vramfit_api::Quantization;
use vramfit_cli::args::Format;
use vramfit_cli::compare::baseline::BaselineSettings;
use vramfit_cli::compare::jobs::{RunKey, RunPhase};
use vramfit_cli::compare::report::{
    self, ClassContext, Finished, ReportContext, RunOutcome, RunState,
};
use vramfit_cli::compare::{report_output, svg};

fn context() -> ReportContext {
    let class = |name: &str, baseline_skipped: Option<&str>| ClassContext {
        name: name.into(),
        baseline_skipped: baseline_skipped.map(String::from),
        optimized_skipped: None,
    };
    ReportContext {
        comparison: "captions".into(),
        namespace: "team-a".into(),
        job: "team-a/captions".into(),
        model: "OpenGVLab/InternVL3-8B".into(),
        runtime: "transformers".into(),
        baseline: BaselineSettings {
            dtype: "float16".into(),
            quantization: Some(Quantization::Int8),
            tuning_method: None,
            flash_attention: false,
            pytorch_cuda_alloc_conf: "expandable_segments:False".into(),
            max_tiles: Some(14),
            context_length: 4096,
            batch_size: 1,
        },
        classes: vec![
            class("v100-16gb-x4", None),
            class("a10g-x1", None),
            class(
                "h100-80gb-mig-1g-10gb-x7",
                Some(
                    "cannot run the baseline: does not fit: needs 10.9 GiB per GPU with int8, 8.3 GiB usable",
                ),
            ),
        ],
        repeat: 2,
        // V100 at docs/compare.md's example price, per GPU-hour; the others at their plans' prices.
        prices: BTreeMap::from([("v100-16gb-x4".to_string(), 1.20)]),
        unit: Default::default(),
    }
}

/// A finished run: `work` is (items, seconds), `price` (GPUs, plan cents per hour).
fn finished(
    class: &str,
    phase: RunPhase,
    run: u32,
    work: (u64, f64),
    price: (u32, u32),
    peak: &[u64],
) -> RunOutcome {
    RunOutcome {
        key: RunKey {
            class: class.into(),
            phase,
            run,
        },
        job_name: format!("captions-{class}-{phase}-{run}"),
        state: RunState::Finished(Finished {
            items: work.0,
            seconds: work.1,
            peak_gpu_memory_mib: peak.to_vec(),
            gpu_count: price.0,
            hourly_price_cents: price.1,
            stepped_down: None,
        }),
    }
}

fn outcomes() -> Vec<RunOutcome> {
    use RunPhase::{Baseline, Optimized};
    let mut failed = finished("v100-16gb-x4", Baseline, 2, (0, 0.0), (0, 0), &[]);
    failed.state = RunState::Problem(
        "failed: attempt 3 ran out of memory (CUDA out of memory), no attempt left".into(),
    );
    let mut unfinished = finished(
        "h100-80gb-mig-1g-10gb-x7",
        Optimized,
        2,
        (0, 0.0),
        (0, 0),
        &[],
    );
    unfinished.state = RunState::Unfinished(
        "Unschedulable: no free GPUs: no usable node has 1 GPU free (1 usable node(s))".into(),
    );
    let mut stepped = finished("a10g-x1", Optimized, 2, (500, 560.0), (1, 60), &[13900]);
    if let RunState::Finished(f) = &mut stepped.state {
        f.stepped_down = Some("attempt 2: MAX_TILES 18 → 12".into());
    }
    vec![
        finished(
            "v100-16gb-x4",
            Baseline,
            1,
            (500, 1250.0),
            (2, 240),
            &[9800, 9750],
        ),
        failed,
        finished(
            "v100-16gb-x4",
            Optimized,
            1,
            (500, 1100.0),
            (2, 240),
            &[10100, 10020],
        ),
        finished(
            "v100-16gb-x4",
            Optimized,
            2,
            (500, 1150.0),
            (2, 240),
            &[10180, 10090],
        ),
        finished("a10g-x1", Baseline, 1, (500, 800.0), (1, 60), &[11200]),
        finished("a10g-x1", Baseline, 2, (500, 820.0), (1, 60), &[11150]),
        finished("a10g-x1", Optimized, 1, (500, 540.0), (1, 60), &[14100]),
        stepped,
        finished(
            "h100-80gb-mig-1g-10gb-x7",
            Optimized,
            1,
            (500, 900.0),
            (1, 93),
            &[7900],
        ),
        unfinished,
    ]
}

fn check(name: &str, actual: &str, stale: &mut Vec<String>) {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/compare")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&golden).unwrap_or_default();
    if expected != actual {
        stale.push(format!(
            "{name}:\n--- expected\n{expected}\n--- actual\n{actual}"
        ));
    }
}

#[test]
fn the_report_of_fixed_results_matches_the_reviewed_output() {
    let report = report::build(&context(), &outcomes());
    let mut stale = Vec::new();
    check("report.txt", &report::table(&report), &mut stale);
    check(
        "report.md",
        &report::markdown(&report, Some("chart.svg")),
        &mut stale,
    );
    check(
        "report.json",
        &report_output(&report, Format::Json).unwrap(),
        &mut stale,
    );
    check("chart.svg", &svg::chart(&report), &mut stale);
    assert!(
        stale.is_empty(),
        "report output changed (UPDATE_GOLDEN=1 to accept):\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_fixed_results_give_the_expected_winners() {
    let report = report::build(&context(), &outcomes());
    let cheapest = report.cheapest.as_ref().unwrap();
    // A10G optimized: $0.60/h × 550 s (median) / 3600 / 500 × 1000 = $0.1833 per 1,000.
    assert_eq!(
        (cheapest.node_class.as_str(), cheapest.phase),
        ("a10g-x1", RunPhase::Optimized)
    );
    assert!((cheapest.value - 0.6 * 550.0 / 3600.0 / 500.0 * 1000.0).abs() < 1e-9);
    let fastest = report.fastest.as_ref().unwrap();
    assert_eq!(
        (fastest.node_class.as_str(), fastest.phase),
        ("a10g-x1", RunPhase::Optimized)
    );
    assert!(report.incomplete);
    let v100 = &report.classes[0];
    // --price 1.20 per GPU × 2 GPUs, over the plan's $2.40 — the same here by design.
    assert_eq!(v100.phases[1].dollars_per_hour, Some(2.4));
    assert_eq!(v100.phases[0].finished, 1);
    let speedup = v100.speedup.unwrap();
    // Medians of items per minute: (30000/1100 + 30000/1150) / 2 over 30000/1250.
    let optimized = (30000.0 / 1100.0 + 30000.0 / 1150.0) / 2.0;
    assert!((speedup - optimized / 24.0).abs() < 1e-9);
    assert!(report.classes[2].optimized_only);
}

#[test]
fn reports_are_written_to_a_folder() {
    let dir = std::env::temp_dir().join(format!("vramfit-compare-{}", std::process::id()));
    let report = report::build(&context(), &outcomes());
    let written = vramfit_cli::compare::write_outputs(&report, &dir).unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
        .collect();
    assert_eq!(names, ["report.json", "report.md", "chart.svg"]);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("](chart.svg)"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["cheapest"]["nodeClass"], "a10g-x1");
    std::fs::remove_dir_all(&dir).unwrap();
}
