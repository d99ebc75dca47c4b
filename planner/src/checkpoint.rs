//! A checkpoint's numbers (read by vramfit-models) as a manifest's `model:` fields, each with
//! where it was read from; and the rule that a manifest's own numbers win, field by field.
use vramfit_api::ModelSpec;
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
    ReadModel { spec, read_from }
}

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
                "contextLimit"
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
