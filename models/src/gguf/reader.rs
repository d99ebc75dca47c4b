//! The GGUF header (format v2 and v3, little-endian): magic, version, counts, metadata
//! key/values, tensor infos. Reads sequentially from any `Read`, counting every byte against
//! [`limits::GGUF_HEADER`]; arrays vramfit has no use for (the tokenizer's vocabulary) are
//! skipped without being kept.
use std::collections::{BTreeMap, HashSet};
use std::io::{self, Read};

use crate::error::ModelFileError;
use crate::gguf::types::{GgmlType, ggml_type};
use crate::limits;

/// A metadata value as kept: scalars, strings, and integer arrays short enough to matter
/// (per-layer head counts); other arrays by length only.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    /// An unsigned integer (u8 … u64).
    Unsigned(u64),
    /// A signed integer (i8 … i64).
    Signed(i64),
    /// A float (f32, f64).
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A string.
    String(String),
    /// An array of integers, kept when it has at most [`KEPT_ARRAY`] elements.
    Integers(Vec<i64>),
    /// Any other array: its length.
    Array {
        /// Elements.
        len: u64,
    },
}

/// Integer arrays up to this many elements are kept (one value per layer).
pub const KEPT_ARRAY: u64 = 4096;

/// One tensor info.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Its type.
    pub ggml_type: GgmlType,
    /// Elements.
    pub elements: u64,
    /// Bytes in the file.
    pub bytes: u64,
    /// Offset from the start of the data section.
    pub offset: u64,
}

/// A GGUF file's header.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufHeader {
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata by key.
    pub metadata: BTreeMap<String, MetaValue>,
    /// Tensor infos, in file order.
    pub tensors: Vec<TensorInfo>,
    /// Where the tensor data starts.
    pub data_offset: u64,
}

/// Reads a GGUF header. `file_len`, when known, must hold every tensor's data.
pub fn read_header<R: Read>(
    input: R,
    file: &str,
    file_len: Option<u64>,
) -> Result<GgufHeader, ModelFileError> {
    let mut r = Budget {
        input,
        read: 0,
        file,
    };
    let magic: [u8; 4] = r.array("the magic")?;
    if &magic != b"GGUF" {
        return Err(r.not_gguf(format!("it starts with {magic:02x?}, not \"GGUF\"")));
    }
    let version = r.u32("the version")?;
    match version {
        2 | 3 => {}
        1 => return Err(r.not_gguf("GGUF v1 (32-bit counts) is not read".into())),
        v if v.swap_bytes() <= 3 => {
            return Err(r.not_gguf("a big-endian GGUF file is not read".into()));
        }
        v => return Err(r.not_gguf(format!("unknown version {v}"))),
    }
    let tensor_count = r.u64("the tensor count")?;
    limits::GGUF_TENSORS.check(r.file, "the tensor count", tensor_count)?;
    let kv_count = r.u64("the metadata count")?;
    limits::GGUF_KEYS.check(r.file, "the metadata key count", kv_count)?;
    let mut metadata = BTreeMap::new();
    for _ in 0..kv_count {
        let key = r.string("a metadata key")?;
        let value_type = r.u32("a metadata value type")?;
        let value = r.value(value_type, &key, 0)?;
        // ggml refuses a file that gives a key twice: neither value is the file's.
        if metadata.contains_key(&key) {
            return Err(twice(file, "metadata key", &key));
        }
        metadata.insert(key, value);
    }
    let mut tensors = Vec::with_capacity(tensor_count as usize);
    for _ in 0..tensor_count {
        tensors.push(r.tensor_info()?);
    }
    // ggml refuses a file that names a tensor twice.
    let mut names = HashSet::with_capacity(tensors.len());
    if let Some(again) = tensors.iter().find(|t| !names.insert(t.name.as_str())) {
        return Err(twice(file, "tensor name", &again.name));
    }
    let alignment = match metadata.get("general.alignment") {
        None => 32,
        Some(MetaValue::Unsigned(a)) if a.is_power_of_two() && *a <= 1 << 30 => *a,
        Some(other) => {
            return Err(ModelFileError::BadValue {
                file: file.to_string(),
                key: "general.alignment".into(),
                found: format!("{other:?}"),
                expected: "a power of two".into(),
            });
        }
    };
    let data_offset = r.read.div_ceil(alignment) * alignment;
    check_tensor_data(file, &tensors, alignment, data_offset, file_len)?;
    Ok(GgufHeader {
        version,
        metadata,
        tensors,
        data_offset,
    })
}

fn twice(file: &str, what: &str, name: &str) -> ModelFileError {
    let mut name = name.to_string();
    if let Some((cut, _)) = name.char_indices().nth(80) {
        name.truncate(cut);
        name.push('…');
    }
    ModelFileError::Inconsistent {
        file: file.to_string(),
        why: format!("the {what} {name:?} is given twice"),
    }
}

/// Tensor data aligned, not overlapping, and inside the file.
fn check_tensor_data(
    file: &str,
    tensors: &[TensorInfo],
    alignment: u64,
    data_offset: u64,
    file_len: Option<u64>,
) -> Result<(), ModelFileError> {
    let inconsistent = |why: String| ModelFileError::Inconsistent {
        file: file.to_string(),
        why,
    };
    let mut ranges: Vec<(u64, u64, &str)> = Vec::with_capacity(tensors.len());
    for t in tensors {
        if t.offset % alignment != 0 {
            return Err(inconsistent(format!(
                "tensor {} at offset {} is not aligned to {alignment}",
                t.name, t.offset
            )));
        }
        let end = t
            .offset
            .checked_add(t.bytes)
            .ok_or_else(|| inconsistent(format!("tensor {} ends past 2^64", t.name)))?;
        ranges.push((t.offset, end, &t.name));
    }
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(inconsistent(format!(
                "tensors {} and {} overlap",
                pair[0].2, pair[1].2
            )));
        }
    }
    if let (Some(len), Some(&(_, end, name))) = (file_len, ranges.last()) {
        let needed = data_offset.saturating_add(end);
        if needed > len {
            return Err(ModelFileError::Truncated {
                file: file.to_string(),
                what: format!(
                    "tensor {name} (the file has {len} bytes, the tensor ends at {needed})"
                ),
            });
        }
    }
    Ok(())
}

/// A reader that counts what it reads against the header budget.
struct Budget<'f, R> {
    input: R,
    read: u64,
    file: &'f str,
}

impl<R: Read> Budget<'_, R> {
    fn not_gguf(&self, why: String) -> ModelFileError {
        ModelFileError::NotFormat {
            file: self.file.to_string(),
            format: "GGUF",
            why,
        }
    }

    /// Takes `n` bytes from the budget before reading them.
    fn spend(&mut self, n: u64) -> Result<(), ModelFileError> {
        let total = self.read.saturating_add(n);
        limits::GGUF_HEADER.check(self.file, "the header", total)?;
        self.read = total;
        Ok(())
    }

    fn io(&self, what: &str, e: io::Error) -> ModelFileError {
        match e.kind() {
            io::ErrorKind::UnexpectedEof => ModelFileError::Truncated {
                file: self.file.to_string(),
                what: what.to_string(),
            },
            _ => ModelFileError::NotFormat {
                file: self.file.to_string(),
                format: "GGUF",
                why: format!("reading {what}: {e}"),
            },
        }
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], ModelFileError> {
        self.spend(N as u64)?;
        let mut buf = [0u8; N];
        self.input
            .read_exact(&mut buf)
            .map_err(|e| self.io(what, e))?;
        Ok(buf)
    }

    fn u32(&mut self, what: &str) -> Result<u32, ModelFileError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, ModelFileError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn skip(&mut self, n: u64, what: &str) -> Result<(), ModelFileError> {
        self.spend(n)?;
        let copied = io::copy(&mut (&mut self.input).take(n), &mut io::sink())
            .map_err(|e| self.io(what, e))?;
        if copied < n {
            return Err(self.io(what, io::ErrorKind::UnexpectedEof.into()));
        }
        Ok(())
    }

    fn string(&mut self, what: &str) -> Result<String, ModelFileError> {
        let len = self.u64(what)?;
        limits::GGUF_STRING.check(self.file, "a string", len)?;
        self.spend(len)?;
        let mut bytes = Vec::new();
        (&mut self.input)
            .take(len)
            .read_to_end(&mut bytes)
            .map_err(|e| self.io(what, e))?;
        if (bytes.len() as u64) < len {
            return Err(self.io(what, io::ErrorKind::UnexpectedEof.into()));
        }
        String::from_utf8(bytes).map_err(|_| self.not_gguf(format!("{what} is not UTF-8")))
    }

    /// Bytes of one element of a fixed-size type.
    fn scalar_size(value_type: u32) -> Option<u64> {
        match value_type {
            0 | 1 | 7 => Some(1),
            2 | 3 => Some(2),
            4..=6 => Some(4),
            10..=12 => Some(8),
            _ => None,
        }
    }

    fn value(
        &mut self,
        value_type: u32,
        key: &str,
        depth: u64,
    ) -> Result<MetaValue, ModelFileError> {
        let what = format!("the value of {key}");
        Ok(match value_type {
            0 => MetaValue::Unsigned(u64::from(self.array::<1>(&what)?[0])),
            1 => MetaValue::Signed(i64::from(self.array::<1>(&what)?[0] as i8)),
            2 => MetaValue::Unsigned(u64::from(u16::from_le_bytes(self.array(&what)?))),
            3 => MetaValue::Signed(i64::from(i16::from_le_bytes(self.array(&what)?))),
            4 => MetaValue::Unsigned(u64::from(self.u32(&what)?)),
            5 => MetaValue::Signed(i64::from(i32::from_le_bytes(self.array(&what)?))),
            6 => MetaValue::Float(f64::from(f32::from_le_bytes(self.array(&what)?))),
            7 => match self.array::<1>(&what)?[0] {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => return Err(self.not_gguf(format!("{key}: boolean byte {b}"))),
            },
            8 => MetaValue::String(self.string(&what)?),
            9 => self.array_value(key, depth)?,
            10 => MetaValue::Unsigned(self.u64(&what)?),
            11 => MetaValue::Signed(i64::from_le_bytes(self.array(&what)?)),
            12 => MetaValue::Float(f64::from_le_bytes(self.array(&what)?)),
            t => return Err(self.not_gguf(format!("{key}: unknown value type {t}"))),
        })
    }

    fn array_value(&mut self, key: &str, depth: u64) -> Result<MetaValue, ModelFileError> {
        limits::GGUF_NESTING.check(self.file, "array nesting", depth + 1)?;
        let what = format!("the array {key}");
        let element = self.u32(&what)?;
        let len = self.u64(&what)?;
        limits::GGUF_ARRAY.check(self.file, "an array", len)?;
        let integer = matches!(element, 0..=5 | 10 | 11);
        if integer && len <= KEPT_ARRAY {
            let mut values = Vec::with_capacity(len as usize);
            for _ in 0..len {
                values.push(match self.value(element, key, depth + 1)? {
                    MetaValue::Unsigned(u) => i64::try_from(u).unwrap_or(i64::MAX),
                    MetaValue::Signed(s) => s,
                    _ => 0,
                });
            }
            return Ok(MetaValue::Integers(values));
        }
        match Self::scalar_size(element) {
            Some(size) => self.skip(len.saturating_mul(size), &what)?,
            None => {
                for _ in 0..len {
                    match element {
                        8 => {
                            let n = self.u64(&what)?;
                            limits::GGUF_STRING.check(self.file, "a string", n)?;
                            self.skip(n, &what)?;
                        }
                        9 => {
                            self.array_value(key, depth + 1)?;
                        }
                        t => return Err(self.not_gguf(format!("{key}: unknown array type {t}"))),
                    }
                }
            }
        }
        Ok(MetaValue::Array { len })
    }

    fn tensor_info(&mut self) -> Result<TensorInfo, ModelFileError> {
        let name = self.string("a tensor name")?;
        let what = format!("tensor {name}");
        let dims = self.u32(&what)?;
        if dims == 0 || u64::from(dims) > 4 {
            return Err(self.not_gguf(format!("{what} has {dims} dimensions (1 to 4)")));
        }
        let mut shape = Vec::with_capacity(dims as usize);
        for _ in 0..dims {
            shape.push(self.u64(&what)?);
        }
        let type_id = self.u32(&what)?;
        let ggml_type = ggml_type(type_id)
            .ok_or_else(|| self.not_gguf(format!("{what} has unknown type {type_id}")))?;
        let offset = self.u64(&what)?;
        let inconsistent = |why: String| ModelFileError::Inconsistent {
            file: self.file.to_string(),
            why,
        };
        let elements = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&e| e > 0)
            .ok_or_else(|| inconsistent(format!("{what}: shape {shape:?}")))?;
        if shape[0] % ggml_type.block != 0 {
            return Err(inconsistent(format!(
                "{what}: rows of {} elements are not whole {} blocks of {}",
                shape[0], ggml_type.name, ggml_type.block
            )));
        }
        let bytes = (elements / ggml_type.block)
            .checked_mul(ggml_type.block_bytes)
            .ok_or_else(|| inconsistent(format!("{what}: size overflows")))?;
        Ok(TensorInfo {
            name,
            ggml_type,
            elements,
            bytes,
            offset,
        })
    }
}
