//! Reading a Hugging Face model's numbers from wherever its files are (a local folder, the
//! Hub over HTTP): `config.json`, then the safetensors index, then each safetensors file's
//! header (its first 8 bytes, then the header they announce), never the weights. One read is
//! bounded in bytes and in requests ([`ReadLimits`]); it holds one file at a time, and of the
//! headers only their sums.
use std::future::Future;

use crate::error::ModelFileError;
use crate::facts::Checkpoint;
use crate::hf;
use crate::limits::{self, Limit};
use crate::safetensors::{self, Claim, Index, Sums};

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

/// Bounds on one model's read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadLimits {
    /// Bytes read in all (`config.json`, the index, every header's length and header): past
    /// it the read fails.
    pub bytes: Limit,
    /// Requests (one per file, two per safetensors header): where the headers would take more,
    /// they are not read and the weights are the index's `metadata.total_size`.
    pub requests: Limit,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            bytes: limits::READ_BYTES,
            requests: limits::READ_REQUESTS,
        }
    }
}

/// The model's numbers within the default [`ReadLimits`]: see [`read_checkpoint_with`].
pub async fn read_checkpoint<S: FileSource + Sync>(
    source: &S,
) -> Result<Checkpoint, CheckpointError> {
    read_checkpoint_with(source, ReadLimits::default()).await
}

/// The model's numbers: `config.json`, then exact weight bytes from the safetensors headers
/// (every shard the index names, each tensor counted in the shard its weight map puts it in;
/// or `model.safetensors`), else the index's `metadata.total_size`.
pub async fn read_checkpoint_with<S: FileSource + Sync>(
    source: &S,
    bounds: ReadLimits,
) -> Result<Checkpoint, CheckpointError> {
    let mut read = Read {
        source,
        location: source.describe(),
        bounds,
        bytes: 0,
        requests: 0,
    };
    let config = read
        .file(CONFIG_FILE, limits::CONFIG_JSON)
        .await?
        .ok_or_else(|| CheckpointError::NoConfig {
            location: read.location.clone(),
        })?;
    let text = std::str::from_utf8(&config).map_err(|_| {
        read.error(ModelFileError::Json {
            file: CONFIG_FILE.into(),
            message: "not UTF-8".into(),
        })
    })?;
    let mut checkpoint = hf::read_config(text, CONFIG_FILE).map_err(|e| read.error(e))?;
    drop(config);
    let index = match read
        .file(safetensors::INDEX_FILE, limits::SAFETENSORS_INDEX)
        .await?
    {
        Some(bytes) => Some(
            safetensors::parse_index(&bytes, safetensors::INDEX_FILE).map_err(|e| read.error(e))?,
        ),
        None => None,
    };
    match index {
        Some(index) => read.sharded(&mut checkpoint, index).await?,
        None => read.single(&mut checkpoint).await?,
    }
    Ok(checkpoint)
}

/// One read under way: what it has spent.
struct Read<'s, S> {
    source: &'s S,
    location: String,
    bounds: ReadLimits,
    bytes: u64,
    requests: u64,
}

impl<S: FileSource + Sync> Read<'_, S> {
    fn error(&self, error: ModelFileError) -> CheckpointError {
        CheckpointError::File {
            location: self.location.clone(),
            error,
        }
    }

    /// `n` more bytes, read for `file`, within the read's byte bound.
    fn spend(&mut self, file: &str, n: u64) -> Result<(), CheckpointError> {
        let total = self.bytes.saturating_add(n);
        self.bounds
            .bytes
            .check(
                file,
                "this model's read (config.json, the index and the headers up to this file)",
                total,
            )
            .map_err(|e| self.error(e))?;
        self.bytes = total;
        Ok(())
    }

    async fn file(&mut self, name: &str, limit: Limit) -> Result<Option<Vec<u8>>, CheckpointError> {
        self.requests += 1;
        let bytes = self.source.read_file(name, limit).await?;
        if let Some(bytes) = &bytes {
            self.spend(name, bytes.len() as u64)?;
        }
        Ok(bytes)
    }

    /// Requests the headers of `files` safetensors files take, with those made so far; `None`
    /// where that is within the bound.
    fn too_many_requests(&self, files: usize) -> Option<u64> {
        let needed = self
            .requests
            .saturating_add(2u64.saturating_mul(files as u64));
        (needed > self.bounds.requests.value).then_some(needed)
    }

    /// An unsharded model: `model.safetensors`'s header, where there is one.
    async fn single(&mut self, checkpoint: &mut Checkpoint) -> Result<(), CheckpointError> {
        let file = safetensors::SINGLE_FILE;
        if let Some(needed) = self.too_many_requests(1) {
            checkpoint.notes.push(format!(
                "no weight bytes: the header of {file} was not read ({needed} requests, more than the {} vramfit makes per read)",
                self.bounds.requests
            ));
            return Ok(());
        }
        if let Some(sums) = self.header(file, |_| Ok(true)).await? {
            if sums.counted.tensors > 0 {
                safetensors::apply_headers(checkpoint, &sums.counted, file);
            } else {
                checkpoint
                    .notes
                    .push(format!("{file} holds no tensors: no weight bytes"));
            }
        }
        Ok(())
    }

    /// A sharded model: each shard's header, counting a tensor only in the shard the weight map
    /// puts it in; else the index's `metadata.total_size`.
    async fn sharded(
        &mut self,
        checkpoint: &mut Checkpoint,
        mut index: Index,
    ) -> Result<(), CheckpointError> {
        let file = safetensors::INDEX_FILE;
        if index.tensors == 0 {
            checkpoint.notes.push(format!(
                "{file}'s weight_map names no tensors: no safetensors header was read"
            ));
            safetensors::apply_index(checkpoint, &index, file, None);
            return Ok(());
        }
        let shards = std::mem::take(&mut index.shards);
        if let Some(needed) = self.too_many_requests(shards.len()) {
            let why = format!(
                "the headers of its {} shards were not read: {needed} requests, more than the {} vramfit makes per read",
                shards.len(),
                self.bounds.requests
            );
            safetensors::apply_index(checkpoint, &index, file, Some(&why));
            return Ok(());
        }
        let (mut sums, mut skipped, mut missing) = (Sums::default(), 0u64, 0usize);
        for (number, shard) in shards.iter().enumerate() {
            let header = self
                .header(shard, |name| match index.claim(number, name) {
                    Claim::Here => Ok(true),
                    Claim::Elsewhere => Ok(false),
                    Claim::Again => Err(ModelFileError::Inconsistent {
                        file: shard.clone(),
                        why: format!("its header names {name} twice"),
                    }),
                })
                .await?;
            match header {
                Some(header) => {
                    sums.merge(&header.counted);
                    skipped += header.skipped;
                }
                None => missing += 1,
            }
        }
        if missing == shards.len() {
            // No shard here (a folder with the config and index only): the index's total.
            safetensors::apply_index(checkpoint, &index, file, None);
            return Ok(());
        }
        if missing > 0 {
            return Err(self.error(ModelFileError::Inconsistent {
                file: file.into(),
                why: format!(
                    "it names {} shards, {missing} of them are missing",
                    shards.len()
                ),
            }));
        }
        if sums.tensors == 0 {
            let why = "none of the tensors its weight_map names is in the header of the file it puts it in";
            safetensors::apply_index(checkpoint, &index, file, Some(why));
            return Ok(());
        }
        let files = match shards.as_slice() {
            [one] => one.clone(),
            many => format!("{} safetensors headers", many.len()),
        };
        safetensors::apply_headers(checkpoint, &sums, &files);
        checkpoint
            .notes
            .extend(safetensors::index_notes(&index, &sums, skipped, file));
        Ok(())
    }

    /// One safetensors file's header, summed (`counts` says which tensors count); `None` when
    /// the source has no such file.
    async fn header(
        &mut self,
        shard: &str,
        counts: impl FnMut(&str) -> Result<bool, ModelFileError>,
    ) -> Result<Option<safetensors::HeaderSums>, CheckpointError> {
        self.requests += 1;
        let Some(prefix) = self
            .source
            .read_range(shard, 0, safetensors::LENGTH_PREFIX)
            .await?
        else {
            return Ok(None);
        };
        self.spend(shard, prefix.bytes.len() as u64)?;
        let len = safetensors::header_len(&prefix.bytes, shard).map_err(|e| self.error(e))?;
        let header_end = safetensors::LENGTH_PREFIX + len;
        let truncated = || ModelFileError::Truncated {
            file: shard.to_string(),
            what: format!("the {len}-byte header"),
        };
        if prefix
            .file_len
            .is_some_and(|file_len| file_len < header_end)
        {
            return Err(self.error(truncated()));
        }
        // Counted before it is asked for: a header past the budget is never read.
        self.spend(shard, len)?;
        self.requests += 1;
        let Some(header) = self
            .source
            .read_range(shard, safetensors::LENGTH_PREFIX, len)
            .await?
        else {
            return Ok(None);
        };
        if (header.bytes.len() as u64) < len {
            return Err(self.error(truncated()));
        }
        let data_len = prefix.file_len.map(|l| l - header_end);
        safetensors::parse_header(&header.bytes, shard, data_len, counts)
            .map(Some)
            .map_err(|e| self.error(e))
    }
}
