//! The effective batch of a fine-tuning job is a hyperparameter: the plan makes exactly the
//! asked number whenever a micro-batch no larger than the largest that fits splits it, and
//! otherwise overshoots it by as little as it can, saying so (docs/tuning.md).
mod common;

use common::{job, plan};
use proptest::prelude::*;
use vramfit_api::tuning::TuningSpec;
use vramfit_api::{Dtype, Fallback, GpuBounds, InferenceJobSpec, Plan};
use vramfit_planner::tuning::batch_split::split;
use vramfit_planner::{NodeClass, resolve_job, tuning};

/// QLoRA of Mistral-7B at sequence 512: on an A10G the largest micro-batch that fits is 7.
fn qlora_a10(effective_batch: u32) -> Plan {
    let j = job(&format!(
        "{{model: {{preset: mistral-7b-instruct-v0.3}}, runtime: transformers, image: x, \
         tuning: {{method: qlora, sequenceLength: 512, effectiveBatch: {effective_batch}}}}}"
    ));
    plan(&j, "a10g-x1").expect("fits")
}

#[test]
fn qlora_on_an_a10_takes_exactly_the_asked_effective_batch() {
    for (asked, micro_batch, accumulation) in [(8, 4, 2), (16, 4, 4), (14, 7, 2), (32, 4, 8)] {
        let p = qlora_a10(asked);
        let t = p.tuning.as_ref().expect("a tuning plan");
        assert_eq!(
            (t.micro_batch, t.gradient_accumulation, t.effective_batch),
            (micro_batch, accumulation, asked),
            "{asked}: {:#?}",
            p.reasons
        );
        assert_eq!(t.batch, format!("{micro_batch}×{accumulation}"));
        assert!(
            p.reasons.iter().any(|r| r
                == &format!(
                    "gradient accumulation {accumulation}: effective batch {asked} = micro-batch {micro_batch} × {accumulation}"
                )),
            "{:#?}",
            p.reasons
        );
        assert!(p.memory.needed_per_gpu_mib <= p.memory.usable_per_gpu_mib);
    }
    // Where a smaller micro-batch is taken, the plan says why and what fits.
    let p = qlora_a10(8);
    assert!(
        p.reasons.iter().any(|r| r.starts_with(
            "micro-batch 4: the largest up to 7 (the largest that fits at sequence 512) that splits the effective batch 8 exactly; 7 would make it 14"
        )),
        "{:#?}",
        p.reasons
    );
}

/// QLoRA over three GPUs (data parallel): 16 sequences cannot split over 3 GPUs, so the plan
/// overshoots least, and says so.
#[test]
fn an_effective_batch_the_gpus_cannot_split_overshoots_least_and_says_so() {
    let j = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, gpus: {min: 3, max: 3}, \
         tuning: {method: qlora, sequenceLength: 512, effectiveBatch: 16}}",
    );
    let p = plan(&j, "a10g-x4").expect("fits");
    let t = p.tuning.as_ref().expect("a tuning plan");
    assert_eq!(p.gpu_count, 3);
    // Micro-batch 6 (cap: 16 ÷ 3 rounded up), fits 6 or fewer: 3 × 2 = 6 → 18 in 1 step is
    // the least overshoot (2), with 6 the largest micro-batch that makes it.
    assert_eq!(t.effective_batch, 18, "{:#?}", p.reasons);
    assert_eq!(t.micro_batch * 3 * t.gradient_accumulation, 18);
    assert!(
        p.reasons.iter().any(|r| r
            .contains("effective batch 18, not the 16 asked: no micro-batch up to")
            && r.contains("overshoots least")),
        "{:#?}",
        p.reasons
    );
}

/// Brute force: the least overshoot of `asked` over `gpus` GPUs with a micro-batch up to
/// `largest`.
fn least_overshoot(asked: u32, gpus: u32, largest: u32) -> u32 {
    (1..=largest)
        .map(|m| {
            let per_step = m * gpus;
            asked.div_ceil(per_step) * per_step - asked
        })
        .min()
        .unwrap_or(0)
}

fn exact_exists(asked: u32, gpus: u32, largest: u32) -> bool {
    (1..=largest).any(|m| asked.is_multiple_of(m * gpus))
}

/// An A100-like class with `memory_mib` per GPU and `count` GPUs.
fn gpu(memory_mib: u64, count: u32) -> NodeClass {
    NodeClass::new("test", "NVIDIA A100-SXM4-80GB", count, memory_mib, None)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_split_is_exact_when_it_can_be_and_overshoots_least_otherwise(
        asked in 1u32..5000,
        gpus in 1u32..9,
        largest in 1u32..80,
    ) {
        let s = split(asked, gpus, largest);
        prop_assert!(s.micro_batch >= 1 && s.micro_batch <= largest);
        prop_assert_eq!(s.effective, s.micro_batch * gpus * s.accumulation);
        prop_assert!(s.effective >= asked);
        prop_assert_eq!(s.effective - asked, least_overshoot(asked, gpus, largest));
        if exact_exists(asked, gpus, largest) {
            prop_assert_eq!(s.effective, asked);
            // The largest such micro-batch.
            prop_assert!((s.micro_batch + 1..=largest).all(|m| !asked.is_multiple_of(m * gpus)));
        }
    }

    /// Whole plans of a 7B model over random GPU sizes, GPU counts, sequences and effective
    /// batches: the micro-batch never exceeds the largest that fits, the effective batch is
    /// the asked one whenever an exact split exists, and the overshoot is least otherwise.
    #[test]
    fn a_plan_keeps_the_effective_batch_whenever_it_can(
        asked in 1u32..600,
        seq in prop_oneof![Just(256u32), Just(512), Just(1024), Just(2048)],
        memory_mib in 16_000u64..150_000,
        gpus in 1u32..5,
        method in prop_oneof![Just("qlora"), Just("lora"), Just("full")],
    ) {
        let mut spec: InferenceJobSpec = serde_yaml::from_str(
            "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x}",
        ).expect("a spec");
        spec.gpus = GpuBounds { min: gpus, max: gpus, ..GpuBounds::default() };
        spec.tuning = Some(TuningSpec {
            method: serde_yaml::from_str(method).expect("a method"),
            sequence_length: Some(seq),
            effective_batch: Some(asked),
            ..Default::default()
        });
        let j = resolve_job(&spec).expect("a valid job");
        let t = j.tuning.as_ref().expect("a tuning job");
        let class = gpu(memory_mib, 8);
        if let Ok(sized) = tuning::size(&j, t, &class, &Fallback::default(), Dtype::Bfloat16, true) {
            let p = &sized.plan;
            let g = sized.gpu_count;
            let largest = sized.largest_micro_batch;
            prop_assert!(p.micro_batch <= largest, "{} > {}", p.micro_batch, largest);
            prop_assert!(largest <= asked.div_ceil(g));
            prop_assert_eq!(p.effective_batch, p.micro_batch * g * p.gradient_accumulation);
            if exact_exists(asked, g, largest) {
                prop_assert_eq!(p.effective_batch, asked, "{:?}", sized.reasons);
            } else {
                prop_assert_eq!(p.effective_batch - asked, least_overshoot(asked, g, largest));
            }
            prop_assert!(p.memory.needed_mib <= class.usable_per_gpu_mib());
        }
    }
}
