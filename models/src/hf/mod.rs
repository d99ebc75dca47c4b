//! A Hugging Face `config.json`: dense, vision-language (`text_config`, `llm_config`,
//! `vision_config`), mixture-of-experts and pre-quantized checkpoints.
mod family;
mod keys;
mod quantization;
mod shape;
mod vision;

use serde_json::Value;

use crate::error::ModelFileError;
use crate::facts::{Checkpoint, CheckpointFormat, Experts, Fact, LatentAttention, Origin};
use crate::limits;
use family::Family;
use keys::Section;
use shape::{Attention, Decoder, Moe, MoeLayout, Shape};

const LAYERS: &[&str] = &["num_hidden_layers", "n_layer", "num_layers", "n_layers"];
const HIDDEN: &[&str] = &["hidden_size", "n_embd", "d_model"];
const HEADS: &[&str] = &["num_attention_heads", "n_head", "n_heads"];
const KV_HEADS: &[&str] = &["num_key_value_heads", "num_kv_heads", "n_head_kv"];
const HEAD_DIM: &[&str] = &["head_dim"];
const CONTEXT: &[&str] = &[
    "max_position_embeddings",
    "max_sequence_length",
    "seq_length",
    "n_positions",
];
const VOCAB: &[&str] = &["vocab_size", "padded_vocab_size"];
const INTERMEDIATE: &[&str] = &["intermediate_size", "ffn_hidden_size", "n_inner"];

/// Reads a `config.json`. `file` names it in the facts' origins and in errors.
pub fn read_config(text: &str, file: &str) -> Result<Checkpoint, ModelFileError> {
    limits::CONFIG_JSON.check(file, "the file", text.len() as u64)?;
    let value: Value = serde_json::from_str(text).map_err(|e| ModelFileError::Json {
        file: file.to_string(),
        message: e.to_string(),
    })?;
    let map = value.as_object().ok_or_else(|| ModelFileError::Json {
        file: file.to_string(),
        message: "expected a JSON object".into(),
    })?;
    Config::new(Section {
        file,
        prefix: "",
        map,
    })?
    .checkpoint()
}

/// A config with its language model's section and family.
struct Config<'a> {
    root: Section<'a>,
    text: Section<'a>,
    model_type: &'a str,
    family: Family,
}

impl<'a> Config<'a> {
    fn new(root: Section<'a>) -> Result<Self, ModelFileError> {
        let text = root
            .object("text_config", "text_config.")
            .or_else(|| root.object("llm_config", "llm_config."))
            .unwrap_or(root);
        let model_type = match text.string("model_type")? {
            Some(t) => t,
            None => root.string("model_type")?.unwrap_or(""),
        };
        Ok(Config {
            root,
            text,
            model_type,
            family: family::of(model_type),
        })
    }

    /// A count of the language model, else the family's default for it.
    fn count(&self, keys: &[&str]) -> Result<Option<Fact<u32>>, ModelFileError> {
        if let Some(fact) = self.text.count(keys)? {
            return Ok(Some(fact));
        }
        Ok(self.family.default_for(keys).map(|(key, value)| Fact {
            value,
            from: Origin::Default {
                file: self.root.file.to_string(),
                key: self.text.dotted(key),
                default_of: self.family.default_of,
            },
        }))
    }

    fn required(&self, what: &'static str, keys: &[&str]) -> Result<Fact<u32>, ModelFileError> {
        match self.count(keys)? {
            Some(fact) => Ok(fact),
            None => self.text.required(what, keys),
        }
    }

    fn architecture(&self) -> Result<Fact<String>, ModelFileError> {
        for section in [&self.root, &self.text] {
            if let Some(Value::Array(names)) = section.get("architectures")
                && let Some(Value::String(name)) = names.first()
            {
                return Ok(Fact::key(
                    name.clone(),
                    section.file,
                    &section.dotted("architectures[0]"),
                ));
            }
        }
        if self.model_type.is_empty() {
            return Err(ModelFileError::Missing {
                file: self.root.file.to_string(),
                what: "architecture",
                keys: "architectures, model_type".into(),
            });
        }
        Ok(Fact::key(
            self.model_type.to_string(),
            self.root.file,
            &self.text.dotted("model_type"),
        ))
    }

    fn checkpoint(&self) -> Result<Checkpoint, ModelFileError> {
        let layers = self.text.required("layer count", LAYERS)?;
        limits::LAYERS.check(self.root.file, "the layer count", u64::from(layers.value))?;
        let hidden = self.required("hidden size", HIDDEN)?;
        let heads = self.required("attention head count", HEADS)?;
        let kv_heads = match self.count(KV_HEADS)? {
            Some(kv) => kv,
            None => Fact::derived(
                heads.value,
                format!(
                    "{}: no num_key_value_heads, so as many as the attention heads",
                    self.root.file
                ),
            ),
        };
        if kv_heads.value > heads.value {
            return Err(ModelFileError::Inconsistent {
                file: self.root.file.to_string(),
                why: format!(
                    "{} KV heads ({}) exceed {} attention heads ({})",
                    kv_heads.value, kv_heads.from, heads.value, heads.from
                ),
            });
        }
        let latent = self.latent_attention()?;
        let head_dim = match (&latent, self.count(HEAD_DIM)?) {
            (Some((_, nope, rope, _)), _) => Fact::derived(
                u32::try_from(nope.saturating_add(*rope)).unwrap_or(u32::MAX),
                format!("{} qk_nope_head_dim + qk_rope_head_dim", self.root.file),
            ),
            (None, Some(dim)) => dim,
            (None, None) => Fact::derived(
                (hidden.value / heads.value).max(1),
                format!(
                    "{}: hidden size / attention heads (no head_dim)",
                    self.root.file
                ),
            ),
        };
        let vocab = self.count(VOCAB)?;
        let (moe, experts) = match self.moe(layers.value)? {
            Some((moe, experts)) => (Some(moe), Some(experts)),
            None => (None, None),
        };
        let cross = self
            .text
            .layer_list_len("cross_attention_layers", layers.value)?;
        let mut notes = Vec::new();
        self.sliding_window_note(&mut notes)?;
        let vision = self.vision_kind()?;
        let shape = self.shape(
            &layers, &hidden, &heads, &kv_heads, &head_dim, &vocab, moe, cross, &latent,
        )?;
        let parameters = match (&shape, &vision) {
            (Ok(decoder), Some((kind, section))) => {
                match vision::tower(&kind.value, section, &self.root, u64::from(hidden.value))? {
                    Some(tower) => Some(self.counted(decoder, Some(&tower), &kind.value)),
                    None => {
                        notes.push(format!(
                            "the {} vision tower is not counted from {}: the parameters come from the safetensors headers or index",
                            kind.value, self.root.file
                        ));
                        None
                    }
                }
            }
            (Ok(decoder), None) => Some(self.counted(decoder, None, "")),
            (Err(why), _) => {
                notes.push(why.clone());
                None
            }
        };
        let linear_parameters = shape.as_ref().ok().map(|decoder| {
            Fact::derived(
                decoder.linear_params(),
                format!(
                    "counted from {}: the attention, MLP and expert matrices of the language model",
                    self.root.file
                ),
            )
        });
        let active_parameters = match &shape {
            Ok(decoder) => decoder.active().map(|active| {
                Fact::derived(
                    active.saturating_add(
                        parameters
                            .as_ref()
                            .map_or(0, |p| p.value.saturating_sub(decoder.total())),
                    ),
                    format!(
                        "counted from {}: every parameter but the routed experts a token skips",
                        self.root.file
                    ),
                )
            }),
            Err(_) => None,
        };
        Ok(Checkpoint {
            format: CheckpointFormat::HuggingFace,
            architecture: self.architecture()?,
            layers,
            hidden_size: hidden,
            attention_heads: heads,
            kv_heads,
            head_dim,
            context_limit: self.count(CONTEXT)?,
            vocab_size: vocab,
            parameters,
            active_parameters,
            linear_parameters,
            experts,
            vision: vision.map(|(kind, _)| kind),
            cross_attention_layers: cross.map(|n| {
                Fact::key(
                    n as u32,
                    self.root.file,
                    &format!("{} (length)", self.text.dotted("cross_attention_layers")),
                )
            }),
            latent_attention: latent.map(|(latent, ..)| latent),
            dtype: self.dtype()?,
            quantization: quantization::read(&self.root)?,
            weights: None,
            gguf: None,
            notes,
        })
    }

    fn counted(&self, decoder: &Shape, tower: Option<&Shape>, tower_kind: &str) -> Fact<u64> {
        let total = decoder
            .total()
            .saturating_add(tower.map_or(0, Shape::total));
        let formula = if self.family.known {
            format!("the {} layout", self.model_type)
        } else {
            format!(
                "a Llama-style layout (vramfit has no formula of its own for model type {:?})",
                self.model_type
            )
        };
        let tower = if tower.is_some() {
            format!(" and the {tower_kind} vision tower")
        } else {
            String::new()
        };
        Fact::derived(
            total,
            format!("counted from {}: {formula}{tower}", self.root.file),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn shape(
        &self,
        layers: &Fact<u32>,
        hidden: &Fact<u32>,
        heads: &Fact<u32>,
        kv_heads: &Fact<u32>,
        head_dim: &Fact<u32>,
        vocab: &Option<Fact<u32>>,
        moe: Option<Moe>,
        cross: Option<usize>,
        latent: &Option<(LatentAttention, u64, u64, u64)>,
    ) -> Result<Result<Shape, String>, ModelFileError> {
        let Some(vocab) = vocab else {
            return Ok(Err(format!(
                "{} gives no vocab_size: the parameters are not counted",
                self.root.file
            )));
        };
        let intermediate = match self.text.count(INTERMEDIATE)? {
            Some(i) => u64::from(i.value),
            None if moe.is_some() => 0,
            None => {
                return Ok(Err(format!(
                    "{} gives no intermediate_size: the parameters are not counted",
                    self.root.file
                )));
            }
        };
        let tie = match self.text.flag("tie_word_embeddings")? {
            Some(tie) => tie,
            None => self
                .root
                .flag("tie_word_embeddings")?
                .unwrap_or(self.family.tie_embeddings),
        };
        let attention_bias = self.text.flag("attention_bias")?.unwrap_or(false);
        let attention = match latent {
            Some((latent, nope, rope, v_head)) => Attention::Latent {
                heads: u64::from(heads.value),
                q_lora_rank: self.text.integer(&["q_lora_rank"])?.map(|f| f.value),
                kv_lora_rank: u64::from(latent.kv_lora_rank.value),
                nope_head_dim: *nope,
                rope_head_dim: *rope,
                v_head_dim: *v_head,
            },
            None => Attention::Heads {
                heads: u64::from(heads.value),
                kv_heads: u64::from(kv_heads.value),
                head_dim: u64::from(head_dim.value),
                qkv_bias: self.family.qkv_bias,
                o_bias: attention_bias,
                qk_norm: self.family.qk_norm,
            },
        };
        let decoder = Decoder {
            vocab: u64::from(vocab.value),
            extra_embedding_rows: self.family.extra_embedding_rows,
            hidden: u64::from(hidden.value),
            layers: u64::from(layers.value),
            attention,
            intermediate,
            mlp_bias: self.text.flag("mlp_bias")?.unwrap_or(false),
            moe,
            norms_per_layer: self.family.norms_per_layer,
            tie_embeddings: tie,
            cross_attention_layers: cross.unwrap_or(0) as u64,
        };
        Ok(Ok(decoder.shape()))
    }

    /// DeepSeek's multi-head latent attention, with the head widths it needs.
    fn latent_attention(&self) -> Result<Option<(LatentAttention, u64, u64, u64)>, ModelFileError> {
        let Some(rank) = self.text.count(&["kv_lora_rank"])? else {
            return Ok(None);
        };
        let rope = self
            .text
            .required("rotary head size", &["qk_rope_head_dim"])?;
        let nope = self.text.required("head size", &["qk_nope_head_dim"])?;
        let v_head = self.text.required("value head size", &["v_head_dim"])?;
        Ok(Some((
            LatentAttention {
                kv_lora_rank: rank,
                rope_head_dim: rope.clone(),
            },
            u64::from(nope.value),
            u64::from(rope.value),
            u64::from(v_head.value),
        )))
    }

    /// Experts of a MoE model, with the layout of its `layers` MoE layers.
    fn moe(&self, layers: u32) -> Result<Option<(Moe, Experts)>, ModelFileError> {
        let Some(routed) = self
            .text
            .count(&["num_local_experts", "num_experts", "n_routed_experts"])?
            .filter(|r| r.value > 1)
        else {
            return Ok(None);
        };
        let per_token = self.text.required(
            "experts per token",
            &["num_experts_per_tok", "num_experts_per_token"],
        )?;
        let expert_intermediate = match self.text.count(&["moe_intermediate_size"])? {
            Some(size) => size,
            None => self
                .text
                .required("expert intermediate size", INTERMEDIATE)?,
        };
        let deepseek = self.model_type.starts_with("deepseek");
        let (shared, shared_intermediate, shared_gate) = if deepseek {
            let shared = self.text.count(&["n_shared_experts"])?;
            let width = shared.as_ref().map_or(0, |s| {
                u64::from(s.value) * u64::from(expert_intermediate.value)
            });
            (shared, width, false)
        } else {
            match self.text.count(&["shared_expert_intermediate_size"])? {
                Some(size) => (
                    Some(Fact {
                        value: 1,
                        from: size.from.clone(),
                    }),
                    u64::from(size.value),
                    true,
                ),
                None => (None, 0, false),
            }
        };
        let integer = |key: &str, default: u64| -> Result<u64, ModelFileError> {
            Ok(self.text.integer(&[key])?.map_or(default, |f| f.value))
        };
        let layout = if deepseek {
            MoeLayout::DeepSeek {
                first_dense: integer("first_k_dense_replace", 0)?,
                every: integer("moe_layer_freq", 1)?,
            }
        } else if self.text.get("decoder_sparse_step").is_some()
            || self.text.get("mlp_only_layers").is_some()
        {
            MoeLayout::Qwen {
                every: integer("decoder_sparse_step", 1)?,
                dense: self.text.layer_indices("mlp_only_layers", layers)?,
            }
        } else {
            MoeLayout::All
        };
        let moe = Moe {
            routed: u64::from(routed.value),
            per_token: u64::from(per_token.value),
            expert_intermediate: u64::from(expert_intermediate.value),
            shared_intermediate,
            shared_gate,
            router_bias: self.text.string("topk_method")? == Some("noaux_tc"),
            layout,
        };
        Ok(Some((
            moe,
            Experts {
                routed,
                per_token,
                shared,
                expert_intermediate_size: Some(expert_intermediate),
            },
        )))
    }

    /// The vision tower's type and config section.
    fn vision_kind(&self) -> Result<Option<(Fact<String>, Section<'a>)>, ModelFileError> {
        let Some(v) = self.root.object("vision_config", "vision_config.") else {
            return Ok(None);
        };
        let kind = match v.string("model_type")? {
            Some(kind) => Fact::key(kind.to_string(), v.file, &v.dotted("model_type")),
            None => Fact::key(
                self.root
                    .string("model_type")?
                    .unwrap_or("unknown")
                    .to_string(),
                v.file,
                "model_type (vision_config gives none)",
            ),
        };
        Ok(Some((kind, v)))
    }

    fn dtype(&self) -> Result<Option<Fact<String>>, ModelFileError> {
        for section in [&self.root, &self.text] {
            for key in ["torch_dtype", "dtype"] {
                if let Some(dtype) = section.string(key)? {
                    return Ok(Some(Fact::key(
                        dtype.to_string(),
                        section.file,
                        &section.dotted(key),
                    )));
                }
            }
        }
        Ok(None)
    }

    /// Sliding-window attention caches fewer tokens on some layers; vramfit plans the KV
    /// cache of every layer for the full context, which over-estimates.
    fn sliding_window_note(&self, notes: &mut Vec<String>) -> Result<(), ModelFileError> {
        let enabled = self.text.flag("use_sliding_window")?.unwrap_or(true);
        if let (true, Some(window)) = (enabled, self.text.count(&["sliding_window"])?) {
            notes.push(format!(
                "sliding-window attention ({} tokens, {}): the KV cache is planned for the full context on every layer, which over-estimates",
                window.value, window.from
            ));
        }
        Ok(())
    }
}
