//! Reads `model.huggingFace` repositories from the Hub off the reconcile path: a reconcile asks
//! [`HubResolver::lookup`], which answers from a cache and, on a miss or a failure whose
//! backoff has passed, queues one background read. The cache is keyed by repo@revision and by
//! whether the operator's token reads it ([`TokenScope`]): an anonymous reader never sees what
//! the token fetched. Reads wait per namespace and take turns ([`ReadQueue`]): at most
//! [`MAX_READS_AT_ONCE`] at once, one per namespace; each runs off the runtime thread under one
//! deadline for the whole read ([`blocking_read`]). The cache holds at most
//! [`HubSettings::max_entries`] repositories, reads queued and in flight included (the least
//! recently asked for settled one goes first, then the least recently asked for queued one).
//! A slow or failing Hub delays only the jobs that name it: no reconcile ever waits on the
//! network. A repository is read at the commit its revision names at the first read: every
//! job that names that repo@revision while the entry is kept gets that commit.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use tracing::{info, warn};
use vramfit_api::conditions::Reason;
use vramfit_hub::{HubConfig, RepoRef};
use vramfit_models::Checkpoint;
use vramfit_models::source::{CheckpointError, SourceErrorKind};

use super::blocking_read;
use super::read_queue::ReadQueue;
use super::token_scope::TokenScope;

/// Repositories read at once (one per namespace).
pub const MAX_READS_AT_ONCE: usize = 4;
/// Repositories kept in the cache by default.
pub const MAX_ENTRIES: usize = 512;
/// First retry after a failed read; doubles per failure up to [`MAX_RETRY`].
pub const FIRST_RETRY: Duration = Duration::from_secs(5);
/// Longest wait between reads of a failing repository.
pub const MAX_RETRY: Duration = Duration::from_secs(300);
/// Jobs remembered per repository as having seen it refused as invalid.
const MAX_ASKERS: usize = 64;

/// Where the operator reads the Hub.
#[derive(Clone, Debug)]
pub struct HubSettings {
    /// The Hub or a mirror.
    pub endpoint: String,
    /// A Secret in the operator's own namespace whose `token` key holds a Hub token.
    pub token_secret: Option<String>,
    /// The jobs whose reads use the token; every other read is anonymous.
    pub token_scope: TokenScope,
    /// The operator's namespace (where the token Secret is).
    pub namespace: String,
    /// Longest one file may take.
    pub timeout: Duration,
    /// Longest a whole read (config.json, the index and every header) may take.
    pub read_deadline: Duration,
    /// Repositories kept in the cache, reads queued and in flight included.
    pub max_entries: usize,
}

impl HubSettings {
    /// The settings for `endpoint`: no token, 30 s per file, 120 s per read.
    pub fn new(endpoint: String) -> HubSettings {
        HubSettings {
            endpoint,
            token_secret: None,
            token_scope: TokenScope::default(),
            namespace: "default".to_string(),
            timeout: Duration::from_secs(30),
            read_deadline: Duration::from_secs(120),
            max_entries: MAX_ENTRIES,
        }
    }
}

/// Who asks: a job in a namespace, at a generation.
#[derive(Clone, Copy, Debug)]
pub struct Asker<'a> {
    /// The job's namespace: which reads the token may serve, and whose turn a read takes.
    pub namespace: &'a str,
    /// The job's name.
    pub name: &'a str,
    /// The job's generation: a changed spec may retry a repository refused as invalid.
    pub generation: Option<i64>,
}

impl Asker<'_> {
    fn id(&self) -> String {
        format!(
            "{}/{}@{}",
            self.namespace,
            self.name,
            self.generation.unwrap_or(0)
        )
    }
}

/// What one read of a repository found.
#[derive(Clone, Debug)]
pub struct HubRead {
    /// The numbers, read at `commit` where there is one.
    pub checkpoint: Checkpoint,
    /// The commit the revision named (the model info's `sha`); `None` where the endpoint
    /// does not say.
    pub commit: Option<String>,
}

/// What the cache says about a repository.
#[derive(Clone, Debug)]
pub enum Lookup {
    /// Read.
    Ready(Arc<HubRead>),
    /// A read is queued or under way.
    Reading,
    /// The last read failed.
    Failed {
        /// The condition's reason.
        reason: Reason,
        /// One line: what failed.
        message: String,
        /// When the next read may start; `None`: only once the job changes (the repository
        /// was refused as invalid).
        retry_in: Option<Duration>,
    },
}

/// A repository as read by one kind of reader: with the token or anonymously.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CacheKey {
    repo: RepoRef,
    with_token: bool,
}

#[derive(Clone, Debug)]
enum State {
    Queued,
    Reading,
    Ready(Arc<HubRead>),
    Failed {
        reason: Reason,
        message: String,
        retry_at: Instant,
    },
}

#[derive(Clone, Debug)]
struct Entry {
    state: State,
    asked: Instant,
    failures: u32,
    /// The jobs (at a generation) that asked while the last read was queued or under way: a
    /// repository that read refused as invalid is not read again for them.
    askers: Vec<String>,
}

impl Entry {
    fn asked_by(&mut self, asker: &str, now: Instant) {
        self.asked = now;
        let reading = matches!(self.state, State::Queued | State::Reading);
        if reading && !self.askers.iter().any(|a| a == asker) {
            if self.askers.len() >= MAX_ASKERS {
                self.askers.remove(0);
            }
            self.askers.push(asker.to_string());
        }
    }
}

struct Cache {
    entries: HashMap<CacheKey, Entry>,
    queue: ReadQueue<CacheKey>,
}

/// The cache and the reads.
pub struct HubResolver {
    settings: HubSettings,
    client: Option<Client>,
    cache: Mutex<Cache>,
    #[cfg(test)]
    fixed_token: Option<String>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The backoff after `failures` failed reads.
pub fn retry_delay(failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(16));
    FIRST_RETRY.saturating_mul(factor).min(MAX_RETRY)
}

/// A read's failure as a condition reason.
pub fn reason(error: &CheckpointError) -> Reason {
    match error {
        CheckpointError::Source(source) => match source.kind {
            SourceErrorKind::NotFound => Reason::HubNotFound,
            SourceErrorKind::Unauthorized | SourceErrorKind::Forbidden => Reason::HubUnauthorized,
            SourceErrorKind::Timeout => Reason::HubTimeout,
            SourceErrorKind::Unavailable => Reason::HubUnavailable,
            SourceErrorKind::TooLarge | SourceErrorKind::Invalid => Reason::HubInvalid,
        },
        CheckpointError::NoConfig { .. } => Reason::HubNotFound,
        CheckpointError::File { .. } => Reason::HubInvalid,
    }
}

impl HubResolver {
    /// A resolver; `client` reads the token Secret (none in tests without a token).
    pub fn new(settings: HubSettings, client: Option<Client>) -> Arc<Self> {
        if settings.token_secret.is_some() && settings.token_scope.is_empty() {
            warn!(
                "a Hub token Secret is set but no namespace may use it (--hub-token-namespaces): every read is anonymous"
            );
        }
        Arc::new(HubResolver {
            settings,
            client,
            cache: Mutex::new(Cache {
                entries: HashMap::new(),
                queue: ReadQueue::new(MAX_READS_AT_ONCE),
            }),
            #[cfg(test)]
            fixed_token: None,
        })
    }

    /// A resolver whose token is `token` instead of a Secret's.
    #[cfg(test)]
    pub fn with_token(settings: HubSettings, token: &str) -> Arc<Self> {
        Arc::new(HubResolver {
            settings,
            client: None,
            cache: Mutex::new(Cache {
                entries: HashMap::new(),
                queue: ReadQueue::new(MAX_READS_AT_ONCE),
            }),
            fixed_token: Some(token.to_string()),
        })
    }

    /// The endpoint read.
    pub fn endpoint(&self) -> &str {
        &self.settings.endpoint
    }

    /// Repositories in the cache, reads queued and in flight included.
    pub fn entries(&self) -> usize {
        lock(&self.cache).entries.len()
    }

    /// What is known of `repo` for `asker`, queueing a read when nothing is, or when the last
    /// failure's backoff has passed (for a repository refused as invalid: and the job changed).
    /// Never waits on the network.
    pub fn lookup(self: &Arc<Self>, asker: &Asker<'_>, repo: &RepoRef) -> Lookup {
        let key = CacheKey {
            repo: repo.clone(),
            with_token: self.settings.token_scope.allows(asker.namespace, repo),
        };
        let who = asker.id();
        let now = Instant::now();
        let mut cache = lock(&self.cache);
        let failures = match cache.entries.get_mut(&key) {
            Some(entry) => {
                let seen = entry.askers.contains(&who);
                entry.asked_by(&who, now);
                match &entry.state {
                    State::Ready(read) => return Lookup::Ready(read.clone()),
                    State::Reading => return Lookup::Reading,
                    State::Queued => {
                        // This namespace's turn may come before the one that queued it.
                        cache.queue.push(asker.namespace, key);
                        self.start_reads(&mut cache);
                        return Lookup::Reading;
                    }
                    State::Failed {
                        reason: Reason::HubInvalid,
                        message,
                        ..
                    } if seen => {
                        return Lookup::Failed {
                            reason: Reason::HubInvalid,
                            message: message.clone(),
                            retry_in: None,
                        };
                    }
                    State::Failed {
                        reason,
                        message,
                        retry_at,
                    } if *retry_at > now => {
                        return Lookup::Failed {
                            reason: *reason,
                            message: message.clone(),
                            retry_in: Some(retry_at.saturating_duration_since(now)),
                        };
                    }
                    State::Failed { .. } => entry.failures,
                }
            }
            None => 0,
        };
        let mut askers = match cache.entries.remove(&key) {
            Some(entry) => entry.askers,
            None => {
                make_room(&mut cache, self.settings.max_entries);
                Vec::new()
            }
        };
        let mut entry = Entry {
            state: State::Queued,
            asked: now,
            failures,
            askers: Vec::new(),
        };
        askers.retain(|a| *a != who);
        askers.truncate(MAX_ASKERS - 1);
        entry.askers = askers;
        entry.asked_by(&who, now);
        cache.entries.insert(key.clone(), entry);
        cache.queue.push(asker.namespace, key);
        self.start_reads(&mut cache);
        Lookup::Reading
    }

    /// Starts the queued reads whose turn it is, while slots are free.
    fn start_reads(self: &Arc<Self>, cache: &mut Cache) {
        loop {
            let entries = &cache.entries;
            let next = cache.queue.next(|key| {
                entries
                    .get(key)
                    .is_some_and(|e| matches!(e.state, State::Queued))
            });
            let Some((namespace, key)) = next else {
                return;
            };
            if let Some(entry) = cache.entries.get_mut(&key) {
                entry.state = State::Reading;
            }
            let this = self.clone();
            tokio::spawn(async move { this.read(namespace, key).await });
        }
    }

    async fn read(self: Arc<Self>, namespace: String, key: CacheKey) {
        let (result, still_running) = match self.token(key.with_token).await {
            Ok(token) => {
                let config = HubConfig {
                    endpoint: self.settings.endpoint.clone(),
                    token,
                    timeout: self.settings.timeout,
                    ..HubConfig::default()
                };
                blocking_read::read(config, key.repo.clone(), self.settings.read_deadline).await
            }
            Err(refused) => (Err(refused), None),
        };
        self.settle(&key, result);
        if let Some(thread) = still_running {
            // Past the deadline: the job already says so; the slot stays taken until the
            // blocking thread is done.
            let _ = thread.await;
        }
        let mut cache = lock(&self.cache);
        cache.queue.finished(&namespace);
        self.start_reads(&mut cache);
    }

    fn settle(&self, key: &CacheKey, result: blocking_read::ReadResult) {
        let mut cache = lock(&self.cache);
        let Some(entry) = cache.entries.get_mut(key) else {
            return;
        };
        entry.state = match result {
            Ok(read) => {
                info!(repo = %key.repo, commit = ?read.commit, endpoint = %self.settings.endpoint, with_token = key.with_token, "read the model's numbers from the Hub");
                entry.failures = 0;
                State::Ready(Arc::new(read))
            }
            Err((reason, message)) => {
                entry.failures = entry.failures.saturating_add(1);
                let delay = retry_delay(entry.failures);
                warn!(repo = %key.repo, %message, failures = entry.failures, retry_in = ?delay, "could not read the model from the Hub");
                State::Failed {
                    reason,
                    message,
                    retry_at: Instant::now() + delay,
                }
            }
        };
    }

    /// The token from the operator's own Secret when this read may use it, read at each read
    /// (a rotated token is used from the next read on). Never from a job's namespace.
    async fn token(&self, with_token: bool) -> Result<Option<String>, (Reason, String)> {
        if !with_token {
            return Ok(None);
        }
        #[cfg(test)]
        if let Some(token) = &self.fixed_token {
            return Ok(Some(token.clone()));
        }
        let (Some(name), Some(client)) = (&self.settings.token_secret, &self.client) else {
            return Ok(None);
        };
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &self.settings.namespace);
        let secret = secrets.get(name).await.map_err(|e| {
            (
                Reason::HubUnauthorized,
                format!(
                    "cannot read the Hub token Secret {}/{name}: {e}",
                    self.settings.namespace
                ),
            )
        })?;
        let token = secret
            .data
            .as_ref()
            .and_then(|d| d.get("token"))
            .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
            .filter(|t| !t.is_empty());
        match token {
            Some(token) => Ok(Some(token)),
            None => Err((
                Reason::HubUnauthorized,
                format!(
                    "the Hub token Secret {}/{name} has no `token` key",
                    self.settings.namespace
                ),
            )),
        }
    }
}

/// Frees one entry when the cache is full: the least recently asked for settled one, else the
/// least recently asked for queued one (its jobs queue it again when they next look). Reads in
/// flight stay: there are at most [`MAX_READS_AT_ONCE`].
fn make_room(cache: &mut Cache, max_entries: usize) {
    while cache.entries.len() >= max_entries.max(MAX_READS_AT_ONCE + 1) {
        let oldest = |queued: bool| {
            cache
                .entries
                .iter()
                .filter(|(_, e)| match e.state {
                    State::Ready(_) | State::Failed { .. } => !queued,
                    State::Queued => queued,
                    State::Reading => false,
                })
                .min_by_key(|(_, e)| e.asked)
                .map(|(k, _)| k.clone())
        };
        let Some(key) = oldest(false).or_else(|| oldest(true)) else {
            return;
        };
        cache.entries.remove(&key);
        cache.queue.remove(&key);
    }
}
