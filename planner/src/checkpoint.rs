//! A checkpoint's numbers (read by vramfit-models) as a manifest's `model:` fields, each with
//! where it was read from; and the rule that a manifest's own numbers win, field by field.
use vramfit_api::ModelSpec;
use vramfit_api::checkpoint::{GgufLayout, PreQuantizationMethod, PreQuantized, WeightFormat};
use vramfit_models::facts::QuantMethod;
use vramfit_models::{Checkpoint, Fact};

/// A `model:` block read from a checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadModel {
    /// The fields, as a manifest writes them.
    pub spec: ModelSpec,
    /// Where each set field came from, by its manifest name (`layers`, `kvHeads` …), in the
    /// order of the block.
    pub read_from: Vec<(&'static str, String)>,
}

/// The manifest fields a checkpoint gives. `name` is the runtime's identifier for the model
/// (a Hub repository, a path in the container); `name_from` says where it came from.
pub fn model_spec(checkpoint: &Checkpoint, name: Option<(String, String)>) -> ReadModel {
    let mut read_from = Vec::new();
    let mut take = |field: &'static str, from: String| read_from.push((field, from));
    let mut spec = ModelSpec::default();
    if let Some((name, from)) = name {
        take("name", from);
        spec.name = Some(name);
    }
    if let Some(p) = &checkpoint.parameters {
        take("parameters", p.from.to_string());
        spec.parameters = Some(p.value);
    }
    spec.layers = Some(u32_field(&checkpoint.layers, "layers", &mut take));
    spec.hidden_size = Some(u32_field(&checkpoint.hidden_size, "hiddenSize", &mut take));
    spec.attention_heads = Some(u32_field(
        &checkpoint.attention_heads,
        "attentionHeads",
        &mut take,
    ));
    match &checkpoint.latent_attention {
        // vLLM caches one latent of kv_lora_rank + the rotary part per token and layer; as
        // the estimator's 2 × kvHeads × headDim elements, one head of half that width.
        Some(latent) => {
            let width = latent.cached_width();
            spec.kv_heads = Some(1);
            spec.head_dim = Some(width.div_ceil(2));
            let how = format!(
                "latent attention caches {width} values per token and layer ({} + {}): written as 1 KV head of {} for keys and values",
                latent.kv_lora_rank.from,
                latent.rope_head_dim.from,
                width.div_ceil(2)
            );
            take("kvHeads", how.clone());
            take("headDim", how);
        }
        None => {
            spec.kv_heads = Some(u32_field(&checkpoint.kv_heads, "kvHeads", &mut take));
            spec.head_dim = Some(u32_field(&checkpoint.head_dim, "headDim", &mut take));
        }
    }
    if let Some(context) = &checkpoint.context_limit {
        spec.context_limit = Some(u32_field(context, "contextLimit", &mut take));
    }
    if let Some(gguf) = &checkpoint.gguf {
        take("ggufFileBytes", gguf.file_bytes.from.to_string());
        spec.gguf_file_bytes = Some(gguf.file_bytes.value);
    }
    if let Some(vision) = &checkpoint.vision {
        take(
            "vision",
            format!("{} (a {} vision tower)", vision.from, vision.value),
        );
        spec.vision = Some(true);
    }
    if let Some(vocab) = &checkpoint.vocab_size {
        take("vocabSize", vocab.from.to_string());
        spec.vocab_size = Some(vocab.value);
    }
    if let Some((quantized, from)) = pre_quantized(checkpoint) {
        take("preQuantized", from);
        if let Some((bytes, from)) = weight_bytes(checkpoint, &quantized) {
            take("weightBytes", from);
            spec.weight_bytes = Some(bytes);
        }
        spec.pre_quantized = Some(quantized);
    }
    if let Some(experts) = &checkpoint.experts {
        take("experts", experts.routed.from.to_string());
        spec.experts = Some(experts.routed.value);
    }
    if let Some(active) = &checkpoint.active_parameters {
        take("activeParameters", active.from.to_string());
        spec.active_parameters = Some(active.value);
    }
    if let Some(gguf) = &checkpoint.gguf {
        take(
            "ggufLayout",
            "the GGUF file's tensor infos (blk.N.*, output.*, token_embd.*)".to_string(),
        );
        spec.gguf_layout = Some(GgufLayout {
            block_bytes: gguf.block_bytes.clone(),
            output_bytes: gguf.output_bytes,
            token_embedding_bytes: gguf.token_embd_bytes,
        });
    }
    ReadModel { spec, read_from }
}

/// The checkpoint's quantization as a manifest's `preQuantized`, where vramfit plans the
/// method (a method it does not know, or bitsandbytes without its bits, is planned as 16-bit
/// weights: an over-estimate, never an under-estimate).
fn pre_quantized(checkpoint: &Checkpoint) -> Option<(PreQuantized, String)> {
    let q = checkpoint.quantization.as_ref()?;
    let method = match q.method {
        QuantMethod::Awq => PreQuantizationMethod::Awq,
        QuantMethod::Gptq => PreQuantizationMethod::Gptq,
        QuantMethod::Fp8 => PreQuantizationMethod::Fp8,
        QuantMethod::CompressedTensors => PreQuantizationMethod::CompressedTensors,
        QuantMethod::Bitsandbytes => PreQuantizationMethod::Bitsandbytes,
        QuantMethod::Other(_) => return None,
    };
    let weight_format = q.weight_format.as_deref().map(|f| match f {
        "int" => WeightFormat::Int,
        _ => WeightFormat::Float,
    });
    Some((
        PreQuantized {
            method,
            weight_bits: u32::from(q.weight_bits?),
            activation_bits: q.activation_bits.map(u32::from),
            group_size: q.group_size,
            weight_format,
            symmetric: q.symmetric,
        },
        q.from.to_string(),
    ))
}

/// A pre-quantized checkpoint's weight bytes: exact where the safetensors headers or index
/// were read; else estimated from the linear layers' parameters at the stored bits, with a
/// 16-bit scale and zero point per group, and every other parameter at 16 bits.
fn weight_bytes(checkpoint: &Checkpoint, q: &PreQuantized) -> Option<(u64, String)> {
    if let Some(weights) = &checkpoint.weights {
        return Some((weights.bytes.value, weights.bytes.from.to_string()));
    }
    let parameters = checkpoint.parameters.as_ref()?.value;
    let linear = checkpoint.linear_parameters.as_ref()?.value.min(parameters);
    let group = q.group_size.unwrap_or(DEFAULT_GROUP).max(1);
    let quantized = u128::from(linear)
        .saturating_mul(u128::from(q.weight_bits))
        .div_ceil(8)
        .saturating_add(u128::from(linear.div_ceil(u64::from(group))).saturating_mul(4));
    let rest = u128::from(parameters.saturating_sub(linear)).saturating_mul(2);
    let bytes = u64::try_from(quantized.saturating_add(rest)).unwrap_or(u64::MAX);
    Some((
        bytes,
        format!(
            "estimated: {linear} linear-layer parameters at {} bits with a 4-byte scale and zero per {group}, {} others at 16 bits (no safetensors header read)",
            q.weight_bits,
            parameters.saturating_sub(linear)
        ),
    ))
}

/// Weights per scale assumed where a scheme has none (per channel, per tensor, blocks): a
/// smaller share of scales than any grouped scheme vramfit plans, so never an under-estimate.
const DEFAULT_GROUP: u32 = 128;

fn u32_field(
    fact: &Fact<u32>,
    field: &'static str,
    take: &mut impl FnMut(&'static str, String),
) -> u32 {
    take(field, fact.from.to_string());
    fact.value
}

/// The manifest's model with every field it leaves unset taken from `read`: explicit numbers
/// win, field by field; a preset fills what neither gives.
pub fn fill_unset(explicit: &ModelSpec, read: &ModelSpec) -> ModelSpec {
    ModelSpec {
        preset: explicit.preset.clone(),
        name: explicit.name.clone().or_else(|| read.name.clone()),
        parameters: explicit.parameters.or(read.parameters),
        layers: explicit.layers.or(read.layers),
        hidden_size: explicit.hidden_size.or(read.hidden_size),
        attention_heads: explicit.attention_heads.or(read.attention_heads),
        kv_heads: explicit.kv_heads.or(read.kv_heads),
        head_dim: explicit.head_dim.or(read.head_dim),
        context_limit: explicit.context_limit.or(read.context_limit),
        gguf_file_bytes: explicit.gguf_file_bytes.or(read.gguf_file_bytes),
        vision: explicit.vision.or(read.vision),
        hugging_face: explicit.hugging_face.clone(),
        vocab_size: explicit.vocab_size.or(read.vocab_size),
        weight_bytes: explicit.weight_bytes.or(read.weight_bytes),
        pre_quantized: explicit.pre_quantized.or(read.pre_quantized),
        intermediate_size: explicit.intermediate_size.or(read.intermediate_size),
        experts: explicit.experts.or(read.experts),
        active_parameters: explicit.active_parameters.or(read.active_parameters),
        gguf_layout: explicit
            .gguf_layout
            .clone()
            .or_else(|| read.gguf_layout.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen3_moe() -> Checkpoint {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../models/testdata/configs/Qwen/Qwen3-30B-A3B/config.json"
        ))
        .unwrap();
        vramfit_models::hf::read_config(&text, "config.json").unwrap()
    }

    #[test]
    fn the_block_says_where_each_number_was_read_from() {
        let read = model_spec(
            &qwen3_moe(),
            Some(("Qwen/Qwen3-30B-A3B".into(), "the repository".into())),
        );
        assert_eq!(read.spec.layers, Some(48));
        assert_eq!(read.spec.kv_heads, Some(4));
        assert_eq!(read.spec.parameters, Some(30_532_122_624));
        assert_eq!(read.spec.vision, None);
        let fields: Vec<_> = read.read_from.iter().map(|(f, _)| *f).collect();
        assert_eq!(
            fields,
            [
                "name",
                "parameters",
                "layers",
                "hiddenSize",
                "attentionHeads",
                "kvHeads",
                "headDim",
                "contextLimit",
                "vocabSize",
                "experts",
                "activeParameters"
            ]
        );
        assert_eq!(read.read_from[2].1, "config.json num_hidden_layers");
    }

    #[test]
    fn explicit_numbers_win_field_by_field() {
        let read = model_spec(&qwen3_moe(), None).spec;
        let explicit = ModelSpec {
            kv_heads: Some(32),
            context_limit: Some(8192),
            ..Default::default()
        };
        let merged = fill_unset(&explicit, &read);
        assert_eq!(merged.kv_heads, Some(32));
        assert_eq!(merged.context_limit, Some(8192));
        assert_eq!(merged.layers, Some(48));
        assert_eq!(merged.parameters, read.parameters);
    }
}
