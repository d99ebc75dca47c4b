//! The autoscaler's metrics, registered with the operator's (`/metrics`):
//!
//! * `vramfit_autoscaler_metric_reads_total{result}`: replica metrics reads by the load
//!   reader, `read` or `failed` (unreachable, refused, or without the runtime's gauges).
//! * `vramfit_autoscaler_decisions_total{outcome}`: autoscaler passes by outcome (the
//!   `Autoscaling` condition's reason: `ScaledUp`, `WithinTarget`, `ExternalAutoscaler`, …).
//! * `vramfit_autoscaler_read_pass_seconds` (histogram): one pass of the load reader over
//!   every autoscaled job's Ready replicas.
//! * `vramfit_autoscaler_jobs` (gauge): autoscaled jobs whose replicas are read.
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

/// The autoscaler's metrics.
#[derive(Clone, Debug)]
pub struct AutoscalerMetrics {
    reads: Family<ResultLabel, Counter>,
    decisions: Family<OutcomeLabel, Counter>,
    pass: Histogram,
    jobs: Gauge,
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
        metrics
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
