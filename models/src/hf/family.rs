//! What a `config.json` leaves to the transformers class that loads it, per `model_type`:
//! defaults of absent keys, and the layout of each architecture's layers.

/// A model type's defaults and layer layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Family {
    /// The config class whose defaults apply, with the version they were read from.
    pub default_of: &'static str,
    /// Defaults of counts the config may leave out.
    pub defaults: &'static [(&'static str, u32)],
    /// `tie_word_embeddings` when absent.
    pub tie_embeddings: bool,
    /// q, k and v projections carry biases (Qwen2 family).
    pub qkv_bias: bool,
    /// RMSNorms on q and k per head (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// Norms per decoder layer (Gemma 2/3 have four).
    pub norms_per_layer: u64,
    /// Embedding rows beyond the vocabulary (Llama-3.2-Vision's image tokens).
    pub extra_embedding_rows: u64,
    /// Whether vramfit's layer formula was checked against this family's published sizes.
    pub known: bool,
}

const LLAMA: Family = Family {
    default_of: "transformers LlamaConfig",
    defaults: &[],
    tie_embeddings: false,
    qkv_bias: false,
    qk_norm: false,
    norms_per_layer: 2,
    extra_embedding_rows: 0,
    known: true,
};

/// The family of a `model_type` (the text model's, for multimodal configs).
pub(crate) fn of(model_type: &str) -> Family {
    match model_type {
        "llama" | "mistral" | "mixtral" | "phi3" | "deepseek_v2" | "deepseek_v3" => LLAMA,
        "mllama_text_model" | "mllama" => Family {
            default_of: "transformers MllamaTextConfig",
            extra_embedding_rows: 8,
            ..LLAMA
        },
        "qwen2" | "qwen2_moe" | "qwen2_vl" | "qwen2_5_vl" | "qwen2_5_vl_text" | "qwen2_vl_text" => {
            Family {
                default_of: "transformers Qwen2Config",
                qkv_bias: true,
                ..LLAMA
            }
        }
        "qwen3" | "qwen3_moe" => Family {
            default_of: "transformers Qwen3Config",
            qk_norm: true,
            ..LLAMA
        },
        // transformers v4.50.0, models/gemma3/configuration_gemma3.py, Gemma3TextConfig.
        "gemma3_text" | "gemma3" => Family {
            default_of: "transformers 4.50 Gemma3TextConfig",
            defaults: &[
                ("vocab_size", 262_208),
                ("num_attention_heads", 8),
                ("num_key_value_heads", 4),
                ("head_dim", 256),
                ("max_position_embeddings", 131_072),
            ],
            tie_embeddings: true,
            qk_norm: true,
            norms_per_layer: 4,
            ..LLAMA
        },
        _ => Family {
            default_of: "transformers PretrainedConfig",
            known: false,
            ..LLAMA
        },
    }
}

impl Family {
    /// The default of the first of `keys` the family defaults.
    pub fn default_for(&self, keys: &[&str]) -> Option<(&'static str, u32)> {
        keys.iter().find_map(|k| {
            self.defaults
                .iter()
                .find(|(key, _)| key == k)
                .map(|&(key, value)| (key, value))
        })
    }
}
