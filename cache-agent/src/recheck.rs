//! Re-verifying what is served: the folders of complete models are mounted into pods, so the
//! agent checks them again (`vramfit_cache::reverify`). A cheap check of every complete model
//! once a resync period (each file's type and size, the hash of each file of at most 1 MiB:
//! configs, tokenizers, `*.py`, what remote code loads); a full one (every file hashed) once
//! after the agent starts (a node restart, a new agent) and every `--reverify-hours`, in slices
//! of at most `slice(resync)` so that a pass never holds the loop for long. A model that fails
//! is marked incomplete with why (`ModelRecord::damage`): it is no longer `Ready`, and when it
//! is wanted the next fetch brings its bad files again.
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tracing::{info, warn};
use vramfit_cache::reverify::{Depth, Report, apply, reverify};
use vramfit_cache::store::{ModelRecord, Store};

/// The most time one pass spends on a full re-verification: a tenth of the resync period,
/// between 1 and 20 seconds (a file already being hashed is finished first).
pub fn slice(resync: Duration) -> Duration {
    (resync / 10).clamp(Duration::from_secs(1), Duration::from_secs(20))
}

/// When each kind of check is due, and where a full one stands.
#[derive(Debug)]
pub struct Recheck {
    full_every: Option<Duration>,
    next_full: Option<Instant>,
    next_cheap: Instant,
    round: Option<Round>,
}

/// A full re-verification under way: the models left, and the file the first one resumes at.
#[derive(Debug, Default)]
struct Round {
    keys: VecDeque<String>,
    resume_at: Option<String>,
}

/// A model a check found damaged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damaged {
    /// `owner/name@revision`.
    pub key: String,
    /// Why, as the record now says.
    pub damage: String,
}

impl Recheck {
    /// Checks from `now`: a cheap one and a full one at once, then a full one every
    /// `full_every` (`None`: only the one after the start).
    pub fn new(now: Instant, full_every: Option<Duration>) -> Recheck {
        Recheck {
            full_every,
            next_full: Some(now),
            next_cheap: now,
            round: None,
        }
    }

    /// Whether the cheap check is due at `now`; if so, the next one is a `resync` later.
    pub fn take_cheap(&mut self, now: Instant, resync: Duration) -> bool {
        if now < self.next_cheap {
            return false;
        }
        self.next_cheap = now + resync;
        true
    }

    /// Starts a full round of `keys` when one is due at `now` and none is under way.
    pub fn start_full_if_due(&mut self, now: Instant, keys: impl IntoIterator<Item = String>) {
        if self.round.is_some() || self.next_full.is_none_or(|at| now < at) {
            return;
        }
        self.next_full = self.full_every.map(|every| now + every);
        self.round = Some(Round {
            keys: keys.into_iter().collect(),
            resume_at: None,
        });
    }

    /// Whether a full round is under way.
    pub fn full_under_way(&self) -> bool {
        self.round.is_some()
    }

    /// One pass's share of the work: the cheap check when due, then a slice of the full
    /// round. `records` are the cache's records now. Takes the cache's lock (skipped, and
    /// tried on the next pass, when another process holds it). The models found damaged.
    pub async fn step(
        &mut self,
        store: &Store,
        records: &[ModelRecord],
        now: Instant,
        resync: Duration,
    ) -> Vec<Damaged> {
        let _lock = match store.try_lock() {
            Ok(lock) => lock,
            Err(error) => {
                warn!(%error, "re-verification skipped this pass");
                return Vec::new();
            }
        };
        let mut damaged = Vec::new();
        if self.take_cheap(now, resync) {
            for record in records.iter().filter(|r| r.complete) {
                let found = check(store, record, Depth::Cheap, None, None).await;
                damaged.extend(found.and_then(|(_, d)| d));
            }
        }
        self.start_full_if_due(
            now,
            records.iter().filter(|r| r.complete).map(ModelRecord::key),
        );
        let until = Instant::now() + slice(resync);
        while let Some(round) = &mut self.round {
            let Some(key) = round.keys.front().cloned() else {
                info!("full re-verification of the cache done");
                self.round = None;
                break;
            };
            // Read again: a cheap check or a fetch may have changed it since the round began.
            let record = match key_repo(&key) {
                Some(repo) => store.read(&repo).await.ok().flatten(),
                None => None,
            };
            let Some(record) = record.filter(|r| r.complete) else {
                round.keys.pop_front();
                round.resume_at = None;
                continue;
            };
            let resume_at = round.resume_at.take();
            match check(
                store,
                &record,
                Depth::Full,
                resume_at.as_deref(),
                Some(until),
            )
            .await
            {
                Some((Some(next), found)) => {
                    round.resume_at = Some(next);
                    damaged.extend(found);
                    break;
                }
                Some((None, found)) => {
                    round.keys.pop_front();
                    damaged.extend(found);
                }
                None => {
                    round.keys.pop_front();
                }
            }
            if Instant::now() >= until {
                break;
            }
        }
        damaged
    }
}

/// Checks one model and writes what was found into its record: where a cut-short full check
/// goes on, and the damage, if any. `None` when the check could not run (logged).
async fn check(
    store: &Store,
    record: &ModelRecord,
    depth: Depth,
    start_at: Option<&str>,
    until: Option<Instant>,
) -> Option<(Option<String>, Option<Damaged>)> {
    let key = record.key();
    let report: Report = match reverify(store.layout(), record, depth, start_at, until).await {
        Ok(report) => report,
        Err(error) => {
            warn!(model = %key, %error, "cannot re-verify the model");
            return None;
        }
    };
    let written = match apply(store, record.clone(), &report).await {
        Ok(written) => written,
        Err(error) => {
            warn!(model = %key, %error, "cannot record the model's re-verification");
            return None;
        }
    };
    let damaged = written.and_then(|r| r.damage).map(|damage| {
        warn!(model = %key, ?depth, %damage, "the files in place no longer match: not served, fetched again when wanted");
        Damaged {
            key: key.clone(),
            damage,
        }
    });
    Some((report.resume_at, damaged))
}

/// The model of an `owner/name@revision` key.
fn key_repo(key: &str) -> Option<vramfit_hub::RepoRef> {
    let (repo, revision) = key.split_once('@')?;
    vramfit_hub::RepoRef::new(repo, revision).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cheap_check_runs_once_a_resync_period() {
        let start = Instant::now();
        let resync = Duration::from_secs(60);
        let mut recheck = Recheck::new(start, None);
        assert!(recheck.take_cheap(start, resync));
        assert!(!recheck.take_cheap(start + Duration::from_secs(59), resync));
        assert!(recheck.take_cheap(start + resync, resync));
    }

    #[test]
    fn a_full_round_starts_after_the_start_then_on_its_schedule_or_never_again() {
        let start = Instant::now();
        let day = Duration::from_secs(24 * 3600);
        let mut recheck = Recheck::new(start, Some(day));
        recheck.start_full_if_due(start, ["a@main".to_string()]);
        assert!(recheck.full_under_way());
        recheck.round = None;
        recheck.start_full_if_due(start + day / 2, ["a@main".to_string()]);
        assert!(!recheck.full_under_way());
        recheck.start_full_if_due(start + day, ["a@main".to_string()]);
        assert!(recheck.full_under_way());

        let mut once = Recheck::new(start, None);
        once.start_full_if_due(start, Vec::new());
        once.round = None;
        once.start_full_if_due(start + day * 365, Vec::new());
        assert!(!once.full_under_way());
    }

    #[test]
    fn a_slice_is_a_tenth_of_the_resync_period_within_bounds() {
        assert_eq!(slice(Duration::from_secs(60)), Duration::from_secs(6));
        assert_eq!(slice(Duration::from_secs(3600)), Duration::from_secs(20));
        assert_eq!(slice(Duration::from_secs(1)), Duration::from_secs(1));
    }
}
