//! GPU catalog (docs/planning.md): product name → model, architecture, tier.
//!
//! Product names are matched by model token, never by substring: "NVIDIA A100-SXM4-80GB"
//! is an A100, not an A10; "NVIDIA A10G" is an A10G.
use vramfit_api::Tier;
use vramfit_api::labels::ComputeCapability;

/// GPU architecture, from the CUDA compute capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Architecture {
    /// 6.x: P100, P4000.
    Pascal,
    /// 7.0 and 7.2: V100.
    Volta,
    /// 7.5: T4, RTX 20xx.
    Turing,
    /// 8.0, 8.6, 8.7: A100, A30, A10, A10G, RTX 30xx, RTX A6000.
    Ampere,
    /// 8.9: L4, L40, L40S, RTX 40xx.
    Ada,
    /// 9.0: H100, H200.
    Hopper,
    /// 10.x and 12.x: B200, RTX 50xx.
    Blackwell,
    /// Anything else (older, or newer than this catalog).
    Unknown,
}

impl Architecture {
    /// The architecture of a compute capability.
    pub fn from_capability(cc: ComputeCapability) -> Self {
        match (cc.major, cc.minor) {
            (6, _) => Architecture::Pascal,
            (7, 0) | (7, 2) => Architecture::Volta,
            (7, 5) => Architecture::Turing,
            (8, 9) => Architecture::Ada,
            (8, _) => Architecture::Ampere,
            (9, _) => Architecture::Hopper,
            (10, _) | (12, _) => Architecture::Blackwell,
            _ => Architecture::Unknown,
        }
    }

    /// Lower-case name, as GFD's `gpu.family` label spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Architecture::Pascal => "pascal",
            Architecture::Volta => "volta",
            Architecture::Turing => "turing",
            Architecture::Ampere => "ampere",
            Architecture::Ada => "ada-lovelace",
            Architecture::Hopper => "hopper",
            Architecture::Blackwell => "blackwell",
            Architecture::Unknown => "unknown",
        }
    }
}

/// A GPU model the catalog knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuModel {
    /// Canonical name, e.g. `A10G`, `RTX 4090`.
    pub name: &'static str,
    /// Tokens that must appear consecutively in the product name.
    tokens: &'static [&'static str],
    /// Tier (docs/planning.md).
    pub tier: Tier,
    /// Compute capability of the model, for classes whose labels lack it.
    pub capability: ComputeCapability,
}

const fn model(
    name: &'static str,
    tokens: &'static [&'static str],
    tier: Tier,
    major: u32,
    minor: u32,
) -> GpuModel {
    GpuModel {
        name,
        tokens,
        tier,
        capability: ComputeCapability::new(major, minor),
    }
}

use Tier::*;

/// Every model the catalog knows. Order does not matter: matching is by whole tokens.
pub const MODELS: &[GpuModel] = &[
    model("H200", &["H200"], DatacenterHighMemory, 9, 0),
    model("H100", &["H100"], DatacenterHighMemory, 9, 0),
    model("A100", &["A100"], DatacenterHighMemory, 8, 0),
    model("B200", &["B200"], DatacenterHighMemory, 10, 0),
    model("L40S", &["L40S"], WorkstationHighMemory, 8, 9),
    model("L40", &["L40"], WorkstationHighMemory, 8, 9),
    model("RTX A6000", &["A6000"], WorkstationHighMemory, 8, 6),
    model("A10G", &["A10G"], DatacenterMidMemory, 8, 6),
    model("A10", &["A10"], DatacenterMidMemory, 8, 6),
    model("A30", &["A30"], DatacenterMidMemory, 8, 0),
    model("L4", &["L4"], DatacenterMidMemory, 8, 9),
    model("RTX 3090", &["RTX", "3090"], ConsumerHighEnd, 8, 6),
    model("RTX 4090", &["RTX", "4090"], ConsumerHighEnd, 8, 9),
    model("RTX 5090", &["RTX", "5090"], ConsumerHighEnd, 12, 0),
    model("V100", &["V100"], LegacyDatacenter, 7, 0),
    model("P100", &["P100"], LegacyDatacenter, 6, 0),
    model("T4", &["T4"], Other, 7, 5),
];

/// Splits a product name into upper-case tokens at spaces, `-` and `_`.
fn tokens(product: &str) -> Vec<String> {
    product
        .split([' ', '-', '_'])
        .filter(|t| !t.is_empty())
        .map(str::to_ascii_uppercase)
        .collect()
}

/// The catalog model of a product name (NVML's `NVIDIA A10G` or GFD's `NVIDIA-A10G`), if known.
pub fn identify(product: &str) -> Option<&'static GpuModel> {
    let product_tokens = tokens(product);
    MODELS.iter().find(|m| {
        product_tokens
            .windows(m.tokens.len())
            .any(|w| w.iter().zip(m.tokens).all(|(a, b)| a == b))
    })
}

/// The tier of a product name: `other` for unknown models.
pub fn tier_of(product: &str) -> Tier {
    identify(product).map_or(Tier::Other, |m| m.tier)
}

/// Memory kept free on every GPU (docs/planning.md): min(cap, share of VRAM), in MiB.
pub fn memory_buffer_mib(tier: Tier, vram_mib: u64) -> u64 {
    let (cap_gib, percent): (u64, u32) = match tier {
        DatacenterHighMemory => (20, 15),
        WorkstationHighMemory => (12, 20),
        DatacenterMidMemory => (6, 20),
        ConsumerHighEnd => (12, 20),
        LegacyDatacenter => (4, 25),
        Other => (8, 20),
    };
    cap_gib
        .saturating_mul(1024)
        .min(crate::memory::percent_of(vram_mib, percent))
}

/// Share of each GPU's memory a process may use (docs/planning.md), in percent.
pub fn memory_fraction_percent(tier: Tier) -> u32 {
    match tier {
        DatacenterHighMemory => 95,
        LegacyDatacenter => 80,
        _ => 90,
    }
}

/// PYTORCH_CUDA_ALLOC_CONF by architecture (docs/planning.md).
pub fn pytorch_cuda_alloc_conf(arch: Architecture) -> &'static str {
    match arch {
        Architecture::Volta => "max_split_size_mb:32",
        Architecture::Ampere | Architecture::Ada => "max_split_size_mb:128",
        Architecture::Hopper | Architecture::Blackwell => "max_split_size_mb:256",
        _ => "max_split_size_mb:64",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_of(product: &str) -> Option<&'static str> {
        identify(product).map(|m| m.name)
    }

    #[test]
    fn every_domain_model_is_identified_with_its_tier() {
        let cases = [
            ("NVIDIA H200", "H200", DatacenterHighMemory),
            ("NVIDIA H100 80GB HBM3", "H100", DatacenterHighMemory),
            ("NVIDIA-H100-PCIe", "H100", DatacenterHighMemory),
            ("NVIDIA A100-SXM4-80GB", "A100", DatacenterHighMemory),
            ("NVIDIA A100-PCIE-40GB", "A100", DatacenterHighMemory),
            ("NVIDIA B200", "B200", DatacenterHighMemory),
            ("NVIDIA L40S", "L40S", WorkstationHighMemory),
            ("NVIDIA L40", "L40", WorkstationHighMemory),
            ("NVIDIA RTX A6000", "RTX A6000", WorkstationHighMemory),
            ("NVIDIA A10G", "A10G", DatacenterMidMemory),
            ("NVIDIA A10", "A10", DatacenterMidMemory),
            ("NVIDIA A30", "A30", DatacenterMidMemory),
            ("NVIDIA L4", "L4", DatacenterMidMemory),
            ("NVIDIA GeForce RTX 3090", "RTX 3090", ConsumerHighEnd),
            ("NVIDIA GeForce RTX 4090", "RTX 4090", ConsumerHighEnd),
            ("NVIDIA GeForce RTX 5090", "RTX 5090", ConsumerHighEnd),
            ("Tesla V100-SXM2-16GB", "V100", LegacyDatacenter),
            ("Tesla-V100-PCIE-32GB", "V100", LegacyDatacenter),
            ("Tesla P100-PCIE-16GB", "P100", LegacyDatacenter),
        ];
        for (product, name, tier) in cases {
            assert_eq!(name_of(product), Some(name), "{product}");
            assert_eq!(tier_of(product), tier, "{product}");
        }
    }

    #[test]
    fn model_tokens_are_not_substrings() {
        // The trap: A100 contains "A10", L40S contains "L40" and "L4".
        assert_eq!(name_of("NVIDIA A100-SXM4-80GB"), Some("A100"));
        assert_eq!(name_of("NVIDIA-A10"), Some("A10"));
        assert_eq!(name_of("NVIDIA L40S"), Some("L40S"));
        assert_eq!(name_of("NVIDIA L4"), Some("L4"));
        assert_eq!(name_of("NVIDIA GeForce RTX 4090 D"), Some("RTX 4090"));
        assert_eq!(name_of("NVIDIA A1000"), None);
        assert_eq!(name_of("NVIDIA GeForce GTX 1080 Ti"), None);
    }

    #[test]
    fn unknown_models_are_tier_other() {
        assert_eq!(tier_of("NVIDIA Quadro P4000"), Other);
        assert_eq!(tier_of("Tesla T4"), Other);
        assert_eq!(tier_of(""), Other);
    }

    #[test]
    fn architecture_follows_compute_capability() {
        let arch = |a, b| Architecture::from_capability(ComputeCapability::new(a, b));
        assert_eq!(arch(6, 1), Architecture::Pascal);
        assert_eq!(arch(7, 0), Architecture::Volta);
        assert_eq!(arch(7, 5), Architecture::Turing);
        assert_eq!(arch(8, 0), Architecture::Ampere);
        assert_eq!(arch(8, 6), Architecture::Ampere);
        assert_eq!(arch(8, 9), Architecture::Ada);
        assert_eq!(arch(9, 0), Architecture::Hopper);
        assert_eq!(arch(10, 0), Architecture::Blackwell);
        assert_eq!(arch(12, 0), Architecture::Blackwell);
        assert_eq!(arch(5, 2), Architecture::Unknown);
    }

    #[test]
    fn buffers_and_fractions_follow_the_tier_table() {
        // H100 80GB as NVML reports it: 15% (12233 MiB) is below the 20 GiB cap.
        assert_eq!(memory_buffer_mib(DatacenterHighMemory, 81559), 12233);
        // H200: 15% of 143771 MiB is above the cap, so 20 GiB.
        assert_eq!(memory_buffer_mib(DatacenterHighMemory, 143771), 20 * 1024);
        assert_eq!(memory_buffer_mib(DatacenterMidMemory, 23028), 4605);
        assert_eq!(memory_buffer_mib(LegacyDatacenter, 16160), 4040);
        assert_eq!(memory_buffer_mib(LegacyDatacenter, 32768), 4096);
        assert_eq!(memory_buffer_mib(Other, 15360), 3072);
        assert_eq!(memory_fraction_percent(DatacenterHighMemory), 95);
        assert_eq!(memory_fraction_percent(LegacyDatacenter), 80);
        assert_eq!(memory_fraction_percent(DatacenterMidMemory), 90);
        assert_eq!(
            pytorch_cuda_alloc_conf(Architecture::Volta),
            "max_split_size_mb:32"
        );
        assert_eq!(
            pytorch_cuda_alloc_conf(Architecture::Ada),
            "max_split_size_mb:128"
        );
        assert_eq!(
            pytorch_cuda_alloc_conf(Architecture::Hopper),
            "max_split_size_mb:256"
        );
        assert_eq!(
            pytorch_cuda_alloc_conf(Architecture::Turing),
            "max_split_size_mb:64"
        );
    }
}
