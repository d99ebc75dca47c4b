//! The real backend: NVML through `nvml-wrapper`.
//!
//! `nvml-wrapper` opens `libnvidia-ml.so.1` with `dlopen` when [`Nvml::init`] runs, not when
//! the binary starts, so the agent starts on nodes without the driver. Any failure to load or
//! initialise NVML is reported as "no GPUs" with a reason.
//!
//! NVML is opened for each probe and shut down right after it: a handle kept open holds
//! `/dev/nvidiactl` and every `/dev/nvidia*`, and would stop a driver upgrade from unloading
//! the module, `nvidia-smi -r`, and MIG mode changes on the node.
use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;
use tracing::debug;
use vramfit_api::labels::ComputeCapability;

use super::{
    AbsentReason, DriverVersions, GpuDevice, GpuProbe, MigMode, Probe, ProbeError,
    format_cuda_driver_version,
};

/// NVML's value for "MIG enabled" in `nvmlDeviceGetMigMode`.
const NVML_DEVICE_MIG_ENABLE: u32 = 1;

const MIB: u64 = 1024 * 1024;

/// Reads GPUs through NVML, opening and closing the library for each probe.
#[derive(Default)]
pub struct NvmlProbe;

impl NvmlProbe {
    /// A probe that opens NVML when it runs.
    pub fn new() -> Self {
        Self
    }
}

impl GpuProbe for NvmlProbe {
    fn probe(&mut self) -> Result<Probe, ProbeError> {
        let nvml = match Nvml::init() {
            Ok(nvml) => nvml,
            Err(error) => {
                return Ok(Probe::absent(
                    init_failure_reason(&error),
                    error.to_string(),
                ));
            }
        };
        // `nvml` is dropped (nvmlShutdown) when this returns.
        Ok(read_devices(&nvml)
            .unwrap_or_else(|error| Probe::absent(AbsentReason::NvmlError, error.to_string())))
    }
}

/// "Not there" (a CPU node, or the driver not up yet) versus "there but failing".
pub fn init_failure_reason(error: &NvmlError) -> AbsentReason {
    match error {
        NvmlError::LibloadingError(_)
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::LibraryNotFound
        | NvmlError::DriverNotLoaded => AbsentReason::NvmlUnavailable,
        _ => AbsentReason::NvmlError,
    }
}

fn read_devices(nvml: &Nvml) -> Result<Probe, NvmlError> {
    let versions = DriverVersions {
        driver: nvml.sys_driver_version().ok(),
        cuda_driver: nvml
            .sys_cuda_driver_version()
            .ok()
            .and_then(format_cuda_driver_version),
    };
    let count = nvml.device_count()?;
    let mut gpus = Vec::with_capacity(usize::try_from(count).unwrap_or_default());
    for index in 0..count {
        let device = nvml.device_by_index(index)?;
        let cc = device.cuda_compute_capability()?;
        let mig = match device.mig_mode() {
            Ok(mode) if mode.current == NVML_DEVICE_MIG_ENABLE => MigMode::Enabled,
            Ok(_) => MigMode::Disabled,
            Err(NvmlError::NotSupported) => MigMode::Unsupported,
            Err(error) => {
                debug!(index, %error, "MIG mode unreadable, reporting unsupported");
                MigMode::Unsupported
            }
        };
        gpus.push(GpuDevice {
            name: device.name()?,
            memory_mib: device.memory_info()?.total / MIB,
            compute_capability: ComputeCapability::new(
                u32::try_from(cc.major).unwrap_or_default(),
                u32::try_from(cc.minor).unwrap_or_default(),
            ),
            mig,
        });
    }
    Ok(Probe::of_devices(versions, gpus))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_or_driver_means_unavailable_other_failures_mean_error() {
        assert_eq!(
            init_failure_reason(&NvmlError::DriverNotLoaded),
            AbsentReason::NvmlUnavailable
        );
        assert_eq!(
            init_failure_reason(&NvmlError::LibraryNotFound),
            AbsentReason::NvmlUnavailable
        );
        assert_eq!(
            init_failure_reason(&NvmlError::FailedToLoadSymbol("nvmlInit_v2".into())),
            AbsentReason::NvmlUnavailable
        );
        assert_eq!(
            init_failure_reason(&NvmlError::NoPermission),
            AbsentReason::NvmlError
        );
        assert_eq!(
            init_failure_reason(&NvmlError::Unknown),
            AbsentReason::NvmlError
        );
    }
}
