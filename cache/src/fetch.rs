//! `fetch_model`: one model at one revision into the node's cache. The listing first (it proves
//! the repository and revision exist and the token reads them), then the files already in place
//! are checked, models are evicted to fit the budget, the missing files are downloaded one at a
//! time, and the record says the model is complete and who may mount it.
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use vramfit_hub::{HubClient, HubConfig, HubError, RepoRef};

use crate::budget::{CachedModel, NoRoom, choose_victims};
use crate::cadence::Cadence;
use crate::download::{DownloadError, DownloadLimits, download_file};
use crate::layout::{Layout, repo_dir_name};
use crate::manifest::{Manifest, ManifestError, ManifestLimits, list_manifest, resolve_url};
use crate::no_follow::{real_dirs, remove_entry, remove_foreign};
use crate::prune::remove_unlisted;
use crate::store::{Access, ModelRecord, Store, StoreError};
use crate::verify::{Mismatch, verify_in_place};
use vramfit_hub::encode_segment;

/// Where the cache is and how it fetches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// The cache root on the node's disk.
    pub root: PathBuf,
    /// Bytes the cache may hold.
    pub budget_bytes: u64,
    /// The Hub or a mirror (`HF_ENDPOINT`).
    pub endpoint: String,
    /// Bounds on the listing.
    pub manifest: ManifestLimits,
    /// Timeouts of each download.
    pub download: DownloadLimits,
    /// Redirects followed per request.
    pub max_redirects: u8,
    /// Times an interrupted download of one file is resumed before giving up.
    pub resume_attempts: u32,
    /// Longest time one fetch may take (listing, checks, downloads): past it the fetch fails
    /// and the agent moves on; the files verified and the partial downloads are kept, so the
    /// next try resumes where this one stopped.
    pub deadline: Duration,
}

impl CacheConfig {
    /// A cache at `root` holding at most `budget_bytes`, fetching from the Hub.
    pub fn new(root: impl Into<PathBuf>, budget_bytes: u64) -> CacheConfig {
        CacheConfig {
            root: root.into(),
            budget_bytes,
            endpoint: vramfit_hub::DEFAULT_ENDPOINT.to_string(),
            manifest: ManifestLimits::default(),
            download: DownloadLimits::default(),
            max_redirects: 5,
            resume_attempts: 3,
            deadline: Duration::from_secs(3600),
        }
    }
}

/// A Hub token and the namespaces it serves: a private or gated model read with it may be
/// mounted by those namespaces only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// The bearer token.
    pub token: String,
    /// The namespaces whose jobs this token reads models for.
    pub namespaces: BTreeSet<String>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Credential")
            .field("namespaces", &self.namespaces)
            .finish_non_exhaustive()
    }
}

/// What a fetch did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The model's record, complete.
    pub record: ModelRecord,
    /// The folder to mount.
    pub model_dir: PathBuf,
    /// Files downloaded by this call (the others were in place).
    pub downloaded: Vec<String>,
    /// Models evicted to make room (`owner/name@revision`).
    pub evicted: Vec<String>,
}

/// A model that could not be fetched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The endpoint is not usable.
    #[error(transparent)]
    Client(#[from] HubError),
    /// The listing failed.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The model does not fit the budget.
    #[error("{repo}: {why}")]
    NoRoom {
        /// The model.
        repo: String,
        /// Why it does not fit.
        why: NoRoom,
    },
    /// A file could not be downloaded.
    #[error("{repo}: {why}")]
    Download {
        /// The model.
        repo: String,
        /// What failed.
        why: DownloadError,
    },
    /// The model is cached but this token cannot read its files.
    #[error("{repo}: the token cannot read the model's files: {message}")]
    Access {
        /// The model.
        repo: String,
        /// What the Hub said.
        message: String,
    },
    /// The cache on disk failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The fetch took longer than `CacheConfig::deadline`.
    #[error(
        "{repo}: not fetched within {seconds} s (the fetch deadline); the files in place are kept and the next try resumes"
    )]
    Deadline {
        /// The model.
        repo: String,
        /// The deadline.
        seconds: u64,
    },
}

/// The models a fetch must not evict (`owner/name@revision` keys), asked for at the moment it
/// evicts, not when the fetch started: a pod that started mounting a model meanwhile, or a
/// spec that now wants it ahead of the model being fetched, protects it.
pub trait InUse {
    /// The keys protected now.
    fn keys_now(&self) -> BTreeSet<String>;
}

impl InUse for BTreeSet<String> {
    fn keys_now(&self) -> BTreeSet<String> {
        self.clone()
    }
}

impl<F: Fn() -> BTreeSet<String>> InUse for F {
    fn keys_now(&self) -> BTreeSet<String> {
        self()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Fetches `repo` into the cache (with `credential`'s token when given), evicting the least
/// recently used models that `in_use` does not protect (asked when it evicts) when the budget
/// needs room. Holds the cache's lock throughout; fails past `config.deadline`.
pub async fn fetch_model(
    config: &CacheConfig,
    repo: &RepoRef,
    credential: Option<&Credential>,
    in_use: &(dyn InUse + Sync),
) -> Result<Fetched, FetchError> {
    tokio::time::timeout(
        config.deadline,
        fetch_unbounded(config, repo, credential, in_use),
    )
    .await
    .unwrap_or_else(|_| {
        Err(FetchError::Deadline {
            repo: repo.to_string(),
            seconds: config.deadline.as_secs(),
        })
    })
}

async fn fetch_unbounded(
    config: &CacheConfig,
    repo: &RepoRef,
    credential: Option<&Credential>,
    in_use: &(dyn InUse + Sync),
) -> Result<Fetched, FetchError> {
    let store = Store::new(Layout::new(&config.root));
    let _lock = store.try_lock()?;
    let client = hub_client(config, credential.map(|c| c.token.clone()))?;
    let manifest = list_manifest(&client, repo, config.manifest).await?;
    let now = unix_now();
    let access = match credential {
        Some(c) => Access::Namespaces(c.namespaces.clone()),
        None => Access::Public,
    };
    // An unreadable record is a model not cached: a new record, and every file in place is
    // hashed again before it counts.
    let mut record = store
        .read(repo)
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| ModelRecord::new(repo, access, now));
    let model_dir = real_model_dir(&store, repo).await?;
    // Anything in the folder the cache never writes (a link, a device) is removed, never
    // followed; a listed file it stood for is fetched again.
    remove_foreign(&model_dir).await.map_err(|e| StoreError {
        path: model_dir.clone(),
        message: e.to_string(),
    })?;
    let missing = check_in_place(&store, repo, &manifest, &mut record).await?;

    let mut evicted = Vec::new();
    let mut downloaded = Vec::new();
    if missing.is_empty() {
        // Every file in place: a request must prove this token reads them before its
        // namespaces are added (a gated model's listing is public, its files are not). A
        // refusal leaves the record as it was.
        if let Some(first) = manifest.files.first() {
            let url = resolve_url(client.endpoint(), repo, &first.path);
            if let Err(message) = readable(config, &client, &url).await {
                return Err(FetchError::Access {
                    repo: repo.to_string(),
                    message,
                });
            }
        }
    } else {
        evicted = make_room(&store, config, repo, &manifest, in_use).await?;
        // Incomplete, and counted against the budget, from the first byte written.
        record.complete = false;
        record.last_used = now;
        store.write(&record).await?;
        for file in &missing {
            let dest = store.layout().file_path(repo, &file.path);
            // A file, or whatever stands in its place (a folder, a link: unlinked, not
            // followed).
            remove_entry(&dest).await.map_err(|e| StoreError {
                path: dest.clone(),
                message: e.to_string(),
            })?;
        }
        let mut cadence = Cadence::new(Instant::now());
        for file in missing {
            let url = resolve_url(client.endpoint(), repo, &file.path);
            let dest = store.layout().file_path(repo, &file.path);
            // Every folder on the way is a real one: a planted link to another model's
            // folder is replaced, never written through.
            let parents: Vec<&str> = file.path.split('/').collect();
            real_dirs(&model_dir, &parents[..parents.len().saturating_sub(1)])
                .await
                .map_err(|e| StoreError {
                    path: dest.clone(),
                    message: e.to_string(),
                })?;
            if let Err(why) = download_with_retries(config, &client, &url, &dest, file).await {
                // What was verified so far is kept for the next try (best effort: the
                // download's error is what the caller hears).
                let _ = store.write(&record).await;
                return Err(FetchError::Download {
                    repo: repo.to_string(),
                    why,
                });
            }
            record.bytes = record.bytes.saturating_add(file.size);
            record
                .verified
                .insert(file.path.clone(), file.fingerprint());
            record.sizes.insert(file.path.clone(), file.size);
            if cadence.file_done(Instant::now()) {
                store.write(&record).await?;
            }
            downloaded.push(file.path.clone());
        }
    }
    let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    remove_unlisted(&model_dir, &listed)
        .await
        .map_err(|e| StoreError {
            path: model_dir.clone(),
            message: e.to_string(),
        })?;
    record.access = access_after_fetch(config, repo, &manifest, credential, &record.access).await?;
    record.complete = true;
    record.damage = None;
    record.last_used = now;
    store.write(&record).await?;
    Ok(Fetched {
        model_dir,
        record,
        downloaded,
        evicted,
    })
}

/// `<root>/models/<owner>--<name>/<revision>`, each folder on the way a real one (a link
/// there is replaced, never followed).
async fn real_model_dir(store: &Store, repo: &RepoRef) -> Result<PathBuf, StoreError> {
    let root = store.layout().root();
    let revision = encode_segment(repo.revision());
    real_dirs(root, &["models", &repo_dir_name(repo), &revision])
        .await
        .map_err(|e| StoreError {
            path: store.layout().model_dir(repo),
            message: e.to_string(),
        })
}

fn hub_client(config: &CacheConfig, token: Option<String>) -> Result<HubClient, HubError> {
    HubClient::new(HubConfig {
        endpoint: config.endpoint.clone(),
        token,
        timeout: config.download.request_timeout,
        max_redirects: config.max_redirects,
    })
}

/// Checks the files already on disk (size always; hash when the record does not say it was
/// checked) and returns the files to download: those absent and those that do not match.
/// Updates the record's bytes and verified files.
async fn check_in_place<'m>(
    store: &Store,
    repo: &RepoRef,
    manifest: &'m Manifest,
    record: &mut ModelRecord,
) -> Result<Vec<&'m crate::manifest::ManifestFile>, FetchError> {
    let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    record.verified.retain(|p, _| listed.contains(p.as_str()));
    record.sizes.retain(|p, _| listed.contains(p.as_str()));
    record.total_bytes = manifest.total_bytes();
    record.bytes = 0;
    let mut missing = Vec::new();
    for file in &manifest.files {
        let dest = store.layout().file_path(repo, &file.path);
        let io_error = |e: std::io::Error| StoreError {
            path: dest.clone(),
            message: e.to_string(),
        };
        let rehash = record.verified.get(&file.path) != Some(&file.fingerprint());
        match verify_in_place(&dest, &file.expected(), file.size, rehash)
            .await
            .map_err(io_error)?
        {
            Ok(()) => {
                record
                    .verified
                    .insert(file.path.clone(), file.fingerprint());
                record.sizes.insert(file.path.clone(), file.size);
                record.bytes = record.bytes.saturating_add(file.size);
            }
            Err(Mismatch::Missing) => {
                record.verified.remove(&file.path);
                missing.push(file);
            }
            Err(_) => {
                // Truncated or corrupt: fetched again (and deleted once the record says the
                // model is incomplete).
                record.verified.remove(&file.path);
                missing.push(file);
            }
        }
    }
    Ok(missing)
}

/// Evicts what the budget says must go for `repo` to fit; the keys evicted.
async fn make_room(
    store: &Store,
    config: &CacheConfig,
    repo: &RepoRef,
    manifest: &Manifest,
    in_use: &(dyn InUse + Sync),
) -> Result<Vec<String>, FetchError> {
    let key = repo.to_string();
    let listing = store.list_all().await?;
    // A model whose record cannot be read is not cached: its folder goes, freeing its room.
    for unreadable in &listing.unreadable {
        store.discard_unreadable(&unreadable.path).await?;
    }
    let others: Vec<ModelRecord> = listing
        .records
        .into_iter()
        .filter(|r| r.key() != key)
        .collect();
    // What is in use is read now, as the models are chosen, not when the fetch started.
    let in_use = in_use.keys_now();
    let mut cached = Vec::with_capacity(others.len());
    for r in &others {
        // Partial downloads take room too.
        let partial = match r.repo_ref() {
            Ok(other) => store.partial_bytes(&other).await?,
            Err(_) => 0,
        };
        cached.push(CachedModel {
            key: r.key(),
            bytes: r.bytes.saturating_add(partial),
            last_used: r.last_used,
            in_use: in_use.contains(&r.key()),
        });
    }
    let victims =
        choose_victims(&cached, config.budget_bytes, manifest.total_bytes()).map_err(|why| {
            FetchError::NoRoom {
                repo: key.clone(),
                why,
            }
        })?;
    for victim in &victims {
        if let Some(record) = others.iter().find(|r| &r.key() == victim) {
            let victim_repo = record.repo_ref().map_err(|e| StoreError {
                path: store.layout().records_dir(),
                message: e.to_string(),
            })?;
            store.remove(&victim_repo).await?;
        }
    }
    Ok(victims)
}

/// One file, resumed after an interruption (up to `resume_attempts` times) and fetched again
/// from 0 once after a mismatch.
async fn download_with_retries(
    config: &CacheConfig,
    client: &HubClient,
    url: &str,
    dest: &std::path::Path,
    file: &crate::manifest::ManifestFile,
) -> Result<(), DownloadError> {
    let mut resumes = 0u32;
    let mut restarts = 0u32;
    loop {
        match download_file(client, url, dest, file, config.download).await {
            Ok(_) => return Ok(()),
            Err(e @ (DownloadError::Mismatch { .. } | DownloadError::Invalid { .. })) => {
                if restarts >= 1 {
                    return Err(e);
                }
                restarts += 1;
            }
            Err(e) if e.retryable() && resumes < config.resume_attempts => resumes += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Whether `client` may read the file at `url` (the body is not read); why not otherwise.
async fn readable(config: &CacheConfig, client: &HubClient, url: &str) -> Result<(), String> {
    let request = client.get_following_redirects(url, Some("bytes=0-0"));
    match tokio::time::timeout(config.download.request_timeout, request).await {
        Err(_) => Err(format!(
            "no answer within {:?}",
            config.download.request_timeout
        )),
        Ok(Err(e)) => Err(e.message),
        Ok(Ok(response)) if response.status().is_success() => Ok(()),
        // An empty file answers a one-byte range with 416: it exists and was readable.
        Ok(Ok(response)) if response.status() == http::StatusCode::RANGE_NOT_SATISFIABLE => Ok(()),
        Ok(Ok(response)) => Err(vramfit_hub::refusal(response.status(), response.headers())
            .map_or_else(
                || format!("HTTP {}", response.status().as_u16()),
                |(_, why)| why,
            )),
    }
}

/// Who may mount the model now: everyone when it reads without a token (fetched without one, or
/// a file answers an anonymous request); else the namespaces of the tokens that read it, this
/// one's added.
async fn access_after_fetch(
    config: &CacheConfig,
    repo: &RepoRef,
    manifest: &Manifest,
    credential: Option<&Credential>,
    before: &Access,
) -> Result<Access, FetchError> {
    let Some(credential) = credential else {
        return Ok(Access::Public);
    };
    if let Some(first) = manifest.files.first() {
        let anonymous = hub_client(config, None)?;
        let url = resolve_url(anonymous.endpoint(), repo, &first.path);
        if readable(config, &anonymous, &url).await.is_ok() {
            return Ok(Access::Public);
        }
    }
    let mut namespaces = match before {
        Access::Namespaces(namespaces) => namespaces.clone(),
        // Public once, not now (the repository was made private): only this token's.
        Access::Public => BTreeSet::new(),
    };
    namespaces.extend(credential.namespaces.iter().cloned());
    Ok(Access::Namespaces(namespaces))
}
