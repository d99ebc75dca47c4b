//! What a checkpoint says about its model, each number with where it was read from.
use std::collections::BTreeMap;
use std::fmt;

use serde::{Serialize, Serializer};

/// A number (or name) and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fact<T> {
    /// The value.
    pub value: T,
    /// Where it was read from.
    pub from: Origin,
}

impl<T> Fact<T> {
    /// A value read from `key` of `file`.
    pub fn key(value: T, file: &str, key: &str) -> Self {
        Fact {
            value,
            from: Origin::Key {
                file: file.to_string(),
                key: key.to_string(),
            },
        }
    }

    /// A value worked out from other facts; `how` says how.
    pub fn derived(value: T, how: impl Into<String>) -> Self {
        Fact {
            value,
            from: Origin::Derived(how.into()),
        }
    }
}

/// Where a fact came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A key of a file (`config.json` `text_config.num_hidden_layers`, a GGUF metadata key).
    Key {
        /// The file.
        file: String,
        /// The key, dotted for nested objects.
        key: String,
    },
    /// A key the file leaves out, read as the default of the class that loads it.
    Default {
        /// The file.
        file: String,
        /// The key that is absent.
        key: String,
        /// Whose default applies, with its version.
        default_of: &'static str,
    },
    /// Worked out from other facts.
    Derived(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Key { file, key } => write!(f, "{file} {key}"),
            Origin::Default {
                file,
                key,
                default_of,
            } => write!(f, "{file}: {key} absent, the default of {default_of}"),
            Origin::Derived(how) => f.write_str(how),
        }
    }
}

impl Serialize for Origin {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The file format a checkpoint was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum CheckpointFormat {
    /// A Hugging Face model: `config.json`, safetensors.
    HuggingFace,
    /// A GGUF file (llama.cpp).
    Gguf,
}

/// Mixture of experts: every expert sits in memory, a few run per token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Experts {
    /// Routed experts per MoE layer.
    pub routed: Fact<u32>,
    /// Routed experts each token runs through.
    pub per_token: Fact<u32>,
    /// Shared experts every token runs through, where the model has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared: Option<Fact<u32>>,
    /// Intermediate size of one expert's MLP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_intermediate_size: Option<Fact<u32>>,
}

/// Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds one compressed latent and
/// one rotary key per token and layer instead of keys and values per head.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LatentAttention {
    /// Width of the compressed KV latent.
    pub kv_lora_rank: Fact<u32>,
    /// Width of the rotary key part, cached beside the latent.
    pub rope_head_dim: Fact<u32>,
}

impl LatentAttention {
    /// Elements cached per token and layer.
    pub fn cached_width(&self) -> u32 {
        self.kv_lora_rank
            .value
            .saturating_add(self.rope_head_dim.value)
    }
}

/// How a pre-quantized checkpoint stores its weights.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum QuantMethod {
    /// AWQ (AutoAWQ, llm-awq): packed int4 weights with per-group scales and zeros.
    Awq,
    /// GPTQ (AutoGPTQ, GPTQModel, optimum): packed int weights with per-group scales and zeros.
    Gptq,
    /// FP8 weights (`quant_method: fp8`), per tensor, per channel or per block scales.
    Fp8,
    /// compressed-tensors (llm-compressor): W8A8 (FP8 or INT8), W4A16, W8A16 and more.
    CompressedTensors,
    /// bitsandbytes: 8-bit or 4-bit (NF4/FP4) weights.
    Bitsandbytes,
    /// Another method vramfit does not size (named as the config names it).
    Other(String),
}

impl QuantMethod {
    /// The method as `quant_method` names it.
    pub fn as_str(&self) -> &str {
        match self {
            QuantMethod::Awq => "awq",
            QuantMethod::Gptq => "gptq",
            QuantMethod::Fp8 => "fp8",
            QuantMethod::CompressedTensors => "compressed-tensors",
            QuantMethod::Bitsandbytes => "bitsandbytes",
            QuantMethod::Other(name) => name,
        }
    }
}

/// A checkpoint quantized before it was published.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreQuantized {
    /// The method.
    pub method: QuantMethod,
    /// Bits per weight of the quantized linear layers, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_bits: Option<u8>,
    /// Bits of the activations the kernels take (8 for W8A8; none for weight-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub activation_bits: Option<u8>,
    /// Weights sharing one scale, where grouped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_size: Option<u32>,
    /// The number format of the weights: `int` or `float`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_format: Option<String>,
    /// Symmetric weights, without zero points (GPTQ `sym`, AWQ `zero_point: false`,
    /// compressed-tensors `symmetric`), where the config says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symmetric: Option<bool>,
    /// Where it was read from.
    pub from: Origin,
}

/// Exact weight bytes of a checkpoint's tensors (safetensors headers, GGUF tensor infos).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Weights {
    /// All tensor bytes.
    pub bytes: Fact<u64>,
    /// Bytes per stored dtype (`BF16`, `I32`, `F8_E4M3`, `Q4_K` …).
    pub by_dtype: BTreeMap<String, u64>,
    /// Tensors counted.
    pub tensors: u64,
}

/// Where a GGUF file's bytes sit: per transformer block, the output layer, the token
/// embeddings (llama.cpp offloads blocks and the output layer; the embeddings stay in host
/// memory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GgufLayout {
    /// The file's size.
    pub file_bytes: Fact<u64>,
    /// Tensor bytes of each block `blk.N.*`, by N.
    pub block_bytes: Vec<u64>,
    /// Tensor bytes of the output layer (`output.weight`, `output_norm.weight`).
    pub output_bytes: u64,
    /// Tensor bytes of the token embeddings (`token_embd.weight`).
    pub token_embd_bytes: u64,
    /// Tensor bytes of everything else (rope factors …).
    pub other_bytes: u64,
    /// `general.file_type` as llama.cpp names it (`Q4_K_M`), where present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_type: Option<String>,
}

/// What a checkpoint says about its model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// The format read.
    pub format: CheckpointFormat,
    /// The architecture (`architectures[0]`, GGUF `general.architecture`).
    pub architecture: Fact<String>,
    /// Decoder layers (the KV cache; llama.cpp's blocks).
    pub layers: Fact<u32>,
    /// Hidden size of the language model.
    pub hidden_size: Fact<u32>,
    /// Attention heads.
    pub attention_heads: Fact<u32>,
    /// Key/value heads (grouped-query attention).
    pub kv_heads: Fact<u32>,
    /// Dimension of one head.
    pub head_dim: Fact<u32>,
    /// Longest context the model takes, in tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_limit: Option<Fact<u32>>,
    /// Vocabulary size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vocab_size: Option<Fact<u32>>,
    /// Parameters, all of them (every expert, the vision tower).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Fact<u64>>,
    /// Parameters one token runs through (MoE models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_parameters: Option<Fact<u64>>,
    /// Parameters of the language model's linear layers (attention, MLP, experts): those a
    /// pre-quantized checkpoint (AWQ, GPTQ, FP8) stores quantized, while embeddings, the
    /// output layer, norms and the vision tower stay at 16 bits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linear_parameters: Option<Fact<u64>>,
    /// Mixture of experts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub experts: Option<Experts>,
    /// The vision tower's type, for models that take images.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vision: Option<Fact<String>>,
    /// Cross-attention layers (Llama-3.2-Vision): part of `layers`, attending to the image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cross_attention_layers: Option<Fact<u32>>,
    /// Multi-head latent attention.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latent_attention: Option<LatentAttention>,
    /// The dtype the weights were saved in (`torch_dtype`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dtype: Option<Fact<String>>,
    /// How the checkpoint was quantized before it was published.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantization: Option<PreQuantized>,
    /// Exact tensor bytes, where headers were read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights: Option<Weights>,
    /// Where a GGUF file's bytes sit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gguf: Option<GgufLayout>,
    /// What a reader should know (sliding-window layers planned as full ones, say).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}
