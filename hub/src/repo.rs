//! A model on the Hub: repository id and revision, checked before any request, and the
//! `resolve` URL of one of its files.

/// The Hub's public endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// The revision when none is pinned.
pub const DEFAULT_REVISION: &str = "main";

/// A repository at a revision.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RepoRef {
    repo: String,
    revision: String,
}

/// A repository id or revision the Hub would not accept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RepoError {
    /// Not `owner/name` of letters, digits, `-`, `_`, `.`.
    #[error(
        "{0:?} is not a Hugging Face repository id (owner/name of letters, digits, '-', '_', '.'; at most 96 characters)"
    )]
    Repo(String),
    /// Empty, too long, with control characters, or with a part starting with `.` (`.` and
    /// `..` would be sent as dot-segments of the URL, which a server or proxy resolves away).
    #[error(
        "{0:?} is not a revision (a branch, tag or commit of at most 255 printable characters, no part of it starting with '.')"
    )]
    Revision(String),
}

impl RepoRef {
    /// `repo` as `owner/name` (or a bare `name`), `revision` a branch, tag or commit hash.
    pub fn new(repo: &str, revision: &str) -> Result<RepoRef, RepoError> {
        let part_ok = |part: &str| {
            !part.is_empty()
                && !part.starts_with(['.', '-'])
                && !part.ends_with(['.', '-'])
                && !part.contains("..")
                && !part.contains("--")
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        };
        let parts: Vec<&str> = repo.split('/').collect();
        if repo.len() > 96 || parts.len() > 2 || !parts.iter().all(|p| part_ok(p)) {
            return Err(RepoError::Repo(repo.to_string()));
        }
        if revision.is_empty()
            || revision.len() > 255
            || revision.chars().any(char::is_control)
            || !revision_parts_ok(revision)
        {
            return Err(RepoError::Revision(revision.to_string()));
        }
        Ok(RepoRef {
            repo: repo.to_string(),
            revision: revision.to_string(),
        })
    }

    /// `owner/name@revision` written as one string; the revision defaults to `main`.
    pub fn parse(text: &str) -> Result<RepoRef, RepoError> {
        match text.split_once('@') {
            Some((repo, revision)) => RepoRef::new(repo, revision),
            None => RepoRef::new(text, DEFAULT_REVISION),
        }
    }

    /// The repository id.
    pub fn repo(&self) -> &str {
        &self.repo
    }

    /// The revision.
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// `{endpoint}/{repo}/resolve/{revision}/{file}`, the revision percent-encoded as one path
    /// segment (`refs/pr/1` → `refs%2Fpr%2F1`), as the Hub's own client sends it.
    pub fn resolve_url(&self, endpoint: &str, file: &str) -> String {
        format!(
            "{}/{}/resolve/{}/{}",
            endpoint.trim_end_matches('/'),
            self.repo,
            encode_segment(&self.revision),
            encode_segment(file)
        )
    }
}

impl RepoRef {
    /// `{endpoint}/api/models/{repo}/revision/{revision}`: the Hub's model info at the
    /// revision, whose `sha` is the commit the revision names now.
    pub fn info_url(&self, endpoint: &str) -> String {
        format!(
            "{}/api/models/{}/revision/{}",
            endpoint.trim_end_matches('/'),
            self.repo,
            encode_segment(&self.revision)
        )
    }

    /// The revision when it is a full commit hash (40 hex digits), lowercased: it names one
    /// commit for good, with no request.
    pub fn pinned_commit(&self) -> Option<String> {
        is_commit(&self.revision).then(|| self.revision.to_ascii_lowercase())
    }
}

/// Whether `text` is a full commit hash: 40 hex digits.
pub fn is_commit(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

impl std::fmt::Display for RepoRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.repo, self.revision)
    }
}

/// No `/`-separated part of a revision starts with `.`: git refuses such a ref name, and `.` or
/// `..` would reach the server as a dot-segment (`resolve/../config.json`). The CRD's rule on
/// `huggingFace.revision` is the same.
fn revision_parts_ok(revision: &str) -> bool {
    revision.split('/').all(|part| !part.starts_with('.'))
}

/// Percent-encodes everything but unreserved characters (RFC 3986): one URL path segment.
pub fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_commit_hash_is_pinned_and_the_info_url_names_the_revision() {
        let sha = "9C925D64D72725EDAF899C6CB9C377FD0709D9C5";
        let pinned = RepoRef::new("Qwen/Qwen3-8B", sha).unwrap();
        assert_eq!(pinned.pinned_commit(), Some(sha.to_ascii_lowercase()));
        assert_eq!(
            RepoRef::parse("Qwen/Qwen3-8B").unwrap().pinned_commit(),
            None
        );
        assert_eq!(
            RepoRef::new("Qwen/Qwen3-8B", &sha[..39])
                .unwrap()
                .pinned_commit(),
            None,
            "a short hash is a branch or tag name to the Hub"
        );
        assert_eq!(
            RepoRef::parse("Qwen/Qwen3-8B@refs/pr/12")
                .unwrap()
                .info_url("https://hub/"),
            "https://hub/api/models/Qwen/Qwen3-8B/revision/refs%2Fpr%2F12"
        );
    }

    #[test]
    fn repository_ids_and_revisions_are_checked_and_encoded() {
        let r = RepoRef::parse("Qwen/Qwen3-8B@refs/pr/12").unwrap();
        assert_eq!(r.to_string(), "Qwen/Qwen3-8B@refs/pr/12");
        assert_eq!(
            r.resolve_url("https://mirror.example/hf/", "config.json"),
            "https://mirror.example/hf/Qwen/Qwen3-8B/resolve/refs%2Fpr%2F12/config.json"
        );
        assert_eq!(RepoRef::parse("gpt2").unwrap().revision(), "main");
        for bad in [
            "../etc",
            "a/b/c",
            "a//b",
            "",
            "org/na me",
            "org/-x",
            "org/x..y",
            "o/x%2F",
        ] {
            assert!(RepoRef::parse(bad).is_err(), "{bad}");
        }
        assert!(RepoRef::new("a/b", "").is_err());
        assert!(RepoRef::new("a/b", "main\n").is_err());
        for dots in [".", "..", ".hidden", "refs/..", "refs/pr/.x", "../main"] {
            assert_eq!(
                RepoRef::new("a/b", dots),
                Err(RepoError::Revision(dots.to_string())),
                "{dots}"
            );
        }
        assert!(
            RepoRef::new("a/b", "v1.0").is_ok(),
            "a dot inside a part is a tag"
        );
    }
}
