//! Every preset's numbers are checked against the published config.json they come from
//! (models/testdata/configs, origins in models/testdata/SOURCES.md), read the way
//! `vramfit model inspect` reads it: the catalog is not typed twice.
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use vramfit_models::hf::read_config;
use vramfit_planner::checkpoint::model_spec;
use vramfit_planner::model_catalog::PRESETS;

/// Preset → the config.json of the model it runs (a GGUF preset: the model it quantizes).
const CHECKED: &[(&str, &str)] = &[
    (
        "mistral-7b-instruct-v0.3",
        "mistralai/Mistral-7B-Instruct-v0.3",
    ),
    (
        "mistral-7b-instruct-v0.3-q4_k_m",
        "mistralai/Mistral-7B-Instruct-v0.3",
    ),
    (
        "mistral-7b-instruct-v0.3-q8_0",
        "mistralai/Mistral-7B-Instruct-v0.3",
    ),
    ("llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    (
        "llama-3.1-8b-instruct-q4_k_m",
        "meta-llama/Llama-3.1-8B-Instruct",
    ),
    (
        "llama-3.1-70b-instruct-q4_k_m",
        "meta-llama/Llama-3.1-70B-Instruct",
    ),
    ("qwen2.5-7b-instruct", "Qwen/Qwen2.5-7B-Instruct"),
    ("qwen2.5-vl-7b-instruct", "Qwen/Qwen2.5-VL-7B-Instruct"),
    ("qwen3-4b", "Qwen/Qwen3-4B"),
    ("qwen3-8b", "Qwen/Qwen3-8B"),
    ("qwen3-14b", "Qwen/Qwen3-14B"),
    ("phi-4", "microsoft/phi-4"),
    ("qwen3-32b", "Qwen/Qwen3-32B"),
    ("gemma-3-4b-it", "google/gemma-3-4b-it"),
    ("gemma-3-27b-it", "google/gemma-3-27b-it"),
    ("llama-3.2-1b-instruct", "meta-llama/Llama-3.2-1B-Instruct"),
    ("llama-3.2-3b-instruct", "meta-llama/Llama-3.2-3B-Instruct"),
    (
        "llama-3.1-70b-instruct",
        "meta-llama/Llama-3.1-70B-Instruct",
    ),
    (
        "llama-3.2-90b-vision-instruct",
        "meta-llama/Llama-3.2-90B-Vision-Instruct",
    ),
    ("mixtral-8x7b-instruct-v0.1", "mistralai/Mixtral-8x7B-v0.1"),
    ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B"),
    ("qwen3-4b-q4_k_m", "Qwen/Qwen3-4B"),
    ("qwen3-4b-q6_k", "Qwen/Qwen3-4B"),
    ("qwen3-4b-q8_0", "Qwen/Qwen3-4B"),
    ("qwen3-8b-q6_k", "Qwen/Qwen3-8B"),
    ("qwen3-8b-q8_0", "Qwen/Qwen3-8B"),
    ("qwq-32b-preview-awq", "Orion-zhen/QwQ-32B-Preview-AWQ"),
    (
        "qwen2.5-7b-instruct-gptq-int4",
        "OPEA/Qwen2.5-7B-Instruct-int4-sym-inc",
    ),
    (
        "qwen2.5-7b-fp8-dynamic",
        "neuralmagic/Qwen2.5-7B-FP8-dynamic",
    ),
];

/// Presets without a committed config, and why.
const UNCHECKED: &[(&str, &str)] = &[
    (
        "internvl3-8b",
        "no public copy of its config.json was found",
    ),
    (
        "llama-3.2-11b-vision-instruct",
        "no public copy of its config.json was found; its parameter count is the layout that counts Llama-3.2-90B-Vision's file",
    ),
];

#[test]
fn every_preset_is_checked_against_its_config_or_says_why_not() {
    for preset in PRESETS {
        let checked = CHECKED.iter().filter(|(k, _)| *k == preset.key).count();
        let unchecked = UNCHECKED.iter().filter(|(k, _)| *k == preset.key).count();
        assert_eq!(checked + unchecked, 1, "{}", preset.key);
    }
    assert!(
        PRESETS.len() >= 28,
        "the catalog covers what teams run ({} presets)",
        PRESETS.len()
    );
}

#[test]
fn presets_have_the_numbers_of_their_config() {
    for (key, repo) in CHECKED {
        let preset = PRESETS.iter().find(|p| p.key == *key).unwrap().shape;
        let path = format!(
            "{}/../models/testdata/configs/{repo}/config.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let checkpoint =
            read_config(&std::fs::read_to_string(path).unwrap(), "config.json").unwrap();
        let read = model_spec(&checkpoint, None).spec;
        let gguf = preset.gguf_file_bytes.is_some();
        assert_eq!(
            read.parameters,
            Some(preset.parameters),
            "{key}: parameters"
        );
        assert_eq!(read.layers, Some(preset.layers), "{key}: layers");
        assert_eq!(
            read.hidden_size,
            Some(preset.hidden_size),
            "{key}: hidden size"
        );
        assert_eq!(
            read.attention_heads,
            Some(preset.attention_heads),
            "{key}: heads"
        );
        assert_eq!(read.kv_heads, Some(preset.kv_heads), "{key}: KV heads");
        assert_eq!(read.head_dim, Some(preset.head_dim), "{key}: head dim");
        assert_eq!(
            read.context_limit,
            Some(preset.context_limit),
            "{key}: context"
        );
        assert_eq!(read.vision.unwrap_or(false), preset.vision, "{key}: vision");
        assert_eq!(
            read.pre_quantized, preset.pre_quantized,
            "{key}: quantization"
        );
        assert_eq!(
            read.weight_bytes, preset.weight_bytes,
            "{key}: weight bytes"
        );
        assert_eq!(read.experts, preset.experts, "{key}: experts");
        assert_eq!(
            read.active_parameters, preset.active_parameters,
            "{key}: active parameters"
        );
        // GGUF presets leave the vocabulary out: it only sizes in-flight quantization.
        let vocab = checkpoint.vocab_size.map(|v| v.value).filter(|_| !gguf);
        assert_eq!(vocab, preset.vocab_size, "{key}: vocabulary");
        assert!(
            preset.name.contains(".gguf") == gguf,
            "{key}: name {}",
            preset.name
        );
    }
}
