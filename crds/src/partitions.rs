//! How a node's GPUs reach pods when not as whole GPUs: MIG slices and shared GPUs
//! (time-slicing, MPS), read from node labels. The vramfit agent labels what NVML sees (MIG
//! mode and slices); what the device plugin is configured to do with them (MIG strategy,
//! sharing replicas) only NVIDIA's GPU Feature Discovery labels, so those are read from GFD
//! whichever source the GPU facts came from.
use std::collections::BTreeMap;

use crate::labels::{
    GFD_MIG_PREFIX, GFD_MIG_PRODUCT_INFIX, GFD_MIG_STRATEGY, GFD_PRODUCT, GFD_REPLICAS,
    GFD_SHARING_STRATEGY, GPU_MIG, LabelSource, MAX_GPU_MEMORY_MIB, MAX_GPUS_PER_NODE, MIG_PREFIX,
    SHARED_PRODUCT_SUFFIX, mig_profile_key,
};

/// Replicas per shared GPU believed at most (the device plugin has no limit; a label beyond
/// this is a typo, and a GPU split further than this has no memory left to plan with).
pub const MAX_REPLICAS: u32 = 64;

/// The slices of one MIG profile on a node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MigSlices {
    /// Profile as label keys spell it: `3g.40gb`.
    pub profile: String,
    /// Slices of this profile on the node.
    pub count: u32,
    /// Memory of one slice, MiB.
    pub memory_mib: u64,
}

/// How the device plugin advertises MIG slices (its `migStrategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigStrategy {
    /// Every slice is an `nvidia.com/gpu` (all slices of a node must be one profile).
    Single,
    /// Each profile is its own resource, `nvidia.com/mig-<profile>`.
    Mixed,
}

impl MigStrategy {
    /// Parses GFD's `nvidia.com/mig.strategy` value (`none` and anything else: `None`).
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "single" => Some(MigStrategy::Single),
            "mixed" => Some(MigStrategy::Mixed),
            _ => None,
        }
    }
}

/// One GPU handed to several pods by the device plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuSharing {
    /// Pods per GPU.
    pub replicas: u32,
    /// `time-slicing` or `mps`.
    pub strategy: String,
    /// Whether the device plugin renamed the resource to `nvidia.com/gpu.shared`.
    pub renamed: bool,
}

/// MIG slices on a node and how they are advertised.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigFacts {
    /// MIG is enabled on the node's GPUs: whole-GPU scheduling no longer holds there.
    pub enabled: bool,
    /// Slices by profile, sorted by profile (empty when MIG is off).
    pub slices: Vec<MigSlices>,
    /// GFD's strategy label, when present.
    pub strategy: Option<MigStrategy>,
}

/// The MIG facts of a node whose GPU facts came from `source`.
pub fn mig_facts(labels: &BTreeMap<String, String>, source: LabelSource) -> MigFacts {
    let strategy = labels
        .get(GFD_MIG_STRATEGY)
        .and_then(|v| MigStrategy::parse(v));
    let (enabled, slices) = match source {
        LabelSource::Vramfit => {
            let enabled = labels.get(GPU_MIG).map(String::as_str) == Some("enabled");
            let slices = if enabled {
                profile_slices(labels, MIG_PREFIX, "memory-mib")
            } else {
                Vec::new()
            };
            (enabled, slices)
        }
        LabelSource::Gfd => {
            let slices = match strategy {
                Some(MigStrategy::Mixed) => profile_slices(labels, GFD_MIG_PREFIX, "memory"),
                Some(MigStrategy::Single) => gfd_single_slice(labels).into_iter().collect(),
                None => Vec::new(),
            };
            (!slices.is_empty(), slices)
        }
    };
    MigFacts {
        enabled,
        slices,
        strategy,
    }
}

/// `<prefix><profile>.count` and `<prefix><profile>.<memory_suffix>` pairs, within bounds.
fn profile_slices(
    labels: &BTreeMap<String, String>,
    prefix: &str,
    memory_suffix: &str,
) -> Vec<MigSlices> {
    labels
        .range(prefix.to_string()..)
        .take_while(|(key, _)| key.starts_with(prefix))
        .filter_map(|(key, value)| {
            let profile = key.strip_prefix(prefix)?.strip_suffix(".count")?;
            let count: u32 = value.parse().ok()?;
            let memory_mib: u64 = labels
                .get(&format!("{prefix}{profile}.{memory_suffix}"))?
                .parse()
                .ok()?;
            in_bounds(count, memory_mib).then(|| MigSlices {
                profile: mig_profile_key(profile),
                count,
                memory_mib,
            })
        })
        .collect()
}

/// Under GFD's `single` strategy the product names the profile (`A100-SXM4-40GB-MIG-1g.5gb`)
/// and the count and memory labels describe slices.
fn gfd_single_slice(labels: &BTreeMap<String, String>) -> Option<MigSlices> {
    let (_, profile) = labels
        .get(GFD_PRODUCT)?
        .rsplit_once(GFD_MIG_PRODUCT_INFIX)?;
    let count: u32 = labels.get(crate::labels::GFD_COUNT)?.parse().ok()?;
    let memory_mib: u64 = labels.get(crate::labels::GFD_MEMORY)?.parse().ok()?;
    in_bounds(count, memory_mib).then(|| MigSlices {
        profile: mig_profile_key(profile),
        count,
        memory_mib,
    })
}

/// GFD's single-strategy product without its MIG part: `A100-SXM4-40GB-MIG-1g.5gb` →
/// `A100-SXM4-40GB`.
pub fn parent_product(product: &str) -> &str {
    product
        .rsplit_once(GFD_MIG_PRODUCT_INFIX)
        .map_or(product, |(parent, _)| parent)
}

fn in_bounds(count: u32, memory_mib: u64) -> bool {
    (1..=MAX_GPUS_PER_NODE).contains(&count) && (1..=MAX_GPU_MEMORY_MIB).contains(&memory_mib)
}

/// Whether, and how, the device plugin shares each GPU of the node between pods.
pub fn gpu_sharing(labels: &BTreeMap<String, String>) -> Option<GpuSharing> {
    let strategy = labels.get(GFD_SHARING_STRATEGY).map(String::as_str);
    let replicas: u32 = labels.get(GFD_REPLICAS)?.parse().ok()?;
    if !(2..=MAX_REPLICAS).contains(&replicas) || strategy == Some("none") {
        return None;
    }
    Some(GpuSharing {
        replicas,
        // GFD before v0.15 wrote replicas without a strategy: time-slicing was the only one.
        strategy: strategy.unwrap_or("time-slicing").to_string(),
        renamed: labels
            .get(GFD_PRODUCT)
            .is_some_and(|p| p.ends_with(SHARED_PRODUCT_SUFFIX)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::{GFD_COUNT, GFD_MEMORY, mig_count_key, mig_memory_key};

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn slices(list: &[(&str, u32, u64)]) -> Vec<MigSlices> {
        list.iter()
            .map(|&(profile, count, memory_mib)| MigSlices {
                profile: profile.to_string(),
                count,
                memory_mib,
            })
            .collect()
    }

    #[test]
    fn the_agent_labels_each_profile_on_a_mig_node() {
        let l = labels(&[
            (GPU_MIG, "enabled"),
            (&mig_count_key("3g.40gb"), "1"),
            (&mig_memory_key("3g.40gb"), "40192"),
            (&mig_count_key("2g.20gb"), "2"),
            (&mig_memory_key("2g.20gb"), "19968"),
            (&mig_count_key("1g.10gb"), "1"),
        ]);
        let mig = mig_facts(&l, LabelSource::Vramfit);
        assert!(mig.enabled);
        assert_eq!(
            mig.slices,
            slices(&[("2g.20gb", 2, 19968), ("3g.40gb", 1, 40192)]),
            "a profile without its memory label is not believed"
        );
        assert_eq!(mig.strategy, None);
    }

    #[test]
    fn mig_off_or_missing_profiles_give_no_slices() {
        let off = labels(&[
            (GPU_MIG, "disabled"),
            (&mig_count_key("1g.5gb"), "7"),
            (&mig_memory_key("1g.5gb"), "4864"),
        ]);
        assert_eq!(mig_facts(&off, LabelSource::Vramfit), MigFacts::default());
        let enabled_but_unlabelled = labels(&[(GPU_MIG, "enabled")]);
        let mig = mig_facts(&enabled_but_unlabelled, LabelSource::Vramfit);
        assert!(mig.enabled && mig.slices.is_empty());
    }

    #[test]
    fn gfd_mixed_strategy_labels_each_profile() {
        let l = labels(&[
            (GFD_MIG_STRATEGY, "mixed"),
            ("nvidia.com/mig-1g.5gb.count", "7"),
            ("nvidia.com/mig-1g.5gb.memory", "4864"),
            ("nvidia.com/mig-1g.5gb.multiprocessors", "14"),
        ]);
        let mig = mig_facts(&l, LabelSource::Gfd);
        assert_eq!(mig.slices, slices(&[("1g.5gb", 7, 4864)]));
        assert_eq!(mig.strategy, Some(MigStrategy::Mixed));
    }

    #[test]
    fn gfd_single_strategy_names_the_profile_in_the_product() {
        let l = labels(&[
            (GFD_MIG_STRATEGY, "single"),
            (GFD_PRODUCT, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"),
            (GFD_COUNT, "7"),
            (GFD_MEMORY, "4864"),
        ]);
        let mig = mig_facts(&l, LabelSource::Gfd);
        assert_eq!(mig.slices, slices(&[("1g.5gb", 7, 4864)]));
        assert_eq!(
            parent_product("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"),
            "NVIDIA-A100-SXM4-40GB"
        );
        assert_eq!(parent_product("NVIDIA-A10G"), "NVIDIA-A10G");
        let whole = labels(&[(GFD_MIG_STRATEGY, "single"), (GFD_PRODUCT, "NVIDIA-A10G")]);
        assert!(!mig_facts(&whole, LabelSource::Gfd).enabled);
    }

    #[test]
    fn slices_beyond_physical_bounds_are_not_believed() {
        let l = labels(&[
            (GPU_MIG, "enabled"),
            (&mig_count_key("1g.5gb"), "4294967295"),
            (&mig_memory_key("1g.5gb"), "4864"),
            (&mig_count_key("2g.10gb"), "3"),
            (&mig_memory_key("2g.10gb"), "0"),
        ]);
        assert!(mig_facts(&l, LabelSource::Vramfit).slices.is_empty());
    }

    #[test]
    fn shared_gpus_come_from_the_device_plugin_labels() {
        let shared = gpu_sharing(&labels(&[
            (GFD_REPLICAS, "4"),
            (GFD_SHARING_STRATEGY, "mps"),
            (GFD_PRODUCT, "NVIDIA-A10G-SHARED"),
        ]));
        assert_eq!(
            shared,
            Some(GpuSharing {
                replicas: 4,
                strategy: "mps".into(),
                renamed: true
            })
        );
        let old_gfd = gpu_sharing(&labels(&[(GFD_REPLICAS, "2")])).unwrap();
        assert_eq!(old_gfd.strategy, "time-slicing");
        assert!(!old_gfd.renamed);
        for (replicas, strategy) in [("1", "none"), ("4", "none"), ("0", "mps"), ("65", "mps")] {
            assert_eq!(
                gpu_sharing(&labels(&[
                    (GFD_REPLICAS, replicas),
                    (GFD_SHARING_STRATEGY, strategy)
                ])),
                None,
                "{replicas} {strategy}"
            );
        }
    }
}
