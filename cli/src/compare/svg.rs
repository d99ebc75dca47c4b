//! The report's bar chart (pure, hand-written SVG): cost per 1,000 items and items per
//! minute (a fine-tuning job: per million tokens and tokens per second) by class, a baseline
//! and an optimized bar each.
use std::fmt::Write;

use super::jobs::RunPhase;
use super::report::{PhaseReport, Report};

const WIDTH: f64 = 720.0;
const PANEL_HEIGHT: f64 = 230.0;
const LEFT: f64 = 60.0;
const BAR_AREA: f64 = 150.0;
const COLORS: [(RunPhase, &str); 2] = [
    (RunPhase::Baseline, "#9aa5b1"),
    (RunPhase::Optimized, "#2f80ed"),
];

/// The chart for `report`.
pub fn chart(report: &Report) -> String {
    let mut svg = String::new();
    let height = PANEL_HEIGHT * 2.0 + 40.0;
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let cost = format!("Cost {} ($, lower is better)", report.unit.cost_words());
    let rate = format!(
        "{} (higher is better)",
        capitalized(report.unit.rate_words())
    );
    panel(
        &mut svg,
        report,
        0.0,
        &cost,
        |p| p.cost().map(|s| s.median),
        3,
    );
    panel(
        &mut svg,
        report,
        PANEL_HEIGHT,
        &rate,
        |p| p.rate().map(|s| s.median),
        1,
    );
    // Legend.
    let y = PANEL_HEIGHT * 2.0 + 20.0;
    for (i, (phase, color)) in COLORS.iter().enumerate() {
        let x = LEFT + i as f64 * 120.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{color}"/><text x="{}" y="{}">{phase}</text>"#,
            y - 10.0,
            x + 16.0,
            y
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn panel(
    svg: &mut String,
    report: &Report,
    top: f64,
    title: &str,
    value: fn(&PhaseReport) -> Option<f64>,
    decimals: usize,
) {
    // Room above the tallest bar for its value, below the title.
    let base = top + 40.0 + BAR_AREA;
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{}" font-weight="bold">{}</text>"#,
        top + 20.0,
        escape(title)
    );
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" y1="{base}" x2="{}" y2="{base}" stroke="#333"/>"##,
        WIDTH - 20.0
    );
    let max = report
        .classes
        .iter()
        .flat_map(|c| c.phases.iter().filter_map(value))
        .fold(0.0_f64, f64::max);
    let n = report.classes.len().max(1) as f64;
    let slot = (WIDTH - LEFT - 20.0) / n;
    let bar = (slot * 0.35).min(60.0);
    for (i, class) in report.classes.iter().enumerate() {
        let x0 = LEFT + i as f64 * slot + slot / 2.0 - bar;
        for (j, (phase, color)) in COLORS.iter().enumerate() {
            let x = x0 + j as f64 * bar;
            let v = class
                .phases
                .iter()
                .find(|p| p.phase == *phase)
                .and_then(value);
            match v {
                Some(v) if max > 0.0 => {
                    let h = (v / max * BAR_AREA).max(1.0);
                    let _ = writeln!(
                        svg,
                        r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{color}"><title>{} {phase}: {v:.d$}</title></rect>"#,
                        base - h,
                        bar - 2.0,
                        escape(&class.node_class),
                        d = decimals
                    );
                    let _ = writeln!(
                        svg,
                        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{v:.d$}</text>"#,
                        x + bar / 2.0 - 1.0,
                        base - h - 3.0,
                        d = decimals
                    );
                }
                _ => {
                    // No figure (skipped, failed, unpriced): say so instead of a zero bar.
                    let _ = writeln!(
                        svg,
                        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="#888">n/a</text>"##,
                        x + bar / 2.0 - 1.0,
                        base - 3.0
                    );
                }
            }
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x0 + bar,
            base + 15.0,
            escape(&class.node_class)
        );
    }
}

fn capitalized(words: &str) -> String {
    let mut chars = words.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
