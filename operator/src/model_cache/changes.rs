//! Which ModelCache changes matter (pure): the sync and the jobs waiting for a model read a
//! node's spec, its models as the agent lists them (phase, bytes, size, who may mount them),
//! its budget and use, and whether its heartbeat is trusted. An agent writes its status at
//! every heartbeat; a write that moves only what none of them reads — the heartbeat's time,
//! the observed generation, a model's last use or download time — starts no sync and wakes no
//! job. Each node's digest of what is read is kept, with its heartbeat: a change of digest, or
//! a heartbeat that makes a stale node trusted again (or one that no longer is), matters.
//! A node that goes stale without any write is seen by the sync's periodic pass and the
//! waiting jobs' own requeue, as before.
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::watcher;
use vramfit_api::ModelCache;

use super::view::HEARTBEAT_SKEW;

/// What the last change of each node's ModelCache showed.
#[derive(Debug)]
pub struct CacheChanges {
    trust: Duration,
    seen: HashMap<String, Seen>,
}

#[derive(Debug)]
struct Seen {
    digest: u64,
    heartbeat: Option<Timestamp>,
}

impl CacheChanges {
    /// Nothing seen yet; a heartbeat older than `trust` is not trusted (as placement reads it).
    pub fn new(trust: Duration) -> Self {
        Self {
            trust,
            seen: HashMap::new(),
        }
    }

    /// A filter for the ModelCache watch: whether each event, at the time it comes, may change
    /// a decision (see [`CacheChanges::matters`]).
    pub fn at_now(mut self) -> impl FnMut(&watcher::Event<ModelCache>) -> bool + Send + 'static {
        move |event| self.matters(event, Timestamp::now())
    }

    /// Whether `event`, seen at `now`, may change what the sync writes or what a waiting job
    /// decides. A (re)list's objects are recorded and its end matters once.
    pub fn matters(&mut self, event: &watcher::Event<ModelCache>, now: Timestamp) -> bool {
        match event {
            watcher::Event::Apply(cache) => self.record(cache, now),
            watcher::Event::Delete(cache) => {
                self.seen.remove(&cache.name_any());
                true
            }
            watcher::Event::Init => {
                self.seen.clear();
                false
            }
            watcher::Event::InitApply(cache) => {
                self.record(cache, now);
                false
            }
            watcher::Event::InitDone => true,
        }
    }

    /// Records `cache`; whether it differs in what is read from what was seen last.
    fn record(&mut self, cache: &ModelCache, now: Timestamp) -> bool {
        let seen = Seen {
            digest: read_digest(cache),
            heartbeat: cache
                .status
                .as_ref()
                .and_then(|s| s.heartbeat_time.as_ref())
                .map(|t| t.0),
        };
        // As placement trusts a heartbeat (`view.rs`): not too old, not too far ahead.
        let trusted = |beat: Option<Timestamp>| {
            beat.is_some_and(|beat| {
                let age = now.duration_since(beat).as_secs_f64();
                -HEARTBEAT_SKEW.as_secs_f64() <= age && age <= self.trust.as_secs_f64()
            })
        };
        let matters = match self.seen.get(&cache.name_any()) {
            None => true,
            Some(before) => {
                before.digest != seen.digest || trusted(before.heartbeat) != trusted(seen.heartbeat)
            }
        };
        self.seen.insert(cache.name_any(), seen);
        matters
    }
}

/// A digest of what the sync and placement read of `cache`: its spec and its status less the
/// heartbeat's time, the observed generation and each model's last use and download time.
pub fn read_digest(cache: &ModelCache) -> u64 {
    let mut status = cache.status.clone().unwrap_or_default();
    status.heartbeat_time = None;
    status.observed_generation = None;
    for model in &mut status.models {
        model.last_used = None;
        model.download_seconds = None;
    }
    // Serialised, every field a later version adds is covered too.
    let read = serde_json::to_vec(&(&cache.spec, &status)).unwrap_or_default();
    let mut hasher = DefaultHasher::new();
    hasher.write(&read);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use vramfit_api::model_cache::{
        CachedModel, CachedModelPhase, ModelCacheSpec, ModelCacheStatus, WantedModel,
    };

    const TRUST: Duration = Duration::from_secs(600);

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    /// Node `gpu-1` asked for and fetching `o/m@main`, its heartbeat at `beat`.
    fn cache(beat: i64) -> ModelCache {
        let mut cache = ModelCache::new(
            "gpu-1",
            ModelCacheSpec {
                models: vec![WantedModel {
                    repo: "o/m".into(),
                    revision: "main".into(),
                    namespaces: vec!["team-a".into()],
                    in_use: false,
                }],
            },
        );
        cache.status = Some(ModelCacheStatus {
            budget_bytes: 100,
            used_bytes: 10,
            models: vec![CachedModel {
                repo: "o/m".into(),
                revision: "main".into(),
                phase: CachedModelPhase::Fetching,
                bytes: 10,
                total_bytes: 40,
                public: true,
                ..Default::default()
            }],
            observed_generation: Some(1),
            heartbeat_time: Some(Time(at(beat))),
            ..Default::default()
        });
        cache
    }

    fn status(cache: &mut ModelCache) -> &mut ModelCacheStatus {
        cache.status.as_mut().unwrap()
    }

    fn seen_at(changes: &mut CacheChanges, cache: &ModelCache, now: i64) -> bool {
        changes.matters(&watcher::Event::Apply(cache.clone()), at(now))
    }

    #[test]
    fn a_heartbeat_that_moves_nothing_read_triggers_nothing() {
        let mut changes = CacheChanges::new(TRUST);
        assert!(seen_at(&mut changes, &cache(1_000), 1_000), "first sight");
        let mut beat = cache(1_060);
        status(&mut beat).observed_generation = Some(2);
        status(&mut beat).models[0].last_used = Some(Time(at(1_050)));
        status(&mut beat).models[0].download_seconds = Some(3);
        assert!(!seen_at(&mut changes, &beat, 1_060), "heartbeat only");
        assert!(!seen_at(&mut changes, &cache(1_120), 1_120), "and the next");
    }

    #[test]
    fn a_change_of_what_is_read_triggers() {
        type Change = (&'static str, fn(&mut ModelCache));
        let changed: [Change; 7] = [
            ("phase", |c| {
                status(c).models[0].phase = CachedModelPhase::Ready
            }),
            ("bytes", |c| status(c).models[0].bytes = 20),
            ("namespaces", |c| {
                status(c).models[0].namespaces = vec!["team-b".into()]
            }),
            ("public", |c| status(c).models[0].public = false),
            ("used", |c| status(c).used_bytes = 30),
            ("budget", |c| status(c).budget_bytes = 50),
            ("spec", |c| c.spec.models.clear()),
        ];
        for (what, change) in changed {
            let mut changes = CacheChanges::new(TRUST);
            seen_at(&mut changes, &cache(1_000), 1_000);
            let mut next = cache(1_060);
            change(&mut next);
            assert!(seen_at(&mut changes, &next, 1_060), "{what}");
        }
    }

    #[test]
    fn a_heartbeat_that_makes_a_stale_node_trusted_again_triggers() {
        let mut changes = CacheChanges::new(TRUST);
        seen_at(&mut changes, &cache(1_000), 1_000);
        // The agent was silent for 20 minutes: its node was stale; its beat makes it live.
        assert!(seen_at(&mut changes, &cache(2_200), 2_200));
        assert!(!seen_at(&mut changes, &cache(2_260), 2_260));
    }

    #[test]
    fn a_deletion_and_the_end_of_a_list_trigger_and_a_list_s_objects_do_not() {
        let mut changes = CacheChanges::new(TRUST);
        assert!(!changes.matters(&watcher::Event::Init, at(1_000)));
        let listed = watcher::Event::InitApply(cache(1_000));
        assert!(!changes.matters(&listed, at(1_000)));
        assert!(changes.matters(&watcher::Event::InitDone, at(1_000)));
        assert!(
            !seen_at(&mut changes, &cache(1_060), 1_060),
            "recorded by the list"
        );
        assert!(changes.matters(&watcher::Event::Delete(cache(1_060)), at(1_070)));
        assert!(seen_at(&mut changes, &cache(1_080), 1_080), "a new object");
    }
}
