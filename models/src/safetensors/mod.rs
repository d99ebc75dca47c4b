//! safetensors: the index (`model.safetensors.index.json`: shards, where each tensor is, and
//! `metadata.total_size`) and each file's header (8-byte little-endian length, then JSON naming
//! every tensor's dtype, shape and byte range). Read without the weights, parsed as streams
//! (nothing of a file is built but sums and what bounds hold): exact bytes per dtype, and
//! elements.
mod header;
mod index;
mod stream;
mod weights;

pub use header::{HeaderSums, Sums, Tensor, parse_header};
pub use index::{Claim, Index, parse_index};
pub use weights::{apply_headers, apply_index, index_notes};

use crate::error::ModelFileError;
use crate::limits;

/// The index file's name in a Hugging Face model folder.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// The single weights file of an unsharded model.
pub const SINGLE_FILE: &str = "model.safetensors";
/// Bytes before the header: its length, little-endian.
pub const LENGTH_PREFIX: u64 = 8;

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

/// A file name with no folder in it: letters, digits, `.`, `_`, `-`, not starting with `.`.
pub fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_header_length_is_refused_before_reading_it() {
        let err = header_len(&u64::MAX.to_le_bytes(), "big.safetensors").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "big.safetensors: the header is {}, more than the {} vramfit reads",
                u64::MAX,
                limits::SAFETENSORS_HEADER
            )
        );
        assert!(matches!(
            header_len(&[1, 2, 3], "short.safetensors"),
            Err(ModelFileError::Truncated { .. })
        ));
    }
}
