//! The autoscaler's metrics, registered with the operator's (`/metrics`):
//!
//! * `vramfit_autoscaler_metric_reads_total{result}`: replica metrics reads by the load
//!   reader, `read` or `failed` (unreachable, refused, or without the runtime's gauges).
//! * `vramfit_autoscaler_decisions_total{outcome}`: autoscaler passes by outcome (the
//!   `Autoscaling` condition's reason: `ScaledUp`, `WithinTarget`, `ExternalAutoscaler`, …).
//! * `vramfit_autoscaler_read_pass_seconds` (histogram): one pass of the load reader over
//!   every autoscaled job's Ready replicas.
//! * `vramfit_autoscaler_jobs` (gauge): autoscaled jobs whose replicas are read.
//! * Per autoscaled job (`job_namespace`, `inference_job`; not `namespace`/`job`, which
//!   Prometheus's own target labels would rename), as its last pass left it:
//!   `vramfit_autoscaler_replicas` (`spec.serve.replicas`), `vramfit_autoscaler_desired_replicas`
//!   and `vramfit_autoscaler_utilization_percent` (load in units of the planned concurrency;
//!   absent while no replica was read). Removed when the job stops autoscaling or is deleted.
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of `vramfit_autoscaler_metric_reads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `read` or `failed`.
    pub result: String,
}

/// Labels of `vramfit_autoscaler_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// The condition's reason.
    pub outcome: String,
}

/// Labels of the per-job gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AutoscaledJobLabels {
    /// The job's namespace.
    pub job_namespace: String,
    /// The job's name.
    pub inference_job: String,
}

impl AutoscaledJobLabels {
    /// The labels of job `key` (`namespace/name`).
    fn of_key(key: &str) -> Self {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        Self {
            job_namespace: namespace.to_string(),
            inference_job: name.to_string(),
        }
    }

    fn key(&self) -> String {
        format!("{}/{}", self.job_namespace, self.inference_job)
    }
}

/// One autoscaled job's figures after a pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JobFigures {
    /// `spec.serve.replicas` when the pass ran.
    pub replicas: u32,
    /// What the pass wants.
    pub desired: u32,
    /// The load, in percent of the read replicas' planned concurrency.
    pub utilization_percent: Option<u32>,
}

/// The autoscaler's metrics.
#[derive(Clone, Debug)]
pub struct AutoscalerMetrics {
    reads: Family<ResultLabel, Counter>,
    decisions: Family<OutcomeLabel, Counter>,
    pass: Histogram,
    jobs: Gauge,
    replicas: Family<AutoscaledJobLabels, Gauge>,
    desired: Family<AutoscaledJobLabels, Gauge>,
    utilization: Family<AutoscaledJobLabels, Gauge>,
    /// The jobs with per-job series, so that the deleted ones' are removed.
    shown: Arc<Mutex<HashSet<AutoscaledJobLabels>>>,
}

impl AutoscalerMetrics {
    /// Registers them in `registry` (prefix `vramfit_`); both read results exist from 0.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            reads: Family::default(),
            decisions: Family::default(),
            // 1 ms to ~16 s.
            pass: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            jobs: Gauge::default(),
            replicas: Family::default(),
            desired: Family::default(),
            utilization: Family::default(),
            shown: Arc::default(),
        };
        for result in ["read", "failed"] {
            let _ = metrics.reads.get_or_create(&ResultLabel {
                result: result.to_string(),
            });
        }
        registry.register(
            "autoscaler_metric_reads",
            "Replica metrics reads by the autoscaler's load reader, by result",
            metrics.reads.clone(),
        );
        registry.register(
            "autoscaler_decisions",
            "Autoscaler passes, by outcome (the Autoscaling condition's reason)",
            metrics.decisions.clone(),
        );
        registry.register(
            "autoscaler_read_pass_seconds",
            "One pass of the load reader over every autoscaled job's Ready replicas",
            metrics.pass.clone(),
        );
        registry.register(
            "autoscaler_jobs",
            "Autoscaled jobs whose replicas are read",
            metrics.jobs.clone(),
        );
        registry.register(
            "autoscaler_replicas",
            "An autoscaled job's spec.serve.replicas at its last autoscaler pass",
            metrics.replicas.clone(),
        );
        registry.register(
            "autoscaler_desired_replicas",
            "The replicas an autoscaled job's last autoscaler pass wants",
            metrics.desired.clone(),
        );
        registry.register(
            "autoscaler_utilization_percent",
            "An autoscaled job's load in percent of its read replicas' planned concurrency",
            metrics.utilization.clone(),
        );
        metrics
    }

    /// Shows job `key`'s (`namespace/name`) figures after a pass.
    pub fn observe_job(&self, key: &str, figures: JobFigures) {
        let labels = AutoscaledJobLabels::of_key(key);
        self.replicas
            .get_or_create(&labels)
            .set(i64::from(figures.replicas));
        self.desired
            .get_or_create(&labels)
            .set(i64::from(figures.desired));
        match figures.utilization_percent {
            Some(percent) => {
                self.utilization
                    .get_or_create(&labels)
                    .set(i64::from(percent));
            }
            None => {
                self.utilization.remove(&labels);
            }
        }
        lock(&self.shown).insert(labels);
    }

    /// Removes job `key`'s series: it stopped autoscaling or was deleted.
    pub fn forget_job(&self, key: &str) {
        let labels = AutoscaledJobLabels::of_key(key);
        if lock(&self.shown).remove(&labels) {
            self.remove_series(&labels);
        }
    }

    /// Keeps the series of the jobs `exists_key` says still exist (after a relist).
    pub fn keep_jobs(&self, exists_key: impl Fn(&str) -> bool) {
        let mut shown = lock(&self.shown);
        let gone: Vec<AutoscaledJobLabels> = shown
            .iter()
            .filter(|labels| !exists_key(&labels.key()))
            .cloned()
            .collect();
        for labels in gone {
            shown.remove(&labels);
            self.remove_series(&labels);
        }
    }

    fn remove_series(&self, labels: &AutoscaledJobLabels) {
        self.replicas.remove(labels);
        self.desired.remove(labels);
        self.utilization.remove(labels);
    }

    /// Counts `n` reads with `result` (`read` or `failed`).
    pub fn count_reads(&self, result: &str, n: u64) {
        self.reads
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc_by(n);
    }

    /// Counts a pass with `outcome`.
    pub fn count_decision(&self, outcome: &str) {
        self.decisions
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Records one pass of the load reader over `jobs` jobs, taking `seconds`.
    pub fn observe_pass(&self, jobs: usize, seconds: f64) {
        self.pass.observe(seconds);
        self.jobs.set(i64::try_from(jobs).unwrap_or(i64::MAX));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn exposition(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).expect("encodes");
        text
    }

    #[test]
    fn a_jobs_series_follow_its_passes_and_go_with_it() {
        let mut registry = Registry::with_prefix("vramfit");
        let metrics = AutoscalerMetrics::register(&mut registry);
        let figures = JobFigures {
            replicas: 2,
            desired: 3,
            utilization_percent: Some(95),
        };
        metrics.observe_job("ml/chat", figures);
        metrics.observe_job("ml/other", figures);
        let text = exposition(&registry);
        assert!(text.contains(
            "vramfit_autoscaler_desired_replicas{job_namespace=\"ml\",inference_job=\"chat\"} 3"
        ));
        assert!(text.contains(
            "vramfit_autoscaler_utilization_percent{job_namespace=\"ml\",inference_job=\"chat\"} 95"
        ));

        // No replica read: the utilisation is absent, not 0.
        metrics.observe_job(
            "ml/chat",
            JobFigures {
                utilization_percent: None,
                ..figures
            },
        );
        let text = exposition(&registry);
        assert!(!text.contains("utilization_percent{job_namespace=\"ml\",inference_job=\"chat\"}"));
        assert!(text.contains("replicas{job_namespace=\"ml\",inference_job=\"chat\"} 2"));

        metrics.forget_job("ml/chat");
        metrics.keep_jobs(|key| key != "ml/other");
        let text = exposition(&registry);
        assert!(!text.contains("inference_job=\"chat\""), "{text}");
        assert!(!text.contains("inference_job=\"other\""), "{text}");
    }
}
