//! Where a model's files and its record live under the cache root:
//!
//! ```text
//! <root>/models/<owner>--<name>/<revision>/<path>      the repository's files, as on the Hub
//! <root>/models/<owner>--<name>/<revision>/<path>.partial   a download under way
//! <root>/records/<owner>--<name>/<revision>.json       the model's record (bytes, access, use)
//! <root>/cache.lock                                     held by the one process that writes
//! <root>/served/                                        a read-only bind mount of models/: what pods mount
//! ```
//!
//! A model's folder holds its files only, so that it can be mounted as it is. The revision is
//! one path segment, percent-encoded (`refs/pr/1` → `refs%2Fpr%2F1`); a repository id never
//! holds `--` (the Hub's rule, checked by `RepoRef`), so `owner--name` is unambiguous.
use std::path::{Path, PathBuf};

use vramfit_hub::{RepoRef, encode_segment};

/// The suffix of a file being downloaded, next to where it will be renamed to.
pub const PARTIAL_SUFFIX: &str = ".partial";

/// The folder under the root that serves `models/` read-only.
pub const SERVED_DIR: &str = "served";

/// The cache's folders under one root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// The layout under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder every model's folders are under.
    pub fn models_dir(&self) -> PathBuf {
        self.root.join("models")
    }

    /// The folder every record is under.
    pub fn records_dir(&self) -> PathBuf {
        self.root.join("records")
    }

    /// The lock file a writer holds.
    pub fn lock_path(&self) -> PathBuf {
        self.root.join("cache.lock")
    }

    /// The read-only bind mount of [`Layout::models_dir`] that pods mount models from (made by
    /// the cache agent's `--serve-read-only`; docs/model-cache.md, "Threat model").
    pub fn served_dir(&self) -> PathBuf {
        self.root.join(SERVED_DIR)
    }

    /// `<root>/served/<owner>--<name>/<revision>`: what a pod mounts, read-only even for root.
    pub fn served_model_dir(&self, repo: &RepoRef) -> PathBuf {
        self.served_dir()
            .join(repo_dir_name(repo))
            .join(encode_segment(repo.revision()))
    }

    /// `<root>/models/<owner>--<name>/<revision>`: where the agent writes a model.
    pub fn model_dir(&self, repo: &RepoRef) -> PathBuf {
        self.models_dir()
            .join(repo_dir_name(repo))
            .join(encode_segment(repo.revision()))
    }

    /// `<root>/records/<owner>--<name>/<revision>.json`.
    pub fn record_path(&self, repo: &RepoRef) -> PathBuf {
        self.records_dir()
            .join(repo_dir_name(repo))
            .join(format!("{}.json", encode_segment(repo.revision())))
    }

    /// The model folder a record at `record_path` (`<records>/<repo dir>/<revision>.json`)
    /// describes, read from the path alone (the record may be unreadable); `None` when the
    /// path is not a record of this layout.
    pub fn model_dir_of_record(&self, record_path: &Path) -> Option<PathBuf> {
        let repo_dir = record_path.parent()?;
        if repo_dir.parent()? != self.records_dir() {
            return None;
        }
        let name = record_path.file_name()?.to_str()?;
        let revision = name.strip_suffix(".json")?;
        let repo_dir = repo_dir.file_name()?.to_str()?;
        let safe = |part: &str| !part.is_empty() && part != "." && part != "..";
        (safe(revision) && safe(repo_dir)).then(|| self.models_dir().join(repo_dir).join(revision))
    }

    /// Where a file of the repository lands; `path` is a manifest path (checked relative, with
    /// no `..`: see `manifest::check_path`).
    pub fn file_path(&self, repo: &RepoRef, path: &str) -> PathBuf {
        let mut out = self.model_dir(repo);
        out.extend(path.split('/'));
        out
    }
}

/// `owner--name`, or `name` for a repository without an owner.
pub fn repo_dir_name(repo: &RepoRef) -> String {
    repo.repo().replace('/', "--")
}

/// `<dest>.partial`.
pub fn partial_path(dest: &Path) -> PathBuf {
    let mut name = dest.as_os_str().to_owned();
    name.push(PARTIAL_SUFFIX);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_name_the_repository_and_one_encoded_revision_segment() {
        let layout = Layout::new("/cache");
        let repo = RepoRef::parse("Qwen/Qwen3-8B@refs/pr/1").unwrap();
        assert_eq!(
            layout.model_dir(&repo),
            Path::new("/cache/models/Qwen--Qwen3-8B/refs%2Fpr%2F1")
        );
        assert_eq!(
            layout.file_path(&repo, "original/params.json"),
            Path::new("/cache/models/Qwen--Qwen3-8B/refs%2Fpr%2F1/original/params.json")
        );
        assert_eq!(
            layout.record_path(&repo),
            Path::new("/cache/records/Qwen--Qwen3-8B/refs%2Fpr%2F1.json")
        );
        let bare = RepoRef::parse("gpt2").unwrap();
        assert_eq!(
            layout.model_dir(&bare),
            Path::new("/cache/models/gpt2/main")
        );
        assert_eq!(
            layout.model_dir_of_record(&layout.record_path(&repo)),
            Some(layout.model_dir(&repo))
        );
        assert_eq!(layout.model_dir_of_record(Path::new("/cache/x.json")), None);
        assert_eq!(
            partial_path(Path::new("/c/a.safetensors")),
            Path::new("/c/a.safetensors.partial")
        );
    }
}
