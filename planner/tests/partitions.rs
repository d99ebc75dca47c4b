//! Plans on classes that are not whole GPUs of one model: MIG slices, shared GPUs, mixed
//! nodes (docs/planning.md, "Node classes").
mod common;

use common::job;
use vramfit_api::labels::{ComputeCapability, GpuFacts, LabelSource};
use vramfit_api::partitions::{GpuSharing, MigFacts, MigSlices, MigStrategy};
use vramfit_api::{Dtype, Fallback};
use vramfit_planner::{NodeClass, classes_from_facts, plan_for_class};

const MISTRAL: &str =
    "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x}";
const LLAMA_VISION: &str =
    "{model: {preset: llama-3.2-11b-vision-instruct}, runtime: transformers, image: x}";

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

/// The A100-80GB class of one MIG profile under the mixed strategy.
fn a100_slice(profile: &str, count: u32, memory_mib: u64) -> NodeClass {
    let mut f = facts("NVIDIA-A100-SXM4-80GB", 1, 81_920, (8, 0));
    f.mig = MigFacts {
        enabled: true,
        slices: vec![MigSlices {
            profile: profile.into(),
            count,
            memory_mib,
        }],
        strategy: Some(MigStrategy::Mixed),
    };
    classes_from_facts(&f, None).remove(0)
}

#[test]
fn a_small_model_fits_a_3g_40gb_slice_and_the_reasons_name_it() {
    let class = a100_slice("3g.40gb", 1, 40_192);
    let plan = plan_for_class(&job(MISTRAL), &class, &Fallback::default()).unwrap();
    assert_eq!(plan.gpu_count, 1);
    assert_eq!(
        plan.dtype,
        Dtype::Bfloat16,
        "the parent's compute capability 8.0"
    );
    assert!(
        plan.reasons[0].starts_with("MIG slice 3g.40gb of an A100"),
        "{:?}",
        plan.reasons
    );
    assert!(
        plan.reasons
            .iter()
            .any(|r| r.contains("1×A100 MIG 3g.40gb")),
        "{:?}",
        plan.reasons
    );
}

#[test]
fn a_model_is_never_spread_over_slices() {
    // 7 slices of 9.75 GiB hold far more than an 11B vision model in total, but one pod gets
    // one slice, and even nf4 does not fit one.
    let class = a100_slice("1g.10gb", 7, 9_984);
    let j = job(LLAMA_VISION);
    let why = plan_for_class(&j, &class, &Fallback::default())
        .unwrap_err()
        .to_string();
    assert!(
        why.contains("with nf4 on 1×A100 MIG 1g.10gb"),
        "one slice even at the most compact quantization: {why}"
    );
    let pinned = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, gpus: {min: 2, max: 2}}",
    );
    let why = plan_for_class(&pinned, &class, &Fallback::default())
        .unwrap_err()
        .to_string();
    assert!(
        why.contains("no tensor parallel across MIG slices"),
        "{why}"
    );
}

#[test]
fn a_shared_gpu_plans_one_replicas_memory_and_says_it_is_shared() {
    let mut f = facts("NVIDIA-A10G", 1, 23_028, (8, 6));
    f.sharing = Some(GpuSharing {
        replicas: 2,
        strategy: "time-slicing".into(),
        renamed: false,
    });
    let class = classes_from_facts(&f, None).remove(0);
    let plan = plan_for_class(&job(MISTRAL), &class, &Fallback::default()).unwrap();
    assert_eq!(plan.memory.vram_per_gpu_mib, 11_514, "half of the A10G");
    assert!(
        plan.reasons[0].contains("memory is shared"),
        "{:?}",
        plan.reasons
    );
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.contains("does not isolate GPU memory")),
        "{:?}",
        plan.warnings
    );
    let two = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, gpus: {min: 2, max: 2}}",
    );
    let why = plan_for_class(&two, &class, &Fallback::default())
        .unwrap_err()
        .to_string();
    assert!(
        why.contains("multi-GPU plans are refused on shared GPUs"),
        "{why}"
    );
}

#[test]
fn a_mixed_node_is_planned_by_its_weakest_gpu() {
    let mut f = facts("NVIDIA-A10G", 2, 23_028, (7, 0));
    f.mixed = true;
    let class = classes_from_facts(&f, None).remove(0);
    let plan = plan_for_class(&job(MISTRAL), &class, &Fallback::default()).unwrap();
    assert_eq!(plan.dtype, Dtype::Float16, "one GPU is a V100: no bf16");
    assert!(!plan.flash_attention);
    assert!(
        plan.reasons[0].starts_with("mixed node: planned by its weakest GPU"),
        "{:?}",
        plan.reasons
    );
}
