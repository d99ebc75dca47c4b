//! The real backend: NVML through `nvml-wrapper`.
//!
//! `nvml-wrapper` opens `libnvidia-ml.so.1` with `dlopen` when [`Nvml::init`] runs, not when
//! the binary starts, so the agent starts on nodes without the driver. Any failure to load or
//! initialise NVML is reported as "no GPUs" with a reason.
//!
//! NVML is opened for each probe and shut down right after it: a handle kept open holds
//! `/dev/nvidiactl` and every `/dev/nvidia*`, and would stop a driver upgrade from unloading
//! the module, `nvidia-smi -r`, and MIG mode changes on the node.
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use tracing::debug;
use vramfit_api::labels::{ComputeCapability, MAX_GPUS_PER_NODE};

use super::{
    AbsentReason, DriverVersions, GpuDevice, GpuProbe, MigDevice, MigMode, Probe, ProbeError,
    format_cuda_driver_version,
};

/// NVML's value for "MIG enabled" in `nvmlDeviceGetMigMode`.
const NVML_DEVICE_MIG_ENABLE: u32 = 1;

const MIB: u64 = 1024 * 1024;

/// More MIG device slots than any GPU has (an A100 or H100 has 7); a guard against a driver
/// reporting a nonsense maximum.
const MAX_MIG_SLOTS: u32 = 64;

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
    let gpus = match read_each(count, |index| read_device(nvml, index)) {
        Ok(gpus) => gpus,
        Err(ReadError::TooMany(count)) => {
            return Ok(Probe::absent(
                AbsentReason::NvmlError,
                format!(
                    "NVML reports {count} GPUs, more than the {MAX_GPUS_PER_NODE} a node can have"
                ),
            ));
        }
        Err(ReadError::Device(error)) => return Err(error),
    };
    Ok(Probe::of_devices(versions, gpus))
}

/// Why the GPUs could not be read one by one.
#[derive(Debug)]
enum ReadError<E> {
    /// NVML counts more GPUs than any node has: a driver fault, refused before anything is
    /// allocated for that many.
    TooMany(u32),
    /// One GPU could not be read.
    Device(E),
}

/// Reads GPUs `0..count` with `read`, after checking `count` against the node maximum
/// ([`MAX_GPUS_PER_NODE`], what the operator believes of a node's labels).
fn read_each<E>(
    count: u32,
    read: impl FnMut(u32) -> Result<GpuDevice, E>,
) -> Result<Vec<GpuDevice>, ReadError<E>> {
    if count > MAX_GPUS_PER_NODE {
        return Err(ReadError::TooMany(count));
    }
    (0..count)
        .map(read)
        .collect::<Result<_, _>>()
        .map_err(ReadError::Device)
}

/// GPU `index` as NVML describes it.
fn read_device(nvml: &Nvml, index: u32) -> Result<GpuDevice, NvmlError> {
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
    let mig_devices = if mig == MigMode::Enabled {
        read_mig_devices(index, &device)
    } else {
        Vec::new()
    };
    Ok(GpuDevice {
        name: device.name()?,
        memory_mib: device.memory_info()?.total / MIB,
        compute_capability: ComputeCapability::new(
            u32::try_from(cc.major).unwrap_or_default(),
            u32::try_from(cc.minor).unwrap_or_default(),
        ),
        mig,
        mig_devices,
    })
}

/// The MIG devices of a partitioned GPU. Best effort: a slice NVML cannot describe is left
/// out (and so not advertised) rather than failing the whole probe.
fn read_mig_devices(index: u32, device: &Device) -> Vec<MigDevice> {
    // nvmlDeviceGetMaxMigDeviceCount: the number of slots, some of which may be empty.
    let slots = match device.mig_device_count() {
        Ok(slots) => slots.min(MAX_MIG_SLOTS),
        Err(error) => {
            debug!(index, %error, "MIG device count unreadable, reporting no MIG devices");
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    for slot in 0..slots {
        let mig = match device.mig_device_by_index(slot) {
            Ok(mig) => mig,
            // An empty slot: no MIG device was created there.
            Err(NvmlError::NotFound | NvmlError::InvalidArg) => continue,
            Err(error) => {
                debug!(index, slot, %error, "MIG device unreadable, skipping it");
                continue;
            }
        };
        match read_mig_device(&mig) {
            Ok(Some(slice)) => found.push(slice),
            Ok(None) => debug!(
                index,
                slot, "MIG device without a profile or memory, skipping it"
            ),
            Err(error) => debug!(index, slot, %error, "MIG device unreadable, skipping it"),
        }
    }
    found
}

fn read_mig_device(mig: &Device) -> Result<Option<MigDevice>, NvmlError> {
    let name = mig.name()?;
    let Some(profile) = mig_profile_from_name(&name) else {
        debug!(name, "no MIG profile in the device name");
        return Ok(None);
    };
    let memory_mib = mig.memory_info()?.total / MIB;
    Ok((memory_mib > 0).then(|| MigDevice {
        profile: profile.to_string(),
        memory_mib,
    }))
}

/// The profile in a MIG device's NVML name, the text after the last ` MIG `:
/// `NVIDIA A100-SXM4-40GB MIG 1g.5gb` → `1g.5gb`. `None` for a name without one, or whose
/// profile is empty or has spaces or non-ASCII characters (not a profile NVML would name).
pub fn mig_profile_from_name(name: &str) -> Option<&str> {
    let (_, profile) = name.rsplit_once(" MIG ")?;
    let profile = profile.trim();
    let plausible = !profile.is_empty() && profile.chars().all(|c| c.is_ascii_graphic());
    plausible.then_some(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profiles_come_from_the_device_name() {
        let cases = [
            ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", Some("1g.5gb")),
            ("NVIDIA A100-SXM4-80GB MIG 3g.40gb", Some("3g.40gb")),
            ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", Some("1g.10gb+me")),
            ("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", Some("1c.3g.20gb")),
            // The last ` MIG ` counts, should a product name ever contain one.
            ("NVIDIA X MIG Edition MIG 2g.20gb", Some("2g.20gb")),
            ("NVIDIA A100-SXM4-40GB MIG 1g.5gb \n", Some("1g.5gb")),
            // Not a MIG device name, or nothing usable after ` MIG `.
            ("NVIDIA A100-SXM4-40GB", None),
            ("NVIDIA A100-SXM4-40GB MIG ", None),
            ("NVIDIA A100-SXM4-40GB MIG", None),
            ("MIG 1g.5gb", None),
            ("NVIDIA A100 MIG 1g.5gb Device 0", None),
            ("NVIDIA A100 MIG 1g.5gb\u{2009}", Some("1g.5gb")),
            ("NVIDIA A100 MIG 1g.5gbé", None),
            ("", None),
            ("\u{0}\u{1} MIG \u{7f}", None),
        ];
        for (name, expected) in cases {
            assert_eq!(mig_profile_from_name(name), expected, "{name:?}");
        }
    }

    fn gpu(index: u32) -> GpuDevice {
        GpuDevice {
            name: format!("GPU {index}"),
            memory_mib: 1024,
            compute_capability: ComputeCapability::new(8, 0),
            mig: MigMode::Unsupported,
            mig_devices: Vec::new(),
        }
    }

    #[test]
    fn a_device_count_past_the_node_maximum_is_refused_before_any_read() {
        let reads = std::cell::Cell::new(0);
        let read = |index| {
            reads.set(reads.get() + 1);
            Ok::<_, NvmlError>(gpu(index))
        };
        assert!(matches!(
            read_each(u32::MAX, read),
            Err(ReadError::TooMany(u32::MAX))
        ));
        assert!(matches!(
            read_each(MAX_GPUS_PER_NODE + 1, read),
            Err(ReadError::TooMany(n)) if n == MAX_GPUS_PER_NODE + 1
        ));
        assert_eq!(reads.get(), 0, "nothing read, nothing allocated");
        let all = read_each(MAX_GPUS_PER_NODE, read).unwrap();
        assert_eq!(all.len(), MAX_GPUS_PER_NODE as usize);
        let failing = read_each(8, |index| {
            if index == 3 {
                Err(NvmlError::GpuLost)
            } else {
                Ok(gpu(index))
            }
        });
        assert!(matches!(
            failing,
            Err(ReadError::Device(NvmlError::GpuLost))
        ));
    }

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
