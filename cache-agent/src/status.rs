//! The ModelCache status, assembled from the spec, the records on disk and what the agent is
//! doing: the wanted models first (in spec order), then the other cached models by most recent
//! use, at most `MAX_MODELS`. And when it is worth writing: something changed, or the
//! heartbeat is due.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use vramfit_api::model_cache::{
    CachedModel, CachedModelPhase, MAX_MODELS, MAX_NAMESPACES, ModelCacheStatus, WantedModel,
};
use vramfit_cache::store::{Access, ModelRecord};

use crate::backoff::Failures;

/// What a status is assembled from.
#[derive(Clone, Copy, Debug)]
pub struct StatusInput<'a> {
    /// The spec's models, each key once, in spec order.
    pub wanted: &'a [WantedModel],
    /// Every record on disk.
    pub records: &'a [ModelRecord],
    /// The model being fetched now.
    pub fetching: Option<&'a str>,
    /// Models whose last fetch failed.
    pub failures: &'a Failures,
    /// Seconds each model's last download took, by key.
    pub download_seconds: &'a BTreeMap<String, u32>,
    /// `--budget-bytes`.
    pub budget_bytes: u64,
    /// Bytes of the downloads under way (`*.partial` files): counted in `usedBytes`.
    pub partial_bytes: u64,
    /// The spec's `metadata.generation`.
    pub observed_generation: Option<i64>,
}

/// The status, without its heartbeat (set when it is written).
pub fn assemble(input: StatusInput<'_>) -> ModelCacheStatus {
    let records: BTreeMap<String, &ModelRecord> =
        input.records.iter().map(|r| (r.key(), r)).collect();
    let mut models = Vec::new();
    for wanted in input.wanted {
        let key = wanted.key();
        let record = records.get(&key).copied();
        let phase = if input.fetching == Some(key.as_str()) {
            CachedModelPhase::Fetching
        } else if input.failures.get(&key).is_some() {
            CachedModelPhase::Failed
        } else if record.is_some_and(|r| r.complete) {
            CachedModelPhase::Ready
        } else {
            CachedModelPhase::Pending
        };
        let mut model = match record {
            Some(record) => from_record(record, phase),
            None => CachedModel {
                repo: wanted.repo.clone(),
                revision: wanted.revision.clone(),
                phase,
                ..CachedModel::default()
            },
        };
        if phase == CachedModelPhase::Failed {
            model.message = input.failures.get(&key).map(|f| f.message.clone());
        } else if let Some(damage) = record
            .filter(|r| !r.complete)
            .and_then(|r| r.damage.clone())
        {
            // Fetched again after a re-verification found it changed: say why.
            model.message = Some(damage);
        }
        model.download_seconds = input.download_seconds.get(&key).copied();
        models.push(model);
    }
    let wanted: Vec<String> = input.wanted.iter().map(WantedModel::key).collect();
    let mut others: Vec<&ModelRecord> = input
        .records
        .iter()
        .filter(|r| !wanted.contains(&r.key()))
        .collect();
    // Most recently used first; ties by key, so the order is stable.
    others.sort_by(|a, b| b.last_used.cmp(&a.last_used).then(a.key().cmp(&b.key())));
    for record in others {
        let phase = if record.complete {
            CachedModelPhase::Ready
        } else {
            CachedModelPhase::Pending
        };
        let mut model = from_record(record, phase);
        if !record.complete {
            model.message = Some(match &record.damage {
                Some(damage) => format!("{damage} when wanted"),
                None => "incomplete and no longer wanted".to_string(),
            });
        }
        model.download_seconds = input.download_seconds.get(&record.key()).copied();
        models.push(model);
    }
    models.truncate(MAX_MODELS);
    ModelCacheStatus {
        budget_bytes: input.budget_bytes,
        used_bytes: input
            .records
            .iter()
            .fold(input.partial_bytes, |sum, r| sum.saturating_add(r.bytes)),
        fetching: input.fetching.map(str::to_string),
        models,
        observed_generation: input.observed_generation,
        heartbeat_time: None,
    }
}

fn from_record(record: &ModelRecord, phase: CachedModelPhase) -> CachedModel {
    let (public, namespaces) = match &record.access {
        Access::Public => (true, Vec::new()),
        Access::Namespaces(namespaces) => (
            false,
            namespaces.iter().take(MAX_NAMESPACES).cloned().collect(),
        ),
    };
    CachedModel {
        repo: record.repo.clone(),
        revision: record.revision.clone(),
        phase,
        bytes: record.bytes,
        total_bytes: record.total_bytes,
        public,
        namespaces,
        last_used: unix_time(record.last_used),
        download_seconds: None,
        message: None,
    }
}

/// Seconds since the epoch as an API time (none when out of range).
pub fn unix_time(seconds: u64) -> Option<Time> {
    let seconds = i64::try_from(seconds).ok()?;
    Timestamp::from_second(seconds).ok().map(Time)
}

/// The status last written, and when.
#[derive(Clone, Debug)]
pub struct Written {
    /// What was written, without its heartbeat.
    pub status: ModelCacheStatus,
    /// When.
    pub at: Instant,
}

/// Whether `next` should be written at `now`: it differs from what was last written, or the
/// heartbeat is due (a tenth of `resync` early, so that a pass woken by the resync timer
/// refreshes it every resync period and not every other one).
pub fn write_due(
    last: Option<&Written>,
    next: &ModelCacheStatus,
    now: Instant,
    resync: Duration,
) -> bool {
    let Some(last) = last else {
        return true;
    };
    let early = (resync / 10).max(Duration::from_secs(1));
    &last.status != next || now.saturating_duration_since(last.at) + early >= resync
}

/// How many models the status lists in each phase (every phase, zero included).
pub fn phase_counts(status: &ModelCacheStatus) -> [(CachedModelPhase, usize); 4] {
    let count = |phase| status.models.iter().filter(|m| m.phase == phase).count();
    [
        CachedModelPhase::Pending,
        CachedModelPhase::Fetching,
        CachedModelPhase::Ready,
        CachedModelPhase::Failed,
    ]
    .map(|phase| (phase, count(phase)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use vramfit_hub::RepoRef;

    fn wanted(repo: &str) -> WantedModel {
        WantedModel {
            repo: repo.to_string(),
            revision: "main".to_string(),
            namespaces: vec![],
            in_use: false,
        }
    }

    fn record(repo: &str, bytes: u64, complete: bool, last_used: u64) -> ModelRecord {
        let mut record = ModelRecord::new(
            &RepoRef::new(repo, "main").unwrap(),
            Access::Public,
            last_used,
        );
        record.bytes = bytes;
        record.total_bytes = bytes * 2;
        record.complete = complete;
        record
    }

    fn input<'a>(
        wanted: &'a [WantedModel],
        records: &'a [ModelRecord],
        failures: &'a Failures,
        seconds: &'a BTreeMap<String, u32>,
    ) -> StatusInput<'a> {
        StatusInput {
            wanted,
            records,
            fetching: None,
            failures,
            download_seconds: seconds,
            budget_bytes: 1000,
            partial_bytes: 0,
            observed_generation: Some(3),
        }
    }

    #[test]
    fn partial_downloads_count_as_used_and_a_damaged_model_says_why() {
        let wanted = [wanted("org/a")];
        let mut damaged = record("org/a", 10, false, 1);
        damaged.damage = Some("re-verification failed: config.json: missing; fetched again".into());
        let mut gone = record("org/b", 5, false, 2);
        gone.damage = Some("re-verification failed: x.py: missing; fetched again".into());
        let records = [damaged, gone];
        let failures = Failures::default();
        let seconds = BTreeMap::new();
        let mut input = input(&wanted, &records, &failures, &seconds);
        input.partial_bytes = 100;
        input.fetching = Some("org/a@main");
        let status = assemble(input);
        assert_eq!(status.used_bytes, 115);
        assert_eq!(status.models[0].phase, CachedModelPhase::Fetching);
        assert!(
            status.models[0]
                .message
                .as_deref()
                .unwrap()
                .contains("config.json: missing")
        );
        assert!(
            status.models[1]
                .message
                .as_deref()
                .unwrap()
                .ends_with("fetched again when wanted")
        );
    }

    #[test]
    fn wanted_models_come_first_in_spec_order_then_the_most_recently_used() {
        let wanted = [wanted("org/c"), wanted("org/new"), wanted("org/a")];
        let records = [
            record("org/a", 10, true, 100),
            record("org/b", 20, true, 300),
            record("org/c", 5, false, 50),
            record("org/d", 40, true, 200),
            record("org/e", 1, false, 400),
        ];
        let failures = Failures::default();
        let seconds = BTreeMap::from([("org/a@main".to_string(), 7)]);
        let mut input = input(&wanted, &records, &failures, &seconds);
        input.fetching = Some("org/c@main");
        let status = assemble(input);
        let order: Vec<(String, CachedModelPhase)> =
            status.models.iter().map(|m| (m.key(), m.phase)).collect();
        use CachedModelPhase::*;
        assert_eq!(
            order,
            [
                ("org/c@main".to_string(), Fetching),
                ("org/new@main".to_string(), Pending),
                ("org/a@main".to_string(), Ready),
                ("org/e@main".to_string(), Pending),
                ("org/b@main".to_string(), Ready),
                ("org/d@main".to_string(), Ready),
            ]
        );
        assert_eq!(status.used_bytes, 76);
        assert_eq!(status.budget_bytes, 1000);
        assert_eq!(status.fetching.as_deref(), Some("org/c@main"));
        assert_eq!(status.observed_generation, Some(3));
        assert_eq!(status.models[2].download_seconds, Some(7));
        assert_eq!(status.models[2].bytes, 10);
        assert_eq!(status.models[2].total_bytes, 20);
        assert_eq!(
            status.models[2].last_used,
            Some(Time(Timestamp::from_second(100).unwrap()))
        );
        assert_eq!(status.models[1].bytes, 0);
        assert_eq!(status.models[1].last_used, None);
        assert_eq!(
            status.models[3].message.as_deref(),
            Some("incomplete and no longer wanted")
        );
        assert_eq!(
            phase_counts(&status),
            [(Pending, 2), (Fetching, 1), (Ready, 3), (Failed, 0)]
        );
    }

    #[test]
    fn a_failed_model_says_why_and_access_maps_to_public_or_namespaces() {
        let wanted = [wanted("org/a"), wanted("org/b")];
        let mut private = record("org/b", 10, true, 1);
        private.access = Access::Namespaces(BTreeSet::from(["team-a".to_string()]));
        let records = [record("org/a", 1, false, 1), private];
        let mut failures = Failures::default();
        failures.record("org/a@main", "org/a@main: HTTP 503", Instant::now());
        let seconds = BTreeMap::new();
        let status = assemble(input(&wanted, &records, &failures, &seconds));
        assert_eq!(status.models[0].phase, CachedModelPhase::Failed);
        assert_eq!(
            status.models[0].message.as_deref(),
            Some("org/a@main: HTTP 503")
        );
        assert!(status.models[0].public);
        assert!(status.models[0].namespaces.is_empty());
        assert!(!status.models[1].public);
        assert_eq!(status.models[1].namespaces, ["team-a"]);
        assert!(status.models[1].mountable_by("team-a"));
        assert!(!status.models[1].mountable_by("team-b"));
    }

    #[test]
    fn the_list_is_capped_and_namespaces_too() {
        let records: Vec<ModelRecord> = (0..MAX_MODELS + 5)
            .map(|i| {
                let mut r = record(&format!("org/m{i}"), 1, true, i as u64);
                r.access = Access::Namespaces((0..40).map(|n| format!("ns-{n:02}")).collect());
                r
            })
            .collect();
        let failures = Failures::default();
        let seconds = BTreeMap::new();
        let status = assemble(input(&[], &records, &failures, &seconds));
        assert_eq!(status.models.len(), MAX_MODELS);
        // The most recently used are kept; every byte on disk still counts.
        assert_eq!(status.models[0].repo, format!("org/m{}", MAX_MODELS + 4));
        assert_eq!(status.used_bytes, (MAX_MODELS + 5) as u64);
        assert_eq!(status.models[0].namespaces.len(), MAX_NAMESPACES);
    }

    #[test]
    fn a_write_is_due_on_a_change_or_when_the_heartbeat_is_old() {
        let now = Instant::now();
        let resync = Duration::from_secs(60);
        let status = ModelCacheStatus::default();
        assert!(write_due(None, &status, now, resync));
        let last = Written {
            status: status.clone(),
            at: now,
        };
        assert!(!write_due(
            Some(&last),
            &status,
            now + Duration::from_secs(30),
            resync
        ));
        assert!(write_due(
            Some(&last),
            &status,
            now + Duration::from_secs(54),
            resync
        ));
        let changed = ModelCacheStatus {
            used_bytes: 1,
            ..status
        };
        assert!(write_due(Some(&last), &changed, now, resync));
    }
}
