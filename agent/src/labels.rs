//! Rendering a GPU reading into the node's `vramfit.io/` labels. Pure: the whole decision of
//! what the node says about its GPUs lives here, tested from fixtures.
use std::collections::BTreeMap;

use vramfit_api::labels::{self as keys, ComputeCapability, to_label_value};
use vramfit_planner::gpu_catalog::{Architecture, tier_of};

use crate::gpu::{GpuDevice, GpuState, MigMode, Probe};

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
    labels
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

/// The `vramfit.io/` labels among a node's labels: what this agent owns.
pub fn own_labels(all: &BTreeMap<String, String>) -> NodeLabels {
    all.iter()
        .filter(|(key, _)| key.starts_with(keys::PREFIX))
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

    fn gpu(name: &str, memory_mib: u64, cc: (u32, u32), mig: MigMode) -> GpuDevice {
        GpuDevice {
            name: name.to_string(),
            memory_mib,
            compute_capability: ComputeCapability::new(cc.0, cc.1),
            mig,
        }
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
            ("nvidia.com/gpu.product", "Tesla-T4"),
            ("kubernetes.io/hostname", "n1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let own = own_labels(&all);
        assert_eq!(own.len(), 1);
        assert_eq!(to_lines(&own), "vramfit.io/gpu.present=true\n");
    }
}
