//! Reads `model.huggingFace` repositories from the Hub off the reconcile path: a reconcile asks
//! [`HubResolver::lookup`], which answers from a cache kept per repo@revision and, on a miss
//! or a failure whose backoff has passed, starts one background read. Reads run at most
//! [`MAX_READS_AT_ONCE`] at a time; the cache holds at most [`MAX_ENTRIES`] repositories (the
//! least recently asked for goes first). A slow or failing Hub delays only the jobs that name
//! it: no reconcile ever waits on the network.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use tokio::sync::Semaphore;
use tracing::{info, warn};
use vramfit_api::conditions::Reason;
use vramfit_hub::{HubClient, HubConfig, RepoRef};
use vramfit_models::Checkpoint;
use vramfit_models::source::{CheckpointError, SourceErrorKind};

/// Repositories read at once.
pub const MAX_READS_AT_ONCE: usize = 4;
/// Repositories kept in the cache.
pub const MAX_ENTRIES: usize = 512;
/// First retry after a failed read; doubles per failure up to [`MAX_RETRY`].
pub const FIRST_RETRY: Duration = Duration::from_secs(5);
/// Longest wait between reads of a failing repository.
pub const MAX_RETRY: Duration = Duration::from_secs(300);

/// Where the operator reads the Hub.
#[derive(Clone, Debug)]
pub struct HubSettings {
    /// The Hub or a mirror.
    pub endpoint: String,
    /// A Secret in the operator's own namespace whose `token` key holds a Hub token.
    pub token_secret: Option<String>,
    /// The operator's namespace (where the token Secret is).
    pub namespace: String,
    /// Longest one file may take.
    pub timeout: Duration,
}

/// What the cache says about a repository.
#[derive(Clone, Debug)]
pub enum Lookup {
    /// Read.
    Ready(Arc<Checkpoint>),
    /// A read is under way.
    Reading,
    /// The last read failed; the next starts after `retry_in`.
    Failed {
        /// The condition's reason.
        reason: Reason,
        /// One line: what failed.
        message: String,
        /// When the next read may start.
        retry_in: Duration,
    },
}

#[derive(Clone, Debug)]
enum State {
    Reading,
    Ready(Arc<Checkpoint>),
    Failed {
        reason: Reason,
        message: String,
        failures: u32,
        retry_at: Instant,
    },
}

#[derive(Clone, Debug)]
struct Entry {
    state: State,
    asked: Instant,
}

/// The cache and the reads.
pub struct HubResolver {
    settings: HubSettings,
    client: Option<Client>,
    entries: Mutex<HashMap<RepoRef, Entry>>,
    reads: Arc<Semaphore>,
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
        Arc::new(HubResolver {
            settings,
            client,
            entries: Mutex::new(HashMap::new()),
            reads: Arc::new(Semaphore::new(MAX_READS_AT_ONCE)),
        })
    }

    /// The endpoint read.
    pub fn endpoint(&self) -> &str {
        &self.settings.endpoint
    }

    /// What is known of `repo`, starting a read when nothing is, or when the last failure's
    /// backoff has passed. Never waits on the network.
    pub fn lookup(self: &Arc<Self>, repo: &RepoRef) -> Lookup {
        let now = Instant::now();
        let mut entries = lock(&self.entries);
        let start = match entries.get_mut(repo) {
            Some(entry) => {
                entry.asked = now;
                match &entry.state {
                    State::Ready(checkpoint) => return Lookup::Ready(checkpoint.clone()),
                    State::Reading => return Lookup::Reading,
                    State::Failed {
                        reason,
                        message,
                        retry_at,
                        ..
                    } if *retry_at > now => {
                        return Lookup::Failed {
                            reason: *reason,
                            message: message.clone(),
                            retry_in: retry_at.saturating_duration_since(now),
                        };
                    }
                    State::Failed { failures, .. } => *failures,
                }
            }
            None => 0,
        };
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(repo) {
            // The least recently asked for goes; a read under way stays (its task writes it).
            if let Some(oldest) = entries
                .iter()
                .filter(|(_, e)| !matches!(e.state, State::Reading))
                .min_by_key(|(_, e)| e.asked)
                .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        entries.insert(
            repo.clone(),
            Entry {
                state: State::Reading,
                asked: now,
            },
        );
        drop(entries);
        let this = self.clone();
        let repo = repo.clone();
        tokio::spawn(async move { this.read(repo, start).await });
        Lookup::Reading
    }

    async fn read(self: Arc<Self>, repo: RepoRef, failures: u32) {
        let Ok(_permit) = self.reads.clone().acquire_owned().await else {
            return;
        };
        let result = self.read_once(&repo).await;
        let state = match result {
            Ok(checkpoint) => {
                info!(repo = %repo, endpoint = %self.settings.endpoint, "read the model's numbers from the Hub");
                State::Ready(Arc::new(checkpoint))
            }
            Err((reason, message)) => {
                let failures = failures.saturating_add(1);
                let delay = retry_delay(failures);
                warn!(repo = %repo, %message, failures, retry_in = ?delay, "could not read the model from the Hub");
                State::Failed {
                    reason,
                    message,
                    failures,
                    retry_at: Instant::now() + delay,
                }
            }
        };
        let mut entries = lock(&self.entries);
        if let Some(entry) = entries.get_mut(&repo) {
            entry.state = state;
        }
    }

    async fn read_once(&self, repo: &RepoRef) -> Result<Checkpoint, (Reason, String)> {
        let token = self.token().await?;
        let client = HubClient::new(HubConfig {
            endpoint: self.settings.endpoint.clone(),
            token,
            timeout: self.settings.timeout,
            ..HubConfig::default()
        })
        .map_err(|e| (Reason::HubInvalid, e.to_string()))?;
        client
            .read_checkpoint(repo)
            .await
            .map_err(|e| (reason(&e), e.to_string()))
    }

    /// The token from the operator's own Secret, read at each read (a rotated token is used
    /// from the next read on). Never from a job's namespace.
    async fn token(&self) -> Result<Option<String>, (Reason, String)> {
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
