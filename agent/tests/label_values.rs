//! Whatever NVML reports (MIG profile names included), every rendered label has a valid
//! Kubernetes label key and value.
use proptest::prelude::*;
use vramfit_agent::gpu::{
    AbsentReason, DriverVersions, GpuDevice, MigDevice, MigMode, Probe, format_cuda_driver_version,
};
use vramfit_agent::labels::{is_valid_label_key, render};
use vramfit_api::labels::{ComputeCapability, PREFIX, is_valid_label_value};

fn any_mig_device() -> impl Strategy<Value = MigDevice> {
    (
        prop_oneof![
            any::<String>(),
            "[ -~]{0,80}",
            "[1-7]g\\.[0-9]{1,3}gb(\\+me)?"
        ],
        any::<u64>(),
    )
        .prop_map(|(profile, memory_mib)| MigDevice {
            profile,
            memory_mib,
        })
}

fn any_gpu() -> impl Strategy<Value = GpuDevice> {
    (
        prop_oneof![
            any::<String>(),
            "[ -~]{0,100}",
            "NVIDIA [A-Za-z0-9 ()/+_.-]{0,80}"
        ],
        any::<u64>(),
        any::<(u32, u32)>(),
        prop_oneof![
            Just(MigMode::Unsupported),
            Just(MigMode::Disabled),
            Just(MigMode::Enabled)
        ],
        proptest::collection::vec(any_mig_device(), 0..8),
    )
        .prop_map(
            |(name, memory_mib, (major, minor), mig, mig_devices)| GpuDevice {
                name,
                memory_mib,
                compute_capability: ComputeCapability::new(major, minor),
                mig,
                mig_devices,
            },
        )
}

fn any_versions() -> impl Strategy<Value = DriverVersions> {
    (
        proptest::option::of(prop_oneof![any::<String>(), "[0-9.]{0,80}"]),
        proptest::option::of(prop_oneof![
            any::<i32>().prop_map(|v| format_cuda_driver_version(v).unwrap_or_default()),
            any::<String>(),
        ]),
    )
        .prop_map(|(driver, cuda_driver)| DriverVersions {
            driver,
            cuda_driver,
        })
}

fn assert_valid(probe: &Probe) {
    let labels = render(probe);
    for (key, value) in &labels {
        assert!(key.starts_with(PREFIX), "{key}");
        assert!(is_valid_label_key(key), "{key:?} from {probe:?}");
        assert!(
            is_valid_label_value(value),
            "{key}={value:?} from {probe:?}"
        );
    }
}

proptest! {
    #[test]
    fn every_rendered_value_is_a_valid_label_value(
        versions in any_versions(),
        gpus in proptest::collection::vec(any_gpu(), 0..6),
    ) {
        assert_valid(&Probe::of_devices(versions, gpus));
    }

    #[test]
    fn absent_readings_render_valid_labels(
        versions in any_versions(),
        detail in any::<String>(),
        reason in prop_oneof![
            Just(AbsentReason::NoGpus),
            Just(AbsentReason::NvmlUnavailable),
            Just(AbsentReason::NvmlError),
        ],
    ) {
        let mut probe = Probe::absent(reason, detail);
        probe.versions = versions;
        assert_valid(&probe);
    }
}
