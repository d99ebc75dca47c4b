//! Model presets (docs/planning.md), each with the published source of its numbers, and the
//! resolution of a job's `model` into the numbers the estimator needs.
use vramfit_api::ModelSpec;
use vramfit_api::checkpoint::{PreQuantizationMethod, PreQuantized, WeightFormat};

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
    /// How the checkpoint was quantized before it was published: sized by `weight_bytes`,
    /// with no in-flight quantization on top.
    pub pre_quantized: Option<PreQuantized>,
    /// Exact bytes of the checkpoint's weights (safetensors headers), used for pre-quantized
    /// checkpoints.
    pub weight_bytes: Option<u64>,
    /// Mixture of experts: routed experts per MoE layer (every one sits in memory).
    pub experts: Option<u32>,
    /// Mixture of experts: parameters one token runs through (speed, not memory).
    pub active_parameters: Option<u64>,
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

/// The fields a preset leaves unset: a 16-bit dense checkpoint, not a GGUF file, text only,
/// vocabulary unknown. Each preset sets its numbers and what differs (the numbers here are
/// placeholders; `every_preset_is_consistent` checks that none is left at 0).
const UNSET: Shape<&str> = Shape {
    name: "",
    parameters: 0,
    layers: 0,
    hidden_size: 0,
    attention_heads: 0,
    kv_heads: 0,
    head_dim: 0,
    context_limit: 0,
    gguf_file_bytes: None,
    vocab_size: None,
    vision: false,
    pre_quantized: None,
    weight_bytes: None,
    experts: None,
    active_parameters: None,
};

/// A GGUF quantization of `base`: its shape, under the file's name and size (llama.cpp plans by
/// the file's bytes; the vocabulary matters only to in-flight quantization).
const fn gguf(base: Shape<&'static str>, file: &'static str, bytes: u64) -> Shape<&'static str> {
    Shape {
        name: file,
        gguf_file_bytes: Some(bytes),
        vocab_size: None,
        ..base
    }
}

/// Models several presets share (a GGUF or pre-quantized release of the same weights).
const MISTRAL_7B: Shape<&str> = Shape {
    name: "mistralai/Mistral-7B-Instruct-v0.3",
    parameters: 7_248_023_552,
    layers: 32,
    hidden_size: 4096,
    attention_heads: 32,
    kv_heads: 8,
    head_dim: 128,
    context_limit: 32_768,
    vocab_size: Some(32_768),
    ..UNSET
};

const LLAMA_31_8B: Shape<&str> = Shape {
    name: "meta-llama/Llama-3.1-8B-Instruct",
    parameters: 8_030_261_248,
    layers: 32,
    hidden_size: 4096,
    attention_heads: 32,
    kv_heads: 8,
    head_dim: 128,
    context_limit: 131_072,
    vocab_size: Some(128_256),
    ..UNSET
};

const LLAMA_31_70B: Shape<&str> = Shape {
    name: "meta-llama/Llama-3.1-70B-Instruct",
    parameters: 70_553_706_496,
    layers: 80,
    hidden_size: 8192,
    attention_heads: 64,
    kv_heads: 8,
    head_dim: 128,
    context_limit: 131_072,
    vocab_size: Some(128_256),
    ..UNSET
};

const QWEN3_4B: Shape<&str> = Shape {
    name: "Qwen/Qwen3-4B",
    parameters: 4_022_468_096,
    layers: 36,
    hidden_size: 2560,
    attention_heads: 32,
    kv_heads: 8,
    head_dim: 128,
    context_limit: 40_960,
    vocab_size: Some(151_936),
    ..UNSET
};

const QWEN3_8B: Shape<&str> = Shape {
    name: "Qwen/Qwen3-8B",
    parameters: 8_190_735_360,
    layers: 36,
    hidden_size: 4096,
    attention_heads: 32,
    kv_heads: 8,
    head_dim: 128,
    context_limit: 40_960,
    vocab_size: Some(151_936),
    ..UNSET
};

const QWEN25_7B: Shape<&str> = Shape {
    name: "Qwen/Qwen2.5-7B-Instruct",
    parameters: 7_615_616_512,
    layers: 28,
    hidden_size: 3584,
    attention_heads: 28,
    kv_heads: 4,
    head_dim: 128,
    context_limit: 32_768,
    vocab_size: Some(152_064),
    ..UNSET
};

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
            vision: true,
            ..UNSET
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
            vision: true,
            ..UNSET
        },
        source: "meta-llama/Llama-3.2-11B-Vision-Instruct config.json (text_config: 40 layers incl. 8 cross-attention, hidden 4096, 32 heads, 8 KV heads, max_position_embeddings 131072, vocab_size 128256); safetensors: 10.67B parameters",
    },
    Preset {
        key: "mistral-7b-instruct-v0.3",
        shape: MISTRAL_7B,
        source: "mistralai/Mistral-7B-Instruct-v0.3 config.json (32 layers, hidden 4096, 32 heads, 8 KV heads, max_position_embeddings 32768, vocab_size 32768); safetensors: 7.25B parameters",
    },
    Preset {
        key: "llama-3.1-8b-instruct",
        shape: LLAMA_31_8B,
        source: "meta-llama/Llama-3.1-8B-Instruct config.json (32 layers, hidden 4096, 32 heads, 8 KV heads, max_position_embeddings 131072, vocab_size 128256); safetensors: 8.03B parameters",
    },
    Preset {
        key: "mistral-7b-instruct-v0.3-q4_k_m",
        shape: gguf(
            MISTRAL_7B,
            "Mistral-7B-Instruct-v0.3-Q4_K_M.gguf",
            4_372_812_000,
        ),
        source: "GGUF metadata of Mistral-7B-Instruct-v0.3-Q4_K_M.gguf (llama.block_count 32, head_count_kv 8, context_length 32768); file 4.37 GB",
    },
    Preset {
        key: "mistral-7b-instruct-v0.3-q8_0",
        shape: gguf(
            MISTRAL_7B,
            "Mistral-7B-Instruct-v0.3-Q8_0.gguf",
            7_702_565_000,
        ),
        source: "GGUF metadata of Mistral-7B-Instruct-v0.3-Q8_0.gguf (llama.block_count 32, head_count_kv 8); file 7.70 GB",
    },
    Preset {
        key: "llama-3.1-8b-instruct-q4_k_m",
        shape: gguf(
            LLAMA_31_8B,
            "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
            4_920_734_000,
        ),
        source: "GGUF metadata of Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf (llama.block_count 32, head_count_kv 8, context_length 131072); file 4.92 GB",
    },
    Preset {
        key: "llama-3.1-70b-instruct-q4_k_m",
        shape: gguf(
            LLAMA_31_70B,
            "Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf",
            42_520_393_000,
        ),
        source: "GGUF metadata of Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf (llama.block_count 80, embedding_length 8192, head_count 64, head_count_kv 8); file 42.5 GB",
    },
    Preset {
        key: "qwen2.5-7b-instruct",
        shape: QWEN25_7B,
        source: "Qwen/Qwen2.5-7B-Instruct config.json (28 layers, hidden 3584, 28 heads, 4 KV heads, max_position_embeddings 32768, vocab_size 152064; 7.62B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "qwen2.5-vl-7b-instruct",
        shape: Shape {
            name: "Qwen/Qwen2.5-VL-7B-Instruct",
            parameters: 8_292_166_656,
            layers: 28,
            hidden_size: 3584,
            attention_heads: 28,
            kv_heads: 4,
            head_dim: 128,
            context_limit: 128_000,
            vocab_size: Some(152_064),
            vision: true,
            ..UNSET
        },
        source: "Qwen/Qwen2.5-VL-7B-Instruct config.json (28 layers, hidden 3584, 28 heads, 4 KV heads, max_position_embeddings 128000, vocab_size 152064, a 32-block ViT in vision_config; 8.29B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "qwen3-4b",
        shape: QWEN3_4B,
        source: "Qwen/Qwen3-4B config.json (36 layers, hidden 2560, 32 heads of 128, 8 KV heads, max_position_embeddings 40960, vocab_size 151936, tied embeddings; 4.02B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "qwen3-8b",
        shape: QWEN3_8B,
        source: "Qwen/Qwen3-8B config.json (36 layers, hidden 4096, 32 heads of 128, 8 KV heads, max_position_embeddings 40960, vocab_size 151936; 8.19B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "qwen3-14b",
        shape: Shape {
            name: "Qwen/Qwen3-14B",
            parameters: 14_768_307_200,
            layers: 40,
            hidden_size: 5120,
            attention_heads: 40,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 40_960,
            vocab_size: Some(151_936),
            ..UNSET
        },
        source: "Qwen/Qwen3-14B config.json (40 layers, hidden 5120, 40 heads of 128, 8 KV heads, max_position_embeddings 40960, vocab_size 151936; 14.8B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "phi-4",
        shape: Shape {
            name: "microsoft/phi-4",
            parameters: 14_659_507_200,
            layers: 40,
            hidden_size: 5120,
            attention_heads: 40,
            kv_heads: 10,
            head_dim: 128,
            context_limit: 16_384,
            vocab_size: Some(100_352),
            ..UNSET
        },
        source: "microsoft/phi-4 config.json (40 layers, hidden 5120, 40 heads, 10 KV heads, max_position_embeddings 16384, vocab_size 100352; 14.7B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "qwen3-32b",
        shape: Shape {
            name: "Qwen/Qwen3-32B",
            parameters: 32_762_123_264,
            layers: 64,
            hidden_size: 5120,
            attention_heads: 64,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 40_960,
            vocab_size: Some(151_936),
            ..UNSET
        },
        source: "Qwen/Qwen3-32B config.json (64 layers, hidden 5120, 64 heads of 128, 8 KV heads, max_position_embeddings 40960, vocab_size 151936; 32.8B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "gemma-3-4b-it",
        shape: Shape {
            name: "google/gemma-3-4b-it",
            parameters: 4_300_079_472,
            layers: 34,
            hidden_size: 2560,
            attention_heads: 8,
            kv_heads: 4,
            head_dim: 256,
            context_limit: 131_072,
            vocab_size: Some(262_208),
            vision: true,
            ..UNSET
        },
        source: "google/gemma-3-4b-it config.json (text_config: 34 layers, hidden 2560; heads 8, KV heads 4, head_dim 256, context 131072 and vocabulary 262208 as transformers 4.50 Gemma3TextConfig defaults them; a SigLIP tower; 4.30B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "gemma-3-27b-it",
        shape: Shape {
            name: "google/gemma-3-27b-it",
            parameters: 27_432_406_640,
            layers: 62,
            hidden_size: 5376,
            attention_heads: 32,
            kv_heads: 16,
            head_dim: 128,
            context_limit: 131_072,
            vocab_size: Some(262_208),
            vision: true,
            ..UNSET
        },
        source: "google/gemma-3-27b-it config.json (text_config: 62 layers, hidden 5376, 32 heads of 128, 16 KV heads; context 131072 and vocabulary 262208 as transformers 4.50 Gemma3TextConfig defaults them; a SigLIP tower; 27.4B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "llama-3.2-1b-instruct",
        shape: Shape {
            name: "meta-llama/Llama-3.2-1B-Instruct",
            parameters: 1_235_814_400,
            layers: 16,
            hidden_size: 2048,
            attention_heads: 32,
            kv_heads: 8,
            head_dim: 64,
            context_limit: 131_072,
            vocab_size: Some(128_256),
            ..UNSET
        },
        source: "meta-llama/Llama-3.2-1B-Instruct config.json (16 layers, hidden 2048, 32 heads of 64, 8 KV heads, max_position_embeddings 131072, vocab_size 128256, tied embeddings; 1.24B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "llama-3.2-3b-instruct",
        shape: Shape {
            name: "meta-llama/Llama-3.2-3B-Instruct",
            parameters: 3_212_749_824,
            layers: 28,
            hidden_size: 3072,
            attention_heads: 24,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 131_072,
            vocab_size: Some(128_256),
            ..UNSET
        },
        source: "meta-llama/Llama-3.2-3B-Instruct config.json (28 layers, hidden 3072, 24 heads of 128, 8 KV heads, max_position_embeddings 131072, vocab_size 128256, tied embeddings; 3.21B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "llama-3.1-70b-instruct",
        shape: LLAMA_31_70B,
        source: "meta-llama/Llama-3.1-70B-Instruct config.json (80 layers, hidden 8192, 64 heads, 8 KV heads, max_position_embeddings 131072, vocab_size 128256; 70.6B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "llama-3.2-90b-vision-instruct",
        shape: Shape {
            name: "meta-llama/Llama-3.2-90B-Vision-Instruct",
            parameters: 88_593_355_323,
            layers: 100,
            hidden_size: 8192,
            attention_heads: 64,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 131_072,
            vocab_size: Some(128_256),
            vision: true,
            ..UNSET
        },
        source: "meta-llama/Llama-3.2-90B-Vision-Instruct config.json (text_config: 100 layers of which 20 cross-attention, hidden 8192, 64 heads, 8 KV heads, max_position_embeddings 131072, vocab_size 128256; a tiled ViT of 32 + 8 global layers; 88.6B); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "mixtral-8x7b-instruct-v0.1",
        shape: Shape {
            name: "mistralai/Mixtral-8x7B-Instruct-v0.1",
            parameters: 46_702_792_704,
            layers: 32,
            hidden_size: 4096,
            attention_heads: 32,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 32_768,
            vocab_size: Some(32_000),
            experts: Some(8),
            active_parameters: Some(12_879_925_248),
            ..UNSET
        },
        source: "mistralai/Mixtral-8x7B-v0.1 config.json, whose architecture the Instruct release shares (32 layers, hidden 4096, 32 heads, 8 KV heads, 8 experts of 14336 with 2 per token, max_position_embeddings 32768, vocab_size 32000); parameters counted from it: 46.7B, every expert held in memory (12.9B active)",
    },
    Preset {
        key: "qwen3-30b-a3b",
        shape: Shape {
            name: "Qwen/Qwen3-30B-A3B",
            parameters: 30_532_122_624,
            layers: 48,
            hidden_size: 2048,
            attention_heads: 32,
            kv_heads: 4,
            head_dim: 128,
            context_limit: 40_960,
            vocab_size: Some(151_936),
            experts: Some(128),
            active_parameters: Some(3_353_032_704),
            ..UNSET
        },
        source: "Qwen/Qwen3-30B-A3B config.json (48 layers, hidden 2048, 32 heads of 128, 4 KV heads, 128 experts of 768 with 8 per token, max_position_embeddings 40960, vocab_size 151936; 30.5B, every expert held in memory (3.35B active)); parameters counted from it as transformers builds the model",
    },
    Preset {
        key: "qwen3-4b-q4_k_m",
        shape: gguf(QWEN3_4B, "Qwen_Qwen3-4B-Q4_K_M.gguf", 2_505_000_000),
        source: "bartowski/Qwen_Qwen3-4B-GGUF file table (llama.cpp b5200): Qwen_Qwen3-4B-Q4_K_M.gguf 2.50 GB, planned at the listing's upper bound 2.505 GB; GGUF metadata as Qwen/Qwen3-4B config.json (block_count 36, embedding_length 2560, head_count 32, head_count_kv 8, context_length 40960)",
    },
    Preset {
        key: "qwen3-4b-q6_k",
        shape: gguf(QWEN3_4B, "Qwen_Qwen3-4B-Q6_K.gguf", 3_315_000_000),
        source: "bartowski/Qwen_Qwen3-4B-GGUF file table (llama.cpp b5200): Qwen_Qwen3-4B-Q6_K.gguf 3.31 GB, planned at the listing's upper bound 3.315 GB; GGUF metadata as Qwen/Qwen3-4B config.json (block_count 36, embedding_length 2560, head_count 32, head_count_kv 8, context_length 40960)",
    },
    Preset {
        key: "qwen3-4b-q8_0",
        shape: gguf(QWEN3_4B, "Qwen_Qwen3-4B-Q8_0.gguf", 4_285_000_000),
        source: "bartowski/Qwen_Qwen3-4B-GGUF file table (llama.cpp b5200): Qwen_Qwen3-4B-Q8_0.gguf 4.28 GB, planned at the listing's upper bound 4.285 GB; GGUF metadata as Qwen/Qwen3-4B config.json (block_count 36, embedding_length 2560, head_count 32, head_count_kv 8, context_length 40960)",
    },
    Preset {
        key: "qwen3-8b-q6_k",
        shape: gguf(QWEN3_8B, "Qwen_Qwen3-8B-Q6_K.gguf", 6_735_000_000),
        source: "bartowski/Qwen_Qwen3-8B-GGUF file table (llama.cpp b5200): Qwen_Qwen3-8B-Q6_K.gguf 6.73 GB, planned at the listing's upper bound 6.735 GB; GGUF metadata as Qwen/Qwen3-8B config.json (block_count 36, embedding_length 4096, head_count 32, head_count_kv 8, context_length 40960)",
    },
    Preset {
        key: "qwen3-8b-q8_0",
        shape: gguf(QWEN3_8B, "Qwen_Qwen3-8B-Q8_0.gguf", 8_715_000_000),
        source: "bartowski/Qwen_Qwen3-8B-GGUF file table (llama.cpp b5200): Qwen_Qwen3-8B-Q8_0.gguf 8.71 GB, planned at the listing's upper bound 8.715 GB; GGUF metadata as Qwen/Qwen3-8B config.json (block_count 36, embedding_length 4096, head_count 32, head_count_kv 8, context_length 40960)",
    },
    Preset {
        key: "qwq-32b-preview-awq",
        shape: Shape {
            name: "Orion-zhen/QwQ-32B-Preview-AWQ",
            parameters: 32_763_876_352,
            layers: 64,
            hidden_size: 5120,
            attention_heads: 40,
            kv_heads: 8,
            head_dim: 128,
            context_limit: 32_768,
            vocab_size: Some(152_064),
            pre_quantized: Some(PreQuantized {
                method: PreQuantizationMethod::Awq,
                weight_bits: 4,
                activation_bits: None,
                group_size: Some(128),
                weight_format: Some(WeightFormat::Int),
                symmetric: Some(false),
            }),
            weight_bytes: Some(WEIGHTS_QWQ_32B_AWQ),
            ..UNSET
        },
        source: "Orion-zhen/QwQ-32B-Preview-AWQ config.json (64 layers, hidden 5120, 40 heads, 8 KV heads, max_position_embeddings 32768, vocab_size 152064; quantization_config: awq, 4 bits, groups of 128, zero points; 32.8B parameters); weights estimated from its linear layers at 4 bits with a scale and zero per group of 128",
    },
    Preset {
        key: "qwen2.5-7b-instruct-gptq-int4",
        shape: Shape {
            name: "OPEA/Qwen2.5-7B-Instruct-int4-sym-inc",
            pre_quantized: Some(PreQuantized {
                method: PreQuantizationMethod::Gptq,
                weight_bits: 4,
                activation_bits: None,
                group_size: Some(128),
                weight_format: Some(WeightFormat::Int),
                symmetric: Some(true),
            }),
            weight_bytes: Some(WEIGHTS_QWEN25_7B_GPTQ),
            ..QWEN25_7B
        },
        source: "Qwen/Qwen2.5-7B-Instruct config.json with the quantization_config of OPEA/Qwen2.5-7B-Instruct-int4-sym-inc (quantize_config.json: gptq, 4 bits, groups of 128, symmetric; an AutoRound quantization in GPTQ format); weights estimated from its linear layers at 4 bits with a scale and zero per group of 128",
    },
    Preset {
        key: "qwen2.5-7b-fp8-dynamic",
        shape: Shape {
            name: "neuralmagic/Qwen2.5-7B-FP8-dynamic",
            context_limit: 131_072,
            pre_quantized: Some(PreQuantized {
                method: PreQuantizationMethod::CompressedTensors,
                weight_bits: 8,
                activation_bits: Some(8),
                group_size: None,
                weight_format: Some(WeightFormat::Float),
                symmetric: Some(true),
            }),
            weight_bytes: Some(WEIGHTS_QWEN25_7B_FP8),
            ..QWEN25_7B
        },
        source: "neuralmagic/Qwen2.5-7B-FP8-dynamic config.json (Qwen2.5-7B: 28 layers, hidden 3584, 28 heads, 4 KV heads, max_position_embeddings 131072, vocab_size 152064; quantization_config: compressed-tensors, FP8 weights per channel and FP8 dynamic per-token activations, lm_head ignored); weights estimated from its linear layers at 8 bits",
    },
];

/// Weight bytes of the pre-quantized presets, as `vramfit model inspect` estimates them from
/// each config.json (a test keeps the two equal).
const WEIGHTS_QWQ_32B_AWQ: u64 = 19_694_495_744;
const WEIGHTS_QWEN25_7B_GPTQ: u64 = 5_647_215_616;
const WEIGHTS_QWEN25_7B_FP8: u64 = 8_909_859_840;

/// A preset by key (case-insensitive).
pub fn preset(key: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.key.eq_ignore_ascii_case(key))
}

/// The model a GGUF preset quantizes (its Hugging Face name), for presets that are GGUF
/// files: the one 16-bit preset of the catalog with the same numbers. `None` for a preset that
/// is not a GGUF file, or an unknown key.
pub fn gguf_base(key: &str) -> Option<&'static str> {
    let gguf = preset(key)?.shape;
    gguf.gguf_file_bytes?;
    let same = |base: &Shape<&'static str>| {
        base.gguf_file_bytes.is_none()
            && base.pre_quantized.is_none()
            && base.parameters == gguf.parameters
            && base.layers == gguf.layers
            && base.hidden_size == gguf.hidden_size
            && base.attention_heads == gguf.attention_heads
            && base.kv_heads == gguf.kv_heads
            && base.head_dim == gguf.head_dim
            && base.context_limit == gguf.context_limit
            && base.vision == gguf.vision
    };
    let mut bases = PRESETS.iter().map(|p| p.shape).filter(|s| same(s));
    let base = bases.next()?;
    // Two 16-bit presets with the same numbers would make the base ambiguous.
    bases.next().is_none().then_some(base.name)
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
        vocab_size: spec.vocab_size.or(shape.and_then(|s| s.vocab_size)),
        vision: spec.vision.or(shape.map(|s| s.vision)).unwrap_or(false),
        pre_quantized: spec.pre_quantized.or(shape.and_then(|s| s.pre_quantized)),
        weight_bytes: spec.weight_bytes.or(shape.and_then(|s| s.weight_bytes)),
        experts: spec.experts.or(shape.and_then(|s| s.experts)),
        active_parameters: spec
            .active_parameters
            .or(shape.and_then(|s| s.active_parameters)),
    })
}

/// A preset's resolved shape, for tests.
#[cfg(test)]
pub(crate) fn preset_shape(key: &str) -> ModelShape {
    resolve(&ModelSpec {
        preset: Some(key.into()),
        ..Default::default()
    })
    .expect("a built-in preset")
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
    fn every_gguf_preset_names_the_model_it_quantizes() {
        for p in PRESETS {
            let base = gguf_base(p.key);
            assert_eq!(
                base.is_some(),
                p.shape.gguf_file_bytes.is_some(),
                "{}",
                p.key
            );
        }
        assert_eq!(
            gguf_base("mistral-7b-instruct-v0.3-q4_k_m"),
            Some("mistralai/Mistral-7B-Instruct-v0.3")
        );
        assert_eq!(gguf_base("qwen3-8b-q6_k"), Some("Qwen/Qwen3-8B"));
        assert_eq!(
            gguf_base("llama-3.1-70b-instruct-q4_k_m"),
            Some("meta-llama/Llama-3.1-70B-Instruct")
        );
        assert_eq!(gguf_base("qwen3-8b"), None);
        assert_eq!(gguf_base("nope"), None);
    }

    #[test]
    fn every_preset_is_consistent() {
        for p in PRESETS {
            let s = &p.shape;
            let numbers = [
                s.parameters,
                s.layers.into(),
                s.hidden_size.into(),
                s.attention_heads.into(),
                s.kv_heads.into(),
                s.head_dim.into(),
                s.context_limit.into(),
            ];
            assert!(
                !s.name.is_empty() && !numbers.contains(&0),
                "{}: a number left unset",
                p.key
            );
            assert!(p.shape.kv_heads <= p.shape.attention_heads, "{}", p.key);
            // Grouped-query attention shares each KV head among a whole number of heads. (A
            // head's width need not be hidden / heads: Qwen3-32B has 64 heads of 128 on 5120.)
            assert_eq!(p.shape.attention_heads % p.shape.kv_heads, 0, "{}", p.key);
            assert!(!p.source.is_empty(), "{}", p.key);
            assert_eq!(preset(p.key).map(|q| q.key), Some(p.key));
        }
    }
}
