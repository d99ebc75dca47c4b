//! What a job says about its model's checkpoint beyond the shape numbers: where to read it
//! (`model.huggingFace`), how it was quantized before it was published, its exact weight bytes,
//! its experts and a GGUF file's layout; and the numbers the operator read from the Hub, kept
//! in the job's status (docs/models.md).
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A model on the Hugging Face Hub (or the mirror the operator is pointed at) whose numbers
/// the operator reads at reconcile time: `config.json`, the safetensors index and headers,
/// never the weights.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.repo.matches('^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$')").message("huggingFace.repo must be owner/name of letters, digits, '-', '_' and '.'"))]
#[x_kube(validation = Rule::new("!has(self.revision) || !self.revision.matches('(^|/)[.]')").message("huggingFace.revision must not be '.' or '..' or have a part starting with '.'"))]
#[x_kube(validation = Rule::new("!has(self.file) || !self.file.matches('(^|/)[.][.]?(/|$)')").message("huggingFace.file must not have a '.' or '..' part"))]
#[serde(rename_all = "camelCase")]
pub struct HuggingFaceModel {
    /// The repository, `owner/name` (e.g. `Qwen/Qwen3-8B`).
    #[schemars(length(min = 1, max = 96))]
    pub repo: String,
    /// A branch, tag or commit; `main` when unset. Pin a commit for a plan that cannot change
    /// under the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub revision: Option<String>,
    /// The GGUF file llama.cpp loads, a path in the repository (e.g. `model-Q4_K_M.gguf`):
    /// with the node cache the pod gets `LLAMA_ARG_MODEL` pointing at it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255), regex(pattern = r"^[^/\\][^\\]*$"))]
    pub file: Option<String>,
    /// `false`: pods fetch the model themselves, the node cache is not used for this job.
    /// Default `true` (used when the operator runs with the cache on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<bool>,
}

/// How a checkpoint was quantized before it was published (`quantization_config.quant_method`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub enum PreQuantizationMethod {
    /// AWQ (AutoAWQ, llm-awq): packed 4-bit integer weights with per-group scales and zeros.
    Awq,
    /// GPTQ (AutoGPTQ, GPTQModel): packed integer weights with per-group scales.
    Gptq,
    /// FP8 weights (`quant_method: fp8`).
    Fp8,
    /// compressed-tensors (llm-compressor): W8A8 (FP8 or INT8), W4A16, W8A16.
    CompressedTensors,
    /// bitsandbytes 8-bit or 4-bit (NF4/FP4) weights saved quantized.
    Bitsandbytes,
}

impl PreQuantizationMethod {
    /// The method as `quant_method` names it.
    pub fn as_str(self) -> &'static str {
        match self {
            PreQuantizationMethod::Awq => "awq",
            PreQuantizationMethod::Gptq => "gptq",
            PreQuantizationMethod::Fp8 => "fp8",
            PreQuantizationMethod::CompressedTensors => "compressed-tensors",
            PreQuantizationMethod::Bitsandbytes => "bitsandbytes",
        }
    }
}

/// The number format of a pre-quantized checkpoint's weights.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub enum WeightFormat {
    /// Integers (AWQ, GPTQ, INT8, W4A16).
    Int,
    /// Floating point (FP8, NF4/FP4).
    Float,
}

/// A checkpoint quantized before it was published: planned by its real weight bytes, with no
/// in-flight quantization on top and no `--quantization` flag that could contradict it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PreQuantized {
    /// The method.
    pub method: PreQuantizationMethod,
    /// Bits per weight of the quantized layers (4 or 8 for the methods vramfit plans).
    #[schemars(range(min = 1, max = 16))]
    pub weight_bits: u32,
    /// Bits of the activations the kernels take (8 for W8A8); unset for weight-only schemes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub activation_bits: Option<u32>,
    /// Weights sharing one scale; unset for per-channel or per-tensor scales.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1048576))]
    pub group_size: Option<u32>,
    /// Integers or floating point; unset when the config does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_format: Option<WeightFormat>,
    /// Symmetric weights (no zero points): GPTQ `sym`, compressed-tensors `symmetric`; unset
    /// when the config does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symmetric: Option<bool>,
}

/// Where a GGUF file's bytes sit (its tensor infos): llama.cpp offloads blocks and the output
/// layer; the token embeddings stay in host memory.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GgufLayout {
    /// Tensor bytes of each transformer block `blk.N`, in order; one per layer.
    #[schemars(
        length(min = 1, max = 1024),
        inner(range(min = 0, max = 40000000000000_u64))
    )]
    pub block_bytes: Vec<u64>,
    /// Tensor bytes of the output layer (`output.weight`, `output_norm.weight`).
    #[schemars(range(min = 0, max = 40000000000000_u64))]
    pub output_bytes: u64,
    /// Tensor bytes of the token embeddings (`token_embd.weight`), kept in host memory.
    #[schemars(range(min = 0, max = 40000000000000_u64))]
    pub token_embedding_bytes: u64,
}

/// The numbers the operator read from the Hub for `model.huggingFace`, recorded in status.
/// The manifest's own numbers still win, field by field.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedModel {
    /// `owner/name@revision` read.
    pub source: String,
    /// The commit `source`'s revision named when it was read (the Hub's `sha` for it; a full
    /// commit hash as revision is its own). The job's pods take the model at this commit from
    /// the node cache, every replica, rank and attempt alike, until the job names another
    /// repository or revision. Unset where the endpoint did not say (a mirror that serves
    /// files only) or the numbers were read before vramfit recorded it: the revision's name
    /// is used then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The architecture (`architectures[0]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Parameters, all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<u64>,
    /// Parameters one token runs through (mixture of experts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_parameters: Option<u64>,
    /// Decoder layers.
    pub layers: u32,
    /// Hidden size.
    pub hidden_size: u32,
    /// Attention heads.
    pub attention_heads: u32,
    /// Key/value heads.
    pub kv_heads: u32,
    /// Dimension of one head.
    pub head_dim: u32,
    /// Longest context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_limit: Option<u32>,
    /// Vocabulary size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab_size: Option<u32>,
    /// Exact weight bytes, where the safetensors headers or index were read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_bytes: Option<u64>,
    /// Routed experts per MoE layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts: Option<u32>,
    /// How the checkpoint was quantized before it was published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_quantized: Option<PreQuantized>,
    /// Takes images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision: Option<bool>,
}

impl ResolvedModel {
    /// What was read, as the `model:` fields it fills where a manifest leaves them unset; the
    /// model is named after its repository (`source` without the revision).
    pub fn model_spec(&self) -> crate::ModelSpec {
        let repo = self
            .source
            .split_once('@')
            .map_or(&*self.source, |(r, _)| r);
        crate::ModelSpec {
            name: Some(repo.to_string()),
            parameters: self.parameters,
            layers: Some(self.layers),
            hidden_size: Some(self.hidden_size),
            attention_heads: Some(self.attention_heads),
            kv_heads: Some(self.kv_heads),
            head_dim: Some(self.head_dim),
            context_limit: self.context_limit,
            vision: self.vision,
            vocab_size: self.vocab_size,
            weight_bytes: self.weight_bytes,
            pre_quantized: self.pre_quantized,
            experts: self.experts,
            active_parameters: self.active_parameters,
            ..crate::ModelSpec::default()
        }
    }
}
