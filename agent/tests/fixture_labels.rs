//! Label rendering for every shipped fixture: the exact values the planner and the
//! scheduler rely on.
// Test and benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::path::PathBuf;

use vramfit_agent::gpu::GpuProbe;
use vramfit_agent::gpu::fixture::FixtureProbe;
use vramfit_agent::labels::{NodeLabels, is_valid_label_key, render};
use vramfit_api::labels::{self as keys, ComputeCapability, gpu_facts, is_valid_label_value};

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn labels_of(file: &str) -> NodeLabels {
    let mut probe = FixtureProbe::open(fixtures_dir().join(file)).unwrap();
    render(&probe.probe().unwrap())
}

/// What a GPU fixture must render to.
struct Expected {
    file: &'static str,
    product: &'static str,
    count: u32,
    memory_mib: u64,
    cc: &'static str,
    family: &'static str,
    tier: &'static str,
    bf16: bool,
    mig: &'static str,
    mixed: bool,
    driver: &'static str,
    cuda: &'static str,
}

#[rustfmt::skip]
const GPU_FIXTURES: &[Expected] = &[
    Expected { file: "v100-16gb-x4.yaml", product: "Tesla-V100-SXM2-16GB", count: 4, memory_mib: 16160, cc: "7.0", family: "volta", tier: "legacy_datacenter", bf16: false, mig: "unsupported", mixed: false, driver: "535.183.01", cuda: "12.2" },
    Expected { file: "v100-32gb-x1.yaml", product: "Tesla-V100-SXM2-32GB", count: 1, memory_mib: 32768, cc: "7.0", family: "volta", tier: "legacy_datacenter", bf16: false, mig: "unsupported", mixed: false, driver: "535.183.01", cuda: "12.2" },
    Expected { file: "t4-x1.yaml", product: "Tesla-T4", count: 1, memory_mib: 15360, cc: "7.5", family: "turing", tier: "other", bf16: false, mig: "unsupported", mixed: false, driver: "535.183.01", cuda: "12.2" },
    Expected { file: "a10g-x1.yaml", product: "NVIDIA-A10G", count: 1, memory_mib: 23028, cc: "8.6", family: "ampere", tier: "datacenter_mid_memory", bf16: true, mig: "unsupported", mixed: false, driver: "550.54.15", cuda: "12.4" },
    Expected { file: "a10g-x4.yaml", product: "NVIDIA-A10G", count: 4, memory_mib: 23028, cc: "8.6", family: "ampere", tier: "datacenter_mid_memory", bf16: true, mig: "unsupported", mixed: false, driver: "550.54.15", cuda: "12.4" },
    Expected { file: "a100-80gb-x1.yaml", product: "NVIDIA-A100-SXM4-80GB", count: 1, memory_mib: 81920, cc: "8.0", family: "ampere", tier: "datacenter_high_memory", bf16: true, mig: "disabled", mixed: false, driver: "550.54.15", cuda: "12.4" },
    Expected { file: "l40s-x1.yaml", product: "NVIDIA-L40S", count: 1, memory_mib: 46068, cc: "8.9", family: "ada-lovelace", tier: "workstation_high_memory", bf16: true, mig: "unsupported", mixed: false, driver: "550.54.15", cuda: "12.4" },
    // MIG: the gpu.* labels still describe the physical GPU; the slices are in MIG_FIXTURES.
    Expected { file: "a100-40gb-mig-1g.5gb.yaml", product: "NVIDIA-A100-SXM4-40GB", count: 1, memory_mib: 40960, cc: "8.0", family: "ampere", tier: "datacenter_high_memory", bf16: true, mig: "enabled", mixed: false, driver: "550.54.15", cuda: "12.4" },
    Expected { file: "a100-80gb-mig-mixed.yaml", product: "NVIDIA-A100-SXM4-80GB", count: 1, memory_mib: 81920, cc: "8.0", family: "ampere", tier: "datacenter_high_memory", bf16: true, mig: "enabled", mixed: false, driver: "550.54.15", cuda: "12.4" },
    Expected { file: "h100-mig-1g.10gb.yaml", product: "NVIDIA-H100-80GB-HBM3", count: 1, memory_mib: 81559, cc: "9.0", family: "hopper", tier: "datacenter_high_memory", bf16: true, mig: "enabled", mixed: false, driver: "550.54.15", cuda: "12.4" },
    Expected { file: "h100-x8.yaml", product: "NVIDIA-H100-80GB-HBM3", count: 8, memory_mib: 81559, cc: "9.0", family: "hopper", tier: "datacenter_high_memory", bf16: true, mig: "disabled", mixed: false, driver: "550.54.15", cuda: "12.4" },
    Expected { file: "h200-x1.yaml", product: "NVIDIA-H200", count: 1, memory_mib: 143771, cc: "9.0", family: "hopper", tier: "datacenter_high_memory", bf16: true, mig: "disabled", mixed: false, driver: "560.35.03", cuda: "12.6" },
    Expected { file: "rtx4090-x1.yaml", product: "NVIDIA-GeForce-RTX-4090", count: 1, memory_mib: 24564, cc: "8.9", family: "ada-lovelace", tier: "consumer_high_end", bf16: true, mig: "unsupported", mixed: false, driver: "550.54.15", cuda: "12.4" },
    Expected { file: "unknown-model.yaml", product: "Quadro-P4000", count: 1, memory_mib: 8192, cc: "6.1", family: "pascal", tier: "other", bf16: false, mig: "unsupported", mixed: false, driver: "535.183.01", cuda: "12.2" },
    // Sized by the smaller GPU (the T4); counts both; bf16 false because the T4 cannot.
    Expected { file: "mixed-a10g-t4.yaml", product: "Tesla-T4", count: 2, memory_mib: 15360, cc: "7.5", family: "turing", tier: "other", bf16: false, mig: "unsupported", mixed: true, driver: "550.54.15", cuda: "12.4" },
    // The smallest GPU is an A10G (product and count read like an A10G×4), the weakest
    // compute capability the V100's: family and bf16 follow the V100.
    Expected { file: "mixed-a10g-v100-32gb.yaml", product: "NVIDIA-A10G", count: 4, memory_mib: 23028, cc: "7.0", family: "volta", tier: "datacenter_mid_memory", bf16: false, mig: "unsupported", mixed: true, driver: "550.54.15", cuda: "12.4" },
];

/// The exact `vramfit.io/mig-` labels of each GPU fixture; fixtures not listed have none
/// (`a100-80gb-x1.yaml` is MIG capable with MIG off).
#[rustfmt::skip]
const MIG_FIXTURES: &[(&str, &[(&str, &str)])] = &[
    ("a100-40gb-mig-1g.5gb.yaml", &[
        ("vramfit.io/mig-1g.5gb.count", "7"),
        ("vramfit.io/mig-1g.5gb.memory-mib", "4864"),
    ]),
    ("a100-80gb-mig-mixed.yaml", &[
        ("vramfit.io/mig-2g.20gb.count", "2"),
        ("vramfit.io/mig-2g.20gb.memory-mib", "19968"),
        ("vramfit.io/mig-3g.40gb.count", "1"),
        ("vramfit.io/mig-3g.40gb.memory-mib", "40192"),
    ]),
    ("h100-mig-1g.10gb.yaml", &[
        ("vramfit.io/mig-1g.10gb.count", "7"),
        ("vramfit.io/mig-1g.10gb.memory-mib", "9984"),
    ]),
];

fn expected_mig_labels(file: &str) -> NodeLabels {
    MIG_FIXTURES
        .iter()
        .filter(|(f, _)| *f == file)
        .flat_map(|(_, labels)| labels.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Fixtures of nodes without usable GPUs, and the reason each must give.
const ABSENT_FIXTURES: &[(&str, &str)] = &[
    ("no-gpu.yaml", "no-gpus"),
    ("nvml-unavailable.yaml", "nvml-unavailable"),
    ("nvml-error.yaml", "nvml-error"),
];

#[test]
fn every_gpu_fixture_renders_its_exact_labels() {
    for e in GPU_FIXTURES {
        let labels = labels_of(e.file);
        let get = |key: &str| labels.get(key).map(String::as_str).unwrap_or("<missing>");
        let f = e.file;
        assert_eq!(get(keys::GPU_PRESENT), "true", "{f}");
        assert_eq!(get(keys::GPU_PRODUCT), e.product, "{f}");
        assert_eq!(get(keys::GPU_COUNT), e.count.to_string(), "{f}");
        assert_eq!(get(keys::GPU_MEMORY_MIB), e.memory_mib.to_string(), "{f}");
        assert_eq!(get(keys::GPU_COMPUTE_CAPABILITY), e.cc, "{f}");
        assert_eq!(get(keys::GPU_FAMILY), e.family, "{f}");
        assert_eq!(get(keys::GPU_TIER), e.tier, "{f}");
        assert_eq!(get(keys::GPU_BF16), e.bf16.to_string(), "{f}");
        assert_eq!(get(keys::GPU_FLASH_ATTENTION), e.bf16.to_string(), "{f}");
        assert_eq!(get(keys::GPU_MIG), e.mig, "{f}");
        assert_eq!(get(keys::GPU_MIXED), e.mixed.to_string(), "{f}");
        assert_eq!(get(keys::GPU_DRIVER), e.driver, "{f}");
        assert_eq!(get(keys::GPU_CUDA_DRIVER), e.cuda, "{f}");
        assert!(!labels.contains_key(keys::GPU_ABSENT_REASON), "{f}");
        let mig: NodeLabels = labels
            .iter()
            .filter(|(key, _)| key.starts_with(keys::MIG_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(mig, expected_mig_labels(f), "{f}");
        assert_eq!(labels.len(), 13 + mig.len(), "{f}: {labels:?}");

        // The operator reads these labels back through the shared reader.
        let facts = gpu_facts(&labels).unwrap_or_else(|| panic!("{f}: no facts from {labels:?}"));
        assert_eq!(facts.product, e.product, "{f}");
        assert_eq!(facts.count, e.count, "{f}");
        assert_eq!(facts.memory_mib, e.memory_mib, "{f}");
        assert_eq!(
            facts.compute_capability,
            ComputeCapability::parse(e.cc),
            "{f}"
        );
    }
}

#[test]
fn mig_slices_are_labelled_with_the_shared_keys() {
    // The keys are exactly the ones the operator reads.
    let labels = labels_of("a100-80gb-mig-mixed.yaml");
    let get = |key: &str| labels.get(key).map(String::as_str);
    assert_eq!(get(keys::GPU_MIG), Some("enabled"));
    assert_eq!(get(&keys::mig_count_key("3g.40gb")), Some("1"));
    assert_eq!(get(&keys::mig_memory_key("3g.40gb")), Some("40192"));
    assert_eq!(get(&keys::mig_count_key("2g.20gb")), Some("2"));
    assert_eq!(get(&keys::mig_memory_key("2g.20gb")), Some("19968"));
    // Every listed fixture is shipped and is a GPU fixture.
    for (file, _) in MIG_FIXTURES {
        assert!(GPU_FIXTURES.iter().any(|e| e.file == *file), "{file}");
    }
}

#[test]
fn a_mig_capable_gpu_with_mig_off_has_no_slice_labels() {
    let labels = labels_of("a100-80gb-x1.yaml");
    assert_eq!(
        labels.get(keys::GPU_MIG).map(String::as_str),
        Some("disabled")
    );
    let mig: Vec<&String> = labels
        .keys()
        .filter(|key| key.starts_with(keys::MIG_PREFIX))
        .collect();
    assert!(mig.is_empty(), "{mig:?}");
}

#[test]
fn nodes_without_usable_gpus_say_why_and_nothing_else_about_gpus() {
    for (file, reason) in ABSENT_FIXTURES {
        let labels = labels_of(file);
        assert_eq!(
            labels.get(keys::GPU_PRESENT).map(String::as_str),
            Some("false"),
            "{file}"
        );
        assert_eq!(
            labels.get(keys::GPU_ABSENT_REASON).map(String::as_str),
            Some(*reason),
            "{file}"
        );
        for key in [
            keys::GPU_PRODUCT,
            keys::GPU_COUNT,
            keys::GPU_MEMORY_MIB,
            keys::GPU_TIER,
            keys::GPU_BF16,
        ] {
            assert!(!labels.contains_key(key), "{file} must not carry {key}");
        }
        assert_eq!(gpu_facts(&labels), None, "{file}");
    }
    // NVML worked on the no-GPU node, so its driver is still reported; not on the others.
    assert_eq!(
        labels_of("no-gpu.yaml")
            .get(keys::GPU_DRIVER)
            .map(String::as_str),
        Some("550.54.15")
    );
    assert_eq!(labels_of("nvml-unavailable.yaml").len(), 2);
    assert_eq!(labels_of("nvml-error.yaml").len(), 2);
}

#[test]
fn every_shipped_fixture_is_tested_and_renders_valid_labels() {
    let mut tested: Vec<&str> = GPU_FIXTURES.iter().map(|e| e.file).collect();
    tested.extend(ABSENT_FIXTURES.iter().map(|(file, _)| *file));
    let mut shipped = Vec::new();
    for entry in std::fs::read_dir(fixtures_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".yaml") {
            for (key, value) in labels_of(&name) {
                assert!(key.starts_with(keys::PREFIX), "{name}: {key}");
                assert!(is_valid_label_key(&key), "{name}: {key:?}");
                // What the agent writes it also repairs and removes: its own label families.
                assert!(vramfit_api::labels::is_agent_label(&key), "{name}: {key:?}");
                assert!(is_valid_label_value(&value), "{name}: {key}={value:?}");
            }
            shipped.push(name);
        }
    }
    for name in &shipped {
        assert!(
            tested.contains(&name.as_str()),
            "fixture {name} has no expected labels in this test"
        );
    }
    assert_eq!(shipped.len(), tested.len());
}
