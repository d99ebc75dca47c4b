//! Model presets (docs/planning.md), each with the published source of its numbers, and the
//! resolution of a job's `model` into the numbers the estimator needs.
use vramfit_api::ModelSpec;

pub use crate::error::ModelError;

/// The numbers the memory estimator needs about a model. Presets hold `&'static str` names;
/// resolved jobs own theirs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape<Name> {
    /// Identifier passed to the runtime (`VRAMFIT_MODEL`).
    pub name: Name,
    /// Parameter count.
    pub parameters: u64,
    /// Layers (decoder layers: KV cache, llama.cpp offload).
    pub layers: u32,
    /// Hidden size.
    pub hidden_size: u32,
    /// Attention heads.
    pub attention_heads: u32,
    /// KV heads; as many as attention heads when unknown (over-estimates, never under).
    pub kv_heads: u32,
    /// Dimension of one head.
    pub head_dim: u32,
    /// Longest supported context, in tokens.
    pub context_limit: u32,
    /// GGUF file size in bytes (llama.cpp models).
    pub gguf_file_bytes: Option<u64>,
    /// Vocabulary size (config.json `vocab_size`): the token embeddings and the output layer,
    /// vocab × hidden each, stay at 16 bits under in-flight 8-bit and 4-bit quantization.
    pub vocab_size: Option<u32>,
    /// Takes images (MAX_TILES applies).
    pub vision: bool,
}

/// A resolved job's model.
pub type ModelShape = Shape<String>;

/// A catalog entry.
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    /// Preset key used in manifests.
    pub key: &'static str,
    /// The model's numbers; `name` is the runtime's model identifier.
    pub shape: Shape<&'static str>,
    /// Where the numbers come from.
    pub source: &'static str,
}

/// The built-in presets.
pub const PRESETS: &[Preset] = &[
    Preset {
        key: "internvl3-8b",
        shape: Shape {
            name: "OpenGVLab/InternVL3-8B",
            parameters: 7_940_000_000,
            layers: 28,
            hidden_size: 3584,
            attention_heads: 28,
            kv_heads: 4,
            head_dim: 128,
            context_limit: 32_768,
            vocab_size: Some(152_064),
            gguf_file_bytes: None,
            vision: true,
        },
        source: "OpenGVLab/InternVL3-8B config.json (llm_config: Qwen2.5-7B, 28 layers, 28 heads, 4 KV heads, max_position_embeddings 32768; Qwen2.5-7B vocab_size 152064); model card: 7.9B parameters with InternViT-300M",
    },
    Preset {
        key: "llama-3.2-11b-vision-instruct",
        shape: Shape {
            name: "meta-llama/Llama-3.2-11B-Vision-Instruct",
            parameters: 10_670_220_835,
            layers: 40,
            hidden_size: 4096,
            attention_heads: 32,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 131_072,
            vocab_size: Some(128_256),
            gguf_file_bytes: None,
            vision: true,
        },
        source: "meta-llama/Llama-3.2-11B-Vision-Instruct config.json (text_config: 40 layers incl. 8 cross-attention, hidden 4096, 32 heads, 8 KV heads, max_position_embeddings 131072, vocab_size 128256); safetensors: 10.67B parameters",
    },
    Preset {
        key: "mistral-7b-instruct-v0.3",
        shape: Shape {
            name: "mistralai/Mistral-7B-Instruct-v0.3",
            parameters: 7_248_023_552,
            layers: 32,
            hidden_size: 4096,
            attention_heads: 32,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 32_768,
            vocab_size: Some(32_768),
            gguf_file_bytes: None,
            vision: false,
        },
        source: "mistralai/Mistral-7B-Instruct-v0.3 config.json (32 layers, hidden 4096, 32 heads, 8 KV heads, max_position_embeddings 32768, vocab_size 32768); safetensors: 7.25B parameters",
    },
    Preset {
        key: "llama-3.1-8b-instruct",
        shape: Shape {
            name: "meta-llama/Llama-3.1-8B-Instruct",
            parameters: 8_030_261_248,
            layers: 32,
            hidden_size: 4096,
            attention_heads: 32,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 131_072,
            vocab_size: Some(128_256),
            gguf_file_bytes: None,
            vision: false,
        },
        source: "meta-llama/Llama-3.1-8B-Instruct config.json (32 layers, hidden 4096, 32 heads, 8 KV heads, max_position_embeddings 131072, vocab_size 128256); safetensors: 8.03B parameters",
    },
    Preset {
        key: "mistral-7b-instruct-v0.3-q4_k_m",
        shape: Shape {
            name: "Mistral-7B-Instruct-v0.3-Q4_K_M.gguf",
            parameters: 7_248_023_552,
            layers: 32,
            hidden_size: 4096,
            attention_heads: 32,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 32_768,
            vocab_size: None,
            gguf_file_bytes: Some(4_372_812_000),
            vision: false,
        },
        source: "GGUF metadata of Mistral-7B-Instruct-v0.3-Q4_K_M.gguf (llama.block_count 32, head_count_kv 8, context_length 32768); file 4.37 GB",
    },
    Preset {
        key: "mistral-7b-instruct-v0.3-q8_0",
        shape: Shape {
            name: "Mistral-7B-Instruct-v0.3-Q8_0.gguf",
            parameters: 7_248_023_552,
            layers: 32,
            hidden_size: 4096,
            attention_heads: 32,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 32_768,
            vocab_size: None,
            gguf_file_bytes: Some(7_702_565_000),
            vision: false,
        },
        source: "GGUF metadata of Mistral-7B-Instruct-v0.3-Q8_0.gguf (llama.block_count 32, head_count_kv 8); file 7.70 GB",
    },
    Preset {
        key: "llama-3.1-8b-instruct-q4_k_m",
        shape: Shape {
            name: "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
            parameters: 8_030_261_248,
            layers: 32,
            hidden_size: 4096,
            attention_heads: 32,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 131_072,
            vocab_size: None,
            gguf_file_bytes: Some(4_920_734_000),
            vision: false,
        },
        source: "GGUF metadata of Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf (llama.block_count 32, head_count_kv 8, context_length 131072); file 4.92 GB",
    },
    Preset {
        key: "llama-3.1-70b-instruct-q4_k_m",
        shape: Shape {
            name: "Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf",
            parameters: 70_553_706_496,
            layers: 80,
            hidden_size: 8192,
            attention_heads: 64,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 131_072,
            vocab_size: None,
            gguf_file_bytes: Some(42_520_393_000),
            vision: false,
        },
        source: "GGUF metadata of Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf (llama.block_count 80, embedding_length 8192, head_count 64, head_count_kv 8); file 42.5 GB",
    },
];

/// A preset by key (case-insensitive).
pub fn preset(key: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.key.eq_ignore_ascii_case(key))
}

/// Resolves a job's `model` (preset, explicit numbers, or both) into a [`ModelShape`].
pub fn resolve(spec: &ModelSpec) -> Result<ModelShape, ModelError> {
    let base = match &spec.preset {
        Some(key) => {
            Some(preset(key).ok_or_else(|| ModelError::UnknownPreset { key: key.clone() })?)
        }
        None => None,
    };
    let shape = base.map(|p| p.shape);
    let parameters = required(spec.parameters, shape.map(|s| s.parameters), "parameters")?;
    let layers = required(spec.layers, shape.map(|s| s.layers), "layers")?;
    let hidden_size = required(spec.hidden_size, shape.map(|s| s.hidden_size), "hiddenSize")?;
    let attention_heads = required(
        spec.attention_heads,
        shape.map(|s| s.attention_heads),
        "attentionHeads",
    )?;
    if parameters == 0 || layers == 0 || hidden_size == 0 || attention_heads == 0 {
        return Err(ModelError::NotPositive);
    }
    let head_dim = spec
        .head_dim
        .or(shape.map(|s| s.head_dim))
        .unwrap_or(hidden_size.checked_div(attention_heads).unwrap_or(0).max(1));
    // Unknown KV heads: assume full multi-head attention, which never under-estimates.
    let kv_heads = spec
        .kv_heads
        .or(shape.map(|s| s.kv_heads))
        .unwrap_or(attention_heads);
    if kv_heads > attention_heads {
        return Err(ModelError::TooManyKvHeads {
            kv_heads,
            attention_heads,
        });
    }
    let name = spec
        .name
        .clone()
        .or(shape.map(|s| s.name.to_string()))
        .unwrap_or_else(|| "custom-model".to_string());
    Ok(ModelShape {
        name,
        parameters,
        layers,
        hidden_size,
        attention_heads,
        kv_heads,
        head_dim,
        context_limit: spec
            .context_limit
            .or(shape.map(|s| s.context_limit))
            .unwrap_or(u32::MAX),
        gguf_file_bytes: spec
            .gguf_file_bytes
            .or(shape.and_then(|s| s.gguf_file_bytes)),
        vocab_size: shape.and_then(|s| s.vocab_size),
        vision: spec.vision.or(shape.map(|s| s.vision)).unwrap_or(false),
    })
}

/// An explicit field wins over the preset's; without either, the field is missing.
fn required<T>(
    explicit: Option<T>,
    preset: Option<T>,
    field: &'static str,
) -> Result<T, ModelError> {
    explicit.or(preset).ok_or(ModelError::Missing { field })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_resolve_and_explicit_numbers_override() {
        let spec = ModelSpec {
            preset: Some("Mistral-7B-Instruct-v0.3".into()),
            kv_heads: Some(32),
            ..Default::default()
        };
        let shape = resolve(&spec).unwrap();
        assert_eq!(shape.layers, 32);
        assert_eq!(shape.kv_heads, 32, "explicit field wins over the preset");
        assert_eq!(shape.name, "mistralai/Mistral-7B-Instruct-v0.3");
        assert!(!shape.vision);
    }

    #[test]
    fn unknown_preset_names_the_known_ones() {
        let spec = ModelSpec {
            preset: Some("gpt-5".into()),
            ..Default::default()
        };
        let err = resolve(&spec).unwrap_err().to_string();
        assert!(err.contains("unknown model preset \"gpt-5\""), "{err}");
        assert!(err.contains("internvl3-8b"), "{err}");
    }

    #[test]
    fn explicit_models_need_their_numbers_and_default_kv_heads_conservatively() {
        let partial = ModelSpec {
            parameters: Some(1_000_000_000),
            ..Default::default()
        };
        assert_eq!(
            resolve(&partial).unwrap_err().to_string(),
            "model.layers is required when no preset is given"
        );
        let full = ModelSpec {
            parameters: Some(1_000_000_000),
            layers: Some(16),
            hidden_size: Some(2048),
            attention_heads: Some(16),
            ..Default::default()
        };
        let shape = resolve(&full).unwrap();
        assert_eq!(shape.kv_heads, 16, "unknown KV heads = attention heads");
        assert_eq!(shape.head_dim, 128);
        let bad = ModelSpec {
            kv_heads: Some(32),
            ..full
        };
        let err = resolve(&bad).unwrap_err();
        assert_eq!(
            err,
            ModelError::TooManyKvHeads {
                kv_heads: 32,
                attention_heads: 16
            }
        );
        assert_eq!(
            err.to_string(),
            "model.kvHeads (32) cannot exceed attentionHeads (16)"
        );
    }

    #[test]
    fn every_preset_is_consistent() {
        for p in PRESETS {
            assert!(p.shape.kv_heads <= p.shape.attention_heads, "{}", p.key);
            assert_eq!(
                p.shape.hidden_size,
                p.shape.attention_heads * p.shape.head_dim,
                "{}",
                p.key
            );
            assert!(!p.source.is_empty(), "{}", p.key);
            assert_eq!(preset(p.key).map(|q| q.key), Some(p.key));
        }
    }
}
