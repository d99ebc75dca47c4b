//! The Grafana dashboard: it queries only metrics the binaries export (operator, node agent,
//! cache agent), covers the ones that matter, and deploy/ ships exactly charts/vramfit/dashboards/vramfit.json.

use std::collections::BTreeSet;
use std::fs;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::Value;
use vramfit_install_tests::{deploy_objects, repo_root, vramfit_words};

/// The metric families the operator and the agent export (their contract).
const OPERATOR_METRICS: [&str; 24] = [
    "vramfit_jobs",
    "vramfit_unschedulable_jobs",
    "vramfit_reconcile_duration_seconds",
    "vramfit_reconcile_errors_total",
    "vramfit_fallbacks_total",
    "vramfit_gpu_inventory",
    "vramfit_items_total",
    "vramfit_work_seconds_total",
    "vramfit_work_cost_cents_total",
    "vramfit_training_tokens_total",
    "vramfit_training_seconds_total",
    "vramfit_training_cost_cents_total",
    "vramfit_tuning_pods_total",
    "vramfit_serving_ready_replicas",
    "vramfit_serving_replica_restarts_total",
    "vramfit_replica_weights_total",
    "vramfit_replicas_waiting_for_model",
    "vramfit_autoscaler_metric_reads_total",
    "vramfit_autoscaler_decisions_total",
    "vramfit_autoscaler_read_pass_seconds",
    "vramfit_autoscaler_jobs",
    "vramfit_autoscaler_replicas",
    "vramfit_autoscaler_desired_replicas",
    "vramfit_autoscaler_utilization_percent",
];
const AGENT_METRICS: [&str; 5] = [
    "vramfit_agent_gpus",
    "vramfit_agent_gpu_memory_mib",
    "vramfit_agent_last_probe_timestamp_seconds",
    "vramfit_agent_probe_errors_total",
    "vramfit_agent_label_writes_total",
];
/// The cache agent's (`cache-agent/src/metrics.rs`) that the model cache row shows.
const CACHE_AGENT_METRICS: [&str; 4] = [
    "vramfit_model_cache_used_bytes",
    "vramfit_model_cache_fetches_total",
    "vramfit_model_cache_budget_bytes",
    "vramfit_model_cache_fetch_seconds",
];

/// Every family with a panel: the histograms by their family name.
fn known_metrics() -> impl Iterator<Item = &'static str> {
    OPERATOR_METRICS
        .iter()
        .chain(AGENT_METRICS.iter())
        .chain(CACHE_AGENT_METRICS.iter())
        .copied()
}

fn dashboard_text() -> String {
    let path = repo_root().join("charts/vramfit/dashboards/vramfit.json");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn expressions(dashboard: &Value) -> Vec<String> {
    fn walk(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(expr)) = map.get("expr") {
                    out.push(expr.clone());
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(dashboard, &mut out);
    out
}

/// The `vramfit_…` metric names in a PromQL expression, histogram suffixes removed.
fn metric_names(expr: &str) -> BTreeSet<String> {
    vramfit_words(expr)
        .into_iter()
        .map(|name| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .filter(|family| known_metrics().any(|known| known == *family))
                .unwrap_or(name)
                .to_string()
        })
        .collect()
}

#[test]
fn dashboard_queries_only_exported_metrics_and_covers_them() {
    let dashboard: Value = serde_json::from_str(&dashboard_text()).expect("dashboard is JSON");
    assert!(dashboard["title"].is_string() && dashboard["uid"].is_string());
    let used: BTreeSet<String> = expressions(&dashboard)
        .iter()
        .flat_map(|e| metric_names(e))
        .collect();
    let known: BTreeSet<String> = known_metrics().map(str::to_string).collect();
    let unknown: Vec<&String> = used.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries unknown metrics: {unknown:?}"
    );
    let unused: Vec<&String> = known.difference(&used).collect();
    assert!(
        unused.is_empty(),
        "the dashboard shows no panel for: {unused:?}"
    );
    let all = expressions(&dashboard).join("\n");
    for quantile in ["histogram_quantile(0.5,", "histogram_quantile(0.99,"] {
        assert!(all.contains(quantile), "reconcile latency needs {quantile}");
    }
}

#[test]
fn deploy_ships_the_dashboard_to_the_grafana_sidecar() {
    let object = deploy_objects()
        .into_iter()
        .find(|o| o.kind() == "ConfigMap" && o.name() == "vramfit-dashboard")
        .expect("deploy/ has the dashboard ConfigMap");
    let config_map: ConfigMap = object.typed();
    let labels = config_map.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("grafana_dashboard").map(String::as_str),
        Some("1")
    );
    let data = config_map.data.unwrap_or_default();
    assert_eq!(
        data.get("vramfit.json").map(|s| s.trim_end()),
        Some(dashboard_text().trim_end()),
        "the ConfigMap must hold charts/vramfit/dashboards/vramfit.json: run scripts/helm-check.sh --update"
    );
}
