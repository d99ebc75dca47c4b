//! What the agent knows of a node's GPUs, and the [`GpuProbe`] trait its two backends
//! implement: [`nvml::NvmlProbe`] (the real driver) and [`fixture::FixtureProbe`] (a YAML
//! file, for tests and for simulating GPU nodes on clusters without GPUs).
use vramfit_api::labels::ComputeCapability;

pub mod fixture;
pub mod nvml;

/// One GPU, as NVML describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuDevice {
    /// Product name as NVML spells it: `NVIDIA A10G`, `Tesla V100-SXM2-16GB`.
    pub name: String,
    /// Total memory in MiB, as NVML reports it (a little below the marketing size).
    pub memory_mib: u64,
    /// CUDA compute capability.
    pub compute_capability: ComputeCapability,
    /// Multi-Instance GPU mode.
    pub mig: MigMode,
    /// The MIG devices (slices) NVML reports on this GPU; empty unless MIG is enabled.
    pub mig_devices: Vec<MigDevice>,
}

/// One MIG device (a slice of a partitioned GPU), as NVML describes it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MigDevice {
    /// Profile as NVML names it: `1g.5gb`, `3g.40gb`, `1g.10gb+me`.
    pub profile: String,
    /// The slice's memory in MiB, as NVML reports it (`4864` for an A100-40GB `1g.5gb`).
    pub memory_mib: u64,
}

/// Multi-Instance GPU mode of one GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MigMode {
    /// The GPU cannot be partitioned (anything before Ampere datacenter parts).
    #[default]
    Unsupported,
    /// MIG capable, whole-GPU mode.
    Disabled,
    /// Partitioned into MIG instances.
    Enabled,
}

impl MigMode {
    /// Label value: `enabled`, `disabled` or `unsupported`.
    pub fn as_str(self) -> &'static str {
        match self {
            MigMode::Unsupported => "unsupported",
            MigMode::Disabled => "disabled",
            MigMode::Enabled => "enabled",
        }
    }

    /// Parses a label value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "unsupported" => Some(MigMode::Unsupported),
            "disabled" => Some(MigMode::Disabled),
            "enabled" => Some(MigMode::Enabled),
            _ => None,
        }
    }
}

/// Node-wide driver facts; `None` where the driver could not say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverVersions {
    /// NVIDIA driver version, `550.54.15`.
    pub driver: Option<String>,
    /// Highest CUDA version the driver supports, `12.4`.
    pub cuda_driver: Option<String>,
}

/// Why a node has no usable GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbsentReason {
    /// NVML works and counts zero GPUs.
    NoGpus,
    /// The NVML library cannot be loaded or the driver is not loaded (a CPU node, or a GPU
    /// node whose driver has not started yet).
    NvmlUnavailable,
    /// NVML loaded but failed (permissions, a GPU fallen off the bus, ...).
    NvmlError,
}

impl AbsentReason {
    /// Label value: `no-gpus`, `nvml-unavailable`, `nvml-error`.
    pub fn as_str(self) -> &'static str {
        match self {
            AbsentReason::NoGpus => "no-gpus",
            AbsentReason::NvmlUnavailable => "nvml-unavailable",
            AbsentReason::NvmlError => "nvml-error",
        }
    }
}

/// The GPUs of a node: some, or none and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuState {
    /// At least one GPU (never empty).
    Present(Vec<GpuDevice>),
    /// No usable GPU.
    Absent {
        /// Why.
        reason: AbsentReason,
        /// The underlying message, for logs.
        detail: String,
    },
}

/// One reading of a node's GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Driver and CUDA driver versions.
    pub versions: DriverVersions,
    /// The GPUs, or why there are none.
    pub state: GpuState,
}

impl Probe {
    /// A reading of `gpus`; an empty list is a node without GPUs.
    pub fn of_devices(versions: DriverVersions, gpus: Vec<GpuDevice>) -> Self {
        let state = if gpus.is_empty() {
            GpuState::Absent {
                reason: AbsentReason::NoGpus,
                detail: "NVML reports no GPUs".to_string(),
            }
        } else {
            GpuState::Present(gpus)
        };
        Self { versions, state }
    }

    /// A node without usable GPUs.
    pub fn absent(reason: AbsentReason, detail: impl Into<String>) -> Self {
        Self {
            versions: DriverVersions::default(),
            state: GpuState::Absent {
                reason,
                detail: detail.into(),
            },
        }
    }

    /// The GPUs found (empty when absent).
    pub fn gpus(&self) -> &[GpuDevice] {
        match &self.state {
            GpuState::Present(gpus) => gpus,
            GpuState::Absent { .. } => &[],
        }
    }
}

/// Why a probe produced no reading at all (as opposed to a reading of "no GPUs").
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The fixture file could not be read or parsed.
    #[error(transparent)]
    Fixture(#[from] fixture::FixtureError),
    /// The blocking probe task did not finish (it panicked or was cancelled).
    #[error("the GPU probe task did not finish: {0}")]
    Task(String),
}

impl ProbeError {
    /// Short name for the probe error metric: `fixture` or `probe-task`.
    pub fn reason(&self) -> &'static str {
        match self {
            ProbeError::Fixture(_) => "fixture",
            ProbeError::Task(_) => "probe-task",
        }
    }
}

/// A source of GPU readings. Blocking: callers on an async runtime run it on a blocking
/// thread, since NVML initialisation can take seconds on nodes without persistence mode.
pub trait GpuProbe: Send {
    /// Reads the node's GPUs now. NVML failures are readings ("no GPUs, because ..."), never
    /// errors: a node whose driver fails is a node without GPUs, and says so.
    fn probe(&mut self) -> Result<Probe, ProbeError>;
}

/// Formats NVML's CUDA driver version (`1000 * major + 10 * minor`): 12040 → `12.4`.
pub fn format_cuda_driver_version(version: i32) -> Option<String> {
    (version > 0).then(|| format!("{}.{}", version / 1000, (version % 1000) / 10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_driver_versions_read_like_nvidia_smi() {
        assert_eq!(format_cuda_driver_version(12040).as_deref(), Some("12.4"));
        assert_eq!(format_cuda_driver_version(11080).as_deref(), Some("11.8"));
        assert_eq!(format_cuda_driver_version(12000).as_deref(), Some("12.0"));
        assert_eq!(format_cuda_driver_version(12100).as_deref(), Some("12.10"));
        assert_eq!(format_cuda_driver_version(0), None);
        assert_eq!(format_cuda_driver_version(-1), None);
    }

    #[test]
    fn an_empty_device_list_is_a_node_without_gpus() {
        let probe = Probe::of_devices(DriverVersions::default(), vec![]);
        assert!(matches!(
            probe.state,
            GpuState::Absent {
                reason: AbsentReason::NoGpus,
                ..
            }
        ));
        assert!(probe.gpus().is_empty());
    }

    #[test]
    fn mig_modes_round_trip() {
        for mode in [MigMode::Unsupported, MigMode::Disabled, MigMode::Enabled] {
            assert_eq!(MigMode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(MigMode::parse("on"), None);
    }
}
