//! Bounds on everything read from a file: a malformed or hostile file gives an error, never
//! a huge allocation or a long loop. Each bound is far above what published checkpoints use.
use std::fmt;

use crate::error::ModelFileError;

/// A bound with its unit, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The bound.
    pub value: u64,
    /// Bytes, or a count of something.
    pub unit: &'static str,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.unit == "bytes" && self.value >= 1024 * 1024 {
            write!(f, "{} MiB", self.value / (1024 * 1024))
        } else {
            write!(f, "{} {}", self.value, self.unit)
        }
    }
}

impl Limit {
    /// `found` within the limit, else an error naming `what` of `file`.
    pub fn check(self, file: &str, what: &'static str, found: u64) -> Result<(), ModelFileError> {
        if found > self.value {
            return Err(ModelFileError::TooLarge {
                file: file.to_string(),
                what,
                found,
                limit: self,
            });
        }
        Ok(())
    }
}

const fn bytes(value: u64) -> Limit {
    Limit {
        value,
        unit: "bytes",
    }
}

const fn count(value: u64, unit: &'static str) -> Limit {
    Limit { value, unit }
}

/// Layers of a model (the largest published models have under 200).
pub const LAYERS: Limit = count(65_536, "layers");
/// `config.json` (published ones are a few KiB; vision configs written out in full ~10 KiB).
/// Parsed whole: its parsed form takes up to 16 times its size.
pub const CONFIG_JSON: Limit = bytes(1024 * 1024);
/// `model.safetensors.index.json` (DeepSeek-V3's, ~90 000 tensors, is ~9 MiB). Read whole,
/// parsed as a stream: only the shard names and a 16-byte entry per tensor are kept.
pub const SAFETENSORS_INDEX: Limit = bytes(32 * 1024 * 1024);
/// Tensors an index's weight map may name (DeepSeek-V3's names ~90 000).
pub const SAFETENSORS_INDEX_TENSORS: Limit = count(1_000_000, "tensors");
/// Shards an index may name (DeepSeek-V3 has 163).
pub const SAFETENSORS_SHARDS: Limit = count(4096, "shards");
/// A safetensors header (the format's own reader takes up to 100 MB; a shard of a published
/// model has a header of tens of KiB, DeepSeek-V3's 90 000 tensors in one file would be
/// ~10 MiB). Read whole, parsed as a stream.
pub const SAFETENSORS_HEADER: Limit = bytes(32 * 1024 * 1024);
/// Tensors in one safetensors header.
pub const SAFETENSORS_TENSORS: Limit = count(500_000, "tensors");
/// Bytes of one model's read: `config.json`, the index and every header together
/// (DeepSeek-V3's are ~20 MiB).
pub const READ_BYTES: Limit = bytes(128 * 1024 * 1024);
/// Requests of one model's read: `config.json`, the index, and two per safetensors file (its
/// length, its header). Past it the headers are not read: the weights are the index's
/// `metadata.total_size` (DeepSeek-V3's 163 shards take 328).
pub const READ_REQUESTS: Limit = count(1024, "requests");
/// Tensor dimensions (safetensors and GGUF).
pub const TENSOR_DIMS: Limit = count(8, "dimensions");
/// All of a GGUF file's header read (metadata with the tokenizer's vocabulary, tensor infos:
/// tens of MiB for today's largest vocabularies).
pub const GGUF_HEADER: Limit = bytes(512 * 1024 * 1024);
/// One GGUF string (chat templates are tens of KiB).
pub const GGUF_STRING: Limit = bytes(16 * 1024 * 1024);
/// GGUF metadata keys.
pub const GGUF_KEYS: Limit = count(65_536, "metadata keys");
/// GGUF tensors (a 671B MoE model has under 2 000).
pub const GGUF_TENSORS: Limit = count(65_536, "tensors");
/// Elements of one GGUF metadata array (vocabularies: 262 144 tokens today).
pub const GGUF_ARRAY: Limit = count(16 * 1024 * 1024, "elements");
/// Nesting of GGUF arrays of arrays.
pub const GGUF_NESTING: Limit = count(4, "levels");
