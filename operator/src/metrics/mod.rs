//! Prometheus metrics (`/metrics`, prometheus-client text format), under `vramfit_`:
//!
//! * `vramfit_jobs{phase,node_class}` (gauge): jobs by phase and class (zeros for every phase).
//! * `vramfit_unschedulable_jobs` (gauge): jobs no class can run now.
//! * `vramfit_reconcile_duration_seconds` (histogram).
//! * `vramfit_reconcile_errors_total{kind}`: failed reconciles by [`crate::Error::metric_label`].
//! * `vramfit_fallbacks_total{reason}`: steps down after out-of-memory failures, by kind
//!   (`tiles`, `quantization`, `gpus`, `flash_attention`, `kv_cache`, `offload`).
//! * `vramfit_gpu_inventory{node_class,product}` (gauge): allocatable GPUs per class.
//! * `vramfit_bad_outputs_total{node_class,dtype}`: attempts whose output check found garbage.
//! * `vramfit_items_total{node_class}` and `vramfit_work_seconds_total{node_class}`: what
//!   finished jobs reported (items per hour: the ratio of their rates, times 3600), and
//!   `vramfit_work_cost_cents_total{node_class}`: their seconds at the plan's hourly price
//!   (cost per item: its rate over the items' rate).
//! * `vramfit_training_tokens_total{node_class}`, `vramfit_training_seconds_total{node_class}`
//!   and `vramfit_training_cost_cents_total{node_class}`: the same for finished fine-tuning
//!   runs, whose items are training tokens (tokens per second; cost per million tokens).
//! * `vramfit_tuning_pods_total{node_class,method}`: pods created for fine-tuning attempts.
//!
//! The gauges are set when scraped from counts kept up to date as the watches go (jobs per
//! phase and class: [`crate::job_gauges`]; GPUs per class: counted when the classes are
//! built), so a scrape does work per class, not per job or node.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use vramfit_api::{Dtype, Phase};
use vramfit_runtime::admin_server::MetricsSource;

pub mod autoscaler;
pub mod serving;
pub mod serving_gauges;

/// Labels of `vramfit_jobs`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    /// Phase.
    pub phase: String,
    /// Node class (empty before one is chosen).
    pub node_class: String,
}

/// Labels of `vramfit_reconcile_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// Error kind.
    pub kind: String,
}

/// Labels of `vramfit_fallbacks_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Kind of step.
    pub reason: String,
}

/// Labels of `vramfit_gpu_inventory`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InventoryLabels {
    /// Node class.
    pub node_class: String,
    /// GPU product.
    pub product: String,
}

/// Labels of `vramfit_bad_outputs_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutputLabels {
    /// Node class.
    pub node_class: String,
    /// The dtype the model answered garbage in.
    pub dtype: String,
}

/// Labels of `vramfit_tuning_pods_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TuningLabels {
    /// Node class.
    pub node_class: String,
    /// `full`, `lora` or `qlora`.
    pub method: String,
}

/// Labels of the work counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabels {
    /// Node class.
    pub node_class: String,
}

/// The operator's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    jobs: Family<JobLabels, Gauge>,
    unschedulable_jobs: Gauge,
    reconcile_duration: Histogram,
    reconcile_errors: Family<KindLabels, Counter>,
    fallbacks: Family<ReasonLabels, Counter>,
    gpu_inventory: Family<InventoryLabels, Gauge>,
    bad_outputs: Family<OutputLabels, Counter>,
    work: WorkCounters,
    training: WorkCounters,
    tuning_pods: Family<TuningLabels, Counter>,
    serving: crate::metrics::serving::ServingMetrics,
    autoscaler: crate::metrics::autoscaler::AutoscalerMetrics,
}

/// Items (or tokens), seconds and cost of finished work, by class.
#[derive(Debug, Default)]
struct WorkCounters {
    items: Family<ClassLabels, Counter>,
    seconds: Family<ClassLabels, Counter<f64, AtomicU64>>,
    cost: Family<ClassLabels, Counter<f64, AtomicU64>>,
}

impl WorkCounters {
    /// Creates the series of `node_class` at zero (the cost only when `priced`).
    fn expect(&self, node_class: &str, priced: bool) {
        let labels = ClassLabels {
            node_class: node_class.to_string(),
        };
        let _ = self.items.get_or_create(&labels);
        let _ = self.seconds.get_or_create(&labels);
        if priced {
            let _ = self.cost.get_or_create(&labels);
        }
    }

    /// Adds `items` done in `seconds` and their cost at `hourly_price_cents` (0: unknown).
    fn count(&self, node_class: &str, items: u64, seconds: f64, hourly_price_cents: u32) {
        let labels = ClassLabels {
            node_class: node_class.to_string(),
        };
        // Saturating: a counter that wrapped would read as a reset, a huge rate after it.
        let _ = self.items.get_or_create(&labels).inner().fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            |total| Some(total.saturating_add(items)),
        );
        if !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        self.seconds.get_or_create(&labels).inc_by(seconds);
        let cost = f64::from(hourly_price_cents) * seconds / 3600.0;
        if hourly_price_cents > 0 && cost.is_finite() {
            self.cost.get_or_create(&labels).inc_by(cost);
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("vramfit");
        let jobs = Family::<JobLabels, Gauge>::default();
        let unschedulable_jobs = Gauge::default();
        let reconcile_duration = Histogram::new(exponential_buckets(0.000_25, 2.0, 16));
        let reconcile_errors = Family::<KindLabels, Counter>::default();
        let fallbacks = Family::<ReasonLabels, Counter>::default();
        let gpu_inventory = Family::<InventoryLabels, Gauge>::default();
        let bad_outputs = Family::<OutputLabels, Counter>::default();
        let work = WorkCounters::default();
        let training = WorkCounters::default();
        let tuning_pods = Family::<TuningLabels, Counter>::default();
        registry.register(
            "jobs",
            "InferenceJobs by phase and node class",
            jobs.clone(),
        );
        registry.register(
            "unschedulable_jobs",
            "InferenceJobs that no node class can run now",
            unschedulable_jobs.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile of an InferenceJob takes",
            reconcile_duration.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciles, by error kind",
            reconcile_errors.clone(),
        );
        registry.register(
            "fallbacks",
            "Steps down after out-of-memory failures, by kind of step",
            fallbacks.clone(),
        );
        registry.register(
            "gpu_inventory",
            "Allocatable GPUs per node class",
            gpu_inventory.clone(),
        );
        registry.register(
            "bad_outputs",
            "Attempts whose output check found garbage, by class and dtype",
            bad_outputs.clone(),
        );
        registry.register(
            "items",
            "Items finished jobs reported, by class",
            work.items.clone(),
        );
        registry.register(
            "work_seconds",
            "Seconds of work finished jobs reported, by class",
            work.seconds.clone(),
        );
        registry.register(
            "work_cost_cents",
            "Cost in US cents of the work finished jobs reported, at their plans' hourly price",
            work.cost.clone(),
        );
        // Registered one by one: docs/monitoring.md's test counts one call per family.
        registry.register(
            "training_tokens",
            "Training tokens finished fine-tuning runs reported, by class",
            training.items.clone(),
        );
        registry.register(
            "training_seconds",
            "Seconds of training finished fine-tuning runs reported, by class",
            training.seconds.clone(),
        );
        registry.register(
            "training_cost_cents",
            "Cost in US cents of the training finished fine-tuning runs reported, at their plans' hourly price",
            training.cost.clone(),
        );
        registry.register(
            "tuning_pods",
            "Pods created for fine-tuning attempts, by class and method",
            tuning_pods.clone(),
        );
        let serving = crate::metrics::serving::ServingMetrics::register(&mut registry);
        let autoscaler = crate::metrics::autoscaler::AutoscalerMetrics::register(&mut registry);
        Self {
            registry,
            serving,
            autoscaler,
            jobs,
            unschedulable_jobs,
            reconcile_duration,
            reconcile_errors,
            fallbacks,
            gpu_inventory,
            bad_outputs,
            work,
            training,
            tuning_pods,
        }
    }

    /// The autoscaler's metrics.
    pub fn autoscaler(&self) -> &crate::metrics::autoscaler::AutoscalerMetrics {
        &self.autoscaler
    }

    /// The served jobs' metrics.
    pub fn serving(&self) -> &crate::metrics::serving::ServingMetrics {
        &self.serving
    }

    /// Counts an attempt whose output check found garbage. `dtype` is the workload's own word:
    /// the label takes only the planner's dtypes, anything else is `other` (one series per
    /// string a workload chose would grow without bound).
    pub fn count_bad_output(&self, node_class: &str, dtype: &str) {
        self.bad_outputs
            .get_or_create(&OutputLabels {
                node_class: node_class.to_string(),
                dtype: dtype_label(dtype).to_string(),
            })
            .inc();
    }

    /// Adds what a finished job reported, and its cost at `hourly_price_cents` (0: unknown,
    /// no cost counted).
    pub fn count_result(
        &self,
        node_class: &str,
        items: u64,
        seconds: f64,
        hourly_price_cents: u32,
    ) {
        self.work
            .count(node_class, items, seconds, hourly_price_cents);
    }

    /// Adds what a finished fine-tuning run reported: training tokens, seconds, and their cost
    /// at `hourly_price_cents` (0: unknown, no cost counted).
    pub fn count_training(
        &self,
        node_class: &str,
        tokens: u64,
        seconds: f64,
        hourly_price_cents: u32,
    ) {
        self.training
            .count(node_class, tokens, seconds, hourly_price_cents);
    }

    /// Counts a pod created for a fine-tuning attempt.
    pub fn count_tuning_pod(&self, node_class: &str, method: &str) {
        self.tuning_pods
            .get_or_create(&TuningLabels {
                node_class: node_class.to_string(),
                method: method.to_string(),
            })
            .inc();
    }

    /// Creates the work counters of `node_class` at zero once a job is placed there, before
    /// it reports: Prometheus's `increase()` counts a counter's growth from its first scrape,
    /// so a series that first appeared with a result would lose that result on the
    /// dashboard. The cost counter only for a class with a price: one without has no cost,
    /// not a cost of 0.
    /// A fine-tuning job (`training`) expects the training counters instead.
    pub fn expect_results(&self, node_class: &str, priced: bool, training: bool) {
        let counters = if training { &self.training } else { &self.work };
        counters.expect(node_class, priced);
    }

    /// Records a reconcile's duration.
    pub fn observe_reconcile(&self, took: Duration) {
        self.reconcile_duration.observe(took.as_secs_f64());
    }

    /// Counts a failed reconcile.
    pub fn count_error(&self, kind: &str) {
        self.reconcile_errors
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Counts a step down.
    pub fn count_fallback(&self, reason: &str) {
        self.fallbacks
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Sets the job gauges from the jobs per `(phase, node class)` (zeros for every phase
    /// without a class; pairs that have no jobs any more are dropped).
    pub fn observe_job_totals(
        &self,
        totals: impl IntoIterator<Item = (Phase, Option<Arc<str>>, i64)>,
    ) {
        let mut counts: BTreeMap<(Phase, String), i64> = Phase::ALL
            .iter()
            .map(|p| ((*p, String::new()), 0))
            .collect();
        let mut unschedulable = 0;
        for (phase, class, total) in totals {
            let class = class.as_deref().unwrap_or_default().to_string();
            *counts.entry((phase, class)).or_default() += total;
            if phase == Phase::Unschedulable {
                unschedulable += total;
            }
        }
        self.jobs.clear();
        for ((phase, node_class), count) in counts {
            self.jobs
                .get_or_create(&JobLabels {
                    phase: phase.as_str().to_string(),
                    node_class,
                })
                .set(count);
        }
        self.unschedulable_jobs.set(unschedulable);
    }

    /// Sets the GPU inventory from `(class, product, GPUs)`.
    pub fn observe_inventory(&self, classes: impl IntoIterator<Item = (String, String, u64)>) {
        self.gpu_inventory.clear();
        for (node_class, product, gpus) in classes {
            self.gpu_inventory
                .get_or_create(&InventoryLabels {
                    node_class,
                    product,
                })
                .set(i64::try_from(gpus).unwrap_or(i64::MAX));
        }
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        self.registry.encode_metrics()
    }
}

/// The `dtype` label of a workload's word: one of the planner's dtypes, else `other`.
pub fn dtype_label(dtype: &str) -> &'static str {
    [Dtype::Bfloat16, Dtype::Float16]
        .into_iter()
        .map(Dtype::as_str)
        .find(|known| *known == dtype)
        .unwrap_or("other")
}

impl MetricsSource for Metrics {
    fn encode_metrics(&self) -> Result<String, std::fmt::Error> {
        self.encode()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_exposed() {
        let metrics = Metrics::new();
        metrics.observe_reconcile(Duration::from_millis(3));
        metrics.count_error("status_patch");
        metrics.count_fallback("tiles");
        metrics.count_bad_output("a10g-x4", "bfloat16");
        metrics.count_result("a10g-x4", 120, 300.5, 120);
        metrics.count_training("a10g-x1", 1_638_400, 3600.0, 60);
        metrics.count_tuning_pod("a10g-x1", "qlora");
        metrics.observe_job_totals([
            (Phase::Running, Some(Arc::from("a10g-x4")), 1),
            (Phase::Unschedulable, None, 2),
        ]);
        metrics.observe_inventory([("a10g-x4".to_string(), "NVIDIA-A10G".to_string(), 8)]);
        let text = metrics.encode().unwrap();
        for line in [
            "vramfit_jobs{phase=\"Running\",node_class=\"a10g-x4\"} 1\n",
            "vramfit_jobs{phase=\"Unschedulable\",node_class=\"\"} 2\n",
            "vramfit_jobs{phase=\"Succeeded\",node_class=\"\"} 0\n",
            "vramfit_unschedulable_jobs 2\n",
            "vramfit_reconcile_duration_seconds_count 1\n",
            "vramfit_reconcile_errors_total{kind=\"status_patch\"} 1\n",
            "vramfit_fallbacks_total{reason=\"tiles\"} 1\n",
            "vramfit_bad_outputs_total{node_class=\"a10g-x4\",dtype=\"bfloat16\"} 1\n",
            "vramfit_items_total{node_class=\"a10g-x4\"} 120\n",
            "vramfit_work_seconds_total{node_class=\"a10g-x4\"} 300.5\n",
            "vramfit_work_cost_cents_total{node_class=\"a10g-x4\"} 10.016666666666668\n",
            "vramfit_gpu_inventory{node_class=\"a10g-x4\",product=\"NVIDIA-A10G\"} 8\n",
            "vramfit_training_tokens_total{node_class=\"a10g-x1\"} 1638400\n",
            "vramfit_training_seconds_total{node_class=\"a10g-x1\"} 3600.0\n",
            "vramfit_training_cost_cents_total{node_class=\"a10g-x1\"} 60.0\n",
            "vramfit_tuning_pods_total{node_class=\"a10g-x1\",method=\"qlora\"} 1\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        // The workload's own words never become label values; counters never wrap.
        metrics.count_bad_output("a10g-x4", "bfloat16; drop table");
        metrics.count_bad_output("a10g-x4", "fp8-e4m3");
        metrics.count_result("a10g-x4", u64::MAX, f64::INFINITY, 120);
        let text = metrics.encode().unwrap();
        assert!(
            text.contains("vramfit_bad_outputs_total{node_class=\"a10g-x4\",dtype=\"other\"} 2\n"),
            "{text}"
        );
        assert!(!text.contains("drop table") && !text.contains("fp8"));
        assert!(
            text.contains(&format!(
                "vramfit_items_total{{node_class=\"a10g-x4\"}} {}\n",
                u64::MAX
            )),
            "{text}"
        );
        assert!(
            text.contains("vramfit_work_seconds_total{node_class=\"a10g-x4\"} 300.5\n"),
            "an infinite figure is not added: {text}"
        );
        metrics.expect_results("t4-x1", false, false);
        metrics.expect_results("l40s-x1", true, false);
        metrics.expect_results("h100-x8", true, true);
        let text = metrics.encode().unwrap();
        for line in [
            "vramfit_items_total{node_class=\"t4-x1\"} 0\n",
            "vramfit_work_seconds_total{node_class=\"t4-x1\"} 0.0\n",
            "vramfit_work_cost_cents_total{node_class=\"l40s-x1\"} 0.0\n",
            "vramfit_training_tokens_total{node_class=\"h100-x8\"} 0\n",
            "vramfit_training_cost_cents_total{node_class=\"h100-x8\"} 0.0\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("vramfit_work_cost_cents_total{node_class=\"t4-x1\"}"));
        assert!(!text.contains("vramfit_items_total{node_class=\"h100-x8\"}"));
        metrics.observe_job_totals([]);
        assert!(
            !metrics
                .encode()
                .unwrap()
                .contains("vramfit_jobs{phase=\"Running\",node_class=\"a10g-x4\"}"),
            "stale classes are dropped"
        );
    }
}
