//! Deflate for what the caches keep of each object (a job's JSON, a pod's plan annotation):
//! text that is read once per reconcile but held for the object's whole life.
use std::io::{Read, Write};

use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;

/// `bytes`, deflated.
pub fn deflate(bytes: &[u8]) -> Box<[u8]> {
    let mut encoder =
        DeflateEncoder::new(Vec::with_capacity(bytes.len() / 2), Compression::default());
    // Writing into a Vec cannot fail.
    let written = encoder.write_all(bytes).and_then(|()| encoder.finish());
    written.unwrap_or_default().into_boxed_slice()
}

/// Deflated `bytes`, inflated.
pub fn inflate(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len() * 3);
    DeflateDecoder::new(bytes).read_to_end(&mut out)?;
    Ok(out)
}

/// Text kept as it is, or deflated where that is smaller (long, repetitive values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompactText {
    /// Short or incompressible text.
    Plain(Box<str>),
    /// Deflated UTF-8.
    Deflated(Box<[u8]>),
}

/// Text shorter than this is kept as it is (deflate's header would outweigh the gain).
const DEFLATE_FROM: usize = 256;

impl From<String> for CompactText {
    fn from(text: String) -> Self {
        if text.len() >= DEFLATE_FROM {
            let deflated = deflate(text.as_bytes());
            if deflated.len() < text.len() {
                return Self::Deflated(deflated);
            }
        }
        Self::Plain(text.into_boxed_str())
    }
}

impl CompactText {
    /// The text. (Deflated text is vramfit's own, so it inflates; if it ever did not, the
    /// value reads as empty, as a missing annotation would.)
    pub fn to_text(&self) -> String {
        match self {
            Self::Plain(text) => text.to_string(),
            Self::Deflated(bytes) => inflate(bytes)
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_repetitive_text_is_deflated_and_reads_back() {
        let plan =
            serde_json::to_string(&vec!["bfloat16: compute capability 9.0 ≥ 8.0"; 12]).unwrap();
        let compact = CompactText::from(plan.clone());
        assert!(matches!(&compact, CompactText::Deflated(b) if b.len() < plan.len() / 2));
        assert_eq!(compact.to_text(), plan);
        assert_eq!(
            CompactText::from("short".to_string()),
            CompactText::Plain("short".into())
        );
    }

    #[test]
    fn bytes_round_trip() {
        let text = b"{\"spec\":{}}".repeat(40);
        assert_eq!(inflate(&deflate(&text)).unwrap(), text);
    }
}
