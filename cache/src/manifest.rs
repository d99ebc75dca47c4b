//! The files of a repository at a revision, as the Hub lists them:
//! `GET {endpoint}/api/models/{repo}/tree/{revision}?recursive=true`, a JSON array of entries
//! (`type` `file` or `directory`, `path`, `size`, `oid` the git object id, and for an LFS file
//! `lfs: {oid, size}` with `oid` its SHA-256), the next page named by a `Link: <url>;
//! rel="next"` header. Every path is checked to stay inside the model's folder: a hostile
//! mirror must not write outside the cache.
use std::collections::BTreeSet;
use std::time::Duration;

use http::HeaderMap;
use http::header::LINK;
use serde::Deserialize;
use vramfit_hub::{HubClient, RepoRef, encode_segment, refusal};
use vramfit_models::source::SourceErrorKind;

use crate::body::{BodyError, read_bounded};
use crate::layout::PARTIAL_SUFFIX;
use crate::verify::Expected;

/// A repository's files at one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Every file, in the listing's order.
    pub files: Vec<ManifestFile>,
}

/// One file of the listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestFile {
    /// Relative path, `/`-separated, checked (no `..`, not absolute, no backslash).
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// The SHA-256 of an LFS file (lowercase hex).
    pub sha256: Option<String>,
    /// The git blob id of a file kept in git (lowercase hex SHA-1); `None` for LFS files, whose
    /// git object is the pointer, not the bytes.
    pub git_blob: Option<String>,
}

impl ManifestFile {
    /// The hash the downloaded bytes must have.
    pub fn expected(&self) -> Expected {
        match (&self.sha256, &self.git_blob) {
            (Some(sha), _) => Expected::Sha256(sha.clone()),
            (None, Some(blob)) => Expected::GitBlob(blob.clone()),
            (None, None) => Expected::SizeOnly,
        }
    }
}

impl ManifestFile {
    /// What the file is checked against, as one string (`sha256:<hex>`, `git-blob:<hex>`,
    /// `size:<n>`): a record keeps it for each verified file, so that a listing that names
    /// other bytes under the same path (a branch that moved) has the file hashed again.
    pub fn fingerprint(&self) -> String {
        match self.expected() {
            Expected::Sha256(hex) => format!("sha256:{hex}"),
            Expected::GitBlob(hex) => format!("git-blob:{hex}"),
            Expected::SizeOnly => format!("size:{}", self.size),
        }
    }
}

impl Manifest {
    /// The bytes of every file together.
    pub fn total_bytes(&self) -> u64 {
        self.files
            .iter()
            .fold(0u64, |sum, f| sum.saturating_add(f.size))
    }
}

/// Bounds on a listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ManifestLimits {
    /// Largest body of one page.
    pub max_page_bytes: u64,
    /// Most pages followed.
    pub max_pages: u32,
    /// Most files in a repository.
    pub max_files: usize,
    /// Most bytes of all the listed paths together: with `max_files` it bounds what a listing
    /// keeps in memory (the paths are kept in the listing and in the record), whatever the
    /// Hub or a mirror answers.
    pub max_path_bytes: u64,
    /// Longest wait for an answer, and between two chunks of its body.
    pub timeout: Duration,
}

impl Default for ManifestLimits {
    fn default() -> Self {
        ManifestLimits {
            max_page_bytes: 16 * 1024 * 1024,
            max_pages: 1000,
            max_files: 50_000,
            max_path_bytes: 8 * 1024 * 1024,
            timeout: Duration::from_secs(30),
        }
    }
}

/// A listing that cannot be read or used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The request failed or the Hub refused it.
    #[error("listing the files of {repo}: {message}")]
    Request {
        /// The model.
        repo: String,
        /// Why the request failed.
        kind: SourceErrorKind,
        /// What happened.
        message: String,
    },
    /// The answer is not a listing, or names a file vramfit will not write.
    #[error("listing the files of {repo}: {message}")]
    Invalid {
        /// The model.
        repo: String,
        /// What is wrong, naming the entry.
        message: String,
    },
}

/// `{endpoint}/api/models/{repo}/tree/{revision}?recursive=true`.
pub fn tree_url(endpoint: &str, repo: &RepoRef) -> String {
    format!(
        "{}/api/models/{}/tree/{}?recursive=true",
        endpoint.trim_end_matches('/'),
        repo.repo(),
        encode_segment(repo.revision())
    )
}

/// `{endpoint}/{repo}/resolve/{revision}/{path}`, each segment of `path` percent-encoded and the
/// `/` between them kept, as the Hub's own client sends it.
pub fn resolve_url(endpoint: &str, repo: &RepoRef, path: &str) -> String {
    let segments: Vec<String> = path.split('/').map(encode_segment).collect();
    format!(
        "{}/{}/resolve/{}/{}",
        endpoint.trim_end_matches('/'),
        repo.repo(),
        encode_segment(repo.revision()),
        segments.join("/")
    )
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    oid: Option<String>,
    #[serde(default)]
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    oid: String,
    size: u64,
}

/// Why a path from the listing is refused; `None` when it stays inside the model's folder.
pub fn check_path(path: &str) -> Option<&'static str> {
    if path.is_empty() || path.len() > 4096 {
        return Some("empty or longer than 4096 bytes");
    }
    if path.starts_with('/') {
        return Some("absolute");
    }
    if path.contains('\\') {
        return Some("holds a backslash");
    }
    if path.chars().any(char::is_control) {
        return Some("holds a control character");
    }
    if path
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Some("holds an empty, '.' or '..' part");
    }
    if path.ends_with(PARTIAL_SUFFIX) {
        return Some("ends in .partial, the name of a download under way");
    }
    None
}

fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The files of one page of the listing (directories are skipped).
pub fn parse_page(body: &[u8]) -> Result<Vec<ManifestFile>, String> {
    let entries: Vec<Entry> = serde_json::from_slice(body)
        .map_err(|e| format!("not a JSON array of tree entries: {e}"))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.path;
        match entry.kind.as_str() {
            "directory" => continue,
            "file" => {}
            other => return Err(format!("{path:?}: unknown entry type {other:?}")),
        }
        if let Some(why) = check_path(&path) {
            return Err(format!("path {path:?} is refused: {why}"));
        }
        let (size, sha256, git_blob) = match entry.lfs {
            Some(lfs) => {
                if !is_hex(&lfs.oid, 64) {
                    return Err(format!("{path:?}: lfs.oid is not a SHA-256"));
                }
                if entry.size.is_some_and(|s| s != lfs.size) {
                    return Err(format!("{path:?}: size and lfs.size differ"));
                }
                (lfs.size, Some(lfs.oid.to_ascii_lowercase()), None)
            }
            None => {
                let size = entry
                    .size
                    .ok_or_else(|| format!("{path:?}: a file without a size"))?;
                let blob = entry.oid.filter(|oid| is_hex(oid, 40));
                (size, None, blob.map(|b| b.to_ascii_lowercase()))
            }
        };
        files.push(ManifestFile {
            path,
            size,
            sha256,
            git_blob,
        });
    }
    Ok(files)
}

/// The `rel="next"` target of a `Link` header, absolute or relative to `endpoint`.
pub fn next_page(headers: &HeaderMap, endpoint: &str) -> Option<String> {
    for value in headers.get_all(LINK) {
        let Ok(value) = value.to_str() else {
            continue;
        };
        for link in value.split(',') {
            let mut parts = link.split(';');
            let Some(target) = parts.next() else {
                continue;
            };
            let is_next = parts.any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            });
            let target = target.trim().trim_start_matches('<').trim_end_matches('>');
            if !is_next {
                continue;
            }
            if target.starts_with("http://") || target.starts_with("https://") {
                return Some(target.to_string());
            }
            if target.starts_with('/') {
                return Some(origin_of(endpoint) + target);
            }
        }
    }
    None
}

/// `scheme://host[:port]` of an endpoint URL.
fn origin_of(endpoint: &str) -> String {
    let after_scheme = endpoint.find("://").map_or(0, |i| i + 3);
    let end = endpoint[after_scheme..]
        .find('/')
        .map_or(endpoint.len(), |i| after_scheme + i);
    endpoint[..end].to_string()
}

/// Lists the repository's files through `client` (its token, if any, goes to the endpoint's
/// origin only), following pages within `limits`.
pub async fn list_manifest(
    client: &HubClient,
    repo: &RepoRef,
    limits: ManifestLimits,
) -> Result<Manifest, ManifestError> {
    let request_error = |kind, message| ManifestError::Request {
        repo: repo.to_string(),
        kind,
        message,
    };
    let invalid = |message| ManifestError::Invalid {
        repo: repo.to_string(),
        message,
    };
    let mut url = tree_url(client.endpoint(), repo);
    let mut files = Vec::new();
    let mut path_bytes = 0u64;
    for page in 0.. {
        if page >= limits.max_pages {
            return Err(invalid(format!("more than {} pages", limits.max_pages)));
        }
        let response =
            tokio::time::timeout(limits.timeout, client.get_following_redirects(&url, None))
                .await
                .map_err(|_| {
                    request_error(
                        SourceErrorKind::Timeout,
                        format!("no answer within {:?}", limits.timeout),
                    )
                })?
                .map_err(|e| request_error(e.kind, e.message))?;
        let status = response.status();
        if let Some((kind, why)) = refusal(status, response.headers()) {
            return Err(request_error(kind, why));
        }
        if !status.is_success() {
            return Err(request_error(
                SourceErrorKind::NotFound,
                format!("no such repository or revision (HTTP {})", status.as_u16()),
            ));
        }
        let next = next_page(response.headers(), client.endpoint());
        let body = read_bounded(response.into_body(), limits.max_page_bytes, limits.timeout)
            .await
            .map_err(|e| match e {
                BodyError::TooLarge(_) => invalid(format!("page {}: {e}", page + 1)),
                other => request_error(SourceErrorKind::Unavailable, other.to_string()),
            })?;
        for file in parse_page(&body).map_err(invalid)? {
            path_bytes = path_bytes.saturating_add(file.path.len() as u64);
            files.push(file);
            if files.len() > limits.max_files {
                return Err(invalid(format!("more than {} files", limits.max_files)));
            }
            if path_bytes > limits.max_path_bytes {
                return Err(invalid(format!(
                    "more than {} bytes of paths",
                    limits.max_path_bytes
                )));
            }
        }
        match next {
            Some(next) => url = next,
            None => break,
        }
    }
    check_listed_once(&files).map_err(invalid)?;
    check_no_file_under_a_file(&files).map_err(invalid)?;
    Ok(Manifest { files })
}

/// No path is listed twice (checked on borrowed paths: no copy of the listing is kept).
fn check_listed_once(files: &[ManifestFile]) -> Result<(), String> {
    let mut paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    paths.sort_unstable();
    match paths.windows(2).find(|pair| pair[0] == pair[1]) {
        Some(pair) => Err(format!("{:?} listed twice", pair[0])),
        None => Ok(()),
    }
}

/// A file `a` and a file `a/b` cannot both be written.
fn check_no_file_under_a_file(files: &[ManifestFile]) -> Result<(), String> {
    let paths: BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    for file in files {
        let mut prefix = file.path.as_str();
        while let Some((parent, _)) = prefix.rsplit_once('/') {
            if paths.contains(parent) {
                return Err(format!("{:?} is a file and a folder", parent));
            }
            prefix = parent;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const SHA: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    #[test]
    fn a_page_lists_files_with_their_hashes_and_skips_folders() {
        let body = format!(
            r#"[{{"type":"file","oid":"b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0","size":5,"path":"config.json"}},
               {{"type":"directory","oid":"0000000000000000000000000000000000000000","size":0,"path":"original"}},
               {{"type":"file","oid":"1111111111111111111111111111111111111111","size":9,"path":"original/w.safetensors",
                 "lfs":{{"oid":"{SHA}","size":9,"pointerSize":130}}}}]"#
        );
        let files = parse_page(body.as_bytes()).unwrap();
        assert_eq!(
            files,
            vec![
                ManifestFile {
                    path: "config.json".into(),
                    size: 5,
                    sha256: None,
                    git_blob: Some("b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0".into()),
                },
                ManifestFile {
                    path: "original/w.safetensors".into(),
                    size: 9,
                    sha256: Some(SHA.into()),
                    git_blob: None,
                },
            ]
        );
        assert_eq!(files[1].expected(), Expected::Sha256(SHA.into()));
    }

    #[test]
    fn paths_that_leave_the_folder_are_refused() {
        for bad in [
            "../etc/passwd",
            "a/../../b",
            "/etc/passwd",
            "a\\..\\b",
            "a//b",
            "./a",
            "",
            "a\nb",
            "w.safetensors.partial",
        ] {
            assert!(check_path(bad).is_some(), "{bad:?}");
            let body = format!(r#"[{{"type":"file","size":1,"path":{bad:?}}}]"#);
            let error = parse_page(body.as_bytes()).unwrap_err();
            assert!(error.contains("refused"), "{bad:?}: {error}");
        }
        assert_eq!(check_path("a/b.c..d/e"), None);
    }

    #[test]
    fn malformed_entries_are_errors() {
        let lfs_mismatch =
            format!(r#"[{{"type":"file","size":8,"path":"w","lfs":{{"oid":"{SHA}","size":9}}}}]"#);
        for (body, says) in [
            ("{}", "not a JSON array"),
            (r#"[{"type":"file","path":"w"}]"#, "without a size"),
            (
                r#"[{"type":"link","size":1,"path":"w"}]"#,
                "unknown entry type",
            ),
            (
                r#"[{"type":"file","size":1,"path":"w","lfs":{"oid":"zz","size":1}}]"#,
                "not a SHA-256",
            ),
            (lfs_mismatch.as_str(), "differ"),
        ] {
            let error = parse_page(body.as_bytes()).unwrap_err();
            assert!(error.contains(says), "{body}: {error}");
        }
        let files = vec![
            ManifestFile {
                path: "a".into(),
                size: 1,
                sha256: None,
                git_blob: None,
            },
            ManifestFile {
                path: "a/b".into(),
                size: 1,
                sha256: None,
                git_blob: None,
            },
        ];
        assert!(check_no_file_under_a_file(&files).is_err());
    }

    #[test]
    fn the_next_page_comes_from_the_link_header() {
        let mut headers = HeaderMap::new();
        headers.append(
            LINK,
            HeaderValue::from_static(
                r#"<https://hub.example/api/models/a/b/tree/main?cursor=x>; rel="next", <https://hub.example/x>; rel="last""#,
            ),
        );
        assert_eq!(
            next_page(&headers, "https://hub.example/hf").as_deref(),
            Some("https://hub.example/api/models/a/b/tree/main?cursor=x")
        );
        let mut relative = HeaderMap::new();
        relative.append(LINK, HeaderValue::from_static(r#"</api/p2>; rel="next""#));
        assert_eq!(
            next_page(&relative, "http://127.0.0.1:8080/hf").as_deref(),
            Some("http://127.0.0.1:8080/api/p2")
        );
        let mut last_only = HeaderMap::new();
        last_only.append(LINK, HeaderValue::from_static(r#"</api/p2>; rel="last""#));
        assert_eq!(next_page(&last_only, "http://h"), None);
    }

    #[test]
    fn urls_encode_the_revision_as_one_segment_and_keep_folders() {
        let repo = RepoRef::parse("org/m@refs/pr/1").unwrap();
        assert_eq!(
            tree_url("https://hub.example/", &repo),
            "https://hub.example/api/models/org/m/tree/refs%2Fpr%2F1?recursive=true"
        );
        assert_eq!(
            resolve_url("https://hub.example", &repo, "original/a b.json"),
            "https://hub.example/org/m/resolve/refs%2Fpr%2F1/original/a%20b.json"
        );
    }
}
