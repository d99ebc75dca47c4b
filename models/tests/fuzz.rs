//! Random, truncated and mutated files: every reader answers with an error or the numbers,
//! never a panic (proptest shrinks any input that panics to a minimal case).
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use proptest::prelude::*;
use vramfit_models::{gguf, hf, safetensors};

use vramfit_models::test_support as common;

fn configs() -> Vec<Vec<u8>> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/configs");
    let mut files = Vec::new();
    for org in std::fs::read_dir(root).unwrap() {
        for model in std::fs::read_dir(org.unwrap().path()).unwrap() {
            files.push(std::fs::read(model.unwrap().path().join("config.json")).unwrap());
        }
    }
    files
}

fn read_all(bytes: &[u8]) {
    let _ = gguf::read(bytes, "x.gguf", Some(bytes.len() as u64));
    let _ = gguf::read(bytes, "x.gguf", None);
    let _ = safetensors::header_len(bytes, "x.safetensors");
    let _ = safetensors::parse_header(bytes, "x.safetensors", Some(1 << 20), |_| Ok(true));
    let _ = safetensors::parse_index(bytes, "x.json");
    let _ = hf::read_config(&String::from_utf8_lossy(bytes), "config.json");
}

#[test]
fn every_truncation_of_a_gguf_file_is_an_error() {
    let (file, _) = common::small_llama();
    for cut in 0..file.len() {
        assert!(
            gguf::read(&file[..cut], "cut.gguf", Some(cut as u64)).is_err(),
            "a file cut at {cut} of {} bytes read as whole",
            file.len()
        );
    }
    assert!(gguf::read(&file[..], "whole.gguf", Some(file.len() as u64)).is_ok());
}

#[test]
fn every_truncation_of_a_config_is_an_error_or_the_same_numbers() {
    for config in configs() {
        let text = String::from_utf8(config).unwrap();
        let whole = hf::read_config(&text, "config.json").unwrap();
        for cut in (0..text.len()).filter(|&c| text.is_char_boundary(c)) {
            // JSON cut short never parses; all that matters is no panic and no wrong answer.
            if let Ok(read) = hf::read_config(&text[..cut], "config.json") {
                assert_eq!(read.layers, whole.layers);
            }
        }
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        read_all(&bytes);
        let mut gguf_like = b"GGUF\x03\0\0\0".to_vec();
        gguf_like.extend(&bytes);
        read_all(&gguf_like);
    }

    #[test]
    fn mutated_gguf_files_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let (mut file, _) = common::small_llama();
        for (at, byte) in flips {
            let i = at.index(file.len());
            file[i] = byte;
        }
        let _ = gguf::read(&file[..], "mutated.gguf", Some(file.len() as u64));
    }

    #[test]
    fn mutated_configs_never_panic(
        which in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let configs = configs();
        let mut config = configs[which.index(configs.len())].clone();
        for (at, byte) in flips {
            let i = at.index(config.len());
            config[i] = byte;
        }
        let _ = hf::read_config(&String::from_utf8_lossy(&config), "config.json");
    }

    #[test]
    fn configs_with_any_value_in_a_numeric_key_never_panic(
        which in any::<prop::sample::Index>(),
        section in prop::sample::select(vec!["", "text_config", "vision_config"]),
        key in prop::sample::select(vec![
            "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "vocab_size", "intermediate_size", "num_experts", "num_local_experts",
            "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
            "max_position_embeddings", "decoder_sparse_step", "first_k_dense_replace",
            "kv_lora_rank", "qk_rope_head_dim", "v_head_dim", "q_lora_rank", "depth",
            "image_size", "patch_size", "max_num_tiles", "num_global_layers", "out_hidden_size",
            "vision_output_dim", "spatial_merge_size", "cross_attention_layers", "mlp_only_layers",
            "quantization_config", "tie_word_embeddings", "architectures", "model_type",
        ]),
        value in prop_oneof![
            any::<i64>().prop_map(|v| v.to_string()),
            any::<u64>().prop_map(|v| v.to_string()),
            any::<u32>().prop_map(|v| v.to_string()),
            any::<f64>().prop_map(|v| format!("{v:?}")),
            Just("null".to_string()),
            Just("\"12\"".to_string()),
            Just("[1, 2]".to_string()),
            Just("{}".to_string()),
            Just("true".to_string()),
        ],
    ) {
        let configs = configs();
        let text = &configs[which.index(configs.len())];
        let mut json: serde_json::Value = serde_json::from_slice(text).unwrap();
        let value = serde_json::from_str(&value).unwrap_or(serde_json::Value::Null);
        match section {
            "" => json[key] = value,
            nested if json.get(nested).is_some_and(|v| v.is_object()) => json[nested][key] = value,
            _ => json[key] = value,
        }
        let _ = hf::read_config(&json.to_string(), "config.json");
    }
}
