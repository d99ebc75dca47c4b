//! docs/monitoring.md lists every metric the operator, the agent and the cache agent export, by the name a
//! query uses (`_total` for a counter), and names no metric that neither exports.
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use vramfit_agent::gpu::{DriverVersions, GpuDevice, MigMode, Probe};
use vramfit_api::labels::ComputeCapability;
use vramfit_install_tests::{repo_root, vramfit_words};

/// The series names of an OpenMetrics text's families: `# TYPE x counter` is `x_total`.
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            let (name, kind) = (words.next()?, words.next()?);
            Some(if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            })
        })
        .collect()
}

/// Whole `vramfit_…` names in a text (a bare prefix such as `vramfit_` is no name).
fn named(text: &str) -> BTreeSet<String> {
    vramfit_words(text)
        .into_iter()
        .filter(|word| !word.ends_with('_'))
        .map(str::to_string)
        .collect()
}

/// The operator's metrics with a series in every family (an empty family is not encoded).
fn operator_metrics() -> String {
    let metrics = vramfit_operator::metrics::Metrics::new();
    metrics.observe_job_totals([]);
    metrics.observe_reconcile(Duration::from_millis(1));
    metrics.count_error("api");
    metrics.count_fallback("tiles");
    metrics.observe_inventory([("a10g-x1".into(), "NVIDIA-A10G".into(), 1)]);
    metrics.count_bad_output("a10g-x1", "bfloat16");
    metrics.count_result("a10g-x1", 1, 1.0, 60);
    metrics.count_training("a10g-x1", 1, 1.0, 60);
    metrics.count_tuning_pod("a10g-x1", "qlora");
    metrics
        .serving()
        .observe_ready(BTreeMap::from([("a10g-x1".to_string(), 1)]));
    metrics.autoscaler().count_decision("WithinTarget");
    metrics.autoscaler().observe_pass(1, 0.01);
    metrics.autoscaler().observe_job(
        "ml/chat",
        vramfit_operator::metrics::autoscaler::JobFigures {
            replicas: 2,
            desired: 3,
            utilization_percent: Some(90),
        },
    );
    metrics.encode().unwrap()
}

/// The agent's, the same way.
fn agent_metrics() -> String {
    let metrics = vramfit_agent::metrics::Metrics::new();
    let gpu = GpuDevice {
        name: "NVIDIA A10G".into(),
        memory_mib: 23028,
        compute_capability: ComputeCapability { major: 8, minor: 6 },
        mig: MigMode::Unsupported,
        mig_devices: Vec::new(),
    };
    metrics.observe_probe(&Probe::of_devices(DriverVersions::default(), vec![gpu]));
    metrics.count_probe_error("nvml");
    metrics.count_label_write();
    metrics.count_label_write_error();
    metrics.count_label_repair();
    metrics.encode().unwrap()
}

/// The cache agent's, the same way.
fn cache_agent_metrics() -> String {
    use vramfit_api::model_cache::ModelCacheStatus;
    use vramfit_cache_agent::metrics::{FetchResult, Metrics};
    let metrics = Metrics::new();
    metrics.observe_status(&ModelCacheStatus::default());
    metrics.count_fetch(FetchResult::Hit);
    metrics.observe_fetch(1.0, 1, 1);
    metrics.count_status_write_error();
    metrics.encode().unwrap()
}

/// `registry.register(` calls under `dir`: one per exported family.
fn registrations(dir: &Path) -> usize {
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            count += registrations(&path);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            count += text.matches("registry.register(").count();
        }
    }
    count
}

#[test]
fn the_monitoring_doc_lists_exactly_the_exported_metrics() {
    let (operator, agent) = (exported(&operator_metrics()), exported(&agent_metrics()));
    let root = repo_root();
    assert_eq!(
        operator.len(),
        registrations(&root.join("operator/src")),
        "every operator metric needs a series above: {operator:?}"
    );
    assert_eq!(
        agent.len(),
        registrations(&root.join("agent/src")),
        "every agent metric needs a series above: {agent:?}"
    );
    let cache_agent = exported(&cache_agent_metrics());
    assert_eq!(
        cache_agent.len(),
        registrations(&root.join("cache-agent/src")),
        "every cache agent metric needs a series above: {cache_agent:?}"
    );
    let exported: BTreeSet<String> = operator
        .into_iter()
        .chain(agent)
        .chain(cache_agent)
        .collect();
    let doc = std::fs::read_to_string(repo_root().join("docs/monitoring.md")).unwrap();
    let named = named(&doc);
    let undocumented: Vec<_> = exported.difference(&named).collect();
    assert!(
        undocumented.is_empty(),
        "docs/monitoring.md does not list {undocumented:?}"
    );
    let unknown: Vec<_> = named
        .iter()
        .filter(|n| {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| n.strip_suffix(s))
                .unwrap_or(n);
            !exported.contains(family)
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "docs/monitoring.md names metrics nothing exports: {unknown:?}"
    );
}

#[test]
fn counters_are_named_as_queries_see_them() {
    let text = "# HELP a_x Xs.\n# TYPE a_x counter\na_x_total 1\n# TYPE a_g gauge\na_g 2\n# EOF\n";
    assert_eq!(
        exported(text),
        BTreeSet::from(["a_x_total".to_string(), "a_g".to_string()])
    );
    assert_eq!(
        named("`vramfit_` and `vramfit_jobs{phase}`, vramfit_agent_gpus."),
        BTreeSet::from(["vramfit_jobs".to_string(), "vramfit_agent_gpus".to_string()])
    );
}
