//! What vLLM really does with a plan (docs/runtime-contracts.md): which in-flight quantization
//! realises each level on which GPU, and which models take the plan's image tiles.
use vramfit_api::Quantization;
use vramfit_api::labels::ComputeCapability;

use crate::error::NoEightBitUnderVllm;
use crate::model_catalog::ModelShape;

/// vLLM's FP8 method needs Ampere (`Fp8Config.get_min_capability` is 80).
pub const FP8_MIN_CAPABILITY: ComputeCapability = ComputeCapability::new(8, 0);
/// From Ada on, FP8 runs natively; below, vLLM dequantizes with its weight-only Marlin kernel.
pub const FP8_NATIVE_CAPABILITY: ComputeCapability = ComputeCapability::new(8, 9);

/// How vLLM runs 8-bit on `cc`, or why it cannot: its in-flight bitsandbytes quantization is
/// 4-bit only, so real 8-bit is in-flight FP8.
pub fn eight_bit(cc: ComputeCapability) -> Result<String, NoEightBitUnderVllm> {
    if cc < FP8_MIN_CAPABILITY {
        Err(NoEightBitUnderVllm { capability: cc })
    } else if cc < FP8_NATIVE_CAPABILITY {
        Ok(format!(
            "FP8 weight-only (--quantization fp8, Marlin) at compute capability {cc} < {FP8_NATIVE_CAPABILITY}"
        ))
    } else {
        Ok(format!(
            "FP8 (--quantization fp8), native at compute capability {cc} ≥ {FP8_NATIVE_CAPABILITY}"
        ))
    }
}

/// `--quantization` for a level: FP8 for 8-bit, in-flight bitsandbytes (NF4) for 4-bit.
pub fn quantization_method(q: Quantization) -> Option<&'static str> {
    match q {
        Quantization::None => None,
        Quantization::Int8 => Some("fp8"),
        Quantization::Nf4 => Some("bitsandbytes"),
    }
}

/// Models whose vLLM processor takes the tile count as `max_dynamic_patch`.
pub fn takes_max_dynamic_patch(model: &ModelShape) -> bool {
    model.vision && model.name.to_ascii_lowercase().contains("internvl")
}

/// Whether tensor parallelism over `tp` GPUs splits the attention heads evenly and the KV
/// heads evenly or into whole copies (vLLM replicates a KV head over GPUs when there are more
/// GPUs than KV heads).
pub fn splits_heads(model: &ModelShape, tp: u32) -> bool {
    model.attention_heads.is_multiple_of(tp)
        && (model.kv_heads.is_multiple_of(tp) || tp.is_multiple_of(model.kv_heads))
}
