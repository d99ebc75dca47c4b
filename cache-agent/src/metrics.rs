//! Prometheus metrics, under the `vramfit_model_cache_` prefix, served on `/metrics`.
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use vramfit_api::model_cache::{CachedModelPhase, ModelCacheStatus};
use vramfit_runtime::admin_server::MetricsSource;

use crate::status::phase_counts;

/// Upper bounds of the fetch duration histogram, in seconds (up to an hour).
pub const FETCH_SECONDS_BUCKETS: [f64; 11] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
];

/// Labels of the per-phase gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// `Pending`, `Fetching`, `Ready` or `Failed`.
    pub phase: String,
}

/// Labels of the fetch counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `hit`, `downloaded` or `failed`.
    pub result: String,
}

/// How a wanted model was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchResult {
    /// Already complete on disk when the agent first saw it wanted.
    Hit,
    /// Fetched (files downloaded or checked) into the cache.
    Downloaded,
    /// The fetch failed.
    Failed,
}

impl FetchResult {
    fn as_str(self) -> &'static str {
        match self {
            FetchResult::Hit => "hit",
            FetchResult::Downloaded => "downloaded",
            FetchResult::Failed => "failed",
        }
    }
}

/// The cache agent's metrics.
pub struct Metrics {
    registry: Registry,
    used_bytes: Gauge,
    budget_bytes: Gauge,
    models: Family<PhaseLabels, Gauge>,
    fetches: Family<ResultLabels, Counter>,
    downloaded_bytes: Counter,
    fetch_seconds: Histogram,
    evictions: Counter,
    status_write_errors: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("vramfit_model_cache");
        let metrics = Metrics {
            used_bytes: Gauge::default(),
            budget_bytes: Gauge::default(),
            models: Family::default(),
            fetches: Family::default(),
            downloaded_bytes: Counter::default(),
            fetch_seconds: Histogram::new(FETCH_SECONDS_BUCKETS),
            evictions: Counter::default(),
            status_write_errors: Counter::default(),
            registry: Registry::default(),
        };
        registry.register(
            "used_bytes",
            "Bytes of the models in the node's cache",
            metrics.used_bytes.clone(),
        );
        registry.register(
            "budget_bytes",
            "Bytes the node's cache may hold",
            metrics.budget_bytes.clone(),
        );
        registry.register(
            "models",
            "Models the ModelCache status lists, by phase",
            metrics.models.clone(),
        );
        registry.register(
            "fetches",
            "Wanted models served: hit (complete on disk when first seen), downloaded, or failed",
            metrics.fetches.clone(),
        );
        registry.register(
            "downloaded_bytes",
            "Bytes of the files downloaded from the Hub",
            metrics.downloaded_bytes.clone(),
        );
        registry.register(
            "fetch_seconds",
            "Seconds each fetch took (listing, checking, evicting and downloading)",
            metrics.fetch_seconds.clone(),
        );
        registry.register(
            "evictions",
            "Models evicted to fit the budget",
            metrics.evictions.clone(),
        );
        registry.register(
            "status_write_errors",
            "Failed writes of the ModelCache status",
            metrics.status_write_errors.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    /// Sets the gauges from a status.
    pub fn observe_status(&self, status: &ModelCacheStatus) {
        self.used_bytes.set(saturating_i64(status.used_bytes));
        self.budget_bytes.set(saturating_i64(status.budget_bytes));
        for (phase, count) in phase_counts(status) {
            self.models
                .get_or_create(&PhaseLabels {
                    phase: phase_name(phase).to_string(),
                })
                .set(saturating_i64(count as u64));
        }
    }

    /// Counts a wanted model served.
    pub fn count_fetch(&self, result: FetchResult) {
        self.fetches
            .get_or_create(&ResultLabels {
                result: result.as_str().to_string(),
            })
            .inc();
    }

    /// Records one fetch that ran: its duration, the bytes it downloaded, the models it
    /// evicted.
    pub fn observe_fetch(&self, seconds: f64, downloaded_bytes: u64, evictions: usize) {
        self.fetch_seconds.observe(seconds);
        self.downloaded_bytes.inc_by(downloaded_bytes);
        self.evictions.inc_by(evictions as u64);
    }

    /// Counts a failed status write.
    pub fn count_status_write_error(&self) {
        self.status_write_errors.inc();
    }

    /// The metrics in the OpenMetrics text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        self.registry.encode_metrics()
    }
}

impl MetricsSource for Metrics {
    fn encode_metrics(&self) -> Result<String, std::fmt::Error> {
        self.encode()
    }
}

fn phase_name(phase: CachedModelPhase) -> &'static str {
    match phase {
        CachedModelPhase::Pending => "Pending",
        CachedModelPhase::Fetching => "Fetching",
        CachedModelPhase::Ready => "Ready",
        CachedModelPhase::Failed => "Failed",
    }
}

fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_api::model_cache::CachedModel;

    #[test]
    fn metrics_follow_the_status_and_the_fetches() {
        let metrics = Metrics::new();
        metrics.observe_status(&ModelCacheStatus {
            budget_bytes: 100,
            used_bytes: 40,
            models: vec![CachedModel {
                phase: CachedModelPhase::Ready,
                ..CachedModel::default()
            }],
            ..ModelCacheStatus::default()
        });
        metrics.count_fetch(FetchResult::Hit);
        metrics.count_fetch(FetchResult::Downloaded);
        metrics.observe_fetch(12.0, 4096, 2);
        let text = metrics.encode().unwrap();
        for line in [
            "vramfit_model_cache_used_bytes 40\n",
            "vramfit_model_cache_budget_bytes 100\n",
            "vramfit_model_cache_models{phase=\"Ready\"} 1\n",
            "vramfit_model_cache_models{phase=\"Failed\"} 0\n",
            "vramfit_model_cache_fetches_total{result=\"hit\"} 1\n",
            "vramfit_model_cache_fetches_total{result=\"downloaded\"} 1\n",
            "vramfit_model_cache_downloaded_bytes_total 4096\n",
            "vramfit_model_cache_evictions_total 2\n",
            "vramfit_model_cache_fetch_seconds_bucket{le=\"15.0\"} 1\n",
            "vramfit_model_cache_fetch_seconds_bucket{le=\"3600.0\"} 1\n",
            "vramfit_model_cache_fetch_seconds_count 1\n",
        ] {
            assert!(text.contains(line), "{line:?} not in {text}");
        }
    }
}
