//! GGUF files (llama.cpp): the model's numbers from the metadata (`general.architecture`,
//! `<arch>.block_count`, `<arch>.embedding_length`, `<arch>.attention.head_count` …) and the
//! exact bytes of every tensor from the tensor infos, grouped as llama.cpp offloads them.
mod reader;
pub mod types;

use std::collections::BTreeMap;
use std::io::Read;

pub use reader::{GgufHeader, KEPT_ARRAY, MetaValue, TensorInfo, read_header};

use crate::error::ModelFileError;
use crate::facts::{
    Checkpoint, CheckpointFormat, Experts, Fact, GgufLayout, LatentAttention, Weights,
};
use crate::limits;

/// Reads a GGUF file's header into the model's numbers. `file` names it in the facts' origins;
/// `file_len`, when known, is the file's size (the tensors must fit in it).
pub fn read<R: Read>(
    input: R,
    file: &str,
    file_len: Option<u64>,
) -> Result<Checkpoint, ModelFileError> {
    let header = read_header(input, file, file_len)?;
    checkpoint(&header, file, file_len)
}

/// The model's numbers from a header read with [`read_header`].
pub fn checkpoint(
    header: &GgufHeader,
    file: &str,
    file_len: Option<u64>,
) -> Result<Checkpoint, ModelFileError> {
    let meta = Meta { header, file };
    let arch = meta.string("general.architecture")?;
    if arch.value == "clip" {
        return Err(ModelFileError::NotFormat {
            file: file.to_string(),
            format: "GGUF model",
            why: "it is a multimodal projector (mmproj) file; inspect the model's own GGUF file"
                .into(),
        });
    }
    let prefix = arch.value.clone();
    let key = |suffix: &str| format!("{prefix}.{suffix}");
    let layers = meta.required(&key("block_count"))?;
    limits::LAYERS.check(file, "the block count", u64::from(layers.value))?;
    let hidden = meta.required(&key("embedding_length"))?;
    let heads = meta.required(&key("attention.head_count"))?;
    let kv_heads = match meta.count(&key("attention.head_count_kv"))? {
        Some(kv) => kv,
        None => Fact::derived(
            heads.value,
            format!(
                "{file}: no {}, so as many as the attention heads",
                key("attention.head_count_kv")
            ),
        ),
    };
    let head_dim = match meta.count(&key("attention.key_length"))? {
        Some(dim) => dim,
        None => Fact::derived(
            (hidden.value / heads.value).max(1),
            format!("{file}: embedding length / head count"),
        ),
    };
    let vocab = match meta.count(&key("vocab_size"))? {
        Some(v) => Some(v),
        None => match header.metadata.get("tokenizer.ggml.tokens") {
            Some(MetaValue::Array { len }) => u32::try_from(*len)
                .ok()
                .map(|n| Fact::key(n, file, "tokenizer.ggml.tokens (length)")),
            _ => None,
        },
    };
    let experts = match meta.count(&key("expert_count"))?.filter(|e| e.value > 1) {
        Some(routed) => Some(Experts {
            routed,
            per_token: meta.required(&key("expert_used_count"))?,
            shared: meta.count(&key("expert_shared_count"))?,
            expert_intermediate_size: meta.count(&key("expert_feed_forward_length"))?,
        }),
        None => None,
    };
    let latent = match meta.count(&key("attention.kv_lora_rank"))? {
        Some(rank) => Some(LatentAttention {
            kv_lora_rank: rank,
            rope_head_dim: meta.required(&key("rope.dimension_count"))?,
        }),
        None => None,
    };
    let mut notes = Vec::new();
    if let Some(window) = meta.count(&key("attention.sliding_window"))? {
        notes.push(format!(
            "sliding-window attention ({} tokens, {}): the KV cache is planned for the full context on every layer, which over-estimates",
            window.value, window.from
        ));
    }
    let tally = Tally::of(header, layers.value, experts.as_ref());
    let file_bytes = match file_len {
        Some(len) => Fact::derived(len, format!("the size of {file}")),
        None => Fact::derived(
            header.data_offset.saturating_add(tally.data_end),
            format!("{file}: where the last tensor's data ends"),
        ),
    };
    let file_type = match header.metadata.get("general.file_type") {
        Some(MetaValue::Unsigned(id)) => types::file_type_name(*id).map(str::to_string),
        _ => None,
    };
    Ok(Checkpoint {
        format: CheckpointFormat::Gguf,
        architecture: arch,
        layers,
        hidden_size: hidden,
        attention_heads: heads,
        kv_heads,
        head_dim,
        context_limit: meta.count(&key("context_length"))?,
        vocab_size: vocab,
        parameters: Some(Fact::derived(
            tally.elements,
            format!("tensor elements summed from the tensor infos of {file}"),
        )),
        active_parameters: tally.active.map(|active| {
            Fact::derived(
                active,
                format!("{file}: every tensor element but the routed experts a token skips"),
            )
        }),
        linear_parameters: None,
        experts,
        vision: None,
        cross_attention_layers: None,
        latent_attention: latent,
        dtype: None,
        quantization: None,
        weights: Some(Weights {
            bytes: Fact::derived(
                tally.bytes,
                format!("tensor bytes summed from the tensor infos of {file}"),
            ),
            by_dtype: tally.by_type,
            tensors: header.tensors.len() as u64,
        }),
        gguf: Some(GgufLayout {
            file_bytes,
            block_bytes: tally.blocks,
            output_bytes: tally.output,
            token_embd_bytes: tally.token_embd,
            other_bytes: tally.other,
            file_type,
        }),
        notes,
    })
}

/// Sums over the tensor infos.
struct Tally {
    elements: u64,
    active: Option<u64>,
    bytes: u64,
    by_type: BTreeMap<String, u64>,
    blocks: Vec<u64>,
    output: u64,
    token_embd: u64,
    other: u64,
    data_end: u64,
}

impl Tally {
    fn of(header: &GgufHeader, block_count: u32, experts: Option<&Experts>) -> Tally {
        let mut t = Tally {
            elements: 0,
            active: None,
            bytes: 0,
            by_type: BTreeMap::new(),
            blocks: vec![0; block_count as usize],
            output: 0,
            token_embd: 0,
            other: 0,
            data_end: 0,
        };
        let mut skipped_by_routing = 0u64;
        for tensor in &header.tensors {
            t.elements = t.elements.saturating_add(tensor.elements);
            t.bytes = t.bytes.saturating_add(tensor.bytes);
            t.data_end = t.data_end.max(tensor.offset.saturating_add(tensor.bytes));
            let entry = t
                .by_type
                .entry(tensor.ggml_type.name.to_string())
                .or_default();
            *entry = entry.saturating_add(tensor.bytes);
            if let Some(e) = experts
                && tensor.name.contains("_exps.")
            {
                let (routed, used) = (u64::from(e.routed.value), u64::from(e.per_token.value));
                skipped_by_routing = skipped_by_routing
                    .saturating_add(tensor.elements / routed.max(1) * routed.saturating_sub(used));
            }
            let slot = match block_index(&tensor.name) {
                Some(i) if i < t.blocks.len() => &mut t.blocks[i],
                _ if tensor.name.starts_with("output.")
                    || tensor.name.starts_with("output_norm.") =>
                {
                    &mut t.output
                }
                _ if tensor.name.starts_with("token_embd.") => &mut t.token_embd,
                _ => &mut t.other,
            };
            *slot = slot.saturating_add(tensor.bytes);
        }
        if experts.is_some() {
            t.active = Some(t.elements.saturating_sub(skipped_by_routing));
        }
        t
    }
}

/// `N` of a `blk.N.` tensor.
fn block_index(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// Typed access to the metadata, each value with its key as origin.
struct Meta<'a> {
    header: &'a GgufHeader,
    file: &'a str,
}

impl Meta<'_> {
    fn string(&self, key: &str) -> Result<Fact<String>, ModelFileError> {
        match self.header.metadata.get(key) {
            Some(MetaValue::String(s)) => Ok(Fact::key(s.clone(), self.file, key)),
            Some(other) => Err(self.bad(key, other, "a string")),
            None => Err(self.missing(key)),
        }
    }

    /// A count: an unsigned integer, or the largest of a per-layer array.
    fn count(&self, key: &str) -> Result<Option<Fact<u32>>, ModelFileError> {
        let value = match self.header.metadata.get(key) {
            None => return Ok(None),
            Some(MetaValue::Unsigned(u)) => *u,
            Some(MetaValue::Signed(s)) if *s > 0 => *s as u64,
            Some(MetaValue::Integers(values)) => {
                values.iter().copied().max().unwrap_or(0).max(0) as u64
            }
            Some(other) => return Err(self.bad(key, other, "a count")),
        };
        match u32::try_from(value) {
            Ok(v) if v > 0 => Ok(Some(Fact::key(v, self.file, key))),
            _ => Err(self.bad(
                key,
                &MetaValue::Unsigned(value),
                "a count from 1 to 4294967295",
            )),
        }
    }

    fn required(&self, key: &str) -> Result<Fact<u32>, ModelFileError> {
        self.count(key)?.ok_or_else(|| self.missing(key))
    }

    fn missing(&self, key: &str) -> ModelFileError {
        ModelFileError::Missing {
            file: self.file.to_string(),
            what: "metadata key",
            keys: key.to_string(),
        }
    }

    fn bad(&self, key: &str, found: &MetaValue, expected: &str) -> ModelFileError {
        let mut found = format!("{found:?}");
        if let Some((cut, _)) = found.char_indices().nth(40) {
            found.truncate(cut);
            found.push('…');
        }
        ModelFileError::BadValue {
            file: self.file.to_string(),
            key: key.to_string(),
            found,
            expected: expected.to_string(),
        }
    }
}
