//! The served jobs' metrics, registered with the operator's (`/metrics`):
//!
//! * `vramfit_serving_ready_replicas{node_class}` (gauge): replicas Ready, by class, from the
//!   served jobs' status as the job watch goes ([`super::serving_gauges`]).
//! * `vramfit_serving_replica_restarts_total{reason}`: replica pods replaced after they
//!   ended, by why (`OutOfMemory`, `HostOutOfMemory`, `Failed`, `StartTimeout`,
//!   `ScheduleTimeout`, `Disrupted`, `AdmissionRefused`, `Deleted`); every reason's series
//!   exists from the start, at 0.
//! * `vramfit_replica_weights_total{source}`: replica pods created with the model cache on,
//!   by where their weights come from (`CacheHit`, `FetchedByNode`, `FetchedByPod`; each
//!   from 0).
//! * `vramfit_replicas_waiting_for_model` (gauge): replicas waiting for a node to download
//!   their model, from the jobs' status as the job watch goes (a batch job or group whose
//!   next attempt waits counts 1).
use std::collections::BTreeMap;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::pod::replica_end::EndKind;

/// Labels of `vramfit_serving_ready_replicas`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    /// Node class (the pod's `vramfit.io/node-class` label).
    pub node_class: String,
}

/// Labels of `vramfit_serving_replica_restarts_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestartLabel {
    /// Why the replaced pod ended.
    pub reason: String,
}

/// Labels of `vramfit_replica_weights_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// Where the weights came from.
    pub source: String,
}

/// The served jobs' metrics.
#[derive(Clone, Debug, Default)]
pub struct ServingMetrics {
    ready: Family<ClassLabel, Gauge>,
    restarts: Family<RestartLabel, Counter>,
    weights: Family<SourceLabel, Counter>,
    waiting_for_model: Gauge,
}

impl ServingMetrics {
    /// Registers them in `registry` (prefix `vramfit_`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "serving_ready_replicas",
            "Ready replica pods of served InferenceJobs, by node class",
            metrics.ready.clone(),
        );
        registry.register(
            "serving_replica_restarts",
            "Replica pods of served InferenceJobs replaced after they ended, by reason",
            metrics.restarts.clone(),
        );
        registry.register(
            "replica_weights",
            "Replica pods created with the model cache on, by where their weights come from",
            metrics.weights.clone(),
        );
        registry.register(
            "replicas_waiting_for_model",
            "Replicas of served InferenceJobs waiting for a node to download their model",
            metrics.waiting_for_model.clone(),
        );
        for source in ["CacheHit", "FetchedByNode", "FetchedByPod"] {
            let _ = metrics.weights.get_or_create(&SourceLabel {
                source: source.to_string(),
            });
        }
        // Every reason from 0: Prometheus's increase() counts a counter's growth from its
        // first scrape, so a series that first appeared at 1 would never show that restart.
        for kind in EndKind::ALL {
            let _ = metrics.restarts.get_or_create(&RestartLabel {
                reason: kind.as_str().to_string(),
            });
        }
        metrics
    }

    /// Counts a replaced replica pod.
    pub fn count_restart(&self, reason: &str) {
        self.restarts
            .get_or_create(&RestartLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts a replica pod created with its weights from `source`.
    pub fn count_weights(&self, source: &str) {
        self.weights
            .get_or_create(&SourceLabel {
                source: source.to_string(),
            })
            .inc();
    }

    /// Sets the gauge of replicas waiting for their model.
    pub fn observe_waiting_for_model(&self, waiting: i64) {
        self.waiting_for_model.set(waiting);
    }

    /// Sets the ready-replica gauge from its totals per class (classes absent are dropped).
    pub fn observe_ready(&self, totals: BTreeMap<String, i64>) {
        self.ready.clear();
        for (node_class, count) in totals {
            self.ready
                .get_or_create(&ClassLabel { node_class })
                .set(count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_restart_reason_is_counted_from_zero() {
        let mut registry = Registry::with_prefix("vramfit");
        let _metrics = ServingMetrics::register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for kind in EndKind::ALL {
            let line = format!(
                "vramfit_serving_replica_restarts_total{{reason=\"{}\"}} 0\n",
                kind.as_str()
            );
            assert!(text.contains(&line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn ready_replicas_by_class_and_restarts_by_reason() {
        let mut registry = Registry::with_prefix("vramfit");
        let metrics = ServingMetrics::register(&mut registry);
        metrics.observe_ready(BTreeMap::from([
            ("a10g-x1".to_string(), 2),
            ("l40s-x1".to_string(), 0),
        ]));
        metrics.count_restart("OutOfMemory");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "vramfit_serving_ready_replicas{node_class=\"a10g-x1\"} 2\n",
            "vramfit_serving_ready_replicas{node_class=\"l40s-x1\"} 0\n",
            "vramfit_serving_replica_restarts_total{reason=\"OutOfMemory\"} 1\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        metrics.observe_ready(BTreeMap::new());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            !text.contains("node_class=\"l40s-x1\""),
            "gone classes are dropped"
        );
    }
}
