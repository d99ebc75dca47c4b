//! The fine-tuning step-downs: after out of memory, the micro-batch halves (the effective
//! batch is kept), then checkpointing goes on, then a cheaper method; after a NaN or infinite
//! loss, the other 16-bit dtype where a card has it.
mod common;

use common::{class, job};
use vramfit_api::tuning::TuningMethod;
use vramfit_api::{Dtype, Fallback, Plan};
use vramfit_planner::fallback::next_step;
use vramfit_planner::tuning::fallback::next_after_diverged_loss;
use vramfit_planner::{JobInput, plan_for_class};

const AUTO: &str = "
model: {preset: mistral-7b-instruct-v0.3}
runtime: transformers
image: x
maxAttempts: 10
tuning: {sequenceLength: 512, effectiveBatch: 32}
";

fn step(job: &JobInput, plan: &Plan, fallback: &Fallback) -> Option<(Fallback, String)> {
    let class = class(&plan.node_class);
    next_step(
        job,
        plan,
        fallback,
        class.max_gpus_per_pod(),
        Some(class.capability),
    )
}

/// Every micro-batch step-down keeps the effective batch exact (on one GPU a micro-batch of 1
/// always splits it), and the step's description names the micro-batch the next plan takes.
#[test]
fn a_smaller_micro_batch_still_splits_the_effective_batch_exactly() {
    let a10 = class("a10g-x1");
    for asked in [8, 10, 12, 15, 16, 32] {
        let job = job(&format!(
            "{{model: {{preset: mistral-7b-instruct-v0.3}}, runtime: transformers, image: x, maxAttempts: 10, \
             tuning: {{method: qlora, sequenceLength: 512, effectiveBatch: {asked}}}}}"
        ));
        let mut fallback = Fallback::default();
        let mut plan = plan_for_class(&job, &a10, &fallback).unwrap();
        assert_eq!(plan.tuning.as_ref().unwrap().effective_batch, asked);
        while let Some((next, what)) = step(&job, &plan, &fallback) {
            let before = plan.tuning.clone().unwrap();
            fallback = next;
            plan = plan_for_class(&job, &a10, &fallback).unwrap();
            let after = plan.tuning.clone().unwrap();
            assert_eq!(after.effective_batch, asked, "{asked}: {what}");
            if what.starts_with("micro-batch") {
                assert!(after.micro_batch <= before.micro_batch / 2, "{what}");
                assert_eq!(
                    what,
                    format!(
                        "micro-batch {} → {}, gradient accumulation {} → {} (the effective batch is kept)",
                        before.micro_batch,
                        after.micro_batch,
                        before.gradient_accumulation,
                        after.gradient_accumulation
                    )
                );
            }
        }
    }
}

#[test]
fn out_of_memory_halves_the_micro_batch_then_checkpoints_then_takes_a_cheaper_method() {
    let job = job(&AUTO.replace("tuning: {", "tuning: {lora: {dropoutPercent: 0}, "));
    let l40s = class("l40s-x1");
    let mut fallback = Fallback::default();
    let mut plan = plan_for_class(&job, &l40s, &fallback).unwrap();
    let first = plan.tuning.clone().unwrap();
    assert_eq!(first.method, TuningMethod::Lora, "{:?}", plan.reasons);
    let mut seen = Vec::new();
    while let Some((next, what)) = step(&job, &plan, &fallback) {
        let before = plan.tuning.clone().unwrap();
        fallback = next;
        plan = plan_for_class(&job, &l40s, &fallback).unwrap();
        let after = plan.tuning.clone().unwrap();
        seen.push(what.clone());
        if what.starts_with("micro-batch") {
            assert_eq!(after.micro_batch, before.micro_batch / 2, "{what}");
            assert!(after.effective_batch >= 32, "the effective batch is kept");
            assert!(after.gradient_accumulation >= before.gradient_accumulation);
            assert!(what.contains("(the effective batch is kept)"), "{what}");
        }
        assert!(after.method >= before.method, "never a better method");
        assert!(after.gradient_checkpointing || !before.gradient_checkpointing);
        assert!(seen.len() < 20, "the ladder ends: {seen:?}");
    }
    let halvings = seen.iter().filter(|s| s.starts_with("micro-batch")).count();
    assert!(halvings >= 3, "{seen:?}");
    // The cheaper method gets its own largest micro-batch, which halves again.
    let method = seen.iter().position(|s| s == "method lora → qlora");
    assert!(method.is_some_and(|i| i + 1 < seen.len()), "{seen:?}");
    assert_eq!(
        seen.last().map(String::as_str),
        Some("micro-batch 2 → 1, gradient accumulation 16 → 32 (the effective batch is kept)")
    );
    let last = plan.tuning.unwrap();
    assert_eq!(last.method, TuningMethod::Qlora);
    assert!(last.gradient_checkpointing);
}

#[test]
fn checkpointing_goes_on_once_the_micro_batch_is_one() {
    let job = job(&AUTO
        .replace("tuning: {", "tuning: {method: qlora, ")
        .replace("effectiveBatch: 32", "effectiveBatch: 2"));
    let h100 = class("h100-80gb-x8");
    let plan = plan_for_class(&job, &h100, &Fallback::default()).unwrap();
    let t = plan.tuning.clone().unwrap();
    assert_eq!(
        (t.micro_batch, t.gradient_checkpointing),
        (2, false),
        "{:?}",
        plan.reasons
    );
    let (next, what) = step(&job, &plan, &Fallback::default()).unwrap();
    assert!(what.starts_with("micro-batch 2 → 1"), "{what}");
    let one = plan_for_class(&job, &h100, &next).unwrap();
    assert!(!one.tuning.as_ref().unwrap().gradient_checkpointing);
    let (last, what) = step(&job, &one, &next).unwrap();
    assert_eq!(what, "gradient checkpointing on");
    let again = plan_for_class(&job, &h100, &last).unwrap();
    let t = again.tuning.clone().unwrap();
    assert_eq!((t.micro_batch, t.gradient_checkpointing), (1, true));
    assert!(
        again
            .reasons
            .iter()
            .any(|r| r == "gradient checkpointing on: kept on after an out-of-memory failure")
    );
    assert_eq!(
        step(&job, &again, &last),
        None,
        "a pinned method: nothing left"
    );
}

#[test]
fn a_pinned_method_is_never_stepped_off() {
    let job = job(&AUTO.replace("tuning: {", "tuning: {method: qlora, "));
    let a10 = class("a10g-x1");
    let mut fallback = Fallback::default();
    let mut plan = plan_for_class(&job, &a10, &fallback).unwrap();
    let mut steps = 0;
    while let Some((next, what)) = step(&job, &plan, &fallback) {
        assert!(!what.starts_with("method"), "{what}");
        fallback = next;
        plan = plan_for_class(&job, &a10, &fallback).unwrap();
        steps += 1;
    }
    assert_eq!(plan.tuning.unwrap().micro_batch, 1);
    // 7 → 3 → 1, checkpointing was on from the start.
    assert_eq!(steps, 2);
}

#[test]
fn a_diverged_loss_in_bfloat16_retries_in_float16_then_stops() {
    let job = job(&AUTO.replace("tuning: {", "tuning: {method: qlora, "));
    let a10 = class("a10g-x1");
    let plan = plan_for_class(&job, &a10, &Fallback::default()).unwrap();
    assert_eq!(plan.dtype, Dtype::Bfloat16);
    let (next, what) = next_after_diverged_loss(&job, &plan, &Fallback::default(), true).unwrap();
    assert_eq!(what, "float16 with loss scaling instead of bfloat16");
    let fp16 = plan_for_class(&job, &a10, &next).unwrap();
    assert_eq!(fp16.dtype, Dtype::Float16);
    assert!(
        fp16.reasons
            .iter()
            .any(|r| r.contains("dynamic loss scaling"))
    );
    assert_eq!(next_after_diverged_loss(&job, &fp16, &next, true), None);
}

#[test]
fn a_diverged_loss_in_float16_moves_to_a_card_with_bfloat16_where_there_is_one() {
    let job = job(&AUTO.replace("tuning: {", "tuning: {method: qlora, "));
    let t4 = class("t4-x1");
    let plan = plan_for_class(&job, &t4, &Fallback::default()).unwrap();
    assert_eq!(plan.dtype, Dtype::Float16);
    assert_eq!(
        next_after_diverged_loss(&job, &plan, &Fallback::default(), false),
        None,
        "no class with bfloat16: nothing to change"
    );
    let (next, what) = next_after_diverged_loss(&job, &plan, &Fallback::default(), true).unwrap();
    assert!(what.starts_with("bfloat16 instead of float16"), "{what}");
    let why = plan_for_class(&job, &t4, &next).unwrap_err().to_string();
    assert!(why.contains("bfloat16 is needed"), "{why}");
    let a10 = plan_for_class(&job, &class("a10g-x1"), &next).unwrap();
    assert_eq!(a10.dtype, Dtype::Bfloat16);
}

#[test]
fn a_pinned_dtype_is_kept_after_a_diverged_loss() {
    let job = job(&AUTO.replace("tuning: {", "dtype: bfloat16\ntuning: {"));
    let plan = plan_for_class(&job, &class("a10g-x1"), &Fallback::default()).unwrap();
    assert_eq!(
        next_after_diverged_loss(&job, &plan, &Fallback::default(), true),
        None
    );
}
