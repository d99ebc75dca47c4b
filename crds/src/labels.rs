//! Node labels: the keys the vramfit agent writes, the NVIDIA GPU Feature Discovery (GFD)
//! keys read as a fallback, and the [`GpuFacts`] the operator plans from.
use std::collections::BTreeMap;
use std::fmt;

use crate::partitions::{GpuSharing, MigFacts, gpu_sharing, mig_facts};

/// Prefix of every label the agent writes.
pub const PREFIX: &str = "vramfit.io/";
/// Prefix of the agent's GPU labels (`vramfit.io/gpu.*`).
pub const GPU_PREFIX: &str = "vramfit.io/gpu.";

/// Whether `key` is one of the agent's label families (`vramfit.io/gpu.*`,
/// `vramfit.io/mig-*`): those it writes, repairs and removes. Other `vramfit.io/` keys on a
/// Node (an admin's, a test suite's) are not the agent's.
pub fn is_agent_label(key: &str) -> bool {
    key.starts_with(GPU_PREFIX) || key.starts_with(MIG_PREFIX)
}

/// `true` when the node has at least one usable NVIDIA GPU.
pub const GPU_PRESENT: &str = "vramfit.io/gpu.present";
/// Product name, GFD style (spaces as `-`): `NVIDIA-A10G`.
pub const GPU_PRODUCT: &str = "vramfit.io/gpu.product";
/// GPUs on the node.
pub const GPU_COUNT: &str = "vramfit.io/gpu.count";
/// Memory per GPU in MiB, as NVML reports it (the smallest GPU on mixed nodes).
pub const GPU_MEMORY_MIB: &str = "vramfit.io/gpu.memory-mib";
/// CUDA compute capability, `8.6`.
pub const GPU_COMPUTE_CAPABILITY: &str = "vramfit.io/gpu.compute-capability";
/// Architecture family, `ampere`.
pub const GPU_FAMILY: &str = "vramfit.io/gpu.family";
/// vramfit tier, `datacenter_mid_memory`.
pub const GPU_TIER: &str = "vramfit.io/gpu.tier";
/// `true` where bfloat16 runs natively (compute capability >= 8.0).
pub const GPU_BF16: &str = "vramfit.io/gpu.bf16";
/// `true` where Flash Attention 2 runs (compute capability >= 8.0).
pub const GPU_FLASH_ATTENTION: &str = "vramfit.io/gpu.flash-attention";
/// NVIDIA driver version.
pub const GPU_DRIVER: &str = "vramfit.io/gpu.driver";
/// Highest CUDA version the driver supports, `12.4`.
pub const GPU_CUDA_DRIVER: &str = "vramfit.io/gpu.cuda-driver";
/// MIG mode: `enabled`, `disabled` or `unsupported`.
pub const GPU_MIG: &str = "vramfit.io/gpu.mig";
/// `true` when the node has GPUs of more than one model.
pub const GPU_MIXED: &str = "vramfit.io/gpu.mixed";
/// Why `gpu.present` is false: `no-gpus`, `nvml-unavailable`, `nvml-error`.
pub const GPU_ABSENT_REASON: &str = "vramfit.io/gpu.absent-reason";

/// Per MIG profile present on a node (MIG enabled): `vramfit.io/mig-<profile>.count`, the
/// slices of that profile on the node, and `vramfit.io/mig-<profile>.memory-mib`, the memory
/// of one slice as NVML reports it. `<profile>` is [`mig_profile_key`] of NVML's profile name.
pub const MIG_PREFIX: &str = "vramfit.io/mig-";

/// GFD's product label.
pub const GFD_PRODUCT: &str = "nvidia.com/gpu.product";
/// GFD's GPU count label.
pub const GFD_COUNT: &str = "nvidia.com/gpu.count";
/// GFD's memory label (MiB per GPU).
pub const GFD_MEMORY: &str = "nvidia.com/gpu.memory";
/// GFD's compute capability major.
pub const GFD_COMPUTE_MAJOR: &str = "nvidia.com/gpu.compute.major";
/// GFD's compute capability minor.
pub const GFD_COMPUTE_MINOR: &str = "nvidia.com/gpu.compute.minor";
/// GFD's architecture family.
pub const GFD_FAMILY: &str = "nvidia.com/gpu.family";

/// GFD's MIG strategy: `none`, `single` or `mixed` (the device plugin's `migStrategy`).
pub const GFD_MIG_STRATEGY: &str = "nvidia.com/mig.strategy";
/// GFD's per-profile labels under the `mixed` strategy: `nvidia.com/mig-<profile>.count` and
/// `.memory` (MiB per slice).
pub const GFD_MIG_PREFIX: &str = "nvidia.com/mig-";
/// GFD's sharing labels: replicas per GPU (time-slicing or MPS) and the strategy
/// (`none`, `time-slicing`, `mps`).
pub const GFD_REPLICAS: &str = "nvidia.com/gpu.replicas";
/// See [`GFD_REPLICAS`].
pub const GFD_SHARING_STRATEGY: &str = "nvidia.com/gpu.sharing-strategy";
/// Suffix GFD adds to the product of shared GPUs when the device plugin renames the resource
/// (`renameByDefault`), which is then [`SHARED_GPU_RESOURCE`].
pub const SHARED_PRODUCT_SUFFIX: &str = "-SHARED";
/// Infix of GFD's product under the MIG `single` strategy: `A100-SXM4-40GB-MIG-1g.5gb`.
pub const GFD_MIG_PRODUCT_INFIX: &str = "-MIG-";

/// The extended resource GPUs are requested with.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The resource of shared GPUs when the device plugin renames them.
pub const SHARED_GPU_RESOURCE: &str = "nvidia.com/gpu.shared";

/// Whether a pod or node resource is one the device plugin hands GPUs out with: whole GPUs,
/// shared GPUs, or MIG slices.
pub fn is_gpu_resource(name: &str) -> bool {
    name == GPU_RESOURCE || name == SHARED_GPU_RESOURCE || name.starts_with("nvidia.com/mig-")
}

/// A MIG profile as label keys and resource names spell it: NVML's `1g.10gb+me` becomes
/// `1g.10gb.me` (`+` is not allowed in either), letters lower case.
pub fn mig_profile_key(profile: &str) -> String {
    profile
        .trim()
        .chars()
        .map(|c| match c {
            c if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') => {
                c.to_ascii_lowercase()
            }
            _ => '.',
        })
        .collect()
}

/// `vramfit.io/mig-<profile>.count`.
pub fn mig_count_key(profile: &str) -> String {
    format!("{MIG_PREFIX}{}.count", mig_profile_key(profile))
}

/// `vramfit.io/mig-<profile>.memory-mib`.
pub fn mig_memory_key(profile: &str) -> String {
    format!("{MIG_PREFIX}{}.memory-mib", mig_profile_key(profile))
}

/// The resource of one slice under the `mixed` strategy: `nvidia.com/mig-<profile>`.
pub fn mig_resource(profile: &str) -> String {
    format!("nvidia.com/mig-{}", mig_profile_key(profile))
}

/// A CUDA compute capability; compared as a number pair, never as a string
/// ("10.0" > "9.0", which a string comparison gets wrong).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComputeCapability {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl ComputeCapability {
    /// A capability from its parts.
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// Parses `8.6`; `None` beyond [`MAX_COMPUTE_MAJOR`] or a minor above 99.
    pub fn parse(s: &str) -> Option<Self> {
        let (major, minor) = s.trim().split_once('.')?;
        Self::checked(major.parse().ok()?, minor.parse().ok()?)
    }

    /// A capability within physical bounds, or `None`.
    pub fn checked(major: u32, minor: u32) -> Option<Self> {
        (major <= MAX_COMPUTE_MAJOR && minor <= 99).then_some(Self::new(major, minor))
    }

    /// bfloat16 and Flash Attention 2 need Ampere (8.0) or newer.
    pub fn supports_bf16(self) -> bool {
        self >= Self::new(8, 0)
    }
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Where a node's GPU facts were read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelSource {
    /// The vramfit agent's labels.
    Vramfit,
    /// NVIDIA GPU Feature Discovery's labels.
    Gfd,
}

/// Node labels are believed only within physical bounds: a value beyond them (a typo, or a
/// label someone else wrote) leaves the node without GPU facts rather than feeding the
/// planner's arithmetic a number it could overflow on.
pub const MAX_GPUS_PER_NODE: u32 = 256;
/// Memory per GPU, MiB (1 TiB; an H200 has 141 GiB).
pub const MAX_GPU_MEMORY_MIB: u64 = 1 << 20;
/// Compute capability major version (the minor is bounded at 99 too).
pub const MAX_COMPUTE_MAJOR: u32 = 99;

/// What the operator knows of a node's GPUs, read from its labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuFacts {
    /// Product label value, e.g. `NVIDIA-A10G` (GFD's MIG `single` strategy names the slice
    /// too: `A100-SXM4-40GB-MIG-1g.5gb`).
    pub product: String,
    /// GPUs on the node.
    pub count: u32,
    /// Memory per GPU in MiB.
    pub memory_mib: u64,
    /// Compute capability, when the labels carry it.
    pub compute_capability: Option<ComputeCapability>,
    /// Which labels they came from.
    pub source: LabelSource,
    /// The agent found GPUs of more than one kind (`gpu.mixed`); product, memory and
    /// compute capability then describe the weakest.
    pub mixed: bool,
    /// MIG mode and slices.
    pub mig: MigFacts,
    /// GPUs shared between pods by the device plugin, if they are.
    pub sharing: Option<GpuSharing>,
}

/// Reads a node's GPU facts: the vramfit agent's labels first, GFD's when the agent's are
/// absent or the agent could not read NVML (GFD may still see the GPUs). `None` for a node
/// without GPUs or without enough labels to plan from.
pub fn gpu_facts(labels: &BTreeMap<String, String>) -> Option<GpuFacts> {
    if let Some(present) = labels.get(GPU_PRESENT) {
        if present != "true" {
            let reason = labels.get(GPU_ABSENT_REASON).map(String::as_str);
            // The agent saw the node and found no GPU: believe it over any stale GFD label.
            if reason.is_none_or(|r| r == "no-gpus") {
                return None;
            }
            return read_gfd_facts(labels);
        }
        return read_facts(
            labels,
            LabelSource::Vramfit,
            GPU_PRODUCT,
            GPU_COUNT,
            GPU_MEMORY_MIB,
            |l| {
                l.get(GPU_COMPUTE_CAPABILITY)
                    .and_then(|v| ComputeCapability::parse(v))
            },
        );
    }
    read_gfd_facts(labels)
}

fn read_gfd_facts(labels: &BTreeMap<String, String>) -> Option<GpuFacts> {
    read_facts(
        labels,
        LabelSource::Gfd,
        GFD_PRODUCT,
        GFD_COUNT,
        GFD_MEMORY,
        |l| {
            ComputeCapability::checked(
                l.get(GFD_COMPUTE_MAJOR)?.parse().ok()?,
                l.get(GFD_COMPUTE_MINOR)?.parse().ok()?,
            )
        },
    )
}

fn read_facts(
    labels: &BTreeMap<String, String>,
    source: LabelSource,
    product_key: &str,
    count_key: &str,
    memory_key: &str,
    capability: impl Fn(&BTreeMap<String, String>) -> Option<ComputeCapability>,
) -> Option<GpuFacts> {
    let count: u32 = labels.get(count_key)?.parse().ok()?;
    let memory_mib: u64 = labels.get(memory_key)?.parse().ok()?;
    if !(1..=MAX_GPUS_PER_NODE).contains(&count) || !(1..=MAX_GPU_MEMORY_MIB).contains(&memory_mib)
    {
        return None;
    }
    Some(GpuFacts {
        product: labels.get(product_key)?.clone(),
        count,
        memory_mib,
        compute_capability: capability(labels),
        source,
        mixed: source == LabelSource::Vramfit
            && labels.get(GPU_MIXED).map(String::as_str) == Some("true"),
        mig: mig_facts(labels, source),
        sharing: gpu_sharing(labels),
    })
}

/// Turns any text into a valid label value the way GFD does (spaces become `-`), replacing
/// other invalid characters with `_`, trimming to 63 characters and to alphanumerics at both
/// ends. Empty results become `unknown`.
pub fn to_label_value(text: &str) -> String {
    let mapped: String = text
        .trim()
        .chars()
        .map(|c| match c {
            ' ' => '-',
            c if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') => c,
            _ => '_',
        })
        .collect();
    let trimmed: String = mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .chars()
        .take(63)
        .collect();
    let trimmed = trimmed.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed.is_empty() {
        "unknown".to_string()
    } else {
        trimmed.to_string()
    }
}

/// Whether `value` is a valid Kubernetes label value.
pub fn is_valid_label_value(value: &str) -> bool {
    value.len() <= 63
        && (value.is_empty()
            || (value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                && value.starts_with(|c: char| c.is_ascii_alphanumeric())
                && value.ends_with(|c: char| c.is_ascii_alphanumeric())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn compute_capability_compares_as_numbers() {
        let ten = ComputeCapability::parse("10.0").unwrap();
        let nine = ComputeCapability::parse("9.0").unwrap();
        assert!(ten > nine, "a string comparison would put 10.0 below 9.0");
        assert!(!ComputeCapability::parse("7.5").unwrap().supports_bf16());
        assert!(ComputeCapability::parse("8.0").unwrap().supports_bf16());
        assert_eq!(ComputeCapability::parse("8"), None);
        assert_eq!(ComputeCapability::parse("a.b"), None);
    }

    #[test]
    fn vramfit_labels_win_over_gfd() {
        let l = labels(&[
            (GPU_PRESENT, "true"),
            (GPU_PRODUCT, "NVIDIA-A10G"),
            (GPU_COUNT, "4"),
            (GPU_MEMORY_MIB, "23028"),
            (GPU_COMPUTE_CAPABILITY, "8.6"),
            (GFD_PRODUCT, "NVIDIA-H100"),
            (GFD_COUNT, "8"),
            (GFD_MEMORY, "81559"),
        ]);
        let facts = gpu_facts(&l).unwrap();
        assert_eq!(facts.product, "NVIDIA-A10G");
        assert_eq!(facts.count, 4);
        assert_eq!(facts.memory_mib, 23028);
        assert_eq!(facts.compute_capability, Some(ComputeCapability::new(8, 6)));
        assert_eq!(facts.source, LabelSource::Vramfit);
    }

    #[test]
    fn gfd_labels_are_the_fallback() {
        let l = labels(&[
            (GFD_PRODUCT, "NVIDIA-H100-80GB-HBM3"),
            (GFD_COUNT, "8"),
            (GFD_MEMORY, "81559"),
            (GFD_COMPUTE_MAJOR, "9"),
            (GFD_COMPUTE_MINOR, "0"),
        ]);
        let facts = gpu_facts(&l).unwrap();
        assert_eq!(facts.source, LabelSource::Gfd);
        assert_eq!(facts.compute_capability, Some(ComputeCapability::new(9, 0)));
        assert_eq!(facts.count, 8);
    }

    #[test]
    fn gfd_labels_stand_in_when_the_agent_cannot_read_nvml() {
        let gfd = [
            (GFD_PRODUCT, "NVIDIA-A10G"),
            (GFD_COUNT, "1"),
            (GFD_MEMORY, "23028"),
            (GFD_COMPUTE_MAJOR, "8"),
            (GFD_COMPUTE_MINOR, "6"),
        ];
        let with_agent = |reason: &'static str| {
            let mut l = labels(&gfd);
            l.insert(GPU_PRESENT.into(), "false".into());
            l.insert(GPU_ABSENT_REASON.into(), reason.into());
            gpu_facts(&l)
        };
        assert_eq!(
            with_agent("nvml-unavailable").map(|f| f.source),
            Some(LabelSource::Gfd)
        );
        assert_eq!(with_agent("nvml-error").map(|f| f.count), Some(1));
        assert_eq!(
            with_agent("no-gpus"),
            None,
            "the agent saw no GPU: stale GFD labels lose"
        );
    }

    #[test]
    fn values_beyond_physical_bounds_give_no_facts() {
        let with = |count: &str, memory: &str| {
            gpu_facts(&labels(&[
                (GPU_PRESENT, "true"),
                (GPU_PRODUCT, "NVIDIA-A10G"),
                (GPU_COUNT, count),
                (GPU_MEMORY_MIB, memory),
                (GPU_COMPUTE_CAPABILITY, "8.6"),
            ]))
        };
        assert!(with("8", "81920").is_some());
        assert!(
            with("256", "1048576").is_some(),
            "the bounds themselves are allowed"
        );
        assert!(with("257", "81920").is_none());
        assert!(with("4294967295", "81920").is_none());
        assert!(with("8", "1048577").is_none());
        assert!(with("8", "18446744073709551615").is_none());
        assert_eq!(ComputeCapability::parse("100.0"), None);
        assert_eq!(ComputeCapability::parse("9.100"), None);
        assert_eq!(
            ComputeCapability::parse("8.10"),
            Some(ComputeCapability::new(8, 10))
        );
        assert_eq!(
            ComputeCapability::parse("12.0"),
            Some(ComputeCapability::new(12, 0))
        );
    }

    #[test]
    fn absent_or_incomplete_gpus_give_no_facts() {
        assert_eq!(
            gpu_facts(&labels(&[(GPU_PRESENT, "false"), (GFD_COUNT, "8")])),
            None
        );
        assert_eq!(
            gpu_facts(&labels(&[(GFD_PRODUCT, "Tesla-T4"), (GFD_COUNT, "1")])),
            None
        );
        assert_eq!(
            gpu_facts(&labels(&[
                (GFD_PRODUCT, "X"),
                (GFD_COUNT, "0"),
                (GFD_MEMORY, "1")
            ])),
            None
        );
        assert_eq!(
            gpu_facts(&labels(&[
                (GFD_PRODUCT, "X"),
                (GFD_COUNT, "two"),
                (GFD_MEMORY, "1")
            ])),
            None
        );
    }

    #[test]
    fn label_values_follow_gfd_and_stay_valid() {
        assert_eq!(
            to_label_value("NVIDIA H100 80GB HBM3"),
            "NVIDIA-H100-80GB-HBM3"
        );
        assert_eq!(
            to_label_value("Tesla V100-SXM2-16GB"),
            "Tesla-V100-SXM2-16GB"
        );
        assert_eq!(
            to_label_value("  (weird) name/with+chars  "),
            "weird_-name_with_chars"
        );
        assert_eq!(to_label_value("---"), "unknown");
        let long = "A".repeat(62) + "-B";
        let v = to_label_value(&long);
        assert!(is_valid_label_value(&v), "{v}");
        assert_eq!(v.len(), 62);
        assert!(!is_valid_label_value("-a"));
        assert!(!is_valid_label_value("a b"));
    }
}
