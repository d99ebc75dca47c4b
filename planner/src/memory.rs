//! Memory needed by a model (docs/planning.md). Every figure rounds up: a plan that does not fit
//! costs a failed pod and a retry; an over-estimate costs at most a quantization step.
use vramfit_api::{KvCacheType, Quantization};

use crate::model_catalog::ModelShape;

/// One mebibyte.
pub const MIB: u64 = 1024 * 1024;
/// Fixed runtime floor per GPU: CUDA context, cuBLAS workspaces, allocator slack.
pub const RUNTIME_FLOOR_MIB: u64 = 1024;
/// Activation allowance: bytes per (token × hidden unit) processed at once during prefill
/// (MLP intermediates, attention projections and fp32 logits, with room to spare).
pub const ACTIVATION_BYTES_PER_TOKEN_HIDDEN: u64 = 64;
/// Vision models: the vision tower's activations, image embeddings and cross-attention
/// states. With the floor and activations, calibrated on the teams' measurements
/// (Llama-3.2-11B-Vision ≈ 27-28 GB in bf16 at 4k, InternVL3-8B ≈ 19.5 GB).
pub const VISION_ALLOWANCE_MIB: u64 = 3072;
/// llama.cpp runtime overhead per GPU (docs/planning.md).
pub const LLAMACPP_OVERHEAD_MIB: u64 = 500;

/// Bytes per parameter, in thousandths (quantization constants included: docs/planning.md).
pub fn weight_millibytes_per_parameter(q: Quantization) -> u64 {
    match q {
        Quantization::None => 2000,
        Quantization::Int8 => 1020,
        Quantization::Nf4 => 560,
    }
}

/// Bytes per KV element, in thousandths.
pub fn kv_millibytes_per_element(t: KvCacheType) -> u64 {
    match t {
        KvCacheType::F16 => 2000,
        KvCacheType::Q8_0 => 1060,
        KvCacheType::Q4_0 => 560,
    }
}

/// Integer division rounding up.
pub fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b.max(1))
}

/// Bytes to MiB, rounding up.
pub fn mib(bytes: u64) -> u64 {
    div_ceil(bytes, MIB)
}

/// Weights in bytes at a quantization. In-flight quantization (bitsandbytes, vLLM's FP8)
/// converts the linear layers only: the token embeddings and the output layer (vocab ×
/// hidden each, where the vocabulary is known) stay at 16 bits.
pub fn weights_bytes(model: &ModelShape, q: Quantization) -> u64 {
    let unquantized = match q {
        Quantization::None => 0,
        _ => model.vocab_size.map_or(0, |v| {
            (2 * u64::from(v) * u64::from(model.hidden_size)).min(model.parameters)
        }),
    };
    let quantized = model.parameters - unquantized;
    div_ceil(
        quantized
            .saturating_mul(weight_millibytes_per_parameter(q))
            .saturating_add(
                unquantized.saturating_mul(weight_millibytes_per_parameter(Quantization::None)),
            ),
        1000,
    )
}

/// KV cache in bytes for all layers: 2 × layers × tokens × kv_heads × head_dim × bytes.
pub fn kv_cache_bytes(model: &ModelShape, tokens: u64, t: KvCacheType) -> u64 {
    kv_cache_bytes_per_layer(model, tokens, t).saturating_mul(u64::from(model.layers))
}

/// KV cache in bytes for one layer.
pub fn kv_cache_bytes_per_layer(model: &ModelShape, tokens: u64, t: KvCacheType) -> u64 {
    let elements = 2u64
        .saturating_mul(tokens)
        .saturating_mul(u64::from(model.kv_heads))
        .saturating_mul(u64::from(model.head_dim));
    div_ceil(elements.saturating_mul(kv_millibytes_per_element(t)), 1000)
}

/// Activations and runtime overhead per GPU, in bytes: a 1 GiB floor, a share
/// proportional to the tokens processed at once × hidden, and the vision tower's allowance.
pub fn overhead_bytes(model: &ModelShape, prefill_tokens: u64) -> u64 {
    let activations = prefill_tokens
        .saturating_mul(u64::from(model.hidden_size))
        .saturating_mul(ACTIVATION_BYTES_PER_TOKEN_HIDDEN);
    let vision = if model.vision {
        VISION_ALLOWANCE_MIB * MIB
    } else {
        0
    };
    (RUNTIME_FLOOR_MIB * MIB)
        .saturating_add(activations)
        .saturating_add(vision)
}

/// Memory per GPU for a transformer runtime with weights and KV cache sharded over `gpus`
/// (tensor parallel) and the overhead on each GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransformerNeed {
    /// Weights per GPU, MiB.
    pub weights_mib: u64,
    /// KV cache per GPU, MiB.
    pub kv_cache_mib: u64,
    /// Overhead per GPU, MiB.
    pub overhead_mib: u64,
}

impl TransformerNeed {
    /// Total per GPU, MiB.
    pub fn per_gpu_mib(&self) -> u64 {
        self.weights_mib + self.kv_cache_mib + self.overhead_mib
    }
}

/// Memory per GPU needed to serve `model` on `gpus` GPUs, holding `tokens` (batch × context)
/// in the KV cache and processing `prefill_tokens` at once.
pub fn transformer_need(
    model: &ModelShape,
    q: Quantization,
    tokens: u64,
    prefill_tokens: u64,
    gpus: u32,
) -> TransformerNeed {
    let gpus = u64::from(gpus.max(1));
    TransformerNeed {
        weights_mib: div_ceil(mib(weights_bytes(model, q)), gpus),
        kv_cache_mib: div_ceil(mib(kv_cache_bytes(model, tokens, KvCacheType::F16)), gpus),
        overhead_mib: mib(overhead_bytes(model, prefill_tokens)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_catalog::{ModelShape, resolve};
    use vramfit_api::ModelSpec;

    fn preset(key: &str) -> ModelShape {
        resolve(&ModelSpec {
            preset: Some(key.into()),
            ..Default::default()
        })
        .unwrap()
    }

    fn total_gb(model: &ModelShape, q: Quantization, tokens: u64) -> f64 {
        transformer_need(model, q, tokens, tokens, 1).per_gpu_mib() as f64 * MIB as f64 / 1e9
    }

    #[test]
    fn mistral_weights_match_the_reference_points() {
        let m = preset("mistral-7b-instruct-v0.3");
        let gb = |q| weights_bytes(&m, q) as f64 / 1e9;
        assert!(
            (gb(Quantization::None) - 14.5).abs() < 0.1,
            "{}",
            gb(Quantization::None)
        );
        // The teams' 7.25 / 3.6 GB count every parameter at 1 / 0.5 bytes; loaded in flight,
        // the 0.27B embedding and output parameters stay at 2 bytes.
        assert!(
            (7.25..7.8).contains(&gb(Quantization::Int8)),
            "{}",
            gb(Quantization::Int8)
        );
        assert!(
            (3.6..4.6).contains(&gb(Quantization::Nf4)),
            "{}",
            gb(Quantization::Nf4)
        );
    }

    #[test]
    fn quantization_leaves_embeddings_and_the_output_layer_at_16_bits() {
        let m = preset("mistral-7b-instruct-v0.3");
        let unquantized = 2 * 32_768 * 4096;
        assert_eq!(
            weights_bytes(&m, Quantization::Int8),
            div_ceil(
                (m.parameters - unquantized) * 1020 + unquantized * 2000,
                1000
            )
        );
        let unknown = ModelShape {
            vocab_size: None,
            ..m.clone()
        };
        assert!(
            weights_bytes(&unknown, Quantization::Int8) < weights_bytes(&m, Quantization::Int8)
        );
        assert_eq!(
            weights_bytes(&m, Quantization::None),
            weights_bytes(&unknown, Quantization::None)
        );
    }

    #[test]
    fn vision_models_match_the_reference_points_without_under_estimating() {
        let llama = preset("llama-3.2-11b-vision-instruct");
        let bf16 = total_gb(&llama, Quantization::None, 4096);
        assert!(
            (27.0..30.0).contains(&bf16),
            "Llama-3.2-11B-Vision bf16 4k: {bf16}"
        );
        let int8 = total_gb(&llama, Quantization::Int8, 4096);
        assert!(
            (14.0..19.0).contains(&int8),
            "Llama-3.2-11B-Vision int8 4k: {int8}"
        );
        let internvl = preset("internvl3-8b");
        let bf16 = total_gb(&internvl, Quantization::None, 4096);
        assert!((19.5..23.0).contains(&bf16), "InternVL3-8B bf16: {bf16}");
        let int8 = total_gb(&internvl, Quantization::Int8, 4096);
        // About 10 GB measured; 16-bit embeddings and the vision allowance on top.
        assert!((10.0..15.0).contains(&int8), "InternVL3-8B int8: {int8}");
    }

    #[test]
    fn grouped_query_attention_shrinks_the_kv_cache() {
        let m = preset("mistral-7b-instruct-v0.3");
        // 2 × 32 layers × 4096 tokens × 8 KV heads × 128 × 2 bytes = 512 MiB.
        assert_eq!(kv_cache_bytes(&m, 4096, KvCacheType::F16), 512 * MIB);
        let full_mha = ModelShape {
            kv_heads: 32,
            ..m.clone()
        };
        assert_eq!(
            kv_cache_bytes(&full_mha, 4096, KvCacheType::F16),
            2048 * MIB
        );
        assert!(
            kv_cache_bytes(&m, 4096, KvCacheType::Q8_0)
                < kv_cache_bytes(&m, 4096, KvCacheType::F16)
        );
        assert!(
            kv_cache_bytes(&m, 4096, KvCacheType::Q4_0)
                < kv_cache_bytes(&m, 4096, KvCacheType::Q8_0)
        );
    }

    #[test]
    fn sharding_divides_weights_and_cache_but_not_overhead() {
        let m = preset("llama-3.2-11b-vision-instruct");
        let one = transformer_need(&m, Quantization::None, 4096, 4096, 1);
        let two = transformer_need(&m, Quantization::None, 4096, 4096, 2);
        assert_eq!(two.weights_mib, one.weights_mib.div_ceil(2));
        assert_eq!(two.overhead_mib, one.overhead_mib);
    }
}
