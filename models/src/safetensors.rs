//! safetensors: the index (`model.safetensors.index.json`: shards and `metadata.total_size`)
//! and each file's header (8-byte little-endian length, then JSON naming every tensor's dtype,
//! shape and byte range). Read without the weights: exact bytes and dtypes per tensor.
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::error::ModelFileError;
use crate::facts::{Checkpoint, Fact, Weights};
use crate::limits;

/// The index file's name in a Hugging Face model folder.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// The single weights file of an unsharded model.
pub const SINGLE_FILE: &str = "model.safetensors";
/// Bytes before the header: its length, little-endian.
pub const LENGTH_PREFIX: u64 = 8;

/// One tensor of a header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name.
    pub name: String,
    /// Its dtype as safetensors names it (`BF16`, `F8_E4M3`, `I32` …).
    pub dtype: String,
    /// Elements.
    pub elements: u64,
    /// Bytes.
    pub bytes: u64,
}

/// A file's header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The file.
    pub file: String,
    /// Its tensors, in name order.
    pub tensors: Vec<TensorInfo>,
}

/// The index of a sharded model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Index {
    /// `metadata.total_size`: bytes of all tensors, where given.
    pub total_size: Option<u64>,
    /// The shard files the weight map names, in order.
    pub shards: Vec<String>,
    /// Tensors the weight map names.
    pub tensors: u64,
}

/// The header's length from the file's first 8 bytes.
pub fn header_len(prefix: &[u8], file: &str) -> Result<u64, ModelFileError> {
    let bytes: [u8; 8] = prefix
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| ModelFileError::Truncated {
            file: file.to_string(),
            what: "the 8-byte header length".into(),
        })?;
    let len = u64::from_le_bytes(bytes);
    if len < 2 {
        return Err(ModelFileError::NotFormat {
            file: file.to_string(),
            format: "safetensors",
            why: format!("header length {len}"),
        });
    }
    limits::SAFETENSORS_HEADER.check(file, "the header", len)?;
    Ok(len)
}

/// Bits of one element of a safetensors dtype.
fn dtype_bits(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        "I64" | "U64" | "F64" | "C64" => 64,
        _ => return None,
    })
}

/// Parses a header (the bytes after the length). `data_len`, the bytes after the header when
/// known, bounds the tensors' byte ranges.
pub fn parse_header(
    bytes: &[u8],
    file: &str,
    data_len: Option<u64>,
) -> Result<Header, ModelFileError> {
    limits::SAFETENSORS_HEADER.check(file, "the header", bytes.len() as u64)?;
    let map = json_object(bytes, file)?;
    let inconsistent = |why: String| ModelFileError::Inconsistent {
        file: file.to_string(),
        why,
    };
    let entries: Vec<_> = map
        .iter()
        .filter(|(name, _)| *name != "__metadata__")
        .collect();
    limits::SAFETENSORS_TENSORS.check(file, "the tensor count", entries.len() as u64)?;
    let mut ranges = Vec::with_capacity(entries.len());
    let mut tensors = Vec::with_capacity(entries.len());
    for (name, entry) in entries {
        let bad = |why: &str| ModelFileError::BadValue {
            file: file.to_string(),
            key: name.clone(),
            found: short(entry),
            expected: why.to_string(),
        };
        let entry = entry.as_object().ok_or_else(|| bad("a tensor entry"))?;
        let dtype = entry
            .get("dtype")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("a tensor entry with a dtype"))?;
        let bits = dtype_bits(dtype).ok_or_else(|| bad("a known safetensors dtype"))?;
        let shape = entry
            .get("shape")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("a tensor entry with a shape"))?;
        limits::TENSOR_DIMS.check(file, "a tensor's dimensions", shape.len() as u64)?;
        let mut elements: u64 = 1;
        for dim in shape {
            let dim = dim.as_u64().ok_or_else(|| bad("a shape of integers"))?;
            elements = elements
                .checked_mul(dim)
                .ok_or_else(|| inconsistent(format!("{name}: shape overflows")))?;
        }
        let offsets = entry
            .get("data_offsets")
            .and_then(Value::as_array)
            .filter(|o| o.len() == 2)
            .ok_or_else(|| bad("data_offsets [start, end]"))?;
        let (start, end) = match (offsets[0].as_u64(), offsets[1].as_u64()) {
            (Some(s), Some(e)) if s <= e => (s, e),
            _ => return Err(bad("data_offsets [start, end] with start <= end")),
        };
        let bits_total = elements
            .checked_mul(bits)
            .ok_or_else(|| inconsistent(format!("{name}: size overflows")))?;
        if bits_total % 8 != 0 || bits_total / 8 != end - start {
            return Err(inconsistent(format!(
                "{name}: {elements} elements of {dtype} need {} bits, data_offsets give {} bytes",
                bits_total,
                end - start
            )));
        }
        ranges.push((start, end, name.as_str()));
        tensors.push(TensorInfo {
            name: name.clone(),
            dtype: dtype.to_string(),
            elements,
            bytes: end - start,
        });
    }
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(inconsistent(format!(
                "{} and {} overlap",
                pair[0].2, pair[1].2
            )));
        }
    }
    if let (Some(len), Some(last)) = (data_len, ranges.last())
        && last.1 > len
    {
        return Err(ModelFileError::Truncated {
            file: file.to_string(),
            what: format!("tensor {} (bytes up to {})", last.2, last.1),
        });
    }
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Header {
        file: file.to_string(),
        tensors,
    })
}

/// Parses `model.safetensors.index.json`.
pub fn parse_index(bytes: &[u8], file: &str) -> Result<Index, ModelFileError> {
    limits::SAFETENSORS_INDEX.check(file, "the file", bytes.len() as u64)?;
    let map = json_object(bytes, file)?;
    let total_size = match map.get("metadata").and_then(|m| m.get("total_size")) {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                        .map(|f| f as u64)
                })
                .ok_or_else(|| ModelFileError::BadValue {
                    file: file.to_string(),
                    key: "metadata.total_size".into(),
                    found: short(v),
                    expected: "a byte count".into(),
                })?,
        ),
    };
    let weight_map = map
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| ModelFileError::Missing {
            file: file.to_string(),
            what: "weight map",
            keys: "weight_map".into(),
        })?;
    let mut shards = BTreeSet::new();
    for (tensor, shard) in weight_map {
        let shard = shard.as_str().ok_or_else(|| ModelFileError::BadValue {
            file: file.to_string(),
            key: format!("weight_map.{tensor}"),
            found: short(shard),
            expected: "a file name".into(),
        })?;
        if !is_plain_file_name(shard) || !shard.ends_with(".safetensors") {
            return Err(ModelFileError::BadValue {
                file: file.to_string(),
                key: format!("weight_map.{tensor}"),
                found: format!("{shard:?}"),
                expected: "a .safetensors file name in the same folder".into(),
            });
        }
        if shards.insert(shard.to_string()) {
            limits::SAFETENSORS_SHARDS.check(file, "the shard count", shards.len() as u64)?;
        }
    }
    Ok(Index {
        total_size,
        shards: shards.into_iter().collect(),
        tensors: weight_map.len() as u64,
    })
}

/// A file name with no folder in it: letters, digits, `.`, `_`, `-`, not starting with `.`.
pub fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The checkpoint with the exact tensor bytes of its headers, and (for a checkpoint that is
/// not pre-quantized, whose packed integers are not parameters) its exact parameter count.
pub fn apply_headers(checkpoint: &mut Checkpoint, headers: &[Header]) {
    let mut by_dtype: BTreeMap<String, u64> = BTreeMap::new();
    let (mut bytes, mut elements, mut tensors) = (0u64, 0u64, 0u64);
    for tensor in headers.iter().flat_map(|h| &h.tensors) {
        bytes = bytes.saturating_add(tensor.bytes);
        elements = elements.saturating_add(tensor.elements);
        tensors += 1;
        let entry = by_dtype.entry(tensor.dtype.clone()).or_default();
        *entry = entry.saturating_add(tensor.bytes);
    }
    let files = match headers {
        [one] => one.file.clone(),
        many => format!("{} safetensors headers", many.len()),
    };
    checkpoint.weights = Some(Weights {
        bytes: Fact::derived(bytes, format!("summed from {files}")),
        by_dtype,
        tensors,
    });
    if checkpoint.quantization.is_none() {
        checkpoint.parameters = Some(Fact::derived(
            elements,
            format!("tensor elements summed from {files}"),
        ));
    }
}

/// The checkpoint with the index's `metadata.total_size` as its weight bytes, where the
/// headers were not read.
pub fn apply_index(checkpoint: &mut Checkpoint, index: &Index, file: &str) {
    if let (None, Some(total)) = (&checkpoint.weights, index.total_size) {
        checkpoint.weights = Some(Weights {
            bytes: Fact::key(total, file, "metadata.total_size"),
            by_dtype: BTreeMap::new(),
            tensors: index.tensors,
        });
    }
}

fn json_object(bytes: &[u8], file: &str) -> Result<Map<String, Value>, ModelFileError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ModelFileError::Json {
            file: file.to_string(),
            message: "expected a JSON object".into(),
        }),
        Err(e) => Err(ModelFileError::Json {
            file: file.to_string(),
            message: e.to_string(),
        }),
    }
}

fn short(value: &Value) -> String {
    let mut text = value.to_string();
    if let Some((cut, _)) = text.char_indices().nth(40) {
        text.truncate(cut);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: usize) -> Vec<u8> {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend(std::iter::repeat_n(0u8, data));
        bytes
    }

    #[test]
    fn a_header_gives_exact_bytes_and_dtypes() {
        let header = r#"{"__metadata__":{"format":"pt"},
            "model.embed_tokens.weight":{"dtype":"BF16","shape":[8,4],"data_offsets":[0,64]},
            "model.layers.0.mlp.qweight":{"dtype":"I32","shape":[4,2],"data_offsets":[64,96]},
            "model.layers.0.mlp.scales":{"dtype":"F16","shape":[1,16],"data_offsets":[96,128]},
            "lm_head.weight":{"dtype":"F8_E4M3","shape":[8,4],"data_offsets":[128,160]}}"#;
        let bytes = file(header, 160);
        let len = header_len(&bytes, "model.safetensors").unwrap();
        assert_eq!(len, header.len() as u64);
        let parsed =
            parse_header(&bytes[8..8 + len as usize], "model.safetensors", Some(160)).unwrap();
        assert_eq!(parsed.tensors.len(), 4);
        assert_eq!(parsed.tensors[0].name, "lm_head.weight");
        assert_eq!(
            (parsed.tensors[0].elements, parsed.tensors[0].bytes),
            (32, 32)
        );
        let total: u64 = parsed.tensors.iter().map(|t| t.bytes).sum();
        assert_eq!(total, 160);
    }

    #[test]
    fn inconsistent_headers_are_refused_with_the_tensor_named() {
        let wrong_size = r#"{"w":{"dtype":"BF16","shape":[8,4],"data_offsets":[0,63]}}"#;
        let err = parse_header(wrong_size.as_bytes(), "a.safetensors", None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "a.safetensors: inconsistent: w: 32 elements of BF16 need 512 bits, data_offsets give 63 bytes"
        );
        let overlap = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},
            "b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#;
        assert!(
            parse_header(overlap.as_bytes(), "a.safetensors", None)
                .unwrap_err()
                .to_string()
                .contains("a and b overlap")
        );
        let past_end = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
        assert!(matches!(
            parse_header(past_end.as_bytes(), "a.safetensors", Some(3)),
            Err(ModelFileError::Truncated { .. })
        ));
        let unknown = r#"{"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,2]}}"#;
        assert!(
            parse_header(unknown.as_bytes(), "a.safetensors", None)
                .unwrap_err()
                .to_string()
                .contains("expected a known safetensors dtype")
        );
        let overflow =
            r#"{"a":{"dtype":"U8","shape":[4294967296,4294967296,16],"data_offsets":[0,2]}}"#;
        assert!(
            parse_header(overflow.as_bytes(), "a.safetensors", None)
                .unwrap_err()
                .to_string()
                .contains("shape overflows")
        );
    }

    #[test]
    fn a_huge_header_length_is_refused_before_reading_it() {
        let err = header_len(&u64::MAX.to_le_bytes(), "big.safetensors").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "big.safetensors: the header is {}, more than the 95 MiB vramfit reads",
                u64::MAX
            )
        );
        assert!(matches!(
            header_len(&[1, 2, 3], "short.safetensors"),
            Err(ModelFileError::Truncated { .. })
        ));
    }

    #[test]
    fn the_index_names_plain_shard_files_only() {
        let index = br#"{"metadata":{"total_size":16060522496},"weight_map":{
            "a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors",
            "c":"model-00001-of-00002.safetensors"}}"#;
        let parsed = parse_index(index, INDEX_FILE).unwrap();
        assert_eq!(parsed.total_size, Some(16_060_522_496));
        assert_eq!(parsed.shards.len(), 2);
        assert_eq!(parsed.tensors, 3);
        for evil in [
            "../../etc/passwd",
            "/abs.safetensors",
            "sub/dir.safetensors",
            ".hidden.safetensors",
            "x.bin",
        ] {
            let text = format!(r#"{{"weight_map":{{"a":"{evil}"}}}}"#);
            let err = parse_index(text.as_bytes(), INDEX_FILE)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("a .safetensors file name in the same folder"),
                "{evil}: {err}"
            );
        }
    }
}
