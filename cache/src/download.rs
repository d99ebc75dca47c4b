//! One file, from `{endpoint}/{repo}/resolve/{revision}/{path}` (the Hub answers 302 to its CDN
//! for LFS files: redirects are followed, the token stays on the endpoint's origin) to
//! `<dest>.partial`, resumed with `Range: bytes=<len>-` when a partial exists (206 appends, 200
//! starts again from 0), then checked by size and hash and renamed into place. A file that does
//! not match is deleted, never renamed: the caller fetches it again from 0.
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::StatusCode;
use http::header::CONTENT_RANGE;
use tokio::io::AsyncWriteExt;
use vramfit_hub::{HubClient, refusal};
use vramfit_models::source::SourceErrorKind;

use crate::body::next_data;
use crate::layout::partial_path;
use crate::manifest::ManifestFile;
use crate::no_follow::{EntryKind, create_fresh, entry_kind, open_append, remove_entry};
use crate::verify::{Hasher, Mismatch, check, hash_file};

/// How long to wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DownloadLimits {
    /// Longest wait for the answer's headers (redirects included).
    pub request_timeout: Duration,
    /// Longest wait between two chunks of the body.
    pub idle_timeout: Duration,
}

impl Default for DownloadLimits {
    fn default() -> Self {
        DownloadLimits {
            request_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// What a finished download did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Downloaded {
    /// Bytes of a partial file kept and resumed from (0 when it started from the beginning).
    pub resumed_from: u64,
    /// Bytes received in this call.
    pub received: u64,
}

/// A file that could not be downloaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DownloadError {
    /// The Hub refused the file or could not be reached; nothing written.
    #[error("{path}: {message}")]
    Request {
        /// The file.
        path: String,
        /// Why.
        kind: SourceErrorKind,
        /// What happened.
        message: String,
    },
    /// The body broke off or stalled; the bytes received are kept, and the next call resumes.
    #[error("{path}: interrupted after {have} of {size} bytes: {message}")]
    Interrupted {
        /// The file.
        path: String,
        /// Bytes kept in the partial file.
        have: u64,
        /// The file's size.
        size: u64,
        /// What happened.
        message: String,
    },
    /// The bytes are not the file the listing names; the partial file is deleted.
    #[error("{path}: the download does not match the Hub's listing ({mismatch}); deleted")]
    Mismatch {
        /// The file.
        path: String,
        /// How it differs.
        mismatch: Mismatch,
    },
    /// The server answered something that is not the file asked for; the partial is deleted.
    #[error("{path}: {message}; the partial download is deleted")]
    Invalid {
        /// The file.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// The disk failed.
    #[error("{file}: {message}")]
    Io {
        /// The file on disk.
        file: PathBuf,
        /// What the system said.
        message: String,
    },
}

impl DownloadError {
    /// Whether another call may succeed where this one failed: an interrupted download
    /// resumes; a mismatch or a refused range starts again from 0.
    pub fn retryable(&self) -> bool {
        match self {
            DownloadError::Interrupted { .. }
            | DownloadError::Mismatch { .. }
            | DownloadError::Invalid { .. } => true,
            DownloadError::Request { kind, .. } => {
                matches!(
                    kind,
                    SourceErrorKind::Unavailable | SourceErrorKind::Timeout
                )
            }
            DownloadError::Io { .. } => false,
        }
    }
}

fn io(file: &Path) -> impl Fn(std::io::Error) -> DownloadError + '_ {
    move |e| DownloadError::Io {
        file: file.to_path_buf(),
        message: e.to_string(),
    }
}

/// The length of the regular file at `path`, 0 when there is none. Anything else there (a
/// planted link, a folder) is removed without being followed, and counts as none.
async fn len_or_zero(path: &Path) -> Result<u64, DownloadError> {
    match entry_kind(path).await.map_err(io(path))? {
        EntryKind::File(len) => Ok(len),
        EntryKind::Absent => Ok(0),
        EntryKind::Dir | EntryKind::Foreign(_) => {
            remove_entry(path).await.map_err(io(path))?;
            Ok(0)
        }
    }
}

/// Deletes `path` if it is there (a link itself, never its target).
pub async fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match tokio::fs::remove_file(path).await {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The first byte of a `Content-Range: bytes <first>-<last>/<total>`.
fn content_range_start(headers: &http::HeaderMap) -> Option<u64> {
    let value = headers.get(CONTENT_RANGE)?.to_str().ok()?;
    let (range, _total) = value.strip_prefix("bytes ")?.split_once('/')?;
    range.split_once('-')?.0.trim().parse().ok()
}

/// Downloads `file` from `url` to `dest` through `<dest>.partial`, resuming a partial file.
pub async fn download_file(
    client: &HubClient,
    url: &str,
    dest: &Path,
    file: &ManifestFile,
    limits: DownloadLimits,
) -> Result<Downloaded, DownloadError> {
    let path = file.path.clone();
    let size = file.size;
    let expected = file.expected();
    let partial = partial_path(dest);
    if let Some(parent) = dest.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(io(parent))?;
    }
    let mut have = len_or_zero(&partial).await?;
    if have > size {
        remove_if_present(&partial).await.map_err(io(&partial))?;
        have = 0;
    }
    let mut hasher = Hasher::new(&expected, size);
    if have > 0 {
        have = hash_file(&partial, have, &mut hasher)
            .await
            .map_err(io(&partial))?;
    }
    let resumed_from = have;
    let mut received = 0u64;
    // A partial file of the full size is only waiting to be checked; an empty file is asked for
    // (its answer proves the file exists).
    if have < size || size == 0 {
        let range = (have > 0).then(|| format!("bytes={have}-"));
        let request = client.get_following_redirects(url, range.as_deref());
        let response = tokio::time::timeout(limits.request_timeout, request)
            .await
            .map_err(|_| DownloadError::Request {
                path: path.clone(),
                kind: SourceErrorKind::Timeout,
                message: format!("no answer within {:?}", limits.request_timeout),
            })?
            .map_err(|e| DownloadError::Request {
                path: path.clone(),
                kind: e.kind,
                message: e.message,
            })?;
        let status = response.status();
        let invalid = |message: String| DownloadError::Invalid {
            path: path.clone(),
            message,
        };
        let append = match status {
            StatusCode::PARTIAL_CONTENT if have > 0 => {
                if content_range_start(response.headers()) != Some(have) {
                    remove_if_present(&partial).await.map_err(io(&partial))?;
                    return Err(invalid(format!(
                        "asked for bytes from {have}, the answer's Content-Range starts elsewhere"
                    )));
                }
                true
            }
            StatusCode::OK => {
                // The whole file again (a server that ignores Range): start from 0.
                have = 0;
                hasher = Hasher::new(&expected, size);
                false
            }
            StatusCode::RANGE_NOT_SATISFIABLE => {
                remove_if_present(&partial).await.map_err(io(&partial))?;
                return Err(invalid(format!(
                    "the server has fewer than the {have} bytes already downloaded (HTTP 416)"
                )));
            }
            StatusCode::NOT_FOUND => {
                return Err(DownloadError::Request {
                    path: path.clone(),
                    kind: SourceErrorKind::NotFound,
                    message: "listed by the Hub, but not found (HTTP 404)".to_string(),
                });
            }
            other => {
                let (kind, message) = refusal(other, response.headers()).unwrap_or((
                    SourceErrorKind::Invalid,
                    format!("unexpected HTTP {}", other.as_u16()),
                ));
                return Err(DownloadError::Request {
                    path: path.clone(),
                    kind,
                    message,
                });
            }
        };
        // Never through a link: appended only to the regular file checked above, else
        // created afresh (whatever was there unlinked, not followed).
        let mut out = if append {
            open_append(&partial).await
        } else {
            create_fresh(&partial).await
        }
        .map_err(io(&partial))?;
        let mut body = response.into_body();
        let broke = loop {
            let data = match next_data(&mut body, limits.idle_timeout).await {
                Ok(Some(data)) => data,
                Ok(None) => break None,
                Err(e) => break Some(e.to_string()),
            };
            if have + data.len() as u64 > size {
                drop(out);
                remove_if_present(&partial).await.map_err(io(&partial))?;
                return Err(DownloadError::Mismatch {
                    path: path.clone(),
                    mismatch: Mismatch::Size {
                        expected: size,
                        found: have + data.len() as u64,
                    },
                });
            }
            out.write_all(&data).await.map_err(io(&partial))?;
            hasher.update(&data);
            have += data.len() as u64;
            received += data.len() as u64;
        };
        out.flush().await.map_err(io(&partial))?;
        out.sync_all().await.map_err(io(&partial))?;
        if have < size {
            return Err(DownloadError::Interrupted {
                path: path.clone(),
                have,
                size,
                message: broke.unwrap_or_else(|| "the body ended early".to_string()),
            });
        }
    }
    if let Err(mismatch) = check(&expected, size, have, hasher.finish()) {
        remove_if_present(&partial).await.map_err(io(&partial))?;
        return Err(DownloadError::Mismatch { path, mismatch });
    }
    tokio::fs::rename(&partial, dest).await.map_err(io(dest))?;
    Ok(Downloaded {
        resumed_from,
        received,
    })
}
