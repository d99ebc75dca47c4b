//! What vLLM runs is what the plan says (docs/runtime-contracts.md): 8-bit is FP8, never
//! 4-bit bitsandbytes; the memory share, sequences, context and image tiles reach its flags.
mod common;

use common::{class, job, plan};
use vramfit_api::{Fallback, Plan, Quantization};
use vramfit_planner::{JobInput, builtin_classes, fallback, plan_for_class, workload};

fn flag(args: &[String], name: &str) -> Option<String> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

fn args(j: &JobInput, p: &Plan) -> Vec<String> {
    workload::runtime_args(j, p)
}

#[test]
fn eight_bit_is_fp8_weight_only_on_ampere_and_native_from_ada() {
    let j = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, allowedQuantizations: [int8]}",
    );
    for (name, mode) in [
        ("a10g-x1", "weight-only"),
        ("a100-40gb-x1", "weight-only"),
        ("l40s-x1", "native"),
        ("h100-80gb-x8", "native"),
    ] {
        let p = plan(&j, name).unwrap();
        assert_eq!(p.quantization, Quantization::Int8, "{name}");
        assert_eq!(
            flag(&args(&j, &p), "--quantization").as_deref(),
            Some("fp8")
        );
        assert!(
            p.reasons
                .iter()
                .any(|r| r.contains("FP8") && r.contains(mode)),
            "{name}: {:?}",
            p.reasons
        );
    }
}

#[test]
fn below_ampere_vllm_has_no_8_bit_and_goes_to_4_bit_saying_why() {
    let j = job("{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x}");
    let t4 = plan(&j, "t4-x1").unwrap();
    assert_eq!(t4.quantization, Quantization::Nf4);
    assert_eq!(
        flag(&args(&j, &t4), "--quantization").as_deref(),
        Some("bitsandbytes")
    );
    assert!(
        t4.reasons.iter().any(|r| r.contains("no 8-bit under vLLM")),
        "{:?}",
        t4.reasons
    );
    let only_8_bit = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, allowedQuantizations: [int8]}",
    );
    let err = plan(&only_8_bit, "v100-16gb-x4").unwrap_err();
    assert_eq!(
        err.to_string(),
        "no allowed quantization is left: no 8-bit under vLLM at compute capability 7.0 < 8.0: FP8 needs 8.0 and in-flight bitsandbytes is 4-bit only"
    );
}

#[test]
fn no_vllm_plan_runs_bitsandbytes_for_8_bit_anywhere() {
    for preset in [
        "mistral-7b-instruct-v0.3",
        "internvl3-8b",
        "llama-3.1-8b-instruct",
    ] {
        for q in ["int8", "nf4"] {
            let j = job(&format!(
                "{{model: {{preset: {preset}}}, runtime: vllm, image: x, allowedQuantizations: [{q}]}}"
            ));
            for c in builtin_classes() {
                let Ok(p) = plan_for_class(&j, &c, &Fallback::default()) else {
                    continue;
                };
                let method = flag(&args(&j, &p), "--quantization");
                match p.quantization {
                    Quantization::Int8 => assert_eq!(method.as_deref(), Some("fp8")),
                    Quantization::Nf4 => assert_eq!(method.as_deref(), Some("bitsandbytes")),
                    Quantization::None => assert_eq!(method, None),
                }
            }
        }
    }
}

#[test]
fn gpu_memory_utilization_is_the_share_the_plan_budgets() {
    let j = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, batchSize: 8, contextLength: 16384}",
    );
    for c in builtin_classes() {
        let Ok(p) = plan_for_class(&j, &c, &Fallback::default()) else {
            continue;
        };
        let a = args(&j, &p);
        let share: f64 = flag(&a, "--gpu-memory-utilization")
            .unwrap()
            .parse()
            .unwrap();
        let budgeted = p.memory.usable_per_gpu_mib as f64 / p.memory.vram_per_gpu_mib as f64;
        assert!(
            (share - budgeted).abs() < 0.01,
            "{}: {share} vs {budgeted}",
            c.name
        );
        // vLLM may fill at least what the plan checked and never more than the class allows.
        let claimed = share * p.memory.vram_per_gpu_mib as f64;
        assert!(
            p.memory.usable_per_gpu_mib as f64 <= claimed + 1e-6,
            "{}",
            c.name
        );
        assert!(claimed <= c.usable_per_gpu_mib() as f64, "{}", c.name);
        assert!(p.memory.needed_per_gpu_mib <= p.memory.usable_per_gpu_mib);
        assert_eq!(flag(&a, "--max-num-seqs").as_deref(), Some("8"));
        assert_eq!(flag(&a, "--max-model-len").as_deref(), Some("16384"));
    }
}

#[test]
fn internvl_tiles_reach_vllm_and_the_fewer_tiles_step_changes_them() {
    let j = job("{model: {preset: internvl3-8b}, runtime: vllm, image: x}");
    let c = class("a10g-x1");
    let first = plan_for_class(&j, &c, &Fallback::default()).unwrap();
    let kwargs = |p: &Plan| -> serde_yaml::Value {
        serde_yaml::from_str(&flag(&args(&j, p), "--mm-processor-kwargs").unwrap()).unwrap()
    };
    assert_eq!(
        kwargs(&first)["max_dynamic_patch"],
        first.max_tiles.unwrap()
    );
    let limit: serde_yaml::Value =
        serde_yaml::from_str(&flag(&args(&j, &first), "--limit-mm-per-prompt").unwrap()).unwrap();
    assert_eq!(limit["image"], 1);
    let (fb, step) =
        fallback::next_step(&j, &first, &Fallback::default(), 1, Some(c.capability)).unwrap();
    assert!(step.starts_with("fewer image tiles"), "{step}");
    let second = plan_for_class(&j, &c, &fb).unwrap();
    assert!(second.max_tiles < first.max_tiles);
    assert_eq!(
        kwargs(&second)["max_dynamic_patch"],
        second.max_tiles.unwrap()
    );
    // A text model gets no multimodal flags.
    let text = job("{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x}");
    let p = plan(&text, "a10g-x1").unwrap();
    assert_eq!(flag(&args(&text, &p), "--mm-processor-kwargs"), None);
}

#[test]
fn below_ampere_the_vllm_out_of_memory_step_skips_8_bit() {
    let j = job(
        "{model: {parameters: 2000000000, layers: 24, hiddenSize: 2048, attentionHeads: 16}, \
         runtime: vllm, image: x, preference: economy, gpus: {max: 1}}",
    );
    for (name, step) in [
        ("t4-x1", "quantization none → nf4"),
        ("a10g-x1", "quantization none → int8"),
    ] {
        let c = class(name);
        let first = plan_for_class(&j, &c, &Fallback::default()).unwrap();
        assert_eq!(first.quantization, Quantization::None, "{name}");
        let (fb, taken) =
            fallback::next_step(&j, &first, &Fallback::default(), 1, Some(c.capability)).unwrap();
        assert_eq!(taken, step, "{name}");
        let second = plan_for_class(&j, &c, &fb).unwrap();
        assert_eq!(
            second.quantization.as_str(),
            step.rsplit(' ').next().unwrap()
        );
    }
}

#[test]
fn a_vision_model_whose_tiles_vllm_cannot_take_says_so() {
    let j = job("{model: {preset: llama-3.2-11b-vision-instruct}, runtime: vllm, image: x}");
    let p = plan(&j, "h100-80gb-x8").unwrap();
    assert!(
        p.warnings.iter().any(|w| w.contains("no tile count")),
        "{:?}",
        p.warnings
    );
    assert_eq!(flag(&args(&j, &p), "--mm-processor-kwargs"), None);
    let internvl = job("{model: {preset: internvl3-8b}, runtime: vllm, image: x}");
    assert!(plan(&internvl, "h100-80gb-x8").unwrap().warnings.is_empty());
}
