//! Rendering a GPU reading into the node's `vramfit.io/` labels. Pure: the whole decision of
//! what the node says about its GPUs lives here, tested from fixtures.
use std::collections::BTreeMap;

use vramfit_api::labels::{self as keys, ComputeCapability, to_label_value};
use vramfit_planner::gpu_catalog::{Architecture, tier_of};

use crate::gpu::{GpuDevice, GpuState, MigMode, Probe};
use tracing::debug;

/// A set of node labels, sorted by key.
pub type NodeLabels = BTreeMap<String, String>;

/// The labels a reading gives. Every key is under [`keys::PREFIX`], every value a valid label
/// value.
///
/// On a node that mixes GPU models, `gpu.mixed` is `true`, the count is all GPUs, and the
/// labels the planner sizes jobs from (product, memory, family, tier) describe the smallest
/// GPU (least memory, then lowest compute capability), and the compute capability is the
/// lowest on the node, so a plan never assumes more than any GPU has. bf16 and Flash Attention are `true` only when every GPU
/// on the node supports them: a bf16 job must never land on a pre-Ampere GPU.
///
/// These labels describe the physical GPUs, MIG or not; the slices of MIG-enabled GPUs add
/// the per-profile labels of [`mig_labels`].
pub fn render(probe: &Probe) -> NodeLabels {
    let mut labels = NodeLabels::new();
    let mut put = |key: &str, value: String| {
        labels.insert(key.to_string(), value);
    };
    if let Some(driver) = &probe.versions.driver {
        put(keys::GPU_DRIVER, to_label_value(driver));
    }
    if let Some(cuda) = &probe.versions.cuda_driver {
        put(keys::GPU_CUDA_DRIVER, to_label_value(cuda));
    }
    let gpus = match &probe.state {
        GpuState::Absent { reason, .. } => {
            put(keys::GPU_PRESENT, "false".to_string());
            put(keys::GPU_ABSENT_REASON, reason.as_str().to_string());
            return labels;
        }
        GpuState::Present(gpus) => gpus,
    };
    let Some(smallest) = smallest_gpu(gpus) else {
        // `Present` is never empty; an empty list still renders honestly.
        put(keys::GPU_PRESENT, "false".to_string());
        put(keys::GPU_ABSENT_REASON, "no-gpus".to_string());
        return labels;
    };
    // The operator decides bf16 and flash attention from this label: the weakest GPU counts.
    let cc = gpus
        .iter()
        .map(|g| g.compute_capability)
        .min()
        .unwrap_or(smallest.compute_capability);
    let all_support_bf16 = gpus.iter().all(|g| g.compute_capability.supports_bf16());
    put(keys::GPU_PRESENT, "true".to_string());
    put(keys::GPU_PRODUCT, to_label_value(&smallest.name));
    put(keys::GPU_COUNT, gpus.len().to_string());
    put(keys::GPU_MEMORY_MIB, smallest.memory_mib.to_string());
    put(keys::GPU_COMPUTE_CAPABILITY, capability_value(cc));
    put(
        keys::GPU_FAMILY,
        Architecture::from_capability(cc).as_str().to_string(),
    );
    put(keys::GPU_TIER, tier_of(&smallest.name).as_str().to_string());
    put(keys::GPU_BF16, all_support_bf16.to_string());
    put(keys::GPU_FLASH_ATTENTION, all_support_bf16.to_string());
    put(keys::GPU_MIG, node_mig_mode(gpus).as_str().to_string());
    put(keys::GPU_MIXED, is_mixed(gpus).to_string());
    labels.extend(mig_labels(gpus));
    labels
}

/// Per MIG profile on the node's MIG-enabled GPUs: `mig-<profile>.count`, the slices of that
/// profile on the whole node, and `mig-<profile>.memory-mib`, the smallest such slice (a pod
/// may get any of them). Profiles NVML spells differently but that share a key
/// (`1g.10gb+me`, `1g.10gb.me`) are counted together; a profile whose key would not be a
/// valid label key is left out.
pub fn mig_labels(gpus: &[GpuDevice]) -> NodeLabels {
    // Keyed by the label spelling, so two spellings never overwrite each other's count.
    let mut profiles: BTreeMap<String, (u64, u64, &str)> = BTreeMap::new();
    let slices = gpus
        .iter()
        .filter(|g| g.mig == MigMode::Enabled)
        .flat_map(|g| &g.mig_devices);
    for slice in slices {
        let entry = profiles
            .entry(keys::mig_profile_key(&slice.profile))
            .or_insert((0, u64::MAX, slice.profile.as_str()));
        entry.0 += 1;
        entry.1 = entry.1.min(slice.memory_mib);
    }
    let mut labels = NodeLabels::new();
    for (count, memory_mib, profile) in profiles.into_values() {
        let (count_key, memory_key) = (keys::mig_count_key(profile), keys::mig_memory_key(profile));
        if !is_valid_label_key(&count_key) || !is_valid_label_key(&memory_key) {
            debug!(
                profile,
                "MIG profile makes no valid label key, not labelling it"
            );
            continue;
        }
        labels.insert(count_key, count.to_string());
        labels.insert(memory_key, memory_mib.to_string());
    }
    labels
}

/// Whether `key` is a valid Kubernetes label key: an optional DNS subdomain prefix and `/`,
/// then a name of 1 to 63 characters (alphanumerics at both ends; `-`, `_`, `.` inside).
pub fn is_valid_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    prefix_ok && name_ok
}

/// The GPU a mixed node is planned from: least memory, then lowest compute capability
/// (then name, so the choice never depends on device order).
pub fn smallest_gpu(gpus: &[GpuDevice]) -> Option<&GpuDevice> {
    gpus.iter().min_by(|a, b| {
        (a.memory_mib, a.compute_capability, &a.name).cmp(&(
            b.memory_mib,
            b.compute_capability,
            &b.name,
        ))
    })
}

/// Whether the node has GPUs of more than one kind.
pub fn is_mixed(gpus: &[GpuDevice]) -> bool {
    gpus.split_first().is_some_and(|(first, rest)| {
        rest.iter().any(|g| {
            g.name != first.name
                || g.memory_mib != first.memory_mib
                || g.compute_capability != first.compute_capability
        })
    })
}

/// One MIG mode for the node: `enabled` if any GPU is partitioned (whole-GPU scheduling no
/// longer holds there), else `disabled` if any GPU could be, else `unsupported`.
pub fn node_mig_mode(gpus: &[GpuDevice]) -> MigMode {
    gpus.iter().map(|g| g.mig).max().unwrap_or_default()
}

fn capability_value(cc: ComputeCapability) -> String {
    to_label_value(&cc.to_string())
}

/// The agent's labels among a node's labels ([`keys::is_agent_label`]): what it compares,
/// repairs and removes. Other `vramfit.io/` keys are left alone.
pub fn own_labels(all: &BTreeMap<String, String>) -> NodeLabels {
    all.iter()
        .filter(|(key, _)| keys::is_agent_label(key))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// `key=value` lines, sorted by key, as `--print` shows them.
pub fn to_lines(labels: &NodeLabels) -> String {
    labels
        .iter()
        .map(|(key, value)| format!("{key}={value}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::MigDevice;

    fn gpu(name: &str, memory_mib: u64, cc: (u32, u32), mig: MigMode) -> GpuDevice {
        GpuDevice {
            name: name.to_string(),
            memory_mib,
            compute_capability: ComputeCapability::new(cc.0, cc.1),
            mig,
            mig_devices: vec![],
        }
    }

    fn partitioned(mig: MigMode, slices: &[(&str, u64)]) -> GpuDevice {
        GpuDevice {
            mig_devices: slices
                .iter()
                .map(|(profile, memory_mib)| MigDevice {
                    profile: profile.to_string(),
                    memory_mib: *memory_mib,
                })
                .collect(),
            ..gpu("NVIDIA A100-SXM4-80GB", 81920, (8, 0), mig)
        }
    }

    fn pairs(labels: &NodeLabels) -> Vec<(&str, &str)> {
        labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn mig_slices_are_counted_per_profile_over_the_node() {
        let gpus = [
            partitioned(
                MigMode::Enabled,
                &[("3g.40gb", 40192), ("2g.20gb", 19968), ("2g.20gb", 19968)],
            ),
            // Slices of one profile that differ: the smallest is what a pod can count on.
            partitioned(MigMode::Enabled, &[("2g.20gb", 19900), ("1g.10gb", 9728)]),
        ];
        let labels = mig_labels(&gpus);
        assert_eq!(
            pairs(&labels),
            [
                ("vramfit.io/mig-1g.10gb.count", "1"),
                ("vramfit.io/mig-1g.10gb.memory-mib", "9728"),
                ("vramfit.io/mig-2g.20gb.count", "3"),
                ("vramfit.io/mig-2g.20gb.memory-mib", "19900"),
                ("vramfit.io/mig-3g.40gb.count", "1"),
                ("vramfit.io/mig-3g.40gb.memory-mib", "40192"),
            ]
        );
        // The physical GPUs are still what the gpu.* labels describe.
        let all = render(&Probe::of_devices(Default::default(), gpus.to_vec()));
        assert_eq!(all[keys::GPU_COUNT], "2");
        assert_eq!(all[keys::GPU_MEMORY_MIB], "81920");
        assert_eq!(all[keys::GPU_MIG], "enabled");
        assert_eq!(all.len(), 11 + labels.len(), "{all:?}");
    }

    #[test]
    fn mig_labels_use_the_shared_keys_and_merge_spellings() {
        let labels = mig_labels(&[partitioned(
            MigMode::Enabled,
            &[
                ("1g.10gb+me", 9984),
                ("1g.10gb.me", 9728),
                ("1G.10GB+ME", 9984),
            ],
        )]);
        assert_eq!(labels.len(), 2, "{labels:?}");
        assert_eq!(labels[&keys::mig_count_key("1g.10gb+me")], "3");
        assert_eq!(labels[&keys::mig_memory_key("1g.10gb+me")], "9728");
        assert!(labels.contains_key("vramfit.io/mig-1g.10gb.me.count"));
    }

    #[test]
    fn only_mig_enabled_gpus_advertise_slices() {
        // Slices on a GPU whose mode is not enabled cannot be scheduled: none are labelled.
        for mode in [MigMode::Disabled, MigMode::Unsupported] {
            assert!(mig_labels(&[partitioned(mode, &[("1g.5gb", 4864)])]).is_empty());
        }
        assert!(mig_labels(&[partitioned(MigMode::Enabled, &[])]).is_empty());
        let mixed = [
            partitioned(MigMode::Enabled, &[("1g.5gb", 4864)]),
            partitioned(MigMode::Disabled, &[("1g.5gb", 4864)]),
        ];
        assert_eq!(mig_labels(&mixed)["vramfit.io/mig-1g.5gb.count"], "1");
    }

    #[test]
    fn mig_profiles_that_make_no_valid_key_are_left_out() {
        let long = format!("1g.{}gb", "9".repeat(60));
        let labels = mig_labels(&[partitioned(
            MigMode::Enabled,
            &[(long.as_str(), 4864), ("1g.5gb", 4864)],
        )]);
        assert_eq!(
            labels.keys().collect::<Vec<_>>(),
            [
                "vramfit.io/mig-1g.5gb.count",
                "vramfit.io/mig-1g.5gb.memory-mib"
            ]
        );
    }

    #[test]
    fn label_keys_are_checked_like_the_api_server_does() {
        assert!(is_valid_label_key("vramfit.io/mig-1g.5gb.count"));
        assert!(is_valid_label_key("app"));
        assert!(is_valid_label_key(&format!(
            "vramfit.io/{}",
            "a".repeat(63)
        )));
        assert!(!is_valid_label_key(&format!(
            "vramfit.io/{}",
            "a".repeat(64)
        )));
        assert!(!is_valid_label_key("vramfit.io/"));
        assert!(!is_valid_label_key("vramfit.io/-a"));
        assert!(!is_valid_label_key("vramfit.io/a+b"));
        assert!(!is_valid_label_key("Vramfit.io/a"));
        assert!(!is_valid_label_key("/a"));
    }

    #[test]
    fn the_smallest_gpu_is_least_memory_then_lowest_capability() {
        let gpus = [
            gpu("B", 16384, (8, 6), MigMode::Unsupported),
            gpu("A", 16384, (7, 5), MigMode::Unsupported),
            gpu("C", 81920, (7, 0), MigMode::Unsupported),
        ];
        assert_eq!(smallest_gpu(&gpus).map(|g| g.name.as_str()), Some("A"));
        assert!(is_mixed(&gpus));
        assert!(!is_mixed(&gpus[..1]));
        assert!(!is_mixed(&[]));
    }

    #[test]
    fn bf16_needs_every_gpu_to_support_it() {
        // The A10G has less memory, so it describes the node, but the V100 could run the pod.
        let probe = Probe::of_devices(
            Default::default(),
            vec![
                gpu("Tesla V100-SXM2-32GB", 32768, (7, 0), MigMode::Unsupported),
                gpu("NVIDIA A10G", 23028, (8, 6), MigMode::Unsupported),
            ],
        );
        let labels = render(&probe);
        assert_eq!(labels[keys::GPU_PRODUCT], "NVIDIA-A10G");
        // The operator plans dtype from this label: the V100's 7.0, not the A10G's 8.6.
        assert_eq!(labels[keys::GPU_COMPUTE_CAPABILITY], "7.0");
        assert_eq!(labels[keys::GPU_FAMILY], "volta");
        assert_eq!(labels[keys::GPU_BF16], "false");
        assert_eq!(labels[keys::GPU_FLASH_ATTENTION], "false");
        assert_eq!(labels[keys::GPU_MIXED], "true");
    }

    #[test]
    fn mig_is_enabled_when_any_gpu_is_partitioned() {
        let g = |mig| gpu("NVIDIA A100-SXM4-80GB", 81920, (8, 0), mig);
        assert_eq!(
            node_mig_mode(&[g(MigMode::Disabled), g(MigMode::Enabled)]),
            MigMode::Enabled
        );
        assert_eq!(
            node_mig_mode(&[g(MigMode::Disabled), g(MigMode::Unsupported)]),
            MigMode::Disabled
        );
        assert_eq!(
            node_mig_mode(&[g(MigMode::Unsupported)]),
            MigMode::Unsupported
        );
    }

    #[test]
    fn own_labels_are_the_vramfit_ones() {
        let all: BTreeMap<String, String> = [
            ("vramfit.io/gpu.present", "true"),
            ("vramfit.io/mig-1g.5gb.count", "7"),
            ("vramfit.io/e2e-run", "abc"),
            ("nvidia.com/gpu.product", "Tesla-T4"),
            ("kubernetes.io/hostname", "n1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let own = own_labels(&all);
        assert_eq!(
            to_lines(&own),
            "vramfit.io/gpu.present=true\nvramfit.io/mig-1g.5gb.count=7\n",
            "another vramfit.io/ key (an admin's, a test suite's) is not the agent's"
        );
    }
}
