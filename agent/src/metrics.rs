//! Prometheus metrics, served on `/metrics` in the text format.
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::gpu::{AbsentReason, GpuState, Probe};
use vramfit_api::labels::to_label_value;
use vramfit_runtime::admin_server::MetricsSource;

/// Labels of the per-GPU memory gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuLabels {
    /// Device index.
    pub gpu: String,
    /// Product, as in the node label.
    pub product: String,
}

/// Labels of the probe error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// `nvml-unavailable`, `nvml-error`, `fixture` or `probe-task`.
    pub reason: String,
}

/// The agent's metrics, under the `vramfit_agent_` prefix.
pub struct Metrics {
    registry: Registry,
    gpus: Gauge,
    gpu_memory_mib: Family<GpuLabels, Gauge>,
    last_successful_probe: Gauge,
    probe_errors: Family<ReasonLabels, Counter>,
    label_writes: Counter,
    label_write_errors: Counter,
    label_repairs: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("vramfit_agent");
        let gpus = Gauge::default();
        let gpu_memory_mib = Family::<GpuLabels, Gauge>::default();
        let last_successful_probe = Gauge::default();
        let probe_errors = Family::<ReasonLabels, Counter>::default();
        let label_writes = Counter::default();
        let label_write_errors = Counter::default();
        let label_repairs = Counter::default();
        registry.register(
            "gpus",
            "GPUs found on the node by the last probe",
            gpus.clone(),
        );
        registry.register(
            "gpu_memory_mib",
            "Total memory of each GPU in MiB, as NVML reports it",
            gpu_memory_mib.clone(),
        );
        registry.register(
            "last_probe_timestamp_seconds",
            "Unix time of the last probe that read the GPUs (or read that there are none)",
            last_successful_probe.clone(),
        );
        registry.register(
            "probe_errors",
            "Probes that could not read the GPUs, by reason",
            probe_errors.clone(),
        );
        registry.register(
            "label_writes",
            "Server-side applies of the node's vramfit labels",
            label_writes.clone(),
        );
        registry.register(
            "label_write_errors",
            "Failed reads or applies of the node's labels",
            label_write_errors.clone(),
        );
        registry.register(
            "label_repairs",
            "Times the node's vramfit labels had been changed by someone else and were put back",
            label_repairs.clone(),
        );
        Self {
            registry,
            gpus,
            gpu_memory_mib,
            last_successful_probe,
            probe_errors,
            label_writes,
            label_write_errors,
            label_repairs,
        }
    }

    /// Records a probe's reading.
    pub fn observe_probe(&self, probe: &Probe) {
        self.gpu_memory_mib.clear();
        let gpus = probe.gpus();
        self.gpus.set(i64::try_from(gpus.len()).unwrap_or(i64::MAX));
        for (index, gpu) in gpus.iter().enumerate() {
            let labels = GpuLabels {
                gpu: index.to_string(),
                product: to_label_value(&gpu.name),
            };
            self.gpu_memory_mib
                .get_or_create(&labels)
                .set(i64::try_from(gpu.memory_mib).unwrap_or(i64::MAX));
        }
        match &probe.state {
            GpuState::Present(_)
            | GpuState::Absent {
                reason: AbsentReason::NoGpus,
                ..
            } => {
                self.last_successful_probe.set(unix_now());
            }
            GpuState::Absent { reason, .. } => self.count_probe_error(reason.as_str()),
        }
    }

    /// Counts a probe that produced no reading (`fixture`) or a failed NVML reading.
    pub fn count_probe_error(&self, reason: &str) {
        self.probe_errors
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts an apply of the labels.
    pub fn count_label_write(&self) {
        self.label_writes.inc();
    }

    /// Counts a failed API call.
    pub fn count_label_write_error(&self) {
        self.label_write_errors.inc();
    }

    /// Counts labels put back after someone else changed them.
    pub fn count_label_repair(&self) {
        self.label_repairs.inc();
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        self.registry.encode_metrics()
    }
}

impl MetricsSource for Metrics {
    fn encode_metrics(&self) -> Result<String, std::fmt::Error> {
        self.encode()
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{DriverVersions, GpuDevice, MigMode};
    use vramfit_api::labels::ComputeCapability;

    #[test]
    fn metrics_follow_the_probes() {
        let metrics = Metrics::new();
        let a10g = GpuDevice {
            name: "NVIDIA A10G".into(),
            memory_mib: 23028,
            compute_capability: ComputeCapability::new(8, 6),
            mig: MigMode::Unsupported,
            mig_devices: vec![],
        };
        metrics.observe_probe(&Probe::of_devices(
            DriverVersions::default(),
            vec![a10g.clone(), a10g],
        ));
        metrics.observe_probe(&Probe::absent(AbsentReason::NvmlError, "lost"));
        metrics.count_label_write();
        metrics.count_label_repair();
        let text = metrics.encode().unwrap();
        assert!(text.contains("vramfit_agent_gpus 0\n"), "{text}");
        assert!(
            !text.contains("vramfit_agent_gpu_memory_mib{"),
            "stale GPUs are cleared: {text}"
        );
        assert!(
            text.contains("vramfit_agent_probe_errors_total{reason=\"nvml-error\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("vramfit_agent_label_writes_total 1\n"),
            "{text}"
        );
        assert!(
            text.contains("vramfit_agent_label_repairs_total 1\n"),
            "{text}"
        );
        assert!(
            text.contains("vramfit_agent_last_probe_timestamp_seconds "),
            "{text}"
        );

        metrics.observe_probe(&Probe::of_devices(
            DriverVersions::default(),
            vec![GpuDevice {
                name: "NVIDIA H200".into(),
                memory_mib: 143771,
                compute_capability: ComputeCapability::new(9, 0),
                mig: MigMode::Disabled,
                mig_devices: vec![],
            }],
        ));
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(
                "vramfit_agent_gpu_memory_mib{gpu=\"0\",product=\"NVIDIA-H200\"} 143771\n"
            ),
            "{text}"
        );
        assert!(text.contains("vramfit_agent_gpus 1\n"), "{text}");
    }
}
