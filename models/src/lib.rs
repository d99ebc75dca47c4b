//! vramfit-models: the numbers a model checkpoint holds, each with the file and key it was
//! read from. Hugging Face `config.json` (dense, vision-language, mixture-of-experts,
//! pre-quantized), the safetensors index and headers (exact weight bytes and dtypes), and
//! GGUF files (metadata and tensor infos).
//!
//! Pure parsing: callers pass bytes (or a reader, or a [`source::FileSource`]); every size
//! and count read is bounded ([`limits`]), so a malformed or hostile file gives a
//! [`ModelFileError`], never a panic or a huge allocation.
#![forbid(unsafe_code)]

pub mod error;
pub mod facts;
pub mod gguf;
pub mod hf;
pub mod limits;
pub mod safetensors;
pub mod source;
#[cfg(feature = "test-support")]
pub mod test_support;

pub use error::ModelFileError;
pub use facts::{Checkpoint, CheckpointFormat, Fact, Origin};
