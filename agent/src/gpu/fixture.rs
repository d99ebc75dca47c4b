//! The simulated backend: a YAML file that describes what NVML would report.
//!
//! ```yaml
//! driverVersion: "550.54.15"
//! cudaDriverVersion: 12040        # NVML's integer, or "12.4"
//! gpus:
//!   - name: NVIDIA H100 80GB HBM3  # as NVML spells it
//!     memoryMiB: 81559             # as NVML reports it
//!     computeCapability: "9.0"     # major.minor
//!     migMode: disabled            # enabled | disabled | unsupported (default)
//!     count: 8                     # repeats the entry (default 1)
//!   - name: NVIDIA A100-SXM4-80GB
//!     memoryMiB: 81920
//!     computeCapability: "8.0"
//!     migMode: enabled             # migDevices needs it: NVML reports slices only then
//!     migDevices:                  # the MIG devices of each GPU of this entry
//!       - profile: 3g.40gb         # as NVML names it (the text after " MIG ")
//!         memoryMiB: 40192         # one slice, as NVML reports it
//!       - {profile: 2g.20gb, memoryMiB: 19968, count: 2}  # count: default 1
//! ```
//!
//! `error: "message"` simulates NVML failing (`nvml-error`), `unavailable: "message"` a node
//! where NVML cannot be loaded (`nvml-unavailable`), and `gpus: []` a node without GPUs.
//! The file is read again on every probe, so editing it changes what the agent reports.
use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use vramfit_api::labels::ComputeCapability;

use super::{
    AbsentReason, DriverVersions, GpuDevice, GpuProbe, MigDevice, MigMode, Probe, ProbeError,
};

/// The most GPUs a node has, as for NVML's count: a guard against `count: 4000000000` eating
/// memory, and against labels the operator would not believe.
const MAX_GPUS: u32 = vramfit_api::labels::MAX_GPUS_PER_NODE;
/// More MIG devices than any GPU has (an A100 or H100 has at most 7); the same guard.
const MAX_MIG_DEVICES_PER_GPU: u32 = 64;

/// A fixture that could not be read or does not describe GPUs.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// The file could not be read.
    #[error("fixture {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid fixture YAML.
    #[error("fixture {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, on one line.
        message: String,
    },
}

/// The fixture file format.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FixtureFile {
    /// NVIDIA driver version.
    #[serde(default)]
    pub driver_version: Option<String>,
    /// CUDA driver version: NVML's integer (`12040`) or text (`12.4`).
    #[serde(default)]
    pub cuda_driver_version: Option<CudaDriverVersion>,
    /// GPU entries.
    #[serde(default)]
    pub gpus: Vec<FixtureGpu>,
    /// Simulates NVML failing after it loaded.
    #[serde(default)]
    pub error: Option<String>,
    /// Simulates NVML not being loadable.
    #[serde(default)]
    pub unavailable: Option<String>,
}

/// CUDA driver version as NVML's integer or as text.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum CudaDriverVersion {
    /// `12040`.
    Nvml(i32),
    /// `"12.4"`.
    Text(String),
}

/// One GPU entry, repeated `count` times.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FixtureGpu {
    /// Product name as NVML spells it.
    pub name: String,
    /// Total memory in MiB.
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// `major.minor`.
    pub compute_capability: String,
    /// `enabled`, `disabled` or `unsupported`.
    #[serde(default)]
    pub mig_mode: Option<String>,
    /// How many GPUs of this kind.
    #[serde(default = "one")]
    pub count: u32,
    /// The MIG devices of each GPU of this entry; only with `migMode: enabled`.
    #[serde(default)]
    pub mig_devices: Vec<FixtureMigDevice>,
}

/// MIG devices of one profile on one GPU, repeated `count` times.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FixtureMigDevice {
    /// Profile as NVML names it: `1g.5gb`.
    pub profile: String,
    /// Memory of one slice in MiB, as NVML reports it.
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// How many slices of this profile on each GPU of the entry.
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

impl FixtureFile {
    /// Parses fixture YAML; `path` is only used in messages.
    pub fn parse(yaml: &str, path: &Path) -> Result<Self, FixtureError> {
        let invalid = |message: String| FixtureError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        // An empty file is YAML null; say so rather than "invalid type: unit value".
        if yaml.trim().is_empty() {
            return Err(invalid("the file is empty".to_string()));
        }
        let file: FixtureFile =
            serde_yaml::from_str(yaml).map_err(|e| invalid(one_line(&e.to_string())))?;
        file.validate().map_err(invalid)?;
        Ok(file)
    }

    fn validate(&self) -> Result<(), String> {
        let mut total: u32 = 0;
        for (i, gpu) in self.gpus.iter().enumerate() {
            if gpu.name.trim().is_empty() {
                return Err(format!("gpus[{i}].name is empty"));
            }
            if gpu.memory_mib == 0 {
                return Err(format!("gpus[{i}].memoryMiB must be above 0"));
            }
            if ComputeCapability::parse(&gpu.compute_capability).is_none() {
                return Err(format!(
                    "gpus[{i}].computeCapability {:?} is not major.minor, e.g. \"8.6\"",
                    gpu.compute_capability
                ));
            }
            if let Some(mode) = &gpu.mig_mode
                && MigMode::parse(mode).is_none()
            {
                return Err(format!(
                    "gpus[{i}].migMode {mode:?} is not enabled, disabled or unsupported"
                ));
            }
            if gpu.count == 0 {
                return Err(format!("gpus[{i}].count must be at least 1"));
            }
            validate_mig_devices(i, gpu)?;
            total = total.saturating_add(gpu.count);
        }
        if total > MAX_GPUS {
            return Err(format!(
                "{total} GPUs is more than the {MAX_GPUS} a node can have"
            ));
        }
        if self.error.is_some() && self.unavailable.is_some() {
            return Err("set at most one of error and unavailable".to_string());
        }
        Ok(())
    }

    /// What NVML would have reported.
    pub fn to_probe(&self) -> Probe {
        if let Some(message) = &self.unavailable {
            return Probe::absent(AbsentReason::NvmlUnavailable, message.clone());
        }
        if let Some(message) = &self.error {
            return Probe::absent(AbsentReason::NvmlError, message.clone());
        }
        let versions = DriverVersions {
            driver: self.driver_version.clone(),
            cuda_driver: match &self.cuda_driver_version {
                Some(CudaDriverVersion::Nvml(v)) => super::format_cuda_driver_version(*v),
                Some(CudaDriverVersion::Text(v)) => Some(v.clone()),
                None => None,
            },
        };
        let gpus = self
            .gpus
            .iter()
            .flat_map(|gpu| {
                let device = GpuDevice {
                    name: gpu.name.clone(),
                    memory_mib: gpu.memory_mib,
                    // Validated in `parse`; an unparsable value cannot reach here.
                    compute_capability: ComputeCapability::parse(&gpu.compute_capability)
                        .unwrap_or(ComputeCapability::new(0, 0)),
                    mig: gpu
                        .mig_mode
                        .as_deref()
                        .and_then(MigMode::parse)
                        .unwrap_or_default(),
                    mig_devices: gpu
                        .mig_devices
                        .iter()
                        .flat_map(|mig| {
                            let slice = MigDevice {
                                profile: mig.profile.trim().to_string(),
                                memory_mib: mig.memory_mib,
                            };
                            std::iter::repeat_n(slice, mig.count as usize)
                        })
                        .collect(),
                };
                std::iter::repeat_n(device, gpu.count as usize)
            })
            .collect();
        Probe::of_devices(versions, gpus)
    }
}

/// NVML reports slices only on a MIG-enabled GPU, and they fit in it.
fn validate_mig_devices(i: usize, gpu: &FixtureGpu) -> Result<(), String> {
    if gpu.mig_devices.is_empty() {
        return Ok(());
    }
    let mode = gpu.mig_mode.as_deref().and_then(MigMode::parse);
    if mode != Some(MigMode::Enabled) {
        return Err(format!(
            "gpus[{i}].migDevices needs migMode: enabled (NVML reports no MIG devices on a GPU in {} mode)",
            mode.unwrap_or_default().as_str()
        ));
    }
    let mut slices: u32 = 0;
    let mut memory_mib: u64 = 0;
    for (j, mig) in gpu.mig_devices.iter().enumerate() {
        let at = format!("gpus[{i}].migDevices[{j}]");
        if mig.profile.trim().is_empty()
            || !mig.profile.trim().chars().all(|c| c.is_ascii_graphic())
        {
            return Err(format!(
                "{at}.profile {:?} is not a MIG profile name, e.g. \"1g.5gb\"",
                mig.profile
            ));
        }
        if !crate::labels::is_valid_label_key(&vramfit_api::labels::mig_memory_key(&mig.profile)) {
            return Err(format!(
                "{at}.profile {:?} is too long for a label key",
                mig.profile
            ));
        }
        if mig.memory_mib == 0 {
            return Err(format!("{at}.memoryMiB must be above 0"));
        }
        if mig.count == 0 {
            return Err(format!("{at}.count must be at least 1"));
        }
        slices = slices.saturating_add(mig.count);
        memory_mib = memory_mib.saturating_add(mig.memory_mib.saturating_mul(u64::from(mig.count)));
    }
    if slices > MAX_MIG_DEVICES_PER_GPU {
        return Err(format!(
            "gpus[{i}]: {slices} MIG devices is more than the {MAX_MIG_DEVICES_PER_GPU} a GPU may have"
        ));
    }
    if memory_mib > gpu.memory_mib {
        return Err(format!(
            "gpus[{i}]: its MIG devices hold {memory_mib} MiB, more than the GPU's memoryMiB {}",
            gpu.memory_mib
        ));
    }
    Ok(())
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Reads a fixture file on every probe.
#[derive(Clone, Debug)]
pub struct FixtureProbe {
    path: PathBuf,
}

impl FixtureProbe {
    /// Opens `path`, failing now (one clear message) if it is not a valid fixture.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, FixtureError> {
        let probe = Self { path: path.into() };
        probe.load()?;
        Ok(probe)
    }

    /// The fixture file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and parses the file.
    pub fn load(&self) -> Result<FixtureFile, FixtureError> {
        let yaml = fs::read_to_string(&self.path).map_err(|source| FixtureError::Read {
            path: self.path.clone(),
            source,
        })?;
        FixtureFile::parse(&yaml, &self.path)
    }
}

impl GpuProbe for FixtureProbe {
    fn probe(&mut self) -> Result<Probe, ProbeError> {
        Ok(self.load()?.to_probe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuState;

    fn parse(yaml: &str) -> Result<FixtureFile, FixtureError> {
        FixtureFile::parse(yaml, Path::new("test.yaml"))
    }

    #[test]
    fn count_repeats_an_entry() {
        let file = parse(
            "driverVersion: '550.54.15'\ncudaDriverVersion: 12040\ngpus:\n  - {name: NVIDIA H100 80GB HBM3, memoryMiB: 81559, computeCapability: '9.0', migMode: disabled, count: 8}\n",
        )
        .unwrap();
        let probe = file.to_probe();
        assert_eq!(probe.gpus().len(), 8);
        assert_eq!(probe.versions.cuda_driver.as_deref(), Some("12.4"));
        assert_eq!(probe.gpus()[7].mig, MigMode::Disabled);
    }

    #[test]
    fn mig_devices_repeat_per_gpu_of_the_entry() {
        let file = parse(
            "gpus:\n  - name: NVIDIA A100-SXM4-80GB\n    memoryMiB: 81920\n    computeCapability: '8.0'\n    migMode: enabled\n    count: 2\n    migDevices:\n      - {profile: 3g.40gb, memoryMiB: 40192}\n      - {profile: 2g.20gb, memoryMiB: 19968, count: 2}\n",
        )
        .unwrap();
        let probe = file.to_probe();
        assert_eq!(probe.gpus().len(), 2);
        for gpu in probe.gpus() {
            let slices: Vec<(&str, u64)> = gpu
                .mig_devices
                .iter()
                .map(|m| (m.profile.as_str(), m.memory_mib))
                .collect();
            assert_eq!(
                slices,
                [("3g.40gb", 40192), ("2g.20gb", 19968), ("2g.20gb", 19968)]
            );
        }
        // Without migDevices, no slices (a MIG-enabled GPU with none created yet).
        let file =
            parse("gpus: [{name: X, memoryMiB: 1, computeCapability: '8.0', migMode: enabled}]")
                .unwrap();
        assert!(file.to_probe().gpus()[0].mig_devices.is_empty());
    }

    #[test]
    fn unquoted_capabilities_keep_their_text() {
        // YAML would read 8.10 as the float 8.1; the raw scalar text is kept instead.
        let file = parse("gpus: [{name: X, memoryMiB: 1, computeCapability: 8.10}, {name: Y, memoryMiB: 1, computeCapability: 9.0}]").unwrap();
        let probe = file.to_probe();
        assert_eq!(
            probe.gpus()[0].compute_capability,
            ComputeCapability::new(8, 10)
        );
        assert_eq!(
            probe.gpus()[1].compute_capability,
            ComputeCapability::new(9, 0)
        );
    }

    #[test]
    fn error_and_unavailable_simulate_nvml_failures() {
        let probe = parse("error: GPU is lost\n").unwrap().to_probe();
        assert!(matches!(
            probe.state,
            GpuState::Absent {
                reason: AbsentReason::NvmlError,
                ..
            }
        ));
        let probe = parse("unavailable: libnvidia-ml.so.1 not found\n")
            .unwrap()
            .to_probe();
        assert!(matches!(
            probe.state,
            GpuState::Absent {
                reason: AbsentReason::NvmlUnavailable,
                ..
            }
        ));
        assert!(parse("gpus: []\n").unwrap().to_probe().gpus().is_empty());
    }

    #[test]
    fn malformed_fixtures_give_one_line_messages() {
        let cases = [
            ("", "empty"),
            (
                "gpus: [{name: X, memoryMiB: 1, computeCapability: 'eight'}]",
                "major.minor",
            ),
            (
                "gpus: [{name: X, memoryMiB: 0, computeCapability: '8.6'}]",
                "memoryMiB",
            ),
            (
                "gpus: [{name: X, memoryMiB: 1, computeCapability: '8.6', count: 0}]",
                "count",
            ),
            (
                "gpus: [{name: X, memoryMiB: 1, computeCapability: '8.6', migMode: on}]",
                "migMode",
            ),
            (
                "gpus: [{name: X, memoryMiB: 1, computeCapability: '8.6', count: 5000}]",
                "5000 GPUs is more than the 256 a node can have",
            ),
            (
                "gpus: [{name: X, memoryMiB: 1, computeCapability: '8.6', count: 200}, {name: Y, memoryMiB: 1, computeCapability: '8.6', count: 57}]",
                "257 GPUs is more than the 256 a node can have",
            ),
            ("gpu: []", "unknown field"),
            (
                "gpus: [{name: X, memoryMiB: 40960, computeCapability: '8.0', migMode: disabled, migDevices: [{profile: 1g.5gb, memoryMiB: 4864}]}]",
                "gpus[0].migDevices needs migMode: enabled (NVML reports no MIG devices on a GPU in disabled mode)",
            ),
            (
                "gpus: [{name: X, memoryMiB: 40960, computeCapability: '8.0', migDevices: [{profile: 1g.5gb, memoryMiB: 4864}]}]",
                "in unsupported mode",
            ),
            (
                "gpus: [{name: X, memoryMiB: 40960, computeCapability: '8.0', migMode: enabled, migDevices: [{profile: ' ', memoryMiB: 4864}]}]",
                "migDevices[0].profile",
            ),
            (
                "gpus: [{name: X, memoryMiB: 40960, computeCapability: '8.0', migMode: enabled, migDevices: [{profile: 1g.5gb, memoryMiB: 0}]}]",
                "migDevices[0].memoryMiB",
            ),
            (
                "gpus: [{name: X, memoryMiB: 40960, computeCapability: '8.0', migMode: enabled, migDevices: [{profile: 1g.5gb, memoryMiB: 1, count: 0}]}]",
                "migDevices[0].count",
            ),
            (
                "gpus: [{name: X, memoryMiB: 40960, computeCapability: '8.0', migMode: enabled, migDevices: [{profile: 1g.5gb, memoryMiB: 1, count: 4000000000}]}]",
                "more than the 64",
            ),
            (
                "gpus: [{name: X, memoryMiB: 40960, computeCapability: '8.0', migMode: enabled, migDevices: [{profile: 1g.5gb, memoryMiB: 4864, count: 9}]}]",
                "43776 MiB",
            ),
            (
                "gpus: [{name: X, memoryMiB: 40960, computeCapability: '8.0', migMode: enabled, migDevices: [{profile: 1g.5gb, memoryMiB: 4864, slices: 7}]}]",
                "unknown field `slices`",
            ),
            ("gpus: [", "test.yaml"),
        ];
        for (yaml, expected) in cases {
            let message = parse(yaml).unwrap_err().to_string();
            assert!(message.contains(expected), "{yaml:?} gave {message:?}");
            assert!(message.starts_with("fixture test.yaml: "), "{message}");
            assert!(!message.contains('\n'), "{message:?}");
        }
    }
}
