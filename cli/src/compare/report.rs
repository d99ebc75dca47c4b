//! The comparison report (pure): per class and phase, seconds per item, items per minute,
//! peak GPU memory, dollars per hour, cost per 1,000 items, and the speed-up of optimized
//! over baseline; the median and the spread over repeated runs.
use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::baseline::BaselineSettings;
use super::jobs::{RunKey, RunPhase};
pub use super::unit::Unit;

/// A finished run's figures (from the job's `status.result` and `status.plan`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finished {
    /// Items done.
    pub items: u64,
    /// Wall time of the work, seconds.
    pub seconds: f64,
    /// Peak GPU memory per GPU, MiB.
    pub peak_gpu_memory_mib: Vec<u64>,
    /// GPUs the run took, on every node of a group.
    pub gpu_count: u32,
    /// The plan's price (class price per GPU × GPUs of every node), cents per hour; 0 when
    /// unknown.
    pub hourly_price_cents: u32,
    /// Steps the operator took down before this attempt ran (its settings then differ from
    /// the phase's), one line.
    pub stepped_down: Option<String>,
}

/// How a run ended, or why it did not.
#[derive(Clone, Debug, PartialEq)]
pub enum RunState {
    /// The workload reported its result.
    Finished(Finished),
    /// It cannot give figures: failed, no nodes, unknown class, invalid, deleted. One line.
    Problem(String),
    /// Still going when the comparison stopped following; the last state seen.
    Unfinished(String),
}

/// One run's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutcome {
    /// Which run.
    pub key: RunKey,
    /// Its job.
    pub job_name: String,
    /// How it ended.
    pub state: RunState,
}

/// What the report needs besides the runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportContext {
    /// Comparison id.
    pub comparison: String,
    /// Namespace of the jobs.
    pub namespace: String,
    /// `namespace/name` of the job compared.
    pub job: String,
    /// Model name.
    pub model: String,
    /// Runtime.
    pub runtime: String,
    /// The generic settings.
    pub baseline: BaselineSettings,
    /// The compared classes in order.
    pub classes: Vec<ClassContext>,
    /// Runs per class and phase.
    pub repeat: u32,
    /// `--price` flags: dollars per GPU-hour by class.
    pub prices: BTreeMap<String, f64>,
    /// Items, or a fine-tuning job's training tokens.
    pub unit: Unit,
}

/// A compared class and the phases it skips.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassContext {
    /// The class.
    pub name: String,
    /// Why it skips the baseline (compared on its optimized plan only).
    pub baseline_skipped: Option<String>,
    /// Why it runs nothing at all.
    pub optimized_skipped: Option<String>,
}

/// Median and spread of one figure over the finished runs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stat {
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

impl Stat {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Stat> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Stat {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// Where a price came from.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PriceSource {
    /// `--price`.
    Flag,
    /// The plan's hourlyPriceCents (the class's price per GPU × GPUs).
    Plan,
}

/// One class and phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseReport {
    /// baseline or optimized.
    pub phase: RunPhase,
    /// Runs that reported a result.
    pub finished: u32,
    /// Runs planned.
    pub runs: u32,
    /// GPUs of the (median) run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_count: Option<u32>,
    /// Seconds per item.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds_per_item: Option<Stat>,
    /// Items per minute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items_per_minute: Option<Stat>,
    /// Peak GPU memory of the busiest GPU, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_gpu_memory_mib: Option<Stat>,
    /// Dollars per hour of the GPUs taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dollars_per_hour: Option<f64>,
    /// Where the price came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_source: Option<PriceSource>,
    /// Dollars per 1,000 items.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_1000_items: Option<Stat>,
    /// Fine-tuning: training tokens per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_second: Option<Stat>,
    /// Fine-tuning: dollars per million training tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_million_tokens: Option<Stat>,
    /// One line per run that gave no figures, or whose settings were stepped down.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Why the phase did not run at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl PhaseReport {
    /// The rate the report's unit compares: items per minute, or training tokens per second.
    pub fn rate(&self) -> Option<Stat> {
        self.items_per_minute.or(self.tokens_per_second)
    }

    /// The cost the report's unit compares: per 1,000 items, or per million tokens.
    pub fn cost(&self) -> Option<Stat> {
        self.cost_per_1000_items.or(self.cost_per_million_tokens)
    }
}

/// One class.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassReport {
    /// The class.
    pub node_class: String,
    /// Baseline, then optimized.
    pub phases: Vec<PhaseReport>,
    /// Optimized rate over baseline rate (medians): items per minute, or tokens per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// True when the class is compared on its optimized plan only.
    pub optimized_only: bool,
    /// Why the class runs nothing at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cannot_run: Option<String>,
}

/// A winner.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Best {
    /// The class.
    pub node_class: String,
    /// Its phase.
    pub phase: RunPhase,
    /// The figure it wins on (the cost, or the rate of the report's unit; medians).
    pub value: f64,
}

/// The whole report (report.json).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Comparison id.
    pub comparison: String,
    /// Namespace.
    pub namespace: String,
    /// The job compared.
    pub job: String,
    /// Model.
    pub model: String,
    /// Runtime.
    pub runtime: String,
    /// Items, or training tokens (a fine-tuning job).
    pub unit: Unit,
    /// Runs per class and phase.
    pub repeat: u32,
    /// The generic settings of the baseline phase.
    pub baseline: BaselineSettings,
    /// Every class, in the order given.
    pub classes: Vec<ClassReport>,
    /// Lowest median cost (per 1,000 items, or per million tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cheapest: Option<Best>,
    /// Highest median rate (items per minute, or tokens per second).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fastest: Option<Best>,
    /// True when some run had not ended when the comparison stopped following.
    pub incomplete: bool,
}

/// The report of `outcomes`.
pub fn build(ctx: &ReportContext, outcomes: &[RunOutcome]) -> Report {
    let mut classes = Vec::new();
    let mut incomplete = false;
    for ClassContext {
        name: class,
        baseline_skipped,
        optimized_skipped,
    } in &ctx.classes
    {
        let mut phases = Vec::new();
        for phase in [RunPhase::Baseline, RunPhase::Optimized] {
            let runs: Vec<&RunOutcome> = outcomes
                .iter()
                .filter(|o| &o.key.class == class && o.key.phase == phase)
                .collect();
            incomplete |= runs
                .iter()
                .any(|o| matches!(o.state, RunState::Unfinished(_)));
            let skipped = match phase {
                RunPhase::Baseline => baseline_skipped.clone(),
                RunPhase::Optimized => optimized_skipped.clone(),
            };
            phases.push(phase_report(ctx, class, phase, &runs, skipped));
        }
        let rate = |p: RunPhase| {
            phases
                .iter()
                .find(|r| r.phase == p)
                .and_then(PhaseReport::rate)
                .map(|s| s.median)
        };
        let speedup = match (rate(RunPhase::Baseline), rate(RunPhase::Optimized)) {
            (Some(b), Some(o)) if b > 0.0 => Some(o / b),
            _ => None,
        };
        classes.push(ClassReport {
            node_class: class.clone(),
            cannot_run: optimized_skipped.clone(),
            optimized_only: baseline_skipped.is_some() && optimized_skipped.is_none(),
            phases,
            speedup,
        });
    }
    let candidates = || {
        classes
            .iter()
            .flat_map(|c| c.phases.iter().map(move |p| (c, p)))
    };
    // Ties go to the earlier class and phase: deterministic for a golden report.
    let pick = |value: fn(&PhaseReport) -> Option<f64>, lowest: bool| {
        let mut best: Option<Best> = None;
        for (c, p) in candidates() {
            let Some(v) = value(p) else { continue };
            let better = best
                .as_ref()
                .is_none_or(|b| if lowest { v < b.value } else { v > b.value });
            if better {
                best = Some(Best {
                    node_class: c.node_class.clone(),
                    phase: p.phase,
                    value: v,
                });
            }
        }
        best
    };
    Report {
        comparison: ctx.comparison.clone(),
        namespace: ctx.namespace.clone(),
        job: ctx.job.clone(),
        model: ctx.model.clone(),
        runtime: ctx.runtime.clone(),
        unit: ctx.unit,
        repeat: ctx.repeat,
        baseline: ctx.baseline.clone(),
        cheapest: pick(|p| p.cost().map(|s| s.median), true),
        fastest: pick(|p| p.rate().map(|s| s.median), false),
        classes,
        incomplete,
    }
}

fn phase_report(
    ctx: &ReportContext,
    class: &str,
    phase: RunPhase,
    runs: &[&RunOutcome],
    skipped: Option<String>,
) -> PhaseReport {
    let mut problems = Vec::new();
    let mut done: Vec<&Finished> = Vec::new();
    let mut ordered: Vec<&&RunOutcome> = runs.iter().collect();
    ordered.sort_by_key(|o| o.key.run);
    for o in ordered {
        match &o.state {
            RunState::Finished(f) if f.items > 0 && f.seconds > 0.0 => {
                if let Some(step) = &f.stepped_down {
                    problems.push(format!(
                        "run {}: ran after stepping down ({step}), not the {phase} settings",
                        o.key.run
                    ));
                }
                done.push(f);
            }
            RunState::Finished(f) => problems.push(format!(
                "run {}: reported {} items in {} s, no rate to compare",
                o.key.run, f.items, f.seconds
            )),
            RunState::Problem(why) => problems.push(format!("run {}: {why}", o.key.run)),
            RunState::Unfinished(last) => problems.push(format!(
                "run {}: not finished when the comparison stopped following ({last})",
                o.key.run
            )),
        }
    }
    let map = |f: fn(&Finished) -> f64| Stat::of(&done.iter().map(|d| f(d)).collect::<Vec<_>>());
    // Dollars per hour of one run: --price per GPU × its GPUs, else its plan's price.
    let flag = ctx.prices.get(class).copied();
    let hourly = |f: &Finished| match flag {
        Some(per_gpu) => Some(per_gpu * f64::from(f.gpu_count)),
        None => (f.hourly_price_cents > 0).then(|| f64::from(f.hourly_price_cents) / 100.0),
    };
    let unit = ctx.unit;
    let costs: Vec<f64> = done
        .iter()
        .filter_map(|f| hourly(f).map(|h| unit.cost(h, f.items, f.seconds)))
        .collect();
    let items = unit == Unit::Items;
    let rates = map_rate(&done, unit);
    let hourly_rates: Vec<f64> = done.iter().filter_map(|f| hourly(f)).collect();
    let mut gpus: Vec<u32> = done.iter().map(|f| f.gpu_count).collect();
    gpus.sort_unstable();
    PhaseReport {
        phase,
        finished: done.len() as u32,
        runs: runs.len() as u32,
        gpu_count: gpus.get(gpus.len() / 2).copied(),
        seconds_per_item: map(|f| f.seconds / f.items as f64).filter(|_| items),
        items_per_minute: rates.filter(|_| items),
        tokens_per_second: rates.filter(|_| !items),
        peak_gpu_memory_mib: map(|f| {
            f.peak_gpu_memory_mib.iter().copied().max().unwrap_or(0) as f64
        })
        .filter(|_| done.iter().any(|f| !f.peak_gpu_memory_mib.is_empty())),
        dollars_per_hour: Stat::of(&hourly_rates).map(|s| s.median),
        price_source: (!hourly_rates.is_empty()).then_some(if flag.is_some() {
            PriceSource::Flag
        } else {
            PriceSource::Plan
        }),
        cost_per_1000_items: Stat::of(&costs).filter(|_| items),
        cost_per_million_tokens: Stat::of(&costs).filter(|_| !items),
        problems,
        skipped,
    }
}

/// The rate of each finished run in `unit`.
fn map_rate(done: &[&Finished], unit: Unit) -> Option<Stat> {
    Stat::of(
        &done
            .iter()
            .map(|f| unit.rate(f.items, f.seconds))
            .collect::<Vec<_>>(),
    )
}

/// `12.34` or, over repeats with a spread, `12.34 (11.90–12.80)`.
fn stat_cell(stat: Option<Stat>, decimals: usize, repeat: u32) -> String {
    let Some(s) = stat else {
        return "-".into();
    };
    let (median, min, max) = (
        format!("{:.d$}", s.median, d = decimals),
        format!("{:.d$}", s.min, d = decimals),
        format!("{:.d$}", s.max, d = decimals),
    );
    // A spread that rounds away is no spread worth printing.
    if repeat > 1 && min != max {
        format!("{median} ({min}–{max})")
    } else {
        median
    }
}

fn gib_cell(stat: Option<Stat>, repeat: u32) -> String {
    let gib = stat.map(|s| Stat {
        median: s.median / 1024.0,
        min: s.min / 1024.0,
        max: s.max / 1024.0,
    });
    match stat_cell(gib, 1, repeat) {
        dash if dash == "-" => dash,
        cell => format!("{cell} GiB"),
    }
}

/// The table's rows: header first. Items get seconds per item, items per minute and dollars
/// per 1,000 items; training tokens get tokens per second and dollars per million tokens.
fn rows(report: &Report) -> Vec<Vec<String>> {
    let unit = report.unit;
    let items = unit == Unit::Items;
    let mut header = vec!["CLASS", "PHASE", "RUNS", "GPUS"];
    if items {
        header.push("S/ITEM");
    }
    header.extend([
        unit.rate_header(),
        "PEAK GPU MEM",
        "$/H",
        unit.cost_header(),
        "SPEED-UP",
    ]);
    let width = header.len();
    let mut rows = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for c in &report.classes {
        for p in &c.phases {
            let mut row = vec![c.node_class.clone(), p.phase.to_string()];
            if p.skipped.is_some() {
                row.push("skipped".into());
                row.resize(width, String::new());
                rows.push(row);
                continue;
            }
            row.push(format!("{}/{}", p.finished, p.runs));
            row.push(p.gpu_count.map_or("-".into(), |g| g.to_string()));
            if items {
                row.push(stat_cell(p.seconds_per_item, 2, report.repeat));
            }
            row.extend([
                stat_cell(p.rate(), 1, report.repeat),
                gib_cell(p.peak_gpu_memory_mib, report.repeat),
                p.dollars_per_hour.map_or("-".into(), |d| format!("{d:.2}")),
                stat_cell(p.cost(), 3, report.repeat),
                match (p.phase, c.speedup) {
                    (RunPhase::Optimized, Some(s)) => format!("{s:.2}×"),
                    _ => String::new(),
                },
            ]);
            rows.push(row);
        }
    }
    rows
}

/// The lines under the table: winners, then every problem.
fn summary_lines(report: &Report) -> Vec<String> {
    let mut lines = Vec::new();
    let unit = report.unit;
    let per = match unit {
        Unit::Items => "per item",
        Unit::TrainingTokens => "per training token",
    };
    match &report.cheapest {
        Some(b) => lines.push(format!(
            "Cheapest {per}: {} ({}), ${:.3} {}",
            b.node_class,
            b.phase,
            b.value,
            unit.cost_words()
        )),
        None => lines.push(format!(
            "Cheapest {per}: unknown (no finished run with a price; pass --price CLASS=DOLLARS)"
        )),
    }
    match &report.fastest {
        Some(b) => lines.push(format!(
            "Fastest: {} ({}), {:.1} {}",
            b.node_class,
            b.phase,
            b.value,
            unit.rate_words()
        )),
        None => lines.push("Fastest: unknown (no run finished with a result)".into()),
    }
    for c in &report.classes {
        if let Some(why) = &c.cannot_run {
            lines.push(format!("{}: not compared: {why}", c.node_class));
        }
        for p in &c.phases {
            match &p.skipped {
                Some(why) if p.phase == RunPhase::Baseline && c.cannot_run.is_none() => {
                    lines.push(format!(
                        "{}: compared on its optimized plan only: {why}",
                        c.node_class
                    ));
                }
                _ => {}
            }
            for problem in &p.problems {
                lines.push(format!("{} {}: {problem}", c.node_class, p.phase));
            }
        }
    }
    if report.incomplete {
        lines.push(format!(
            "Incomplete: re-attach with the same command (or --name {}) to report the rest.",
            report.comparison
        ));
    }
    lines
}

/// The baseline's settings in words, one line; without the dtype and allocator settings for a
/// runtime that does not read them (`pytorch` false: llama.cpp).
pub fn baseline_words(b: &BaselineSettings, pytorch: bool) -> String {
    let mut parts = Vec::new();
    if pytorch {
        parts.push(b.dtype.clone());
    }
    match (b.quantization, b.tuning_method) {
        (Some(q), _) => parts.push(format!("quantization {}", q.as_str())),
        (None, None) => parts.push("the GGUF file's quantization".into()),
        (None, Some(_)) => {}
    }
    if let Some(m) = b.tuning_method {
        parts.push(format!("method {}", m.as_str()));
    }
    parts.push("flash attention off".into());
    if pytorch {
        parts.push(format!(
            "PYTORCH_CUDA_ALLOC_CONF {}",
            b.pytorch_cuda_alloc_conf
        ));
    }
    if let Some(t) = b.max_tiles {
        parts.push(format!("MAX_TILES {t}"));
    }
    parts.push(if b.tuning_method.is_some() {
        format!("sequence {}", b.context_length)
    } else {
        format!("context {} × batch {}", b.context_length, b.batch_size)
    });
    parts.join(", ")
}

/// The report as a table for a terminal.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Comparison {} of InferenceJob {}: {} under {}, {} run(s) per class and phase",
        report.comparison, report.job, report.model, report.runtime, report.repeat
    );
    let _ = writeln!(
        out,
        "Baseline: {}\n",
        baseline_words(&report.baseline, true)
    );
    out.push_str(&crate::render::columns(&rows(report)));
    out.push('\n');
    for line in summary_lines(report) {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The report in Markdown, showing `chart` (a file next to it) when given.
pub fn markdown(report: &Report, chart: Option<&str>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# GPU class comparison `{}`\n", report.comparison);
    let _ = writeln!(
        out,
        "InferenceJob `{}`: {} under {}, {} run(s) per class and phase{}.\n",
        report.job,
        report.model,
        report.runtime,
        report.repeat,
        if report.repeat > 1 {
            "; cells give the median (min–max)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "Baseline settings (every class): {}.\n",
        baseline_words(&report.baseline, true)
    );
    let rows = rows(report);
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
        if i == 0 {
            let _ = writeln!(out, "|{}", "---|".repeat(row.len()));
        }
    }
    out.push('\n');
    for line in summary_lines(report) {
        let _ = writeln!(out, "- {line}");
    }
    if let Some(chart) = chart {
        let _ = writeln!(
            out,
            "\n![Cost {} and {} by class]({chart})",
            report.unit.cost_words(),
            report.unit.rate_words()
        );
    }
    let _ = writeln!(out, "\n{}", report.unit.formulas());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_api::Quantization;

    fn ctx(repeat: u32) -> ReportContext {
        ReportContext {
            comparison: "c".into(),
            namespace: "ns".into(),
            job: "ns/j".into(),
            model: "m".into(),
            runtime: "transformers".into(),
            baseline: BaselineSettings {
                dtype: "float16".into(),
                quantization: Some(Quantization::None),
                tuning_method: None,
                flash_attention: false,
                pytorch_cuda_alloc_conf: "expandable_segments:False".into(),
                max_tiles: None,
                context_length: 4096,
                batch_size: 1,
            },
            classes: vec![
                ClassContext {
                    name: "a".into(),
                    baseline_skipped: None,
                    optimized_skipped: None,
                },
                ClassContext {
                    name: "b".into(),
                    baseline_skipped: Some("too small".into()),
                    optimized_skipped: None,
                },
            ],
            repeat,
            prices: BTreeMap::new(),
            unit: Unit::Items,
        }
    }

    fn run(
        class: &str,
        phase: RunPhase,
        n: u32,
        items: u64,
        seconds: f64,
        cents: u32,
    ) -> RunOutcome {
        RunOutcome {
            key: RunKey {
                class: class.into(),
                phase,
                run: n,
            },
            job_name: format!("{class}-{phase}-{n}"),
            state: RunState::Finished(Finished {
                items,
                seconds,
                peak_gpu_memory_mib: vec![1000, 2048],
                gpu_count: 1,
                hourly_price_cents: cents,
                stepped_down: None,
            }),
        }
    }

    #[test]
    fn median_and_spread() {
        let s = Stat::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Stat::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(Stat::of(&[]), None);
        assert_eq!(Stat::of(&[f64::NAN]), None);
    }

    #[test]
    fn figures_per_item_and_per_thousand() {
        // 120 items in 300 s at $0.60/h: 2.5 s per item, 24 per minute, 5 cents for the
        // run, $0.4167 per 1,000 items.
        let r = build(
            &ctx(1),
            &[
                run("a", RunPhase::Baseline, 1, 120, 300.0, 60),
                run("a", RunPhase::Optimized, 1, 120, 200.0, 60),
            ],
        );
        let base = &r.classes[0].phases[0];
        assert_eq!(base.seconds_per_item.unwrap().median, 2.5);
        assert_eq!(base.items_per_minute.unwrap().median, 24.0);
        assert_eq!(base.dollars_per_hour, Some(0.6));
        let cost = base.cost_per_1000_items.unwrap().median;
        assert!((cost - 0.6 * 300.0 / 3600.0 / 120.0 * 1000.0).abs() < 1e-12);
        assert_eq!(base.peak_gpu_memory_mib.unwrap().median, 2048.0);
        assert_eq!(r.classes[0].speedup, Some(1.5));
        let cheapest = r.cheapest.unwrap();
        assert_eq!(
            (cheapest.node_class.as_str(), cheapest.phase),
            ("a", RunPhase::Optimized)
        );
        assert!(r.classes[1].optimized_only);
        assert_eq!(r.classes[1].phases[0].skipped.as_deref(), Some("too small"));
    }

    #[test]
    fn a_fine_tuning_comparison_counts_tokens_per_second_and_dollars_per_million() {
        let mut c = ctx(1);
        c.unit = Unit::TrainingTokens;
        // 1,800,000 tokens in an hour at $0.60/h: 500 tokens/s, $0.333 per million tokens.
        let r = build(
            &c,
            &[
                run("a", RunPhase::Baseline, 1, 1_800_000, 3600.0, 60),
                run("a", RunPhase::Optimized, 1, 1_800_000, 2400.0, 60),
            ],
        );
        let base = &r.classes[0].phases[0];
        assert_eq!(base.tokens_per_second.unwrap().median, 500.0);
        assert!((base.cost_per_million_tokens.unwrap().median - 0.6 / 1.8).abs() < 1e-12);
        assert_eq!(base.items_per_minute, None);
        assert_eq!(base.cost_per_1000_items, None);
        assert_eq!(r.classes[0].speedup, Some(1.5));
        let text = table(&r);
        assert!(
            text.contains("TOKENS/S") && text.contains("$/1M TOKENS"),
            "{text}"
        );
        assert!(
            !text.contains("ITEMS/MIN") && !text.contains("S/ITEM"),
            "{text}"
        );
        assert!(
            text.contains("Fastest: a (optimized), 750.0 training tokens per second"),
            "{text}"
        );
        assert!(
            text.contains(
                "Cheapest per training token: a (optimized), $0.222 per million training tokens"
            ),
            "{text}"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["unit"], "trainingTokens");
        assert!(super::super::svg::chart(&r).contains("Cost per million training tokens"));
    }

    #[test]
    fn price_flags_are_per_gpu_and_win_over_the_plan() {
        let mut c = ctx(1);
        c.prices.insert("a".into(), 1.0);
        let mut o = run("a", RunPhase::Optimized, 1, 100, 3600.0, 60);
        if let RunState::Finished(f) = &mut o.state {
            f.gpu_count = 2;
        }
        let r = build(&c, &[o]);
        let p = &r.classes[0].phases[1];
        assert_eq!(p.dollars_per_hour, Some(2.0));
        assert_eq!(p.price_source, Some(PriceSource::Flag));
        assert_eq!(p.cost_per_1000_items.unwrap().median, 20.0);
    }

    #[test]
    fn no_price_no_cost_and_problems_are_lines_not_numbers() {
        let mut failed = run("a", RunPhase::Baseline, 2, 0, 0.0, 0);
        failed.state = RunState::Problem("Failed: exit code 1".into());
        let r = build(
            &ctx(2),
            &[run("a", RunPhase::Baseline, 1, 60, 60.0, 0), failed],
        );
        let p = &r.classes[0].phases[0];
        assert_eq!((p.finished, p.runs), (1, 2));
        assert_eq!(p.cost_per_1000_items, None);
        assert_eq!(p.problems, ["run 2: Failed: exit code 1"]);
        assert!(r.cheapest.is_none());
        assert!(table(&r).contains("Cheapest per item: unknown"));
    }

    #[test]
    fn repeats_give_median_and_spread_in_the_table() {
        let r = build(
            &ctx(3),
            &[
                run("a", RunPhase::Baseline, 1, 60, 60.0, 60),
                run("a", RunPhase::Baseline, 2, 60, 30.0, 60),
                run("a", RunPhase::Baseline, 3, 60, 40.0, 60),
            ],
        );
        let ipm = r.classes[0].phases[0].items_per_minute.unwrap();
        assert_eq!((ipm.median, ipm.min, ipm.max), (90.0, 60.0, 120.0));
        assert!(table(&r).contains("90.0 (60.0–120.0)"), "{}", table(&r));
    }
}
