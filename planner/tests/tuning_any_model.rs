//! Fine-tuning jobs take every model source the inference side takes: a `model.huggingFace`
//! job's numbers read from the repository's `config.json` (as the operator fills them before
//! planning), and pre-quantized checkpoints, which only QLoRA on a bitsandbytes 4-bit base
//! can train.
#![allow(clippy::unwrap_used)]

mod common;

use common::{plan, spec};
use vramfit_api::tuning::TuningMethod;
use vramfit_planner::checkpoint::{fill_unset, model_spec};
use vramfit_planner::resolve_job;

const LLAMA_8B_CONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../models/testdata/configs/meta-llama/Llama-3.1-8B-Instruct/config.json"
);

/// The spec of a LoRA job on `meta-llama/Llama-3.1-8B-Instruct`, with the numbers its
/// `config.json` gives filled in where the manifest leaves them unset.
fn hub_lora_job(extra: &str) -> vramfit_planner::JobInput {
    let mut job = spec(&format!(
        "model: {{huggingFace: {{repo: meta-llama/Llama-3.1-8B-Instruct}}{extra}}}
runtime: transformers
image: x
tuning: {{method: lora, sequenceLength: 2048, effectiveBatch: 64}}"
    ));
    let text = std::fs::read_to_string(LLAMA_8B_CONFIG).unwrap();
    let checkpoint = vramfit_models::hf::read_config(&text, "config.json").unwrap();
    let read = model_spec(
        &checkpoint,
        Some((
            "meta-llama/Llama-3.1-8B-Instruct".into(),
            "the repository".into(),
        )),
    );
    job.model = fill_unset(&job.model, &read.spec);
    resolve_job(&job).unwrap()
}

#[test]
fn a_hub_model_is_planned_for_fine_tuning_from_its_config() {
    let job = hub_lora_job("");
    let tuning = job.tuning.as_ref().unwrap();
    // config.json: vocab_size 128256 (the logits), 32 layers, hidden 4096.
    assert_eq!(tuning.shape.vocab_size, 128_256);
    assert_eq!(job.model.layers, 32);
    let h100 = plan(&job, "h100-80gb-x8").unwrap();
    let t = h100.tuning.as_ref().unwrap();
    assert_eq!(t.method, TuningMethod::Lora);
    assert!(t.micro_batch >= 1 && t.micro_batch * t.gradient_accumulation * h100.gpu_count >= 64);
    assert!(h100.memory.needed_per_gpu_mib <= h100.memory.vram_per_gpu_mib);
    // A 16-bit 8B base leaves a 24 GB A10G no room for LoRA at 2048.
    assert!(plan(&job, "a10g-x1").is_err());
}

#[test]
fn the_manifest_s_own_numbers_win_over_the_config_s_for_fine_tuning_too() {
    let job = hub_lora_job(", intermediateSize: 20000");
    let tuning = job.tuning.as_ref().unwrap();
    assert_eq!(tuning.shape.dims.intermediate, 20_000);
    assert!(!tuning.shape.intermediate_derived);
}

#[test]
fn a_pre_quantized_preset_is_refused_for_full_and_lora_with_the_reason() {
    for (preset, method) in [
        ("qwq-32b-preview-awq", "full"),
        ("qwen2.5-7b-instruct-gptq-int4", "lora"),
        ("qwen2.5-7b-fp8-dynamic", "auto"),
    ] {
        let job = spec(&format!(
            "model: {{preset: {preset}}}\nruntime: transformers\nimage: x\ntuning: {{method: {method}}}"
        ));
        let err = resolve_job(&job).unwrap_err().to_string();
        assert!(
            err.contains("pre-quantized") && err.contains("fine-tune the unquantized checkpoint"),
            "{preset} {method}: {err}"
        );
    }
}
