//! What training needs to know of a model beyond what inference does: the MLP's intermediate
//! size, the vocabulary, and the linear layers of a decoder block that LoRA adapts
//! (docs/planning.md, "Fine-tuning").
use vramfit_api::tuning::ALL_LINEAR;

use crate::model_catalog::ModelShape;

/// A vocabulary for models that give none: Qwen2.5's 152,064, the largest of the presets'
/// text vocabularies, so that a model with a typical vocabulary is not under-estimated.
pub const ASSUMED_VOCAB_SIZE: u32 = 152_064;

/// The dimensions of one decoder block (a Llama-style block: attention with grouped KV heads,
/// a gated MLP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockDims {
    /// Hidden size.
    pub hidden: u64,
    /// Query projection width: attention heads × head dim.
    pub query: u64,
    /// Key (and value) projection width: KV heads × head dim.
    pub key_value: u64,
    /// MLP intermediate size: the width of the linear layers LoRA adapts (for a mixture of
    /// experts derived from every expert's parameters, an upper bound).
    pub intermediate: u64,
    /// MLP width one token runs through, which sizes its activations: the intermediate size,
    /// or for a mixture of experts the width its active parameters leave.
    pub active_intermediate: u64,
}

/// The training-relevant numbers of a model, each with whether it was derived or assumed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainingShape {
    /// Block dimensions.
    pub dims: BlockDims,
    /// The intermediate size was derived from the parameter count, not given.
    pub intermediate_derived: bool,
    /// Vocabulary size.
    pub vocab_size: u32,
    /// The vocabulary was assumed ([`ASSUMED_VOCAB_SIZE`]), not known.
    pub vocab_assumed: bool,
    /// Parameters outside the decoder blocks: token embeddings and output layer (vocab ×
    /// hidden each; 0 when the vocabulary is unknown).
    pub embedding_parameters: u64,
}

impl TrainingShape {
    /// The numbers of `model`, with `intermediate` from the job when it gives one.
    pub fn of(model: &ModelShape, intermediate: Option<u32>) -> Self {
        let hidden = u64::from(model.hidden_size);
        let query = u64::from(model.attention_heads).saturating_mul(u64::from(model.head_dim));
        let key_value = u64::from(model.kv_heads).saturating_mul(u64::from(model.head_dim));
        let embedding_parameters = model.vocab_size.map_or(0, |v| {
            2u64.saturating_mul(u64::from(v))
                .saturating_mul(hidden)
                .min(model.parameters)
        });
        let (intermediate, intermediate_derived) = match intermediate {
            Some(i) => (u64::from(i), false),
            None => (
                derived_intermediate(model, embedding_parameters, query, key_value),
                true,
            ),
        };
        // A token of a mixture of experts runs through a few experts' MLPs, not all of them.
        let active_intermediate = match (model.experts, model.active_parameters) {
            (Some(_), Some(active)) => derived_intermediate(
                &ModelShape {
                    parameters: active.min(model.parameters),
                    ..model.clone()
                },
                embedding_parameters,
                query,
                key_value,
            )
            .min(intermediate),
            _ => intermediate,
        };
        Self {
            dims: BlockDims {
                hidden,
                query,
                key_value,
                intermediate,
                active_intermediate,
            },
            intermediate_derived,
            vocab_size: model.vocab_size.unwrap_or(ASSUMED_VOCAB_SIZE),
            vocab_assumed: model.vocab_size.is_none(),
            embedding_parameters,
        }
    }
}

/// The MLP's intermediate size from the parameter count: each block holds the attention
/// projections (hidden × (2 × query + 2 × key/value)) and a gated MLP (3 × hidden ×
/// intermediate), so intermediate = (parameters per block − attention) ÷ (3 × hidden),
/// rounded up. Mistral-7B gives 14,339 (config: 14,336). Parameters the blocks do not hold
/// (an unknown vocabulary's embeddings, a vision tower) make it larger, never smaller.
fn derived_intermediate(model: &ModelShape, embeddings: u64, query: u64, key_value: u64) -> u64 {
    let hidden = u64::from(model.hidden_size).max(1);
    let per_block = model
        .parameters
        .saturating_sub(embeddings)
        .checked_div(u64::from(model.layers))
        .unwrap_or(0);
    let attention = hidden.saturating_mul(query.saturating_add(key_value).saturating_mul(2));
    per_block
        .saturating_sub(attention)
        .div_ceil(hidden.saturating_mul(3))
        .max(1)
}

/// One linear layer of a block: its name in Llama-family code, input and output width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    /// Module name (`q_proj`, …).
    pub name: &'static str,
    /// Input features.
    pub inputs: u64,
    /// Output features.
    pub outputs: u64,
}

/// The seven linear layers of a Llama-family block (Mistral, Llama, Qwen2, …).
pub fn block_linears(d: &BlockDims) -> [Linear; 7] {
    let linear = |name, inputs, outputs| Linear {
        name,
        inputs,
        outputs,
    };
    [
        linear("q_proj", d.hidden, d.query),
        linear("k_proj", d.hidden, d.key_value),
        linear("v_proj", d.hidden, d.key_value),
        linear("o_proj", d.query, d.hidden),
        linear("gate_proj", d.hidden, d.intermediate),
        linear("up_proj", d.hidden, d.intermediate),
        linear("down_proj", d.intermediate, d.hidden),
    ]
}

/// Fused spellings other families use for the same layers (Phi-3's `qkv_proj` and
/// `gate_up_proj`, Falcon's `query_key_value`).
fn fused_linear(name: &str, d: &BlockDims) -> Option<(u64, u64)> {
    let key_values = d.key_value.saturating_mul(2);
    match name {
        "qkv_proj" | "query_key_value" => Some((d.hidden, d.query.saturating_add(key_values))),
        "gate_up_proj" => Some((d.hidden, d.intermediate.saturating_mul(2))),
        _ => None,
    }
}

/// The layers LoRA adapts in one block, as (inputs, outputs), and the target names that match
/// no known layer (each counted as the block's largest, so that an unknown name never
/// under-estimates).
pub fn adapted_linears(targets: &[String], d: &BlockDims) -> (Vec<(u64, u64)>, Vec<String>) {
    let known = block_linears(d);
    if targets.iter().any(|t| t == ALL_LINEAR) {
        return (
            known.iter().map(|l| (l.inputs, l.outputs)).collect(),
            Vec::new(),
        );
    }
    let largest = known
        .iter()
        .map(|l| (l.inputs, l.outputs))
        .max_by_key(|(i, o)| i.saturating_add(*o))
        .unwrap_or((d.hidden, d.hidden));
    let mut unknown = Vec::new();
    let adapted = targets
        .iter()
        .map(|t| {
            known
                .iter()
                .find(|l| l.name == t)
                .map(|l| (l.inputs, l.outputs))
                .or_else(|| fused_linear(t, d))
                .unwrap_or_else(|| {
                    unknown.push(t.clone());
                    largest
                })
        })
        .collect();
    (adapted, unknown)
}

/// LoRA parameters: rank × (inputs + outputs) for each adapted layer, in every block.
pub fn adapter_parameters(rank: u32, adapted: &[(u64, u64)], layers: u32) -> u64 {
    adapted
        .iter()
        .map(|(i, o)| i.saturating_add(*o))
        .fold(0u64, u64::saturating_add)
        .saturating_mul(u64::from(rank))
        .saturating_mul(u64::from(layers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_catalog::preset_shape as preset;

    #[test]
    fn the_intermediate_size_derived_from_parameters_is_close_above_the_config() {
        // config.json: Mistral-7B-v0.3 14336, Llama-3.1-8B 14336.
        for key in ["mistral-7b-instruct-v0.3", "llama-3.1-8b-instruct"] {
            let shape = TrainingShape::of(&preset(key), None);
            assert!(shape.intermediate_derived);
            let i = shape.dims.intermediate;
            assert!((14_336..14_400).contains(&i), "{key}: {i}");
        }
        let given = TrainingShape::of(&preset("mistral-7b-instruct-v0.3"), Some(14_336));
        assert_eq!(
            (given.dims.intermediate, given.intermediate_derived),
            (14_336, false)
        );
    }

    /// Qwen3-30B-A3B: 128 experts of width 768, 8 per token. Adapters are sized on every
    /// expert's width; activations on the 8 a token runs through (8 × 768 = 6144).
    #[test]
    fn a_mixture_of_experts_sizes_activations_by_the_experts_a_token_runs_through() {
        let moe = TrainingShape::of(&preset("qwen3-30b-a3b"), None);
        let active = moe.dims.active_intermediate;
        assert!((6_144..7_000).contains(&active), "{active}");
        assert!(moe.dims.intermediate > 10 * active, "{:?}", moe.dims);
        let dense = TrainingShape::of(&preset("mistral-7b-instruct-v0.3"), None);
        assert_eq!(dense.dims.active_intermediate, dense.dims.intermediate);
    }

    #[test]
    fn an_unknown_vocabulary_is_assumed_large_and_said_so() {
        let mut model = preset("mistral-7b-instruct-v0.3");
        model.vocab_size = None;
        let shape = TrainingShape::of(&model, None);
        assert_eq!((shape.vocab_size, shape.vocab_assumed), (152_064, true));
        assert_eq!(shape.embedding_parameters, 0);
        // Without the embeddings the blocks look larger: never a smaller intermediate.
        let known = TrainingShape::of(&preset("mistral-7b-instruct-v0.3"), None);
        assert!(shape.dims.intermediate > known.dims.intermediate);
    }

    #[test]
    fn lora_on_all_linear_layers_of_mistral_matches_peft() {
        // peft reports 41,943,040 trainable parameters for r=16 on every linear layer of
        // Mistral-7B: 16 × (4096+4096 + 2×(4096+1024) + 4096+4096 + 3×(4096+14336)) × 32.
        let shape = TrainingShape::of(&preset("mistral-7b-instruct-v0.3"), Some(14_336));
        let (adapted, unknown) = adapted_linears(&[ALL_LINEAR.to_string()], &shape.dims);
        assert!(unknown.is_empty());
        assert_eq!(adapter_parameters(16, &adapted, 32), 41_943_040);
        // q and v only: 16 × (8192 + 5120) × 32.
        let (adapted, _) = adapted_linears(&["q_proj".into(), "v_proj".into()], &shape.dims);
        assert_eq!(adapter_parameters(16, &adapted, 32), 6_815_744);
    }

    #[test]
    fn unknown_target_names_count_as_the_largest_layer() {
        let shape = TrainingShape::of(&preset("mistral-7b-instruct-v0.3"), Some(14_336));
        let (adapted, unknown) = adapted_linears(&["c_attn".into()], &shape.dims);
        assert_eq!(unknown, ["c_attn"]);
        let (i, o) = adapted[0];
        assert_eq!(i + o, 4096 + 14_336, "the largest layer: gate, up or down");
        let (fused, unknown) = adapted_linears(&["qkv_proj".into()], &shape.dims);
        assert!(unknown.is_empty());
        assert_eq!(fused, [(4096, 4096 + 2 * 1024)]);
    }
}
