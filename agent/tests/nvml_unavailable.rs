//! The real NVML backend on whatever machine runs the tests. Without an NVIDIA driver (CI,
//! laptops) it must report "no GPUs, nvml-unavailable" and keep going; with one, it must read
//! GPUs or say why not. Either way, nothing panics.
use std::path::Path;
use std::process::Command;

use vramfit_agent::gpu::nvml::NvmlProbe;
use vramfit_agent::gpu::{AbsentReason, GpuProbe, GpuState};
use vramfit_agent::labels::render;
use vramfit_api::labels::{self as keys, is_valid_label_value};

/// The kernel driver is what NVML needs; without it, NVML cannot be available.
fn no_nvidia_driver() -> bool {
    !Path::new("/proc/driver/nvidia/version").exists()
}

#[test]
fn the_nvml_backend_reports_no_gpus_instead_of_failing() {
    let mut probe = NvmlProbe::new();
    // Twice: a failed initialisation is retried on the next probe, and must fail the same way.
    for _ in 0..2 {
        let reading = probe.probe().unwrap();
        let labels = render(&reading);
        for value in labels.values() {
            assert!(is_valid_label_value(value), "{value:?}");
        }
        match &reading.state {
            GpuState::Absent { reason, .. } => {
                assert_eq!(labels[keys::GPU_PRESENT], "false");
                assert_eq!(labels[keys::GPU_ABSENT_REASON], reason.as_str());
                if no_nvidia_driver() {
                    assert_eq!(*reason, AbsentReason::NvmlUnavailable);
                }
            }
            GpuState::Present(gpus) => {
                assert!(!gpus.is_empty());
                assert_eq!(labels[keys::GPU_PRESENT], "true");
                assert_eq!(labels[keys::GPU_COUNT], gpus.len().to_string());
            }
        }
    }
}

#[test]
fn once_print_without_a_fixture_exits_0_and_says_whether_gpus_are_present() {
    let output = Command::new(env!("CARGO_BIN_EXE_vramfit-agent"))
        .args(["--once", "--print"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    if no_nvidia_driver() {
        assert_eq!(
            stdout,
            "vramfit.io/gpu.absent-reason=nvml-unavailable\nvramfit.io/gpu.present=false\n"
        );
        // The missing driver is worth a warning, not an error.
        assert!(
            stderr.contains("WARN") && stderr.contains("nvml-unavailable"),
            "{stderr}"
        );
    } else {
        assert!(
            stdout.contains("vramfit.io/gpu.present=true\n")
                || stdout.contains("vramfit.io/gpu.present=false\n"),
            "{stdout}"
        );
    }
}
