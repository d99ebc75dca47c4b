//! The cache on disk: one record per model (JSON, written atomically) beside the model's folder,
//! saying how many bytes it holds, whether every file is in place and verified, when it was last
//! used, and which namespaces may mount it.
use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use vramfit_hub::RepoRef;

use crate::layout::{Layout, PARTIAL_SUFFIX, repo_dir_name};
use crate::no_follow::{EntryKind, entry_kind, remove_entry};

/// What `Store::list_all` found.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// The readable records, sorted by key.
    pub records: Vec<ModelRecord>,
    /// The records (or folders of records) that could not be read.
    pub unreadable: Vec<StoreError>,
}

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
    /// The size of each verified file, for the cheap re-verification of a complete model
    /// (`reverify`); a record written before it was kept has none, filled by the first full
    /// re-verification.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sizes: BTreeMap<String, u64>,
    /// Why the files in place stopped matching what was verified (a re-verification found a
    /// file changed, missing or not a regular file, or something in the folder the cache did not
    /// write): the model is no longer complete and is fetched again. Cleared by a fetch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damage: Option<String>,
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
            sizes: BTreeMap::new(),
            damage: None,
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

    /// Every readable record, sorted by key (the unreadable ones are left out: see
    /// `list_all`).
    pub async fn list(&self) -> Result<Vec<ModelRecord>, StoreError> {
        Ok(self.list_all().await?.records)
    }

    /// Every record, sorted by key, and the records that cannot be read: one corrupt record
    /// never hides the others. Fails only when the records' folders cannot be read.
    pub async fn list_all(&self) -> Result<Listing, StoreError> {
        let mut listing = Listing::default();
        let records = self.layout.records_dir();
        for repo_dir in read_dir(&records).await? {
            let files = match read_dir(&repo_dir).await {
                Ok(files) => files,
                Err(error) => {
                    listing.unreadable.push(error);
                    continue;
                }
            };
            for file in files {
                if file.extension().is_none_or(|e| e != "json") {
                    continue;
                }
                match read_record(&file).await {
                    Ok(Some(record)) => listing.records.push(record),
                    Ok(None) => {}
                    Err(error) => listing.unreadable.push(error),
                }
            }
        }
        listing.records.sort_by_key(ModelRecord::key);
        Ok(listing)
    }

    /// Forgets the model of an unreadable record at `record_path` (as `list_all` named it):
    /// its folder and the record go, so the model counts as not cached and is fetched again
    /// when wanted. A path that is not a record of this cache is left alone.
    pub async fn discard_unreadable(&self, record_path: &Path) -> Result<(), StoreError> {
        let Some(model_dir) = self.layout.model_dir_of_record(record_path) else {
            return Ok(());
        };
        remove_entry(&model_dir)
            .await
            .map_err(store_error(&model_dir))?;
        remove_entry(record_path)
            .await
            .map_err(store_error(record_path))
    }

    /// Bytes of the downloads under way (`*.partial` regular files) in `repo`'s folder: they
    /// take room on the disk before they are files in place.
    pub async fn partial_bytes(&self, repo: &RepoRef) -> Result<u64, StoreError> {
        let dir = self.layout.model_dir(repo);
        partial_bytes_under(&dir).await.map_err(store_error(&dir))
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
        // Never through a link: the folder of the repository and the model's folder are
        // removed as entries (a link itself, not what it points at).
        let repo_dir = self.layout.models_dir().join(repo_dir_name(repo));
        let dir = self.layout.model_dir(repo);
        let target = match entry_kind(&repo_dir)
            .await
            .map_err(store_error(&repo_dir))?
        {
            EntryKind::Dir => &dir,
            _ => &repo_dir,
        };
        remove_entry(target).await.map_err(store_error(target))?;
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

/// Bytes of the regular `*.partial` files under `dir`, seen without following links.
async fn partial_bytes_under(dir: &Path) -> std::io::Result<u64> {
    let mut bytes = 0u64;
    if entry_kind(dir).await? != EntryKind::Dir {
        return Ok(0);
    }
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let mut entries = tokio::fs::read_dir(&folder).await?;
        while let Some(entry) = entries.next_entry().await? {
            match entry_kind(&entry.path()).await? {
                EntryKind::Dir => folders.push(entry.path()),
                EntryKind::File(len)
                    if entry
                        .file_name()
                        .to_string_lossy()
                        .ends_with(PARTIAL_SUFFIX) =>
                {
                    bytes = bytes.saturating_add(len);
                }
                _ => {}
            }
        }
    }
    Ok(bytes)
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
    async fn an_unreadable_record_is_named_and_never_hides_the_others() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(Layout::new(root.path()));
        let good = RepoRef::parse("org/good").unwrap();
        let mut record = ModelRecord::new(&good, Access::Public, 1);
        record.complete = true;
        store.write(&record).await.unwrap();
        let repo = RepoRef::parse("org/m").unwrap();
        let path = store.layout().record_path(&repo);
        tokio::fs::create_dir_all(path.parent().unwrap())
            .await
            .unwrap();
        tokio::fs::write(&path, b"{").await.unwrap();
        let dir = store.layout().model_dir(&repo);
        tokio::fs::create_dir_all(&dir).await.unwrap();
        tokio::fs::write(dir.join("w"), b"x").await.unwrap();

        let listing = store.list_all().await.unwrap();
        assert_eq!(listing.records, [record.clone()]);
        assert_eq!(listing.unreadable.len(), 1);
        let error = &listing.unreadable[0];
        assert_eq!(error.path, path);
        assert!(error.to_string().contains("not a model record"), "{error}");
        assert_eq!(store.list().await.unwrap(), [record]);

        // Forgotten: its folder and record go, the other model stays.
        store.discard_unreadable(&error.path).await.unwrap();
        assert!(!dir.exists() && !path.exists());
        assert!(store.list_all().await.unwrap().unreadable.is_empty());
        assert!(store.read(&good).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn partial_downloads_are_counted_and_links_are_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(Layout::new(root.path()));
        let repo = RepoRef::parse("org/m").unwrap();
        let dir = store.layout().model_dir(&repo);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a.partial"), [0u8; 100]).unwrap();
        std::fs::write(dir.join("sub/b.partial"), [0u8; 20]).unwrap();
        std::fs::write(dir.join("done"), [0u8; 1000]).unwrap();
        let elsewhere = root.path().join("big.partial");
        std::fs::write(&elsewhere, [0u8; 5000]).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.join("c.partial")).unwrap();
        assert_eq!(store.partial_bytes(&repo).await.unwrap(), 120);
        let absent = RepoRef::parse("org/none").unwrap();
        assert_eq!(store.partial_bytes(&absent).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn removing_a_model_never_follows_a_link_in_place_of_its_folders() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(Layout::new(root.path()));
        let victim = root.path().join("victim");
        std::fs::create_dir_all(victim.join("main")).unwrap();
        std::fs::write(victim.join("main/keep"), b"x").unwrap();
        let repo = RepoRef::parse("org/m").unwrap();
        let repo_dir = store.layout().models_dir().join("org--m");
        std::fs::create_dir_all(store.layout().models_dir()).unwrap();
        std::os::unix::fs::symlink(&victim, &repo_dir).unwrap();
        store.remove(&repo).await.unwrap();
        assert!(std::fs::symlink_metadata(&repo_dir).is_err());
        assert!(victim.join("main/keep").exists());
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
