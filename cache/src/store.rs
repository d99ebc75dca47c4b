//! The cache on disk: one record per model (JSON, written atomically) beside the model's folder,
//! saying how many bytes it holds, whether every file is in place and verified, when it was last
//! used, and which namespaces may mount it.
use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use vramfit_hub::RepoRef;

use crate::layout::Layout;

/// Who may mount a model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Access {
    /// A public model (read without a token): every namespace.
    Public,
    /// A private or gated model read with tokens: the namespaces those tokens serve.
    Namespaces(BTreeSet<String>),
}

impl Access {
    /// Whether a pod of `namespace` may mount the model.
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Access::Public => true,
            Access::Namespaces(namespaces) => namespaces.contains(namespace),
        }
    }
}

/// What the cache knows of one model at one revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRecord {
    /// `owner/name`.
    pub repo: String,
    /// The revision as asked for.
    pub revision: String,
    /// Bytes of the files in place.
    pub bytes: u64,
    /// Bytes of every file of the listing.
    pub total_bytes: u64,
    /// Every file of the listing is in place and verified: the folder may be mounted.
    pub complete: bool,
    /// Last use (fetched or mounted), in seconds since the Unix epoch.
    pub last_used: u64,
    /// Who may mount it.
    pub access: Access,
    /// Files in place whose hash was checked, with what they were checked against
    /// (`ManifestFile::fingerprint`): a file in place that is not here with the listing's
    /// fingerprint (a crash before the record was written, a branch that moved) is hashed
    /// again before it counts.
    pub verified: BTreeMap<String, String>,
}

impl ModelRecord {
    /// An empty record for `repo`.
    pub fn new(repo: &RepoRef, access: Access, now: u64) -> ModelRecord {
        ModelRecord {
            repo: repo.repo().to_string(),
            revision: repo.revision().to_string(),
            bytes: 0,
            total_bytes: 0,
            complete: false,
            last_used: now,
            access,
            verified: BTreeMap::new(),
        }
    }

    /// The model it describes.
    pub fn repo_ref(&self) -> Result<RepoRef, vramfit_hub::RepoError> {
        RepoRef::new(&self.repo, &self.revision)
    }

    /// `owner/name@revision`, the key budgets and in-use sets speak of.
    pub fn key(&self) -> String {
        format!("{}@{}", self.repo, self.revision)
    }
}

/// The disk failed, or a record is unreadable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("model cache {path}: {message}")]
pub struct StoreError {
    /// The file or folder.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

fn store_error(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |e| StoreError {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// The records and folders under one cache root.
#[derive(Clone, Debug)]
pub struct Store {
    layout: Layout,
}

/// Held while one process writes the cache; released when dropped.
#[derive(Debug)]
pub struct CacheLock {
    _file: std::fs::File,
}

impl Store {
    /// The store under `layout`.
    pub fn new(layout: Layout) -> Store {
        Store { layout }
    }

    /// Its layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Takes the writer's lock, or says another process holds it.
    pub fn try_lock(&self) -> Result<CacheLock, StoreError> {
        let path = self.layout.lock_path();
        std::fs::create_dir_all(self.layout.root()).map_err(store_error(self.layout.root()))?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(store_error(&path))?;
        match file.try_lock() {
            Ok(()) => Ok(CacheLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(StoreError {
                path,
                message: "another process is writing this cache".to_string(),
            }),
            Err(std::fs::TryLockError::Error(e)) => Err(store_error(&path)(e)),
        }
    }

    /// The record of `repo`, if any.
    pub async fn read(&self, repo: &RepoRef) -> Result<Option<ModelRecord>, StoreError> {
        read_record(&self.layout.record_path(repo)).await
    }

    /// Writes `record` atomically (a temporary file renamed over the old one).
    pub async fn write(&self, record: &ModelRecord) -> Result<(), StoreError> {
        let repo = record.repo_ref().map_err(|e| StoreError {
            path: self.layout.records_dir(),
            message: e.to_string(),
        })?;
        let path = self.layout.record_path(&repo);
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(store_error(parent))?;
        }
        let text = serde_json::to_vec_pretty(record).map_err(|e| StoreError {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let mut temporary = path.clone().into_os_string();
        temporary.push(".tmp");
        let temporary = PathBuf::from(temporary);
        tokio::fs::write(&temporary, text)
            .await
            .map_err(store_error(&temporary))?;
        tokio::fs::rename(&temporary, &path)
            .await
            .map_err(store_error(&path))
    }

    /// Every record, sorted by key.
    pub async fn list(&self) -> Result<Vec<ModelRecord>, StoreError> {
        let mut out = Vec::new();
        let records = self.layout.records_dir();
        for repo_dir in read_dir(&records).await? {
            for file in read_dir(&repo_dir).await? {
                if file.extension().is_some_and(|e| e == "json")
                    && let Some(record) = read_record(&file).await?
                {
                    out.push(record);
                }
            }
        }
        out.sort_by_key(ModelRecord::key);
        Ok(out)
    }

    /// Marks `repo` used at `now` (a pod mounted it); `false` when it is not cached.
    pub async fn touch(&self, repo: &RepoRef, now: u64) -> Result<bool, StoreError> {
        let Some(mut record) = self.read(repo).await? else {
            return Ok(false);
        };
        record.last_used = now;
        self.write(&record).await?;
        Ok(true)
    }

    /// The folder a pod of `namespace` may mount for `repo`: `None` unless the model is
    /// complete and its access allows the namespace.
    pub async fn mountable(
        &self,
        repo: &RepoRef,
        namespace: &str,
    ) -> Result<Option<PathBuf>, StoreError> {
        Ok(self
            .read(repo)
            .await?
            .filter(|r| r.complete && r.access.allows(namespace))
            .map(|_| self.layout.model_dir(repo)))
    }

    /// Deletes `repo`'s files and record: first the record says incomplete (nothing mounts a
    /// half-deleted folder), then the folder goes, then the record.
    pub async fn remove(&self, repo: &RepoRef) -> Result<(), StoreError> {
        if let Some(mut record) = self.read(repo).await? {
            record.complete = false;
            self.write(&record).await?;
        }
        let dir = self.layout.model_dir(repo);
        match tokio::fs::remove_dir_all(&dir).await {
            Err(e) if e.kind() != ErrorKind::NotFound => return Err(store_error(&dir)(e)),
            _ => {}
        }
        let record = self.layout.record_path(repo);
        match tokio::fs::remove_file(&record).await {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(store_error(&record)(e)),
            _ => Ok(()),
        }
    }
}

async fn read_record(path: &Path) -> Result<Option<ModelRecord>, StoreError> {
    let text = match tokio::fs::read(path).await {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(store_error(path)(e)),
    };
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| StoreError {
            path: path.to_path_buf(),
            message: format!("not a model record ({e}); delete it and its model's folder"),
        })
}

/// The entries of a folder, sorted; none when it does not exist.
async fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(store_error(dir)(e)),
    };
    let mut out = Vec::new();
    while let Some(entry) = entries.next_entry().await.map_err(store_error(dir))? {
        out.push(entry.path());
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_round_trip_and_say_who_may_mount() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(Layout::new(root.path()));
        let private = RepoRef::parse("org/private@refs/pr/2").unwrap();
        let public = RepoRef::parse("gpt2").unwrap();
        let mut record = ModelRecord::new(
            &private,
            Access::Namespaces(BTreeSet::from(["team-a".to_string()])),
            10,
        );
        record.complete = true;
        record.bytes = 5;
        store.write(&record).await.unwrap();
        let mut open = ModelRecord::new(&public, Access::Public, 20);
        store.write(&open).await.unwrap();

        assert_eq!(store.read(&private).await.unwrap(), Some(record.clone()));
        let keys: Vec<String> = store
            .list()
            .await
            .unwrap()
            .iter()
            .map(ModelRecord::key)
            .collect();
        assert_eq!(keys, ["gpt2@main", "org/private@refs/pr/2"]);

        let dir = store.layout().model_dir(&private);
        assert_eq!(
            store.mountable(&private, "team-a").await.unwrap(),
            Some(dir.clone())
        );
        assert_eq!(store.mountable(&private, "team-b").await.unwrap(), None);
        assert_eq!(
            store.mountable(&public, "team-b").await.unwrap(),
            None,
            "incomplete"
        );
        open.complete = true;
        store.write(&open).await.unwrap();
        assert!(store.mountable(&public, "team-b").await.unwrap().is_some());

        assert!(store.touch(&private, 99).await.unwrap());
        assert_eq!(store.read(&private).await.unwrap().unwrap().last_used, 99);

        tokio::fs::create_dir_all(&dir).await.unwrap();
        tokio::fs::write(dir.join("w"), b"x").await.unwrap();
        store.remove(&private).await.unwrap();
        assert!(!dir.exists());
        assert_eq!(store.read(&private).await.unwrap(), None);
    }

    #[tokio::test]
    async fn an_unreadable_record_is_an_error_naming_the_file() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(Layout::new(root.path()));
        let repo = RepoRef::parse("org/m").unwrap();
        let path = store.layout().record_path(&repo);
        tokio::fs::create_dir_all(path.parent().unwrap())
            .await
            .unwrap();
        tokio::fs::write(&path, b"{").await.unwrap();
        let error = store.list().await.unwrap_err();
        assert_eq!(error.path, path);
        assert!(error.to_string().contains("not a model record"), "{error}");
    }

    #[test]
    fn one_writer_holds_the_lock() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(Layout::new(root.path()));
        let held = store.try_lock().unwrap();
        let error = store.try_lock().unwrap_err();
        assert!(error.message.contains("another process"), "{error}");
        drop(held);
        store.try_lock().unwrap();
    }
}
