//! Reading a Hugging Face model's numbers from wherever its files are (a local folder, the
//! Hub over HTTP): `config.json`, then the safetensors index, then each safetensors file's
//! header (its first 8 bytes, then the header they announce), never the weights.
use std::future::Future;

use crate::error::ModelFileError;
use crate::facts::Checkpoint;
use crate::limits::{self, Limit};
use crate::{hf, safetensors};

/// The model's configuration file.
pub const CONFIG_FILE: &str = "config.json";

/// Why a source could not give a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceErrorKind {
    /// The repository or revision does not exist (or is private and no token was given).
    NotFound,
    /// The source refused the credentials (HTTP 401).
    Unauthorized,
    /// The source refused access (HTTP 403: a gated model without the licence accepted).
    Forbidden,
    /// The source took too long.
    Timeout,
    /// The file is larger than vramfit reads.
    TooLarge,
    /// The source could not be reached or failed (network, HTTP 5xx, I/O).
    Unavailable,
    /// The source answered something that is not the file (a bad range, a redirect loop).
    Invalid,
}

/// A file a source could not give; the message is one line naming the source and file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SourceError {
    /// Why.
    pub kind: SourceErrorKind,
    /// What happened, naming the source and the file.
    pub message: String,
}

/// Part of a file, with the file's size when the source knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// The bytes read (fewer than asked when the file ends first).
    pub bytes: Vec<u8>,
    /// The whole file's size.
    pub file_len: Option<u64>,
}

/// Where a model's files are.
pub trait FileSource {
    /// The source in words, for messages (`Qwen/Qwen3-8B@main`, a folder's path).
    fn describe(&self) -> String;

    /// A whole file of at most `limit` bytes; `None` when the source has no such file.
    fn read_file(
        &self,
        name: &str,
        limit: Limit,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, SourceError>> + Send;

    /// `len` bytes of a file from `start`; `None` when the source has no such file.
    fn read_range(
        &self,
        name: &str,
        start: u64,
        len: u64,
    ) -> impl Future<Output = Result<Option<Range>, SourceError>> + Send;
}

/// Why a model's numbers could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// The source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A file is malformed.
    #[error("{location}: {error}")]
    File {
        /// The source.
        location: String,
        /// What is wrong.
        error: ModelFileError,
    },
    /// No `config.json`: not a Hugging Face model.
    #[error("{location}: no config.json (not a Hugging Face model folder or repository)")]
    NoConfig {
        /// The source.
        location: String,
    },
}

/// The model's numbers: `config.json`, then exact weight bytes from the safetensors headers
/// (every shard the index names, or `model.safetensors`), else the index's total size.
pub async fn read_checkpoint<S: FileSource + Sync>(
    source: &S,
) -> Result<Checkpoint, CheckpointError> {
    let location = source.describe();
    let file_error = |error: ModelFileError| CheckpointError::File {
        location: location.clone(),
        error,
    };
    let config = source
        .read_file(CONFIG_FILE, limits::CONFIG_JSON)
        .await?
        .ok_or_else(|| CheckpointError::NoConfig {
            location: location.clone(),
        })?;
    let text = std::str::from_utf8(&config).map_err(|_| {
        file_error(ModelFileError::Json {
            file: CONFIG_FILE.into(),
            message: "not UTF-8".into(),
        })
    })?;
    let mut checkpoint = hf::read_config(text, CONFIG_FILE).map_err(file_error)?;
    let index = match source
        .read_file(safetensors::INDEX_FILE, limits::SAFETENSORS_INDEX)
        .await?
    {
        Some(bytes) => {
            Some(safetensors::parse_index(&bytes, safetensors::INDEX_FILE).map_err(file_error)?)
        }
        None => None,
    };
    let shards = match &index {
        Some(index) => index.shards.clone(),
        None => vec![safetensors::SINGLE_FILE.to_string()],
    };
    let mut headers = Vec::with_capacity(shards.len());
    for shard in &shards {
        match read_header(source, shard).await? {
            Ok(header) => headers.push(header),
            Err(error) => return Err(file_error(error)),
        }
    }
    let headers: Vec<_> = headers.into_iter().flatten().collect();
    if headers.len() == shards.len() {
        safetensors::apply_headers(&mut checkpoint, &headers);
    } else if let Some(index) = &index {
        if !headers.is_empty() {
            return Err(file_error(ModelFileError::Inconsistent {
                file: safetensors::INDEX_FILE.into(),
                why: format!(
                    "it names {} shards, {} of them are missing",
                    shards.len(),
                    shards.len() - headers.len()
                ),
            }));
        }
        safetensors::apply_index(&mut checkpoint, index, safetensors::INDEX_FILE);
    }
    Ok(checkpoint)
}

/// One safetensors file's header: `None` when the source has no such file.
async fn read_header<S: FileSource + Sync>(
    source: &S,
    shard: &str,
) -> Result<Result<Option<safetensors::Header>, ModelFileError>, SourceError> {
    let Some(prefix) = source
        .read_range(shard, 0, safetensors::LENGTH_PREFIX)
        .await?
    else {
        return Ok(Ok(None));
    };
    let len = match safetensors::header_len(&prefix.bytes, shard) {
        Ok(len) => len,
        Err(e) => return Ok(Err(e)),
    };
    let header_end = safetensors::LENGTH_PREFIX + len;
    if prefix
        .file_len
        .is_some_and(|file_len| file_len < header_end)
    {
        return Ok(Err(ModelFileError::Truncated {
            file: shard.to_string(),
            what: format!("the {len}-byte header"),
        }));
    }
    let Some(header) = source
        .read_range(shard, safetensors::LENGTH_PREFIX, len)
        .await?
    else {
        return Ok(Ok(None));
    };
    if (header.bytes.len() as u64) < len {
        return Ok(Err(ModelFileError::Truncated {
            file: shard.to_string(),
            what: format!("the {len}-byte header"),
        }));
    }
    let data_len = prefix.file_len.map(|l| l - header_end);
    Ok(safetensors::parse_header(&header.bytes, shard, data_len).map(Some))
}
