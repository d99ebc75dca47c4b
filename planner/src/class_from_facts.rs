//! The classes a node forms from its GPU facts (docs/planning.md, "Node classes"). A class
//! must describe the GPUs a pod really gets there:
//! * whole GPUs: `<product>-x<count>`, selected by product and count; its node affinity keeps
//!   mixed, MIG-partitioned and shared nodes out (their product and count labels match too);
//! * a node mixing GPU models: `mixed-cc<capability>-<memory>mib-x<count>`, selected by what
//!   the planner depends on (weakest compute capability, smallest memory, count) and planned
//!   by its weakest GPU;
//! * MIG: one class per slice profile, `<product>-mig-<profile>-x<slices>`, a slice planned as
//!   a GPU with the slice's memory and the parent's compute capability. The device plugin's
//!   `single` strategy advertises slices as `nvidia.com/gpu` (and needs one profile per node);
//!   `mixed` advertises `nvidia.com/mig-<profile>`;
//! * shared GPUs (time-slicing, MPS): `<product>-x<count>-shared<replicas>`, each share
//!   planned with the GPU's memory divided by the replicas.
use std::collections::BTreeMap;

use vramfit_api::labels::{
    self, GFD_COUNT, GFD_MIG_PREFIX, GFD_PRODUCT, GFD_REPLICAS, GFD_SHARING_STRATEGY,
    GPU_COMPUTE_CAPABILITY, GPU_COUNT, GPU_MEMORY_MIB, GPU_MIG, GPU_MIXED, GPU_PRODUCT, GpuFacts,
    LabelSource, SHARED_GPU_RESOURCE, mig_count_key, mig_resource,
};
use vramfit_api::partitions::{MigSlices, MigStrategy, parent_product};

use crate::node_class::{GpuUnit, NodeClass, class_name};

/// The sharing strategies that hand one GPU to several pods.
const SHARING_STRATEGIES: [&str; 2] = ["time-slicing", "mps"];

/// The classes of a node with these facts. `mig_strategy` is the device plugin's, where the
/// facts do not say it (GFD's label wins); none means `single`, the GPU operator's default.
pub fn classes_from_facts(facts: &GpuFacts, mig_strategy: Option<MigStrategy>) -> Vec<NodeClass> {
    if facts.mig.enabled {
        let strategy = facts
            .mig
            .strategy
            .or(mig_strategy)
            .unwrap_or(MigStrategy::Single);
        return mig_classes(facts, strategy);
    }
    let mut class = if facts.mixed {
        match mixed_class(facts) {
            Some(class) => class,
            None => return Vec::new(),
        }
    } else {
        whole_class(facts)
    };
    if let Some(sharing) = &facts.sharing {
        class.name = format!("{}-shared{}", class.name, sharing.replicas);
        // Replicas are at least 2 where labels are read; never divide by zero all the same.
        class.memory_mib = class
            .memory_mib
            .checked_div(u64::from(sharing.replicas))
            .unwrap_or(0);
        class.memory_buffer_mib =
            crate::gpu_catalog::memory_buffer_mib(class.tier, class.memory_mib);
        class.gpus_per_node = class.gpus_per_node.saturating_mul(sharing.replicas);
        class.unit = GpuUnit::Shared {
            replicas: sharing.replicas,
            strategy: sharing.strategy.clone(),
        };
        if sharing.renamed {
            class.resource = SHARED_GPU_RESOURCE.to_string();
        }
        class
            .node_selector
            .insert(GFD_REPLICAS.to_string(), sharing.replicas.to_string());
        class
            .node_exclusions
            .retain(|(key, _)| key != GFD_SHARING_STRATEGY);
    }
    vec![class]
}

/// Product and count label keys of the facts' source.
fn keys(source: LabelSource) -> (&'static str, &'static str) {
    match source {
        LabelSource::Vramfit => (GPU_PRODUCT, GPU_COUNT),
        LabelSource::Gfd => (GFD_PRODUCT, GFD_COUNT),
    }
}

fn whole_class(facts: &GpuFacts) -> NodeClass {
    let (product_key, count_key) = keys(facts.source);
    let mut class = NodeClass::new(
        class_name(&facts.product, facts.count),
        facts.product.clone(),
        facts.count,
        facts.memory_mib,
        facts.compute_capability,
    );
    class.node_selector = BTreeMap::from([
        (product_key.to_string(), facts.product.clone()),
        (count_key.to_string(), facts.count.to_string()),
    ]);
    let mut exclusions = vec![(
        GFD_SHARING_STRATEGY.to_string(),
        SHARING_STRATEGIES.map(String::from).to_vec(),
    )];
    if facts.source == LabelSource::Vramfit {
        exclusions.push((GPU_MIXED.to_string(), vec!["true".to_string()]));
        exclusions.push((GPU_MIG.to_string(), vec!["enabled".to_string()]));
    }
    class.node_exclusions = exclusions;
    class
}

/// A mixed node's class, or none without a compute capability to name it by.
fn mixed_class(facts: &GpuFacts) -> Option<NodeClass> {
    let capability = facts.compute_capability?;
    let capability_label = labels::to_label_value(&capability.to_string());
    let mut class = NodeClass::new(
        format!(
            "mixed-cc{capability_label}-{}mib-x{}",
            facts.memory_mib, facts.count
        ),
        facts.product.clone(),
        facts.count,
        facts.memory_mib,
        Some(capability),
    );
    class.mixed = true;
    class.node_selector = BTreeMap::from([
        (GPU_MIXED.to_string(), "true".to_string()),
        (GPU_COMPUTE_CAPABILITY.to_string(), capability_label),
        (GPU_MEMORY_MIB.to_string(), facts.memory_mib.to_string()),
        (GPU_COUNT.to_string(), facts.count.to_string()),
    ]);
    class.node_exclusions = vec![
        (
            GFD_SHARING_STRATEGY.to_string(),
            SHARING_STRATEGIES.map(String::from).to_vec(),
        ),
        (GPU_MIG.to_string(), vec!["enabled".to_string()]),
    ];
    Some(class)
}

/// One class per profile (`mixed`), or one for the node's only profile (`single`; a node
/// with several profiles cannot be served under `single`, so it forms none).
fn mig_classes(facts: &GpuFacts, strategy: MigStrategy) -> Vec<NodeClass> {
    if strategy == MigStrategy::Single && facts.mig.slices.len() != 1 {
        return Vec::new();
    }
    facts
        .mig
        .slices
        .iter()
        .map(|slices| mig_class(facts, slices, strategy))
        .collect()
}

fn mig_class(facts: &GpuFacts, slices: &MigSlices, strategy: MigStrategy) -> NodeClass {
    let parent = parent_product(&facts.product);
    let profile = &slices.profile;
    let mut class = NodeClass::new(
        class_name(&format!("{parent}-mig-{profile}"), slices.count),
        parent,
        slices.count,
        slices.memory_mib,
        facts.compute_capability,
    );
    class.unit = GpuUnit::MigSlice {
        profile: profile.clone(),
    };
    if strategy == MigStrategy::Mixed {
        class.resource = mig_resource(profile);
    }
    let (product_key, count_key) = keys(facts.source);
    let count_key = match (facts.source, strategy) {
        (LabelSource::Vramfit, _) => mig_count_key(profile),
        (LabelSource::Gfd, MigStrategy::Mixed) => format!("{GFD_MIG_PREFIX}{profile}.count"),
        // GFD's single strategy rewrites product and count to describe slices.
        (LabelSource::Gfd, MigStrategy::Single) => count_key.to_string(),
    };
    class.node_selector = BTreeMap::from([
        (product_key.to_string(), facts.product.clone()),
        (count_key, slices.count.to_string()),
    ]);
    class
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_api::Tier;
    use vramfit_api::labels::{ComputeCapability, GPU_RESOURCE};
    use vramfit_api::partitions::{GpuSharing, MigFacts};

    fn facts(product: &str, count: u32, memory_mib: u64, cc: (u32, u32)) -> GpuFacts {
        GpuFacts {
            product: product.into(),
            count,
            memory_mib,
            compute_capability: Some(ComputeCapability::new(cc.0, cc.1)),
            source: LabelSource::Vramfit,
            mixed: false,
            mig: MigFacts::default(),
            sharing: None,
        }
    }

    fn mig(slices: &[(&str, u32, u64)], strategy: Option<MigStrategy>) -> MigFacts {
        MigFacts {
            enabled: true,
            slices: slices
                .iter()
                .map(|&(profile, count, memory_mib)| MigSlices {
                    profile: profile.into(),
                    count,
                    memory_mib,
                })
                .collect(),
            strategy,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn gfd_facts_select_nodes_by_gfd_labels() {
        let mut f = facts("NVIDIA-A100-SXM4-80GB", 8, 81_920, (8, 0));
        f.source = LabelSource::Gfd;
        let [c] = classes_from_facts(&f, None).try_into().unwrap();
        assert_eq!(c.name, "a100-sxm4-80gb-x8");
        assert_eq!(c.tier, Tier::DatacenterHighMemory);
        assert_eq!(
            c.node_selector.get(GFD_COUNT).map(String::as_str),
            Some("8")
        );
        assert_eq!(c.resource, GPU_RESOURCE);
    }

    #[test]
    fn a_mixed_node_never_joins_the_whole_gpu_class_of_its_product() {
        // An A10G with a V100-32GB: the smallest GPU is the A10G, so product and count match
        // a homogeneous 2×A10G node, but the weakest compute capability is the V100's.
        let homogeneous = facts("NVIDIA-A10G", 2, 23_028, (8, 6));
        let mut mixed = facts("NVIDIA-A10G", 2, 23_028, (7, 0));
        mixed.mixed = true;
        let [whole] = classes_from_facts(&homogeneous, None).try_into().unwrap();
        let [own] = classes_from_facts(&mixed, None).try_into().unwrap();
        let mixed_node = labels(&[
            (GPU_PRODUCT, "NVIDIA-A10G"),
            (GPU_COUNT, "2"),
            (GPU_MEMORY_MIB, "23028"),
            (GPU_COMPUTE_CAPABILITY, "7.0"),
            (GPU_MIXED, "true"),
        ]);
        assert!(
            !whole.selects(&mixed_node),
            "bf16 class must not take a V100"
        );
        assert!(own.selects(&mixed_node));
        assert_eq!(own.name, "mixed-cc7.0-23028mib-x2");
        assert!(
            !own.capability.supports_bf16(),
            "planned by its weakest GPU"
        );
        assert_eq!(own.describe_gpu(), "A10G (weakest of mixed)");
        let mut homogeneous_node = mixed_node.clone();
        homogeneous_node.insert(GPU_MIXED.into(), "false".into());
        homogeneous_node.insert(GPU_COMPUTE_CAPABILITY.into(), "8.6".into());
        assert!(whole.selects(&homogeneous_node));
        assert!(!own.selects(&homogeneous_node));
    }

    #[test]
    fn mixed_strategy_forms_one_class_per_profile_with_its_resource() {
        let mut f = facts("NVIDIA-A100-SXM4-80GB", 1, 81_920, (8, 0));
        f.mig = mig(&[("2g.20gb", 2, 19_968), ("3g.40gb", 1, 40_192)], None);
        let classes = classes_from_facts(&f, Some(MigStrategy::Mixed));
        let names: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "a100-sxm4-80gb-mig-2g-20gb-x2",
                "a100-sxm4-80gb-mig-3g-40gb-x1"
            ]
        );
        let big = &classes[1];
        assert_eq!(big.resource, "nvidia.com/mig-3g.40gb");
        assert_eq!(big.memory_mib, 40_192);
        assert_eq!(big.capability, ComputeCapability::new(8, 0), "the parent's");
        assert_eq!(big.max_gpus_per_pod(), 1);
        assert_eq!(big.describe_gpu(), "A100 MIG 3g.40gb");
        assert_eq!(
            big.node_selector
                .get(&mig_count_key("3g.40gb"))
                .map(String::as_str),
            Some("1")
        );
    }

    #[test]
    fn single_strategy_slices_are_nvidia_gpus_and_need_one_profile() {
        let mut f = facts("NVIDIA-H100-80GB-HBM3", 1, 81_559, (9, 0));
        f.mig = mig(&[("1g.10gb", 7, 9_984)], None);
        let [c] = classes_from_facts(&f, None).try_into().unwrap();
        assert_eq!(c.resource, GPU_RESOURCE);
        assert_eq!(c.gpus_per_node, 7);
        assert_eq!(c.max_gpus_per_pod(), 1);
        f.mig = mig(&[("1g.10gb", 3, 9_984), ("2g.20gb", 2, 19_968)], None);
        assert!(classes_from_facts(&f, Some(MigStrategy::Single)).is_empty());
        f.mig.strategy = Some(MigStrategy::Mixed);
        assert_eq!(
            classes_from_facts(&f, Some(MigStrategy::Single)).len(),
            2,
            "GFD's strategy label wins over the operator's guess"
        );
    }

    #[test]
    fn gfd_single_strategy_keeps_its_product_label_in_the_selector() {
        let mut f = facts("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", 7, 4_864, (8, 0));
        f.source = LabelSource::Gfd;
        f.mig = mig(&[("1g.5gb", 7, 4_864)], Some(MigStrategy::Single));
        let [c] = classes_from_facts(&f, None).try_into().unwrap();
        assert_eq!(c.name, "a100-sxm4-40gb-mig-1g-5gb-x7");
        assert_eq!(c.product, "NVIDIA-A100-SXM4-40GB");
        assert_eq!(c.tier, Tier::DatacenterHighMemory);
        assert!(c.selects(&labels(&[
            (GFD_PRODUCT, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"),
            (GFD_COUNT, "7"),
        ])));
    }

    #[test]
    fn a_mig_node_never_joins_a_whole_gpu_class() {
        let [whole] = classes_from_facts(&facts("NVIDIA-A100-SXM4-80GB", 1, 81_920, (8, 0)), None)
            .try_into()
            .unwrap();
        let mut node = labels(&[
            (GPU_PRODUCT, "NVIDIA-A100-SXM4-80GB"),
            (GPU_COUNT, "1"),
            (GPU_MIG, "disabled"),
        ]);
        assert!(whole.selects(&node));
        node.insert(GPU_MIG.into(), "enabled".into());
        assert!(!whole.selects(&node));
        let mut enabled_unlabelled = facts("NVIDIA-A100-SXM4-80GB", 1, 81_920, (8, 0));
        enabled_unlabelled.mig = mig(&[], None);
        assert!(classes_from_facts(&enabled_unlabelled, None).is_empty());
    }

    #[test]
    fn shared_gpus_are_planned_with_one_replicas_memory() {
        let mut f = facts("NVIDIA-A10G", 1, 23_028, (8, 6));
        f.sharing = Some(GpuSharing {
            replicas: 4,
            strategy: "time-slicing".into(),
            renamed: true,
        });
        let [c] = classes_from_facts(&f, None).try_into().unwrap();
        assert_eq!(c.name, "a10g-x1-shared4");
        assert_eq!(c.memory_mib, 5_757);
        assert_eq!(c.gpus_per_node, 4);
        assert_eq!(c.max_gpus_per_pod(), 1);
        assert_eq!(c.resource, SHARED_GPU_RESOURCE);
        assert_eq!(c.describe_gpu(), "A10G 1/4 shared");
        let node = labels(&[
            (GPU_PRODUCT, "NVIDIA-A10G"),
            (GPU_COUNT, "1"),
            (GFD_REPLICAS, "4"),
            (GFD_SHARING_STRATEGY, "time-slicing"),
        ]);
        assert!(c.selects(&node));
        let [whole] = classes_from_facts(&facts("NVIDIA-A10G", 1, 23_028, (8, 6)), None)
            .try_into()
            .unwrap();
        assert!(
            !whole.selects(&node),
            "a whole-GPU class keeps shared nodes out"
        );
    }
}
