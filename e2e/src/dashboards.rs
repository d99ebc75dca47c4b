//! The Grafana dashboards' queries as the dashboard check evaluates them: every target of
//! every panel of `charts/vramfit/dashboards/*.json` (rows included), Grafana's interval
//! variables replaced the way Grafana replaces them, and what a panel needs from the answer:
//! a series with the labels its legend names, and a number to draw.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde_json::Value;

/// One query of one panel.
#[derive(Clone, Debug, PartialEq)]
pub struct PanelQuery {
    /// The dashboard's file name.
    pub dashboard: String,
    /// The panel's title.
    pub panel: String,
    /// The target's `refId`.
    pub ref_id: String,
    /// Its PromQL, as written (with Grafana's variables).
    pub expr: String,
    /// The labels its `legendFormat` shows (`{{node_class}}` → `node_class`).
    pub legend_labels: Vec<String>,
    /// An instant query (bar gauges over the time range) rather than a range query.
    pub instant: bool,
}

impl PanelQuery {
    /// `vramfit.json: "Jobs by phase" (A)`, for messages.
    pub fn describe(&self) -> String {
        format!("{}: {:?} ({})", self.dashboard, self.panel, self.ref_id)
    }
}

/// Every dashboard file of `dir`, by name.
pub fn read_dashboards(dir: &Path) -> Result<Vec<(String, Value)>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let json = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", path.display()))?;
            Ok((name, json))
        })
        .collect()
}

/// Every target with an `expr` of every panel, rows' nested panels included, in order.
pub fn panel_queries(dashboard: &str, json: &Value) -> Vec<PanelQuery> {
    fn walk(dashboard: &str, panels: &[Value], out: &mut Vec<PanelQuery>) {
        for panel in panels {
            let title = panel["title"].as_str().unwrap_or("(untitled)");
            for target in panel["targets"].as_array().into_iter().flatten() {
                let Some(expr) = target["expr"].as_str() else {
                    continue;
                };
                out.push(PanelQuery {
                    dashboard: dashboard.to_string(),
                    panel: title.to_string(),
                    ref_id: target["refId"].as_str().unwrap_or("?").to_string(),
                    expr: expr.to_string(),
                    legend_labels: legend_labels(target["legendFormat"].as_str().unwrap_or("")),
                    instant: target["instant"].as_bool().unwrap_or(false),
                });
            }
            if let Some(nested) = panel["panels"].as_array() {
                walk(dashboard, nested, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        dashboard,
        json["panels"].as_array().map_or(&[][..], Vec::as_slice),
        &mut out,
    );
    out
}

/// The labels a legend format shows: `{{phase}} / {{ node_class }}` → `phase`, `node_class`.
pub fn legend_labels(format: &str) -> Vec<String> {
    let mut labels = Vec::new();
    let mut rest = format;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else { break };
        let label = after[..close].trim();
        if !label.is_empty() && !labels.iter().any(|l| l == label) {
            labels.push(label.to_string());
        }
        rest = &after[close + 2..];
    }
    labels
}

/// What Grafana puts for its interval variables, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intervals {
    /// `$__interval`: the step between points.
    pub step: u64,
    /// `$__rate_interval`: `max($__interval + scrape interval, 4 × scrape interval)`, as
    /// Grafana computes it, so that every window holds at least four scrapes.
    pub rate: u64,
    /// `$__range`: the dashboard's time range.
    pub range: u64,
}

impl Intervals {
    /// Grafana's values for a range of `range` seconds drawn every `step` seconds, scraped
    /// every `scrape` seconds.
    pub fn grafana(scrape: u64, step: u64, range: u64) -> Self {
        Self {
            step,
            rate: (step + scrape).max(4 * scrape),
            range: range.max(1),
        }
    }
}

/// `expr` with Grafana's variables replaced; an error names any `$variable` left, which no
/// Prometheus could evaluate.
pub fn substitute(expr: &str, intervals: Intervals) -> Result<String, String> {
    let seconds = |s: u64| format!("{s}s");
    let replacements = [
        ("${__rate_interval}", seconds(intervals.rate)),
        ("$__rate_interval", seconds(intervals.rate)),
        ("${__interval}", seconds(intervals.step)),
        ("$__interval_ms", format!("{}", intervals.step * 1000)),
        ("$__interval", seconds(intervals.step)),
        ("${__range}", seconds(intervals.range)),
        ("$__range_ms", format!("{}", intervals.range * 1000)),
        ("$__range_s", format!("{}", intervals.range)),
        ("$__range", seconds(intervals.range)),
    ];
    let mut out = expr.to_string();
    for (variable, value) in replacements {
        out = out.replace(variable, &value);
    }
    match out.find('$') {
        Some(at) => {
            let name: String = out[at..]
                .chars()
                .take_while(|c| matches!(c, '$' | '_' | '{' | '}') || c.is_alphanumeric())
                .collect();
            Err(format!(
                "a Grafana variable the check does not know: {name}"
            ))
        }
        None => Ok(out),
    }
}

/// Whether a query's answer gives its panel something to show: a series that carries every
/// label the legend names (non-empty), with at least one finite value, and no value that is
/// the Unix time `now` itself (what `time() - x` draws when a timestamp gauge `x` was never
/// set and reads 0: "56 years since the last probe"). `Err` says what is wrong, with what
/// was seen.
pub fn judge(result: &[Value], legend_labels: &[String], now: f64) -> Result<(), String> {
    if result.is_empty() {
        return Err("no series at all".to_string());
    }
    let labelled: Vec<&Value> = result
        .iter()
        .filter(|series| {
            legend_labels.iter().all(|label| {
                series["metric"][label.as_str()]
                    .as_str()
                    .is_some_and(|v| !v.is_empty())
            })
        })
        .collect();
    if labelled.is_empty() {
        let seen: Vec<BTreeMap<String, String>> = result
            .iter()
            .take(3)
            .map(|s| {
                s["metric"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .collect();
        return Err(format!(
            "no series with the legend's label(s) {legend_labels:?}; seen {seen:?}"
        ));
    }
    let finite = |sample: &Value| {
        sample[1]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(f64::is_finite)
    };
    let samples = |series: &&Value| -> Vec<f64> {
        series["value"]
            .as_array()
            .map(|_| vec![series["value"].clone()])
            .or_else(|| series["values"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter(|sample| finite(sample))
            .filter_map(|sample| sample[1].as_str().and_then(|v| v.parse::<f64>().ok()))
            .collect()
    };
    let numbers: Vec<f64> = labelled.iter().flat_map(samples).collect();
    if numbers.is_empty() {
        return Err(format!(
            "{} series, none with a finite value (every sample NaN or infinite)",
            labelled.len()
        ));
    }
    const DAY: f64 = 86_400.0;
    if let Some(v) = numbers.iter().find(|v| (**v - now).abs() < DAY) {
        return Err(format!(
            "a value of {v}, the Unix time itself: time() minus a timestamp that was never set (0)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_target_of_the_shipped_dashboards_is_found() {
        let dir = crate::workspace_root().join("charts/vramfit/dashboards");
        let dashboards = read_dashboards(&dir).unwrap();
        assert!(!dashboards.is_empty());
        for (name, json) in &dashboards {
            let queries = panel_queries(name, json);
            let exprs = serde_json::to_string(json)
                .unwrap()
                .matches("\"expr\"")
                .count();
            assert_eq!(
                queries.len(),
                exprs,
                "{name}: every expr is a panel's query"
            );
            for q in &queries {
                let intervals = Intervals::grafana(1, 1, 600);
                assert!(
                    substitute(&q.expr, intervals).is_ok(),
                    "{}: {}",
                    q.describe(),
                    q.expr
                );
            }
        }
    }

    #[test]
    fn nested_row_panels_count_and_legends_name_labels() {
        let dashboard = json!({"panels": [
            {"title": "Row", "type": "row", "panels": [
                {"title": "Inner", "targets": [
                    {"refId": "A", "expr": "up", "legendFormat": "{{ instance }} / {{job}}"}
                ]}
            ]},
            {"title": "Bars", "targets": [{"refId": "B", "expr": "x", "instant": true}]}
        ]});
        let queries = panel_queries("d.json", &dashboard);
        assert_eq!(queries.len(), 2);
        assert_eq!(queries[0].panel, "Inner");
        assert_eq!(queries[0].legend_labels, ["instance", "job"]);
        assert!(queries[1].instant && queries[1].legend_labels.is_empty());
    }

    #[test]
    fn grafana_variables_become_durations() {
        let intervals = Intervals::grafana(1, 1, 300);
        assert_eq!(intervals.rate, 4, "four scrapes at least");
        assert_eq!(Intervals::grafana(15, 30, 300).rate, 60);
        assert_eq!(
            substitute(
                "rate(a[$__rate_interval]) + increase(b[$__range]) + c[${__interval}]",
                intervals
            ),
            Ok("rate(a[4s]) + increase(b[300s]) + c[1s]".to_string())
        );
        assert!(substitute("sum(x{namespace=\"$namespace\"})", intervals).is_err());
    }

    #[test]
    fn a_panel_needs_its_legend_labels_and_a_number() {
        let labels = vec!["node_class".to_string()];
        let series = |metric: Value, values: Value| json!({"metric": metric, "values": values});
        let now = 1_800_000_000.0;
        assert!(judge(&[], &labels, now).is_err());
        let unlabelled = [series(json!({}), json!([[1, "3"]]))];
        assert!(
            judge(&unlabelled, &labels, now)
                .unwrap_err()
                .contains("node_class")
        );
        let nan = [series(
            json!({"node_class": "a10g-x1"}),
            json!([[1, "NaN"]]),
        )];
        assert!(judge(&nan, &labels, now).unwrap_err().contains("finite"));
        let good = [
            series(
                json!({"node_class": "a10g-x1"}),
                json!([[1, "NaN"], [2, "1440"]]),
            ),
            series(json!({}), json!([[1, "NaN"]])),
        ];
        assert_eq!(judge(&good, &labels, now), Ok(()));
        let instant = [json!({"metric": {"node_class": "x"}, "value": [1, "0"]})];
        assert_eq!(
            judge(&instant, &labels, now),
            Ok(()),
            "zero is something to show"
        );
        // time() minus a timestamp gauge still at 0: the Unix time itself.
        let never_probed = [json!({"metric": {"node_class": "x"}, "value": [1, "1799999990.5"]})];
        assert!(
            judge(&never_probed, &labels, now)
                .unwrap_err()
                .contains("never set")
        );
    }
}
