//! A llama GGUF with random weights, of any size, for the model-cache scenarios: the layout of
//! `workload/examples/llama-server/tiny_gguf.py` (the same metadata, tokenizer and tensors),
//! written here so the suite needs no Python. llama-server loads it and answers nonsense.
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::Result;

/// The shape of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaShape {
    /// Transformer blocks.
    pub blocks: u64,
    /// Width of the embeddings.
    pub embedding: u64,
    /// Attention heads (and KV heads).
    pub heads: u64,
    /// Width of the feed-forward layers.
    pub feed_forward: u64,
    /// Context the model declares.
    pub context: u64,
}

impl LlamaShape {
    /// About `mib` MiB of float16 weights: 1024-wide blocks of ~25 MiB each.
    pub fn of_mib(mib: u64) -> LlamaShape {
        let shape = LlamaShape {
            blocks: 1,
            embedding: 1024,
            heads: 16,
            feed_forward: 2816,
            context: 4096,
        };
        let per_block = shape.block_params() * 2;
        LlamaShape {
            blocks: ((mib << 20) / per_block).max(1),
            ..shape
        }
    }

    fn block_params(&self) -> u64 {
        4 * self.embedding * self.embedding + 3 * self.embedding * self.feed_forward
    }

    /// Parameters, embeddings and output included.
    pub fn parameters(&self) -> u64 {
        self.blocks * self.block_params() + 2 * vocabulary().0.len() as u64 * self.embedding
    }
}

const WORDS: [&str; 10] = [
    "▁the", "▁a", "▁of", "▁and", "▁to", "▁in", "▁is", "▁it", "▁that", "▁on",
];
const ALIGNMENT: u64 = 32;

const TYPE_UINT32: u32 = 4;
const TYPE_INT32: u32 = 5;
const TYPE_FLOAT32: u32 = 6;
const TYPE_STRING: u32 = 8;
const TYPE_ARRAY: u32 = 9;
const TENSOR_F32: u32 = 0;
const TENSOR_F16: u32 = 1;

/// <unk>, <s>, </s>, the 256 byte tokens, ▁, the letters of the words and the words.
fn vocabulary() -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3]; // UNKNOWN, CONTROL, CONTROL
    tokens.extend((0..256).map(|b| format!("<0x{b:02X}>")));
    types.extend([6; 256]); // BYTE
    let mut letters: Vec<char> = WORDS.iter().flat_map(|w| w.chars().skip(1)).collect();
    letters.sort_unstable();
    letters.dedup();
    let mut pieces = vec!["▁".to_string()];
    pieces.extend(letters.iter().map(char::to_string));
    pieces.extend(WORDS.iter().map(|w| w.to_string()));
    let scores = (0..259)
        .map(|_| 0.0)
        .chain((0..pieces.len()).map(|i| -(i as f32)))
        .collect();
    types.extend(std::iter::repeat_n(1, pieces.len())); // NORMAL
    tokens.extend(pieces);
    (tokens, scores, types)
}

/// One tensor: name, ggml dimensions (ne0 first) and element type.
struct Tensor {
    name: String,
    dims: Vec<u64>,
    kind: u32,
}

impl Tensor {
    fn bytes(&self) -> u64 {
        let elements: u64 = self.dims.iter().product();
        elements * if self.kind == TENSOR_F32 { 4 } else { 2 }
    }
}

fn tensors(shape: &LlamaShape, vocabulary: u64) -> Vec<Tensor> {
    let e = shape.embedding;
    let f16 = |name: String, dims: Vec<u64>| Tensor {
        name,
        dims,
        kind: TENSOR_F16,
    };
    let norm = |name: String| Tensor {
        name,
        dims: vec![e],
        kind: TENSOR_F32,
    };
    let mut all = vec![f16("token_embd.weight".into(), vec![e, vocabulary])];
    for i in 0..shape.blocks {
        all.push(norm(format!("blk.{i}.attn_norm.weight")));
        for part in ["attn_q", "attn_k", "attn_v", "attn_output"] {
            all.push(f16(format!("blk.{i}.{part}.weight"), vec![e, e]));
        }
        all.push(norm(format!("blk.{i}.ffn_norm.weight")));
        all.push(f16(
            format!("blk.{i}.ffn_gate.weight"),
            vec![e, shape.feed_forward],
        ));
        all.push(f16(
            format!("blk.{i}.ffn_up.weight"),
            vec![e, shape.feed_forward],
        ));
        all.push(f16(
            format!("blk.{i}.ffn_down.weight"),
            vec![shape.feed_forward, e],
        ));
    }
    all.push(norm("output_norm.weight".into()));
    all.push(f16("output.weight".into(), vec![e, vocabulary]));
    all
}

struct Out<W: Write> {
    w: W,
    written: u64,
}

impl<W: Write> Out<W> {
    fn raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.w.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }
    fn u32(&mut self, v: u32) -> Result<()> {
        self.raw(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> Result<()> {
        self.raw(&v.to_le_bytes())
    }
    fn string(&mut self, s: &str) -> Result<()> {
        self.u64(s.len() as u64)?;
        self.raw(s.as_bytes())
    }
    fn kv_u32(&mut self, key: &str, v: u32) -> Result<()> {
        self.string(key)?;
        self.u32(TYPE_UINT32)?;
        self.u32(v)
    }
    fn kv_string(&mut self, key: &str, v: &str) -> Result<()> {
        self.string(key)?;
        self.u32(TYPE_STRING)?;
        self.string(v)
    }
    fn pad(&mut self) -> Result<()> {
        let padding = (ALIGNMENT - self.written % ALIGNMENT) % ALIGNMENT;
        self.raw(&vec![0; padding as usize])
    }
}

/// Writes the model to `path`; returns its size in bytes.
pub fn write_llama(path: &Path, shape: &LlamaShape, seed: u64) -> Result<u64> {
    let (tokens, scores, types) = vocabulary();
    let tensors = tensors(shape, tokens.len() as u64);
    let file = std::fs::File::create(path)?;
    let mut out = Out {
        w: BufWriter::with_capacity(1 << 20, file),
        written: 0,
    };
    out.raw(b"GGUF")?;
    out.u32(3)?;
    out.u64(tensors.len() as u64)?;
    out.u64(18)?; // the key-value pairs below
    out.kv_string("general.architecture", "llama")?;
    out.kv_string("general.name", "vramfit e2e llama (random weights)")?;
    let n = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    out.kv_u32("llama.context_length", n(shape.context))?;
    out.kv_u32("llama.embedding_length", n(shape.embedding))?;
    out.kv_u32("llama.block_count", n(shape.blocks))?;
    out.kv_u32("llama.feed_forward_length", n(shape.feed_forward))?;
    out.kv_u32("llama.attention.head_count", n(shape.heads))?;
    out.kv_u32("llama.attention.head_count_kv", n(shape.heads))?;
    out.kv_u32(
        "llama.rope.dimension_count",
        n(shape.embedding / shape.heads),
    )?;
    out.string("llama.attention.layer_norm_rms_epsilon")?;
    out.u32(TYPE_FLOAT32)?;
    out.raw(&1e-5f32.to_le_bytes())?;
    out.kv_u32("general.file_type", 1)?; // mostly F16
    out.kv_string("tokenizer.ggml.model", "llama")?;
    out.string("tokenizer.ggml.tokens")?;
    out.u32(TYPE_ARRAY)?;
    out.u32(TYPE_STRING)?;
    out.u64(tokens.len() as u64)?;
    for token in &tokens {
        out.string(token)?;
    }
    out.string("tokenizer.ggml.scores")?;
    out.u32(TYPE_ARRAY)?;
    out.u32(TYPE_FLOAT32)?;
    out.u64(scores.len() as u64)?;
    for score in &scores {
        out.raw(&score.to_le_bytes())?;
    }
    out.string("tokenizer.ggml.token_type")?;
    out.u32(TYPE_ARRAY)?;
    out.u32(TYPE_INT32)?;
    out.u64(types.len() as u64)?;
    for kind in &types {
        out.raw(&kind.to_le_bytes())?;
    }
    out.kv_u32("tokenizer.ggml.bos_token_id", 1)?;
    out.kv_u32("tokenizer.ggml.eos_token_id", 2)?;
    out.kv_u32("tokenizer.ggml.unknown_token_id", 0)?;

    let mut offset = 0u64;
    for tensor in &tensors {
        out.string(&tensor.name)?;
        out.u32(tensor.dims.len() as u32)?;
        for dim in &tensor.dims {
            out.u64(*dim)?;
        }
        out.u32(tensor.kind)?;
        out.u64(offset)?;
        offset += tensor.bytes().div_ceil(ALIGNMENT) * ALIGNMENT;
    }
    out.pad()?;
    let mut state = seed | 1;
    let mut chunk = Vec::with_capacity(1 << 20);
    for tensor in &tensors {
        let mut left = tensor.bytes();
        while left > 0 {
            chunk.clear();
            let take = left.min(1 << 20);
            if tensor.kind == TENSOR_F32 {
                for _ in 0..take / 4 {
                    chunk.extend_from_slice(&1.0f32.to_le_bytes());
                }
            } else {
                for _ in 0..take / 2 {
                    // xorshift; ±[2^-7, 2^-6): small weights, never NaN or infinite.
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let bits = (state as u16 & 0x83FF) | 0x2000;
                    chunk.extend_from_slice(&bits.to_le_bytes());
                }
            }
            out.raw(&chunk)?;
            left -= take;
        }
        out.pad()?;
    }
    out.w.flush()?;
    Ok(out.written)
}

/// A `config.json` of the same model, for the operator's read of the repository.
pub fn config_json(shape: &LlamaShape) -> String {
    serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.embedding,
        "intermediate_size": shape.feed_forward,
        "num_hidden_layers": shape.blocks,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.heads,
        "max_position_embeddings": shape.context,
        "vocab_size": vocabulary().0.len(),
        "torch_dtype": "float16",
        "tie_word_embeddings": false,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_has_the_size_its_shape_says_and_a_gguf_header() {
        let dir = std::env::temp_dir().join(format!("vramfit-gguf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.gguf");
        let shape = LlamaShape::of_mib(30);
        assert_eq!(shape.blocks, 1);
        let size = write_llama(&path, &shape, 7).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(bytes.len() as u64, size);
        assert_eq!(&bytes[..4], b"GGUF");
        assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 3);
        // Weights are 2 bytes a parameter, plus a little metadata and padding.
        let weights = shape.parameters() * 2;
        assert!(
            size > weights && size < weights + (1 << 20),
            "{size} vs {weights}"
        );
        let read = vramfit_models::gguf::read(&bytes[..], "m.gguf", Some(size)).unwrap();
        assert_eq!(read.layers.value, 1);
        assert_eq!(read.hidden_size.value, 1024);
        assert_eq!(read.attention_heads.value, 16);
    }
}
