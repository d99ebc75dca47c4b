//! Memory needed by a model (docs/planning.md). Every figure rounds up: a plan that does not fit
//! costs a failed pod and a retry; an over-estimate costs at most a quantization step.
use vramfit_api::{KvCacheType, Quantization};

use crate::error::SizeOverflow;
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

/// Elements in one block of ggml's quantized KV types.
pub const KV_BLOCK_ELEMENTS: u64 = 32;

/// Bytes per block of [`KV_BLOCK_ELEMENTS`] KV elements, as ggml stores them: f16 2 bytes
/// each; q8_0 an f16 scale and 32 int8 (34 bytes, 1.0625 per element); q4_0 an f16 scale and
/// 32 nibbles (18 bytes, 0.5625 per element).
pub fn kv_bytes_per_block(t: KvCacheType) -> u64 {
    match t {
        KvCacheType::F16 => 64,
        KvCacheType::Q8_0 => 34,
        KvCacheType::Q4_0 => 18,
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

/// `percent` % of `value`, rounded down. Exact for any value (computed in 128 bits); a percent
/// above 100 (never from the schema) saturates rather than wraps.
#[expect(
    clippy::arithmetic_side_effects,
    reason = "a u64 times a u32 fits a u128; the division is by a constant"
)]
pub fn percent_of(value: u64, percent: u32) -> u64 {
    let exact = u128::from(value) * u128::from(percent) / 100;
    u64::try_from(exact).unwrap_or(u64::MAX)
}

/// Tokens held at once, `batch × context`: two `u32`s, so the product always fits a `u64`.
#[expect(
    clippy::arithmetic_side_effects,
    reason = "a u32 times a u32 fits a u64"
)]
pub fn tokens(batch: u32, context: u32) -> u64 {
    u64::from(batch) * u64::from(context)
}

/// `factors` multiplied, or [`SizeOverflow`] naming `what` when the product passes `u64`.
fn product(what: &'static str, factors: &[u64]) -> Result<u64, SizeOverflow> {
    factors
        .iter()
        .try_fold(1u64, |acc, &factor| acc.checked_mul(factor))
        .ok_or(SizeOverflow { what })
}

/// `a + b`, or [`SizeOverflow`] naming `what`.
pub fn sum(what: &'static str, a: u64, b: u64) -> Result<u64, SizeOverflow> {
    a.checked_add(b).ok_or(SizeOverflow { what })
}

/// Weights in bytes at a quantization. In-flight quantization (bitsandbytes, vLLM's FP8)
/// converts the linear layers only: the token embeddings and the output layer (vocab ×
/// hidden each, where the vocabulary is known) stay at 16 bits.
pub fn weights_bytes(model: &ModelShape, q: Quantization) -> Result<u64, SizeOverflow> {
    const WHAT: &str = "the weights (parameters × bytes per parameter)";
    if let Some(pre) = model.pre_quantized {
        // The checkpoint's own bytes run as stored; no in-flight level applies on top.
        return match model.weight_bytes {
            Some(bytes) => Ok(bytes),
            None => pre_quantized_estimate(model, pre.weight_bits, pre.group_size),
        };
    }
    let unquantized = match q {
        Quantization::None => 0,
        _ => model.vocab_size.map_or(0, |v| {
            2u64.saturating_mul(u64::from(v))
                .saturating_mul(u64::from(model.hidden_size))
                .min(model.parameters)
        }),
    };
    let quantized = model.parameters.saturating_sub(unquantized);
    let millibytes = sum(
        WHAT,
        product(WHAT, &[quantized, weight_millibytes_per_parameter(q)])?,
        product(
            WHAT,
            &[
                unquantized,
                weight_millibytes_per_parameter(Quantization::None),
            ],
        )?,
    )?;
    Ok(div_ceil(millibytes, 1000))
}

/// A pre-quantized checkpoint whose weight bytes were not read (no safetensors header): the
/// embeddings and output layer (vocab × hidden each, where known) at 16 bits, every other
/// parameter at the stored bits plus a 16-bit scale and zero point per group (128 where the
/// scheme has no groups: scales per channel or tensor are fewer).
fn pre_quantized_estimate(
    model: &ModelShape,
    bits: u32,
    group: Option<u32>,
) -> Result<u64, SizeOverflow> {
    const WHAT: &str = "the weights (pre-quantized parameters × bits per weight)";
    let unquantized = model.vocab_size.map_or(0, |v| {
        2u64.saturating_mul(u64::from(v))
            .saturating_mul(u64::from(model.hidden_size))
            .min(model.parameters)
    });
    let quantized = model.parameters.saturating_sub(unquantized);
    // Thousandths of a byte per quantized weight: bits / 8, and 4 bytes per group.
    let millibytes_per_weight = u64::from(bits)
        .saturating_mul(125)
        .saturating_add(div_ceil(4000, u64::from(group.unwrap_or(128))));
    let millibytes = sum(
        WHAT,
        product(WHAT, &[quantized, millibytes_per_weight])?,
        product(WHAT, &[unquantized, 2000])?,
    )?;
    Ok(div_ceil(millibytes, 1000))
}

/// KV cache in bytes for all layers: 2 × layers × tokens × kv_heads × head_dim × bytes.
pub fn kv_cache_bytes(
    model: &ModelShape,
    tokens: u64,
    t: KvCacheType,
) -> Result<u64, SizeOverflow> {
    product(
        KV_CACHE,
        &[
            kv_cache_bytes_per_layer(model, tokens, t)?,
            u64::from(model.layers),
        ],
    )
}

/// What overflows when the KV cache does.
const KV_CACHE: &str = "the KV cache (2 × batchSize × contextLength × kvHeads × headDim × bytes per element, per layer)";

/// KV cache in bytes for one layer.
pub fn kv_cache_bytes_per_layer(
    model: &ModelShape,
    tokens: u64,
    t: KvCacheType,
) -> Result<u64, SizeOverflow> {
    let block_bytes = product(
        KV_CACHE,
        &[
            2,
            tokens,
            u64::from(model.kv_heads),
            u64::from(model.head_dim),
            kv_bytes_per_block(t),
        ],
    )?;
    Ok(div_ceil(block_bytes, KV_BLOCK_ELEMENTS))
}

/// Activations and runtime overhead per GPU, in bytes: a 1 GiB floor, a share
/// proportional to the tokens processed at once × hidden, and the vision tower's allowance.
pub fn overhead_bytes(model: &ModelShape, prefill_tokens: u64) -> Result<u64, SizeOverflow> {
    const WHAT: &str = "the activations (tokens processed at once × hiddenSize × 64 bytes)";
    let activations = product(
        WHAT,
        &[
            prefill_tokens,
            u64::from(model.hidden_size),
            ACTIVATION_BYTES_PER_TOKEN_HIDDEN,
        ],
    )?;
    let vision = if model.vision {
        VISION_ALLOWANCE_MIB * MIB
    } else {
        0
    };
    sum(WHAT, activations, RUNTIME_FLOOR_MIB * MIB).and_then(|bytes| sum(WHAT, bytes, vision))
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
    /// Total per GPU, MiB. Each part is MiB of a `u64` byte count (below 2^44), so the sum
    /// cannot reach `u64::MAX`.
    pub fn per_gpu_mib(&self) -> u64 {
        self.weights_mib
            .saturating_add(self.kv_cache_mib)
            .saturating_add(self.overhead_mib)
    }
}

/// Memory per GPU needed to serve `model` on `gpus` GPUs, holding `tokens` (batch × context)
/// in the KV cache and processing `prefill_tokens` at once; [`SizeOverflow`] when a figure
/// passes 16 EiB (the job's numbers are beyond any GPU).
pub fn transformer_need(
    model: &ModelShape,
    q: Quantization,
    tokens: u64,
    prefill_tokens: u64,
    gpus: u32,
) -> Result<TransformerNeed, SizeOverflow> {
    let gpus = u64::from(gpus.max(1));
    Ok(TransformerNeed {
        weights_mib: div_ceil(mib(weights_bytes(model, q)?), gpus),
        kv_cache_mib: div_ceil(mib(kv_cache_bytes(model, tokens, KvCacheType::F16)?), gpus),
        overhead_mib: mib(overhead_bytes(model, prefill_tokens)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_catalog::{ModelShape, preset_shape as preset};

    fn total_gb(model: &ModelShape, q: Quantization, tokens: u64) -> f64 {
        transformer_need(model, q, tokens, tokens, 1)
            .unwrap()
            .per_gpu_mib() as f64
            * MIB as f64
            / 1e9
    }

    #[test]
    fn mistral_weights_match_the_reference_points() {
        let m = preset("mistral-7b-instruct-v0.3");
        let gb = |q| weights_bytes(&m, q).unwrap() as f64 / 1e9;
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
            weights_bytes(&m, Quantization::Int8).unwrap(),
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
            weights_bytes(&unknown, Quantization::Int8).unwrap()
                < weights_bytes(&m, Quantization::Int8).unwrap()
        );
        assert_eq!(
            weights_bytes(&m, Quantization::None).unwrap(),
            weights_bytes(&unknown, Quantization::None).unwrap()
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
        assert_eq!(
            kv_cache_bytes(&m, 4096, KvCacheType::F16).unwrap(),
            512 * MIB
        );
        let full_mha = ModelShape {
            kv_heads: 32,
            ..m.clone()
        };
        assert_eq!(
            kv_cache_bytes(&full_mha, 4096, KvCacheType::F16).unwrap(),
            2048 * MIB
        );
        assert!(
            kv_cache_bytes(&m, 4096, KvCacheType::Q8_0).unwrap()
                < kv_cache_bytes(&m, 4096, KvCacheType::F16).unwrap()
        );
        assert!(
            kv_cache_bytes(&m, 4096, KvCacheType::Q4_0).unwrap()
                < kv_cache_bytes(&m, 4096, KvCacheType::Q8_0).unwrap()
        );
    }

    #[test]
    fn sharding_divides_weights_and_cache_but_not_overhead() {
        let m = preset("llama-3.2-11b-vision-instruct");
        let one = transformer_need(&m, Quantization::None, 4096, 4096, 1).unwrap();
        let two = transformer_need(&m, Quantization::None, 4096, 4096, 2).unwrap();
        assert_eq!(two.weights_mib, one.weights_mib.div_ceil(2));
        assert_eq!(two.overhead_mib, one.overhead_mib);
    }
}
