//! The agent's loop: for its node's ModelCache, one pass at a time: touch the models pods
//! use, forget unreadable records, take away readers the token's scope no longer allows,
//! re-verify what is served ([`crate::recheck`]), decide the next fetch ([`crate::plan`]), say `Fetching` in the status, fetch (the
//! status heartbeat goes on meanwhile), say `Ready` or `Failed`; then read the spec again. Idle, it wakes on a change of the
//! ModelCache, every resync period (the status heartbeat), or when a failed model's backoff
//! ends. Nothing here exits on an error: a failed fetch is retried with backoff, a failed
//! status write on the next pass.
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;
use tracing::{debug, info, warn};
use vramfit_api::model_cache::{ModelCache, ModelCacheStatus, WantedModel};
use vramfit_cache::store::{ModelRecord, Store};
use vramfit_cache::{CacheConfig, Fetched, fetch_model};
use vramfit_hub::{RepoRef, TokenScope};
use vramfit_runtime::shutdown::Shutdown;

use crate::backoff::Failures;
use crate::credential::{credential_for, readers_now, wants_token};
use crate::metrics::{FetchResult, Metrics};
use crate::plan::{distinct, next_fetch, protected_keys, protected_now, records_by_key, satisfied};
use crate::readiness::Readiness;
use crate::recheck::Recheck;
use crate::status::{StatusInput, Written, assemble, write_due};
use crate::status_writer::StatusWriter;
use crate::watch::Observed;

/// How the agent fetches and how often it wakes.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The cache: root, budget, endpoint.
    pub cache: CacheConfig,
    /// The file holding the Hub token (a mounted Secret key), read before each fetch that
    /// uses it, so a rotated Secret is picked up.
    pub token_file: Option<PathBuf>,
    /// Which namespaces and repositories the token serves.
    pub token_scope: TokenScope,
    /// Time between passes when nothing changes; the heartbeat's period.
    pub resync: Duration,
    /// Time between two full re-verifications of the complete models (`None`: only the one
    /// after the start).
    pub reverify_every: Option<Duration>,
}

/// What a pass did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassOutcome {
    /// A model was fetched (or failed): read the spec again and go on at once.
    Fetched,
    /// Nothing to fetch now.
    Idle,
}

/// One node's cache agent.
pub struct CacheAgent {
    settings: Settings,
    store: Store,
    writer: StatusWriter,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    failures: Failures,
    download_seconds: BTreeMap<String, u32>,
    /// Wanted models seen since the start (a hit is one complete when first seen).
    seen: BTreeSet<String>,
    last_written: Option<Written>,
    recheck: Recheck,
    /// The ModelCache as the watch sees it now: what a fetch must not evict is read from it
    /// when the fetch evicts.
    latest: Option<watch::Receiver<Observed>>,
}

impl CacheAgent {
    /// An agent that fetches as `settings` say and writes its status with `writer`.
    pub fn new(
        settings: Settings,
        writer: StatusWriter,
        metrics: Arc<Metrics>,
        readiness: Arc<Readiness>,
    ) -> Self {
        let store = Store::new(vramfit_cache::layout::Layout::new(&settings.cache.root));
        let recheck = Recheck::new(Instant::now(), settings.reverify_every);
        Self {
            settings,
            store,
            writer,
            metrics,
            readiness,
            failures: Failures::default(),
            download_seconds: BTreeMap::new(),
            seen: BTreeSet::new(),
            last_written: None,
            recheck,
            latest: None,
        }
    }

    /// Reads what a fetch must not evict from `observed` when it evicts (`run` does this
    /// itself; a caller of `pass` may).
    pub fn follow(&mut self, observed: watch::Receiver<Observed>) {
        self.latest = Some(observed);
    }

    /// One pass over `cache`: at most one fetch, and the status written when it changed or
    /// its heartbeat is due.
    pub async fn pass(&mut self, cache: &ModelCache) -> PassOutcome {
        let wanted = distinct(&cache.spec.models);
        let generation = cache.metadata.generation;
        let keys: BTreeSet<String> = wanted.iter().map(WantedModel::key).collect();
        self.failures.retain(|key| keys.contains(key));
        self.seen.retain(|key| keys.contains(key));
        self.touch_in_use(&wanted).await;
        self.maintain().await;
        let Some(records) = self.records().await else {
            return PassOutcome::Idle;
        };

        let by_key = records_by_key(&records);
        let done: BTreeSet<String> = wanted
            .iter()
            .filter(|m| satisfied(by_key.get(&m.key()).copied(), &self.token_namespaces(m)))
            .map(WantedModel::key)
            .collect();
        for model in &wanted {
            let key = model.key();
            if done.contains(&key) && !self.seen.contains(&key) {
                self.metrics.count_fetch(FetchResult::Hit);
            }
            self.seen.insert(key);
        }
        let next = next_fetch(
            &wanted,
            |m| done.contains(&m.key()),
            &self.failures,
            Instant::now(),
        )
        .cloned();
        let Some(model) = next else {
            self.write_status(&wanted, &records, None, generation).await;
            return PassOutcome::Idle;
        };

        let key = model.key();
        self.write_status(&wanted, &records, Some(&key), generation)
            .await;
        info!(model = %key, "fetching");
        let started = Instant::now();
        // The fetch runs while the status keeps its heartbeat and shows the bytes in place
        // every resync period: a download may take far longer than the heartbeat's period.
        let at_start = protected_keys(&wanted, &model);
        let latest = self.latest.clone();
        let next = model.clone();
        let protect = move || {
            let current = latest.as_ref().and_then(|l| match &*l.borrow() {
                Observed::Present(cache) => Some(distinct(&cache.spec.models)),
                _ => None,
            });
            protected_now(current.as_deref(), &next, &at_start)
        };
        let fetch = fetch(self.settings.clone(), model.clone(), protect);
        tokio::pin!(fetch);
        let period = self.settings.resync;
        let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        let result = loop {
            tokio::select! {
                result = &mut fetch => break result,
                _ = heartbeat.tick() => {
                    if let Some(records) = self.records().await {
                        self.write_status(&wanted, &records, Some(&key), generation).await;
                    }
                }
            }
        };
        let seconds = started.elapsed().as_secs_f64();
        match result {
            Ok(fetched) => {
                let bytes = downloaded_bytes(&fetched).await;
                self.failures.clear(&key);
                if !fetched.downloaded.is_empty() {
                    self.download_seconds
                        .insert(key.clone(), seconds.min(f64::from(u32::MAX)) as u32);
                }
                for evicted in &fetched.evicted {
                    self.download_seconds.remove(evicted);
                }
                self.metrics
                    .observe_fetch(seconds, bytes, fetched.evicted.len());
                self.metrics.count_fetch(FetchResult::Downloaded);
                info!(model = %key, files = fetched.downloaded.len(), bytes, evicted = ?fetched.evicted, seconds, "model ready");
            }
            Err(message) => {
                let retry = self.failures.record(&key, &message, Instant::now());
                self.metrics.observe_fetch(seconds, 0, 0);
                self.metrics.count_fetch(FetchResult::Failed);
                warn!(model = %key, error = %message, retry_in_s = retry.as_secs(), "fetch failed");
            }
        }
        if let Some(records) = self.records().await {
            self.write_status(&wanted, &records, None, generation).await;
        }
        PassOutcome::Fetched
    }

    /// How long to sleep when idle: the resync period, or less when a failed model may be
    /// tried again sooner.
    pub fn idle_wait(&self) -> Duration {
        let resync = self.settings.resync;
        match self.failures.next_retry() {
            // At least a second (never a busy loop), at most the resync period.
            Some(at) => at
                .saturating_duration_since(Instant::now())
                .max(Duration::from_secs(1))
                .min(resync),
            None => resync,
        }
    }

    /// Runs passes until `shutdown`, following `observed`. A ModelCache that does not exist
    /// yet is waited for (logged once); ready meanwhile, as there is nothing to report.
    pub async fn run(mut self, mut observed: watch::Receiver<Observed>, mut shutdown: Shutdown) {
        self.follow(observed.clone());
        info!(node = %self.writer.node_name(), resync_s = self.settings.resync.as_secs(), "cache loop started");
        let mut absent_logged = false;
        let mut watch_open = true;
        loop {
            let current = observed.borrow_and_update().clone();
            let wait = match current {
                Observed::Unknown => None,
                Observed::Absent => {
                    if !absent_logged {
                        info!(node = %self.writer.node_name(), "no ModelCache for this node yet; waiting for the operator to create it");
                        absent_logged = true;
                    }
                    // Written again in full once it exists.
                    self.last_written = None;
                    self.readiness.set_ready();
                    Some(self.settings.resync)
                }
                Observed::Present(cache) => {
                    absent_logged = false;
                    let outcome = tokio::select! {
                        outcome = self.pass(&cache) => outcome,
                        () = shutdown.wait() => break,
                    };
                    match outcome {
                        PassOutcome::Fetched => continue,
                        PassOutcome::Idle => Some(self.idle_wait()),
                    }
                }
            };
            let sleep = async {
                match wait {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = observed.changed(), if watch_open => {
                    if changed.is_err() {
                        warn!("the ModelCache watch ended; passes continue on the resync timer");
                        watch_open = false;
                    }
                }
                () = sleep => {}
                () = shutdown.wait() => break,
            }
        }
        info!("cache loop stopped");
    }

    /// The namespaces the token would add for `model` (none when it is read anonymously).
    fn token_namespaces(&self, model: &WantedModel) -> BTreeSet<String> {
        let Ok(repo) = RepoRef::new(&model.repo, &model.revision) else {
            return BTreeSet::new();
        };
        if self.settings.token_file.is_some()
            && wants_token(&self.settings.token_scope, model, &repo)
        {
            self.settings.token_scope.namespaces_for(&repo)
        } else {
            BTreeSet::new()
        }
    }

    /// Marks the models pods mount as used (at most once a resync period each), so that the
    /// least recently used eviction spares what runs.
    async fn touch_in_use(&self, wanted: &[WantedModel]) {
        let now = unix_now();
        let period = self.settings.resync.as_secs();
        for model in wanted.iter().filter(|m| m.in_use) {
            let Ok(repo) = RepoRef::new(&model.repo, &model.revision) else {
                continue;
            };
            let fresh = match self.store.read(&repo).await {
                Ok(Some(record)) => record.last_used.saturating_add(period) > now,
                Ok(None) => true,
                Err(error) => {
                    warn!(%error, "cannot read a model's record");
                    true
                }
            };
            if !fresh && let Err(error) = self.store.touch(&repo, now).await {
                warn!(%error, model = %model.key(), "cannot mark the model used");
            }
        }
    }

    /// Between fetches: forgets the models whose record cannot be read (one corrupt record
    /// never stops the cache: that model is not cached, and is fetched again when wanted),
    /// takes away the readers the token's scope no longer allows, and re-verifies what is
    /// served.
    async fn maintain(&mut self) {
        let listing = match self.store.list_all().await {
            Ok(listing) => listing,
            Err(error) => {
                warn!(%error, "cannot list the cache's records");
                return;
            }
        };
        for unreadable in &listing.unreadable {
            warn!(error = %unreadable, "an unreadable record: its model is forgotten and fetched again when wanted");
            if let Err(error) = self.store.discard_unreadable(&unreadable.path).await {
                warn!(%error, "cannot forget the model of an unreadable record");
            }
        }
        let mut records = listing.records;
        for record in &mut records {
            let allowed = match record.repo_ref() {
                Ok(repo) if self.settings.token_file.is_some() => {
                    self.settings.token_scope.namespaces_for(&repo)
                }
                _ => BTreeSet::new(),
            };
            if let Some(access) = readers_now(&record.access, &allowed) {
                info!(model = %record.key(), ?access, "the token's scope no longer allows some readers: they are taken away");
                record.access = access;
                if let Err(error) = self.store.write(record).await {
                    warn!(%error, model = %record.key(), "cannot narrow the model's readers");
                }
            }
        }
        let now = Instant::now();
        self.recheck
            .step(&self.store, &records, now, self.settings.resync)
            .await;
    }

    /// The readable records on disk (an unreadable one is left out, logged by the next
    /// pass); `None` (logged) when the records' folder cannot be read.
    async fn records(&self) -> Option<Vec<ModelRecord>> {
        match self.store.list().await {
            Ok(records) => Some(records),
            Err(error) => {
                warn!(%error, "cannot read the cache's records; the status is not written");
                None
            }
        }
    }

    /// Bytes of the downloads under way, in the folders of the incomplete models.
    async fn partial_bytes(&self, records: &[ModelRecord]) -> u64 {
        let mut bytes = 0u64;
        for record in records.iter().filter(|r| !r.complete) {
            if let Ok(repo) = record.repo_ref()
                && let Ok(partial) = self.store.partial_bytes(&repo).await
            {
                bytes = bytes.saturating_add(partial);
            }
        }
        bytes
    }

    /// Assembles the status and writes it when it changed or the heartbeat is due. A failed
    /// write is logged; the next pass tries again.
    async fn write_status(
        &mut self,
        wanted: &[WantedModel],
        records: &[ModelRecord],
        fetching: Option<&str>,
        generation: Option<i64>,
    ) {
        let partial_bytes = self.partial_bytes(records).await;
        let status = assemble(StatusInput {
            wanted,
            records,
            fetching,
            failures: &self.failures,
            download_seconds: &self.download_seconds,
            budget_bytes: self.settings.cache.budget_bytes,
            partial_bytes,
            observed_generation: generation,
        });
        self.metrics.observe_status(&status);
        let now = Instant::now();
        if !write_due(
            self.last_written.as_ref(),
            &status,
            now,
            self.settings.resync,
        ) {
            return;
        }
        let body = ModelCacheStatus {
            heartbeat_time: Some(Time(Timestamp::now())),
            ..status.clone()
        };
        match self.writer.write(&body).await {
            Ok(()) => {
                debug!(
                    models = status.models.len(),
                    used_bytes = status.used_bytes,
                    "status written"
                );
                self.last_written = Some(Written { status, at: now });
                self.readiness.set_ready();
            }
            Err(error) => {
                self.metrics.count_status_write_error();
                warn!(%error, node = %self.writer.node_name(), "cannot write the ModelCache status; retrying next pass");
            }
        }
    }
}

/// Fetches `model` as `settings` say; why not, in one line, otherwise. Owns what it uses,
/// so that the loop can write the status while it runs.
async fn fetch(
    settings: Settings,
    model: WantedModel,
    in_use: impl Fn() -> BTreeSet<String> + Sync,
) -> Result<Fetched, String> {
    let repo = RepoRef::new(&model.repo, &model.revision).map_err(|e| e.to_string())?;
    let scope = &settings.token_scope;
    let token = match &settings.token_file {
        Some(path) if wants_token(scope, &model, &repo) => Some(read_token(path).await?),
        _ => None,
    };
    let credential = credential_for(scope, token.as_deref(), &model, &repo);
    debug!(model = %model.key(), with_token = credential.is_some(), "fetch starts");
    fetch_model(&settings.cache, &repo, credential.as_ref(), &in_use)
        .await
        .map_err(|e| e.to_string())
}

/// The token in `path`, trimmed; why not, otherwise.
async fn read_token(path: &std::path::Path) -> Result<String, String> {
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| format!("cannot read the Hub token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("the Hub token file {} is empty", path.display()));
    }
    Ok(token.to_string())
}

/// The bytes of the files a fetch downloaded.
async fn downloaded_bytes(fetched: &Fetched) -> u64 {
    let mut bytes = 0u64;
    for path in &fetched.downloaded {
        if let Ok(meta) = tokio::fs::metadata(fetched.model_dir.join(path)).await {
            bytes = bytes.saturating_add(meta.len());
        }
    }
    bytes
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
