//! One safetensors header (the JSON after the 8-byte length), parsed as a stream: each tensor
//! entry is checked, added to running sums and dropped; `__metadata__` and unknown keys are
//! skipped without being built. What stays is 16 bytes per tensor (its byte range, to find
//! overlaps), bounded by [`limits::SAFETENSORS_TENSORS`].
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::stream::{Failure, Text, fail, in_value, run, shorten};
use crate::error::ModelFileError;
use crate::limits;

/// The key of a header's free-form metadata.
const METADATA: &str = "__metadata__";

/// One tensor entry, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor {
    /// Its dtype as safetensors names it (`BF16`, `F8_E4M3`, `I32` …).
    pub dtype: &'static str,
    /// Elements.
    pub elements: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Sums over tensors.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sums {
    /// Tensors.
    pub tensors: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their elements.
    pub elements: u64,
    /// Their bytes per dtype.
    pub by_dtype: BTreeMap<&'static str, u64>,
}

impl Sums {
    /// `tensor` added.
    pub fn add(&mut self, tensor: &Tensor) {
        self.tensors += 1;
        self.bytes = self.bytes.saturating_add(tensor.bytes);
        self.elements = self.elements.saturating_add(tensor.elements);
        let entry = self.by_dtype.entry(tensor.dtype).or_default();
        *entry = entry.saturating_add(tensor.bytes);
    }

    /// `other`'s tensors added.
    pub fn merge(&mut self, other: &Sums) {
        self.tensors = self.tensors.saturating_add(other.tensors);
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.elements = self.elements.saturating_add(other.elements);
        for (dtype, bytes) in &other.by_dtype {
            let entry = self.by_dtype.entry(dtype).or_default();
            *entry = entry.saturating_add(*bytes);
        }
    }
}

/// What one header holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderSums {
    /// Tensor entries in the header.
    pub tensors: u64,
    /// The tensors counted (those `counts` took).
    pub counted: Sums,
    /// Tensors not counted.
    pub skipped: u64,
}

/// Bits of one element of a safetensors dtype, with the dtype's name.
fn dtype(name: &str) -> Option<(&'static str, u64)> {
    Some(match name {
        "F4" => ("F4", 4),
        "F6_E2M3" => ("F6_E2M3", 6),
        "F6_E3M2" => ("F6_E3M2", 6),
        "BOOL" => ("BOOL", 8),
        "U8" => ("U8", 8),
        "I8" => ("I8", 8),
        "F8_E5M2" => ("F8_E5M2", 8),
        "F8_E4M3" => ("F8_E4M3", 8),
        "F8_E8M0" => ("F8_E8M0", 8),
        "I16" => ("I16", 16),
        "U16" => ("U16", 16),
        "F16" => ("F16", 16),
        "BF16" => ("BF16", 16),
        "I32" => ("I32", 32),
        "U32" => ("U32", 32),
        "F32" => ("F32", 32),
        "I64" => ("I64", 64),
        "U64" => ("U64", 64),
        "F64" => ("F64", 64),
        "C64" => ("C64", 64),
        _ => return None,
    })
}

/// Parses a header (the bytes after the length). `data_len`, the bytes after the header when
/// known, bounds the tensors' byte ranges. `counts` says, by name, whether a tensor is counted
/// (the index may place it in another file); it sees every tensor entry once, in file order.
pub fn parse_header(
    bytes: &[u8],
    file: &str,
    data_len: Option<u64>,
    mut counts: impl FnMut(&str) -> Result<bool, ModelFileError>,
) -> Result<HeaderSums, ModelFileError> {
    limits::SAFETENSORS_HEADER.check(file, "the header", bytes.len() as u64)?;
    let mut sums = HeaderSums::default();
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    run(bytes, file, |de, failure| {
        de.deserialize_map(Entries {
            file,
            failure,
            each: |name: &str, tensor: Tensor, start: u64, end: u64| {
                if data_len.is_some_and(|len| end > len) {
                    return Err(ModelFileError::Truncated {
                        file: file.to_string(),
                        what: format!("tensor {} (bytes up to {end})", shorten(name)),
                    });
                }
                ranges.push((start, end));
                sums.tensors += 1;
                if counts(name)? {
                    sums.counted.add(&tensor);
                } else {
                    sums.skipped += 1;
                }
                Ok(())
            },
        })
    })?;
    ranges.sort_unstable();
    if let Some(pair) = ranges.windows(2).find(|pair| pair[1].0 < pair[0].1) {
        let (first, second) = (pair[0], pair[1]);
        // The names were not kept: a second pass finds the two entries.
        let names = names_of(bytes, file, first, second);
        return Err(ModelFileError::Inconsistent {
            file: file.to_string(),
            why: format!("{} and {} overlap", names.0, names.1),
        });
    }
    Ok(sums)
}

/// The names of two entries with byte ranges `first` and `second`.
fn names_of(bytes: &[u8], file: &str, first: (u64, u64), second: (u64, u64)) -> (String, String) {
    let (mut first_name, mut second_name) = (None, None);
    let _ = run(bytes, file, |de, failure| {
        de.deserialize_map(Entries {
            file,
            failure,
            each: |name: &str, _: Tensor, start: u64, end: u64| {
                // `else`: two entries, also where both ranges are the same.
                if first_name.is_none() && (start, end) == first {
                    first_name = Some(shorten(name).into_owned());
                } else if second_name.is_none() && (start, end) == second {
                    second_name = Some(shorten(name).into_owned());
                }
                Ok(())
            },
        })
    });
    let unknown = || "a tensor".to_string();
    (
        first_name.unwrap_or_else(unknown),
        second_name.unwrap_or_else(unknown),
    )
}

/// The header's object: each tensor entry checked and handed to `each` with its byte range.
struct Entries<'a, F> {
    file: &'a str,
    failure: &'a mut Failure,
    each: F,
}

impl<'de, F> Visitor<'de> for Entries<'_, F>
where
    F: FnMut(&str, Tensor, u64, u64) -> Result<(), ModelFileError>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a safetensors header (a JSON object of tensor entries)")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut entries = 0u64;
        while let Some(Text(name)) = map.next_key::<Text<'de>>()? {
            if name == METADATA {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            entries += 1;
            if let Err(e) =
                limits::SAFETENSORS_TENSORS.check(self.file, "the tensor count", entries)
            {
                return Err(fail(self.failure, e));
            }
            let raw = map
                .next_value_seed(EntrySeed {
                    file: self.file,
                    failure: self.failure,
                })
                .map_err(|e| in_value(self.failure, self.file, &name, e))?;
            let checked = check(self.file, &name, raw)
                .and_then(|(tensor, start, end)| (self.each)(&name, tensor, start, end));
            if let Err(e) = checked {
                return Err(fail(self.failure, e));
            }
        }
        Ok(())
    }
}

/// A tensor entry as written, before its fields are checked against each other.
struct RawEntry<'de> {
    dtype: Option<Text<'de>>,
    /// Elements of the shape (`None` inside when the product overflows).
    shape: Option<Option<u64>>,
    data_offsets: Option<(u64, u64)>,
}

/// The entry's fields checked: dtype, elements, and a byte range that matches them.
fn check(file: &str, name: &str, raw: RawEntry<'_>) -> Result<(Tensor, u64, u64), ModelFileError> {
    let missing = |what: &'static str| ModelFileError::Missing {
        file: file.to_string(),
        what,
        keys: format!("{}.{what}", shorten(name)),
    };
    let inconsistent = |why: String| ModelFileError::Inconsistent {
        file: file.to_string(),
        why: format!("{}: {why}", shorten(name)),
    };
    let Text(dtype_name) = raw.dtype.ok_or_else(|| missing("dtype"))?;
    let (dtype, bits) = dtype(&dtype_name).ok_or_else(|| ModelFileError::BadValue {
        file: file.to_string(),
        key: format!("{}.dtype", shorten(name)),
        found: format!("{:?}", shorten(&dtype_name)),
        expected: "a known safetensors dtype".into(),
    })?;
    let elements = raw
        .shape
        .ok_or_else(|| missing("shape"))?
        .ok_or_else(|| inconsistent("shape overflows".into()))?;
    let (start, end) = raw.data_offsets.ok_or_else(|| missing("data_offsets"))?;
    if start > end {
        return Err(ModelFileError::BadValue {
            file: file.to_string(),
            key: format!("{}.data_offsets", shorten(name)),
            found: format!("[{start}, {end}]"),
            expected: "[start, end] with start <= end".into(),
        });
    }
    let bits_total = elements
        .checked_mul(bits)
        .ok_or_else(|| inconsistent("size overflows".into()))?;
    if bits_total % 8 != 0 || bits_total / 8 != end - start {
        return Err(inconsistent(format!(
            "{elements} elements of {dtype} need {bits_total} bits, data_offsets give {} bytes",
            end - start
        )));
    }
    Ok((
        Tensor {
            dtype,
            elements,
            bytes: end - start,
        },
        start,
        end,
    ))
}

/// One tensor entry: `dtype`, `shape`, `data_offsets`; other keys skipped.
struct EntrySeed<'a> {
    file: &'a str,
    failure: &'a mut Failure,
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = RawEntry<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = RawEntry<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tensor entry {\"dtype\", \"shape\", \"data_offsets\"}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut raw = RawEntry {
            dtype: None,
            shape: None,
            data_offsets: None,
        };
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            let repeated = match key.as_ref() {
                "dtype" => raw.dtype.replace(map.next_value()?).is_some(),
                "shape" => raw
                    .shape
                    .replace(map.next_value_seed(Dims {
                        file: self.file,
                        failure: &mut *self.failure,
                    })?)
                    .is_some(),
                "data_offsets" => raw.data_offsets.replace(map.next_value()?).is_some(),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    false
                }
            };
            if repeated {
                return Err(de::Error::custom(format_args!("{key} given twice")));
            }
        }
        Ok(raw)
    }
}

/// A shape: at most [`limits::TENSOR_DIMS`] dimensions; their product, `None` on overflow.
struct Dims<'a> {
    file: &'a str,
    failure: &'a mut Failure,
}

impl<'de> DeserializeSeed<'de> for Dims<'_> {
    type Value = Option<u64>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Dims<'_> {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a shape (a list of integers)")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let (mut dims, mut elements) = (0u64, Some(1u64));
        while let Some(dim) = seq.next_element::<u64>()? {
            dims += 1;
            if let Err(e) = limits::TENSOR_DIMS.check(self.file, "a tensor's dimensions", dims) {
                return Err(fail(self.failure, e));
            }
            elements = elements.and_then(|e| e.checked_mul(dim));
        }
        Ok(elements)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(header: &str, data_len: Option<u64>) -> Result<HeaderSums, ModelFileError> {
        parse_header(header.as_bytes(), "a.safetensors", data_len, |_| Ok(true))
    }

    #[test]
    fn a_header_gives_exact_bytes_and_dtypes() {
        let header = r#"{"__metadata__":{"format":"pt"},
            "model.embed_tokens.weight":{"dtype":"BF16","shape":[8,4],"data_offsets":[0,64]},
            "model.layers.0.mlp.qweight":{"dtype":"I32","shape":[4,2],"data_offsets":[64,96]},
            "model.layers.0.mlp.scales":{"dtype":"F16","shape":[1,16],"data_offsets":[96,128]},
            "lm_head.weight":{"dtype":"F8_E4M3","shape":[8,4],"data_offsets":[128,160]}}"#;
        let sums = all(header, Some(160)).unwrap();
        assert_eq!((sums.tensors, sums.skipped), (4, 0));
        assert_eq!(sums.counted.tensors, 4);
        assert_eq!(sums.counted.bytes, 160);
        assert_eq!(sums.counted.elements, 32 + 8 + 16 + 32);
        assert_eq!(
            sums.counted.by_dtype,
            BTreeMap::from([("BF16", 64), ("I32", 32), ("F16", 32), ("F8_E4M3", 32)])
        );
    }

    #[test]
    fn only_the_tensors_counts_takes_are_summed() {
        let header = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},
            "b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}"#;
        let mut seen = Vec::new();
        let sums = parse_header(header.as_bytes(), "a.safetensors", None, |name| {
            seen.push(name.to_string());
            Ok(name == "b")
        })
        .unwrap();
        assert_eq!(seen, ["a", "b"]);
        assert_eq!((sums.tensors, sums.skipped, sums.counted.bytes), (2, 1, 2));
    }

    #[test]
    fn inconsistent_headers_are_refused_with_the_tensor_named() {
        let wrong_size = r#"{"w":{"dtype":"BF16","shape":[8,4],"data_offsets":[0,63]}}"#;
        assert_eq!(
            all(wrong_size, None).unwrap_err().to_string(),
            "a.safetensors: inconsistent: w: 32 elements of BF16 need 512 bits, data_offsets give 63 bytes"
        );
        let overlap = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},
            "b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#;
        assert_eq!(
            all(overlap, None).unwrap_err().to_string(),
            "a.safetensors: inconsistent: a and b overlap"
        );
        let twice = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},
            "a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
        assert_eq!(
            all(twice, None).unwrap_err().to_string(),
            "a.safetensors: inconsistent: a and a overlap"
        );
        let past_end = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
        assert!(matches!(
            all(past_end, Some(3)),
            Err(ModelFileError::Truncated { .. })
        ));
        let unknown = r#"{"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,2]}}"#;
        assert_eq!(
            all(unknown, None).unwrap_err().to_string(),
            "a.safetensors: a.dtype is \"Q4\", expected a known safetensors dtype"
        );
        let overflow =
            r#"{"a":{"dtype":"U8","shape":[4294967296,4294967296,16],"data_offsets":[0,2]}}"#;
        assert_eq!(
            all(overflow, None).unwrap_err().to_string(),
            "a.safetensors: inconsistent: a: shape overflows"
        );
        let no_dtype = r#"{"a":{"shape":[4],"data_offsets":[0,4]}}"#;
        assert_eq!(
            all(no_dtype, None).unwrap_err().to_string(),
            "a.safetensors: no dtype (looked for a.dtype)"
        );
        let backwards = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}}"#;
        assert!(
            all(backwards, None)
                .unwrap_err()
                .to_string()
                .contains("expected [start, end] with start <= end")
        );
    }

    #[test]
    fn malformed_entries_name_the_tensor() {
        for (header, expected) in [
            (
                r#"{"a":5}"#,
                "a: invalid type: integer `5`, expected a tensor entry",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[4.5],"data_offsets":[0,4]}}"#,
                "a: invalid type: floating point `4.5`, expected u64",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}"#,
                "a tensor's dimensions is 9, more than the 8 dimensions vramfit reads",
            ),
            (
                r#"{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
                "a: dtype given twice",
            ),
            (r#"[1,2]"#, "expected a safetensors header"),
            (
                r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}} x"#,
                "trailing characters",
            ),
        ] {
            let err = all(header, None).unwrap_err().to_string();
            assert!(err.contains(expected), "{header}: {err}");
            assert!(err.starts_with("a.safetensors: "), "{err}");
        }
    }

    #[test]
    fn metadata_and_unknown_keys_are_skipped_unbuilt() {
        // A large `__metadata__` (nested, with long strings) and unknown keys in an entry:
        // skipped, the tensor read.
        let blob = "x".repeat(1 << 20);
        let nested = "[".repeat(100) + &"]".repeat(100);
        let header = format!(
            r#"{{"__metadata__":{{"a":"{blob}","b":{nested},"c":[{{"d":1}},2,3.5,null,true]}},
            "w":{{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":{{"k":["{blob}"]}}}}}}"#
        );
        let sums = all(&header, Some(2)).unwrap();
        assert_eq!((sums.tensors, sums.counted.bytes), (1, 2));
    }

    #[test]
    fn a_header_past_the_tensor_bound_is_refused() {
        let n = limits::SAFETENSORS_TENSORS.value + 1;
        let mut header = String::from("{");
        for i in 0..n {
            if i > 0 {
                header.push(',');
            }
            header.push_str(&format!(
                r#""{i}":{{"dtype":"U8","shape":[],"data_offsets":[{i},{}]}}"#,
                i + 1
            ));
        }
        header.push('}');
        assert!(header.len() as u64 <= limits::SAFETENSORS_HEADER.value);
        let mut counted = 0u64;
        let err = parse_header(header.as_bytes(), "big.safetensors", None, |_| {
            counted += 1;
            Ok(true)
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "big.safetensors: the tensor count is {n}, more than the {} tensors vramfit reads",
                n - 1
            )
        );
        assert_eq!(
            counted,
            n - 1,
            "refused as it reads, at the first entry past the bound"
        );
    }
}
