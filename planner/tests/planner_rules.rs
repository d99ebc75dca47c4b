//! The planner's rules (docs/planning.md), one behaviour per test.
mod common;

use common::{class, job, plan, spec};
use vramfit_api::labels::ComputeCapability;
use vramfit_api::{Dtype, Fallback, KvCacheType, Preference, Quantization};
use vramfit_planner::{PlanError, fallback, plan_for_class, ranking, resolve_job, workload};

const LLAMA_VISION: &str =
    "{model: {preset: llama-3.2-11b-vision-instruct}, runtime: transformers, image: x}";
const MISTRAL: &str =
    "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x}";

#[test]
fn auto_dtype_is_bf16_from_ampere_and_fp16_below() {
    let j = job(MISTRAL);
    assert_eq!(plan(&j, "a10g-x1").unwrap().dtype, Dtype::Bfloat16);
    assert_eq!(plan(&j, "h100-80gb-x8").unwrap().dtype, Dtype::Bfloat16);
    assert_eq!(plan(&j, "v100-16gb-x4").unwrap().dtype, Dtype::Float16);
    assert_eq!(plan(&j, "t4-x1").unwrap().dtype, Dtype::Float16);
}

#[test]
fn pinned_bf16_never_lands_below_compute_capability_8() {
    let j = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, dtype: bfloat16}",
    );
    let err = plan(&j, "v100-16gb-x4").unwrap_err();
    assert_eq!(
        err,
        PlanError::Bfloat16Unsupported {
            capability: ComputeCapability::new(7, 0)
        }
    );
    assert_eq!(
        err.to_string(),
        "bfloat16 is pinned but compute capability 7.0 < 8.0: bf16 would be emulated and answer garbage"
    );
    assert!(plan(&j, "t4-x1").is_err());
    assert_eq!(plan(&j, "a10g-x1").unwrap().dtype, Dtype::Bfloat16);
}

#[test]
fn a_model_that_fits_two_a10gs_needs_8_bit_on_one() {
    let j = job(LLAMA_VISION);
    let one = plan(&j, "a10g-x1").unwrap();
    assert_eq!((one.quantization, one.gpu_count), (Quantization::Int8, 1));
    assert!(
        one.reasons
            .iter()
            .any(|r| r.starts_with("8-bit: needs") && r.contains("1×A10G")),
        "{:?}",
        one.reasons
    );
    let four = plan(&j, "a10g-x4").unwrap();
    assert_eq!(
        (four.quantization, four.gpu_count),
        (Quantization::None, 2),
        "quality: more GPUs before quantizing"
    );
}

#[test]
fn economy_quantizes_before_adding_gpus() {
    let j = job(
        "{model: {preset: llama-3.2-11b-vision-instruct}, runtime: transformers, image: x, preference: economy}",
    );
    let p = plan(&j, "a10g-x4").unwrap();
    assert_eq!((p.quantization, p.gpu_count), (Quantization::Int8, 1));
}

#[test]
fn quantization_is_never_chosen_with_room_to_spare() {
    let j = job(LLAMA_VISION);
    for name in ["l40s-x1", "a100-40gb-x1", "h100-80gb-x8", "h200-x8"] {
        assert_eq!(
            plan(&j, name).unwrap().quantization,
            Quantization::None,
            "{name}"
        );
    }
}

#[test]
fn forbidden_quantization_makes_small_classes_unable_with_needed_vs_usable() {
    let j = job(
        "{model: {preset: llama-3.2-11b-vision-instruct}, runtime: transformers, image: x, allowedQuantizations: [none]}",
    );
    let err = plan(&j, "a10g-x1").unwrap_err();
    assert!(
        matches!(
            err,
            PlanError::DoesNotFit {
                quantization: Quantization::None,
                gpus: 1,
                needed_per_gpu_mib,
                usable_per_gpu_mib,
                ..
            } if needed_per_gpu_mib > usable_per_gpu_mib
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "does not fit: needs 25.5 GiB per GPU with none on 1×A10G, 18.0 GiB usable"
    );
}

#[test]
fn gpu_count_bounds_are_respected() {
    let j = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, gpus: {min: 2, max: 2}}",
    );
    assert_eq!(plan(&j, "a10g-x4").unwrap().gpu_count, 2);
    let err = plan(&j, "a10g-x1").unwrap_err();
    assert_eq!(
        err.to_string(),
        "job needs at least 2 GPUs; nodes of this class have 1"
    );
    assert!(resolve_job(&common::spec("{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, gpus: {min: 3, max: 2}}")).is_err());
}

#[test]
fn vllm_tensor_parallelism_takes_gpu_counts_that_split_the_heads() {
    // InternVL3-8B has 28 heads and 4 KV heads: 3 GPUs cannot split them.
    let j = job(
        "{model: {preset: internvl3-8b}, runtime: vllm, image: x, allowedQuantizations: [none]}",
    );
    let p = plan(&j, "v100-16gb-x4").unwrap();
    assert_eq!(p.gpu_count, 4);
    let t = job(
        "{model: {preset: internvl3-8b}, runtime: transformers, image: x, allowedQuantizations: [none]}",
    );
    assert_eq!(
        plan(&t, "v100-16gb-x4").unwrap().gpu_count,
        3,
        "transformers can use any count"
    );
}

#[test]
fn flash_attention_tf32_allocator_and_fraction_follow_the_card() {
    let j = job(MISTRAL);
    let v100 = plan(&j, "v100-16gb-x4").unwrap();
    assert!(!v100.flash_attention && !v100.tf32);
    assert_eq!(v100.pytorch_cuda_alloc_conf, "max_split_size_mb:32");
    assert_eq!(v100.memory_fraction_percent, 80);
    let a10g = plan(&j, "a10g-x1").unwrap();
    assert!(a10g.flash_attention && a10g.tf32);
    assert_eq!(a10g.pytorch_cuda_alloc_conf, "max_split_size_mb:128");
    assert_eq!(a10g.memory_fraction_percent, 90);
    let h100 = plan(&j, "h100-80gb-x8").unwrap();
    assert_eq!(h100.pytorch_cuda_alloc_conf, "max_split_size_mb:256");
    assert_eq!(h100.memory_fraction_percent, 95);
    assert_eq!(
        plan(&j, "t4-x1").unwrap().pytorch_cuda_alloc_conf,
        "max_split_size_mb:64"
    );
    let off = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, overrides: {flashAttention: false}}",
    );
    assert!(!plan(&off, "h100-80gb-x8").unwrap().flash_attention);
}

#[test]
fn image_tiles_only_for_vision_models_and_by_vram() {
    assert_eq!(plan(&job(MISTRAL), "h100-80gb-x8").unwrap().max_tiles, None);
    let j = job(LLAMA_VISION);
    assert_eq!(plan(&j, "a10g-x1").unwrap().max_tiles, Some(18));
    assert_eq!(plan(&j, "h100-80gb-x8").unwrap().max_tiles, Some(32));
    let pinned = job(
        "{model: {preset: internvl3-8b}, runtime: transformers, image: x, overrides: {maxTiles: 6}}",
    );
    assert_eq!(plan(&pinned, "h100-80gb-x8").unwrap().max_tiles, Some(6));
}

#[test]
fn llamacpp_offloads_everything_that_fits_and_steps_kv_down_first() {
    let j = job(
        "{model: {preset: llama-3.1-70b-instruct-q4_k_m}, runtime: llamacpp, image: x, contextLength: 32768}",
    );
    let h100 = plan(&j, "h100-80gb-x8").unwrap();
    let l = h100.llama_cpp.unwrap();
    assert_eq!(
        (
            l.gpu_layers,
            l.total_layers,
            l.kv_cache_type,
            h100.gpu_count
        ),
        (81, 81, KvCacheType::F16, 1),
        "80 blocks and the output layer"
    );
    // One L40S: not all 80 layers fit, even with q4_0: partial offload with the smallest KV.
    let l40s = plan(&j, "l40s-x1").unwrap();
    let l = l40s.llama_cpp.unwrap();
    assert_eq!(l.kv_cache_type, KvCacheType::Q4_0);
    assert!(l.gpu_layers < 80 && l.gpu_layers > 40, "{l:?}");
    assert_eq!(l.total_layers, 81);
    assert!(
        l40s.reasons
            .iter()
            .any(|r| r.starts_with("partial offload")),
        "{:?}",
        l40s.reasons
    );
    assert!(l40s.memory.needed_per_gpu_mib <= l40s.memory.usable_per_gpu_mib);
}

#[test]
fn a_llamacpp_plan_does_not_explain_pytorch_settings() {
    let gguf = job(
        "{model: {preset: llama-3.1-70b-instruct-q4_k_m}, runtime: llamacpp, image: x, contextLength: 32768}",
    );
    let torch = job("{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x}");
    let mentions = |reasons: &[String], what: &str| reasons.iter().any(|r| r.contains(what));
    let gguf = plan(&gguf, "a10g-x4").unwrap().reasons;
    let torch = plan(&torch, "a10g-x4").unwrap().reasons;
    for what in [
        "PYTORCH_CUDA_ALLOC_CONF max_split",
        "bfloat16:",
        "memory fraction 0.",
    ] {
        assert!(!mentions(&gguf, what), "{what} in {gguf:?}");
        assert!(mentions(&torch, what), "{what} not in {torch:?}");
    }
    assert!(mentions(&gguf, "not used by llama.cpp"), "{gguf:?}");
}

#[test]
fn llamacpp_without_flash_attention_keeps_the_kv_cache_f16() {
    let j = job(
        "{model: {preset: llama-3.1-70b-instruct-q4_k_m}, runtime: llamacpp, image: x, contextLength: 32768, overrides: {flashAttention: false}}",
    );
    let v100 = plan(&j, "v100-16gb-x4").unwrap();
    assert_eq!(v100.llama_cpp.unwrap().kv_cache_type, KvCacheType::F16);
    assert!(!v100.flash_attention);
    assert!(
        v100.reasons
            .iter()
            .any(|r| r.contains("quantized V cache needs flash attention")),
        "{:?}",
        v100.reasons
    );
}

#[test]
fn pinned_llamacpp_layers_are_respected_with_a_warning() {
    let j = job(
        "{model: {preset: llama-3.1-70b-instruct-q4_k_m}, runtime: llamacpp, image: x, llamaCpp: {gpuLayers: 80}}",
    );
    let p = plan(&j, "a10g-x1").unwrap();
    assert_eq!(p.llama_cpp.unwrap().gpu_layers, 80);
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("gpuLayers 80 is pinned")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn class_selection_and_admin_switches_are_obeyed() {
    let j = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, nodeClasses: {allowed: [a10g-x1]}}",
    );
    assert!(plan(&j, "a10g-x1").is_ok());
    assert_eq!(
        plan(&j, "h100-80gb-x8").unwrap_err().to_string(),
        "not in the job's nodeClasses.allowed"
    );
    let mut closed = class("a10g-x1");
    closed.allow_jobs = false;
    assert!(
        plan_for_class(&j, &closed, &Fallback::default())
            .unwrap_err()
            .to_string()
            .contains("allowJobs: false")
    );
}

#[test]
fn ranking_quality_takes_the_best_plan_and_economy_the_cheapest() {
    let quality = job(LLAMA_VISION);
    let plans: Vec<_> = ["a10g-x1", "a10g-x4", "a100-40gb-x1", "h100-80gb-x8"]
        .iter()
        .map(|c| plan(&quality, c).unwrap())
        .collect();
    // h100 wins on image tiles (32 vs 18); full precision beats int8.
    assert_eq!(
        ranking::best(Preference::Quality, &plans)
            .unwrap()
            .node_class,
        "h100-80gb-x8"
    );
    assert_eq!(
        ranking::best(Preference::Economy, &plans)
            .unwrap()
            .node_class,
        "a10g-x1"
    );
}

#[test]
fn the_oom_ladder_steps_tiles_then_gpus_then_flash_attention_then_quantization() {
    let j = job(
        "{model: {preset: llama-3.2-11b-vision-instruct}, runtime: transformers, image: x, gpus: {max: 2}}",
    );
    let class = class("a10g-x4");
    let mut fb = Fallback::default();
    let mut steps = Vec::new();
    let mut plans = vec![plan_for_class(&j, &class, &fb).unwrap()];
    while let Some((next, step)) = fallback::next_step(
        &j,
        plans.last().unwrap(),
        &fb,
        class.gpus_per_node,
        Some(class.capability),
    ) {
        fb = next;
        steps.push(step);
        plans.push(plan_for_class(&j, &class, &fb).unwrap());
        assert!(steps.len() < 10, "the ladder must end: {steps:?}");
    }
    assert_eq!(
        steps,
        vec![
            "fewer image tiles: MAX_TILES 18 → 12",
            "quantization none → int8",
            "flash attention off",
            "quantization int8 → nf4",
        ]
    );
    let last = plans.last().unwrap();
    assert_eq!(
        (last.quantization, last.max_tiles, last.flash_attention),
        (Quantization::Nf4, Some(12), false)
    );
}

#[test]
fn the_oom_ladder_adds_a_gpu_first_for_quality_when_there_is_room() {
    let j = job(MISTRAL);
    let class = class("a10g-x4");
    let first = plan_for_class(&j, &class, &Fallback::default()).unwrap();
    assert_eq!(first.gpu_count, 1);
    let (fb, step) =
        fallback::next_step(&j, &first, &Fallback::default(), 4, Some(class.capability)).unwrap();
    assert_eq!(step, "one more GPU: 1 → 2");
    let second = plan_for_class(&j, &class, &fb).unwrap();
    assert_eq!(
        (second.gpu_count, second.quantization),
        (2, Quantization::None)
    );
}

#[test]
fn env_contract_carries_the_teams_names() {
    let j = job(LLAMA_VISION);
    let p = plan(&j, "a10g-x1").unwrap();
    let env: std::collections::BTreeMap<_, _> = workload::plan_env(&j, &p).into_iter().collect();
    assert_eq!(env["TORCH_DTYPE"], "bfloat16");
    assert_eq!(env["USE_QUANTIZATION"], "true");
    assert_eq!(env["QUANTIZATION_BITS"], "8");
    assert_eq!(env["USE_FLASH_ATTN"], "true");
    assert_eq!(env["MAX_TILES"], "18");
    assert_eq!(env["PYTORCH_CUDA_ALLOC_CONF"], "max_split_size_mb:128");
    assert_eq!(env["PYTORCH_ALLOC_CONF"], env["PYTORCH_CUDA_ALLOC_CONF"]);
    assert_eq!(env["VRAMFIT_MEMORY_FRACTION"], "0.90");
    assert_eq!(env["VRAMFIT_GPU_COUNT"], "1");
    assert_eq!(env["VRAMFIT_NODE_CLASS"], "a10g-x1");
}

#[test]
fn runtime_flags_for_vllm_and_llamacpp() {
    let v = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, contextLength: 8192}",
    );
    let p = plan(&v, "h100-80gb-x8").unwrap();
    assert_eq!(
        workload::runtime_args(&v, &p),
        [
            "--dtype",
            "bfloat16",
            "--tensor-parallel-size",
            "1",
            "--gpu-memory-utilization",
            "0.85",
            "--max-model-len",
            "8192",
            "--max-num-seqs",
            "1"
        ]
    );
    let l = job(
        "{model: {preset: mistral-7b-instruct-v0.3-q4_k_m}, runtime: llamacpp, image: x, contextLength: 8192}",
    );
    let p = plan(&l, "a10g-x1").unwrap();
    assert_eq!(
        workload::runtime_args(&l, &p),
        [
            "--n-gpu-layers",
            "33",
            "--ctx-size",
            "8192",
            "--parallel",
            "1",
            "--cache-type-k",
            "f16",
            "--cache-type-v",
            "f16",
            "--flash-attn",
            "on"
        ]
    );
}

#[test]
fn context_is_capped_at_the_model_limit_with_a_reason() {
    let j = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, contextLength: 100000}",
    );
    assert_eq!(j.context_length, 32768);
    let p = plan(&j, "h100-80gb-x8").unwrap();
    assert!(
        p.reasons[0].contains("capped at the model's limit"),
        "{:?}",
        p.reasons
    );
}

#[test]
fn invalid_specs_are_one_line_errors() {
    let err = resolve_job(&common::spec(
        "{model: {preset: nope}, runtime: transformers, image: x}",
    ))
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("unknown model preset \"nope\""), "{err}");
    assert!(!err.contains("did you mean"), "nothing near: {err}");
    // A mistyped preset gets the nearest one, as a mistyped field does.
    let err = resolve_job(&common::spec(
        "{model: {preset: llama-3.1-8b-instuct}, runtime: transformers, image: x}",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with(
            "unknown model preset \"llama-3.1-8b-instuct\"; did you mean llama-3.1-8b-instruct? known presets: "
        ),
        "{err}"
    );
    let err = resolve_job(&common::spec(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: llamacpp, image: x}",
    ))
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "runtime llamacpp needs a GGUF model: a GGUF preset or model.ggufFileBytes"
    );
}

#[test]
fn a_job_may_not_set_planned_or_gpu_selecting_env() {
    for name in [
        "TORCH_DTYPE",
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
        "VRAMFIT_GPU_COUNT",
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "CUDA_VISIBLE_DEVICES",
    ] {
        let yaml = format!(
            "{{model: {{preset: mistral-7b-instruct-v0.3}}, runtime: transformers, image: x, \
             pod: {{env: [{{name: HF_HOME, value: /cache}}, {{name: {name}, value: '0'}}]}}}}"
        );
        let error = resolve_job(&spec(&yaml)).expect_err(name).to_string();
        assert!(error.contains(name), "{error}");
    }
    let own = "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, \
               pod: {env: [{name: HF_HOME, value: /cache}, {name: CUDA_LAUNCH_BLOCKING, value: '1'}]}}";
    assert!(resolve_job(&spec(own)).is_ok(), "other names are the job's");
}

#[test]
fn a_job_may_not_set_vramfits_pod_keys_or_security_annotations() {
    for (field, key) in [
        ("labels", "vramfit.io/job"),
        ("labels", "app.kubernetes.io/managed-by"),
        ("annotations", "vramfit.io/plan"),
        (
            "annotations",
            "container.apparmor.security.beta.kubernetes.io/inference",
        ),
        ("annotations", "seccomp.security.alpha.kubernetes.io/pod"),
        ("annotations", "cdi.k8s.io/gpus"),
    ] {
        let yaml = format!(
            "{{model: {{preset: mistral-7b-instruct-v0.3}}, runtime: transformers, image: x, \
             pod: {{{field}: {{team: a, '{key}': unconfined}}}}}}"
        );
        let error = resolve_job(&spec(&yaml)).expect_err(key).to_string();
        assert!(
            error.starts_with(&format!("spec.pod.{field} may not set {key}: ")),
            "{error}"
        );
    }
    let own = "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, \
               pod: {labels: {team: a, app.kubernetes.io/part-of: x}, annotations: {note: x}}}";
    assert!(resolve_job(&spec(own)).is_ok(), "other keys are the job's");
}

#[test]
fn every_env_name_a_plan_sets_is_reserved() {
    let runtimes = ["transformers", "vllm", "custom"];
    let mut seen = 0;
    for preset in vramfit_planner::model_catalog::PRESETS {
        let runtime = if preset.key.contains("q4_k_m") || preset.key.contains("q8_0") {
            "llamacpp"
        } else {
            runtimes[seen % runtimes.len()]
        };
        let j = job(&format!(
            "{{model: {{preset: {}}}, runtime: {runtime}, image: x}}",
            preset.key
        ));
        for class in vramfit_planner::builtin_classes() {
            let Ok(p) = plan_for_class(&j, &class, &Default::default()) else {
                continue;
            };
            for (name, _) in workload::plan_env(&j, &p) {
                assert!(
                    workload::reserved_env(&name).is_some(),
                    "{name} is planned but a job could set it"
                );
                seen += 1;
            }
        }
    }
    assert!(seen > 100, "only {seen} env vars planned");
}

#[test]
fn garbage_output_steps_to_float16_then_flash_attention_off_then_nothing() {
    let j = job(MISTRAL);
    let first = plan(&j, "a10g-x1").unwrap();
    assert_eq!(
        (first.dtype, first.flash_attention),
        (Dtype::Bfloat16, true)
    );
    let (fp16, step) = fallback::next_after_bad_output(&j, &first, &Fallback::default()).unwrap();
    assert_eq!(step, "float16 instead of bfloat16");
    let second = plan_for_class(&j, &common::class("a10g-x1"), &fp16).unwrap();
    assert_eq!(
        (second.dtype, second.flash_attention),
        (Dtype::Float16, true)
    );
    assert!(
        second
            .reasons
            .iter()
            .any(|r| r.starts_with("float16: bfloat16 answered garbage")),
        "{:?}",
        second.reasons
    );
    let (no_flash, step) = fallback::next_after_bad_output(&j, &second, &fp16).unwrap();
    assert_eq!(step, "flash attention off");
    let third = plan_for_class(&j, &common::class("a10g-x1"), &no_flash).unwrap();
    assert_eq!(
        (third.dtype, third.flash_attention),
        (Dtype::Float16, false)
    );
    assert_eq!(fallback::next_after_bad_output(&j, &third, &no_flash), None);

    // A job that pins bfloat16 is never moved off it: flash attention is the only step.
    let pinned = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, dtype: bfloat16}",
    );
    let p = plan(&pinned, "a10g-x1").unwrap();
    let (next, step) = fallback::next_after_bad_output(&pinned, &p, &Fallback::default()).unwrap();
    assert_eq!(step, "flash attention off");
    assert!(!next.float16);
    // On a V100 the plan is float16 without flash attention already: nothing is left.
    let v100 = plan(&j, "v100-16gb-x4").unwrap();
    assert_eq!(
        fallback::next_after_bad_output(&j, &v100, &Fallback::default()),
        None
    );
}

#[test]
fn admin_allow_lists_keep_jobs_to_the_tolerations_and_priorities_a_class_accepts() {
    let tolerating = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, pod: {tolerations: [{key: dedicated, operator: Exists}], priorityClassName: urgent}}",
    );
    let mut a10g = common::class("a10g-x1");
    assert!(
        plan_for_class(&tolerating, &a10g, &Fallback::default()).is_ok(),
        "no lists: any"
    );
    a10g.allowed_toleration_keys = Some(vec!["gpu-pool".into()]);
    let why = plan_for_class(&tolerating, &a10g, &Fallback::default())
        .unwrap_err()
        .to_string();
    assert_eq!(
        why,
        "the job tolerates taint key dedicated, which GpuNodeClass allowedTolerationKeys does not list (gpu-pool)"
    );
    a10g.allowed_toleration_keys = Some(vec!["dedicated".into()]);
    a10g.allowed_priority_classes = Some(vec!["batch".into()]);
    let why = plan_for_class(&tolerating, &a10g, &Fallback::default())
        .unwrap_err()
        .to_string();
    assert_eq!(
        why,
        "priority class urgent is not in GpuNodeClass allowedPriorityClasses (batch)"
    );
    a10g.allowed_priority_classes = Some(vec!["batch".into(), "urgent".into()]);
    assert!(plan_for_class(&tolerating, &a10g, &Fallback::default()).is_ok());

    let everything = job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, pod: {tolerations: [{operator: Exists}]}}",
    );
    a10g.allowed_toleration_keys = Some(vec!["dedicated".into()]);
    let why = plan_for_class(&everything, &a10g, &Fallback::default())
        .unwrap_err()
        .to_string();
    assert!(
        why.contains("taint key *"),
        "a toleration of every taint needs `*`: {why}"
    );
}

/// Every "<figure> kept free" a plan's reasons name.
fn kept_free_figures(reasons: &[String]) -> Vec<String> {
    reasons
        .iter()
        .flat_map(|r| {
            r.match_indices(" kept free").map(move |(at, _)| {
                let before = &r[..at];
                let figure: Vec<&str> = before.rsplit(' ').take(2).collect();
                format!("{} {}", figure[1].trim_start_matches('('), figure[0])
            })
        })
        .collect()
}

#[test]
fn a_plan_names_one_figure_kept_free_per_gpu() {
    // vLLM on an H200: the 20.0 GiB buffer, rounded to the whole percent vLLM takes (0.85),
    // leaves 21.1 GiB free. The memory fraction's reason and the memory reason name that one
    // figure, and say why it is more than the buffer.
    let vllm = job("{model: {preset: llama-3.1-8b-instruct}, runtime: vllm, image: x}");
    let p = plan(&vllm, "h200-x8").unwrap();
    let figures = kept_free_figures(&p.reasons);
    assert_eq!(figures, ["21.1 GiB", "21.1 GiB"], "{:?}", p.reasons);
    let c = class("h200-x8");
    let kept = c.memory_mib - p.memory.usable_per_gpu_mib;
    assert_eq!(vramfit_planner::gib(kept), "21.1 GiB");
    for r in p.reasons.iter().filter(|r| r.contains("kept free")) {
        assert!(
            r.contains(
                "21.1 GiB kept free: the 20.0 GiB buffer, rounded to a whole percent of VRAM"
            ),
            "{r}"
        );
    }
    // transformers budgets VRAM less the buffer: the buffer is what stays free.
    let hf = job("{model: {preset: llama-3.1-8b-instruct}, runtime: transformers, image: x}");
    let p = plan(&hf, "h200-x8").unwrap();
    assert_eq!(
        kept_free_figures(&p.reasons),
        ["20.0 GiB"],
        "{:?}",
        p.reasons
    );
    assert!(
        p.reasons
            .iter()
            .any(|r| r.contains("(20.0 GiB kept free: the buffer)")),
        "{:?}",
        p.reasons
    );
}
