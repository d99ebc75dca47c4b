//! What to do next, from the spec, the records on disk and the failures: the first wanted
//! model (in spec order) that is not satisfied on disk and not waiting out a failure's
//! backoff. One model at a time.
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use vramfit_api::model_cache::WantedModel;
use vramfit_cache::store::{Access, ModelRecord};

use crate::backoff::Failures;

/// The spec's models with each key once (the first place it is listed; the namespaces of
/// every listing, and in use when any says so).
pub fn distinct(models: &[WantedModel]) -> Vec<WantedModel> {
    let mut out: Vec<WantedModel> = Vec::new();
    for model in models {
        match out.iter_mut().find(|m| m.key() == model.key()) {
            Some(first) => {
                for namespace in &model.namespaces {
                    if !first.namespaces.contains(namespace) {
                        first.namespaces.push(namespace.clone());
                    }
                }
                first.in_use |= model.in_use;
            }
            None => out.push(model.clone()),
        }
    }
    out
}

/// The `owner/name@revision` keys of the models pods mount now: never evicted.
pub fn in_use_keys(wanted: &[WantedModel]) -> BTreeSet<String> {
    wanted
        .iter()
        .filter(|m| m.in_use)
        .map(WantedModel::key)
        .collect()
}

/// The models a fetch of `next` must not evict: those pods mount, and the wanted models
/// listed before it (the spec lists the most needed first). Without the second, two wanted
/// models that do not fit the budget together would evict each other in turn, downloading
/// forever; with it, the less needed one fails (no room) and waits its backoff.
pub fn protected_keys(wanted: &[WantedModel], next: &WantedModel) -> BTreeSet<String> {
    let mut keys = in_use_keys(wanted);
    let next_key = next.key();
    keys.extend(
        wanted
            .iter()
            .map(WantedModel::key)
            .take_while(|key| *key != next_key),
    );
    keys
}

/// What a fetch of `next` must not evict, decided when it evicts: from `latest`, the spec's
/// models as they are then (each key once), or, when the agent knows no spec then, from
/// `at_start`, what it protected when the fetch began. A model no longer in the spec at all
/// protects every wanted model.
pub fn protected_now(
    latest: Option<&[WantedModel]>,
    next: &WantedModel,
    at_start: &BTreeSet<String>,
) -> BTreeSet<String> {
    match latest {
        Some(wanted) => protected_keys(wanted, next),
        None => at_start.clone(),
    }
}

/// Whether a model needs no fetch: complete on disk and, when it would be read with the
/// token, mountable already by every namespace the token serves for it (else a fetch proves
/// the token reads its files and adds them).
pub fn satisfied(record: Option<&ModelRecord>, token_namespaces: &BTreeSet<String>) -> bool {
    let Some(record) = record.filter(|r| r.complete) else {
        return false;
    };
    match &record.access {
        Access::Public => true,
        Access::Namespaces(namespaces) => token_namespaces.is_subset(namespaces),
    }
}

/// The records by key.
pub fn records_by_key(records: &[ModelRecord]) -> BTreeMap<String, &ModelRecord> {
    records.iter().map(|r| (r.key(), r)).collect()
}

/// The next model to fetch: the first of `wanted` that `is_satisfied` says no to and whose
/// last failure's backoff is over at `now`.
pub fn next_fetch<'w>(
    wanted: &'w [WantedModel],
    is_satisfied: impl Fn(&WantedModel) -> bool,
    failures: &Failures,
    now: Instant,
) -> Option<&'w WantedModel> {
    wanted
        .iter()
        .find(|m| !is_satisfied(m) && failures.may_try(&m.key(), now))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use vramfit_hub::RepoRef;

    fn model(repo: &str, namespaces: &[&str], in_use: bool) -> WantedModel {
        WantedModel {
            repo: repo.to_string(),
            revision: "main".to_string(),
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            in_use,
        }
    }

    fn record(repo: &str, complete: bool, access: Access) -> ModelRecord {
        let mut record = ModelRecord::new(&RepoRef::new(repo, "main").unwrap(), access, 0);
        record.complete = complete;
        record
    }

    #[test]
    fn models_are_fetched_one_at_a_time_in_spec_order() {
        let wanted = [
            model("org/a", &[], false),
            model("org/b", &[], false),
            model("org/c", &[], false),
        ];
        let done = ["org/a@main".to_string()];
        let now = Instant::now();
        let failures = Failures::default();
        let next = next_fetch(&wanted, |m| done.contains(&m.key()), &failures, now);
        assert_eq!(next.map(WantedModel::key).as_deref(), Some("org/b@main"));
        let all = next_fetch(&wanted, |_| true, &failures, now);
        assert_eq!(all, None);
    }

    #[test]
    fn a_failed_model_waits_its_backoff_while_the_next_one_is_fetched() {
        let wanted = [model("org/a", &[], false), model("org/b", &[], false)];
        let now = Instant::now();
        let mut failures = Failures::default();
        failures.record("org/a@main", "HTTP 500", now);
        let next = next_fetch(&wanted, |_| false, &failures, now);
        assert_eq!(next.map(WantedModel::key).as_deref(), Some("org/b@main"));
        let later = now + Duration::from_secs(30);
        let next = next_fetch(&wanted, |_| false, &failures, later);
        assert_eq!(next.map(WantedModel::key).as_deref(), Some("org/a@main"));
        assert_eq!(next_fetch(&wanted[..1], |_| false, &failures, now), None);
    }

    #[test]
    fn a_complete_record_satisfies_unless_the_token_serves_more_namespaces() {
        let none = BTreeSet::new();
        let team_a = BTreeSet::from(["team-a".to_string()]);
        let both = BTreeSet::from(["team-a".to_string(), "team-b".to_string()]);
        assert!(!satisfied(None, &none));
        assert!(!satisfied(
            Some(&record("org/a", false, Access::Public)),
            &none
        ));
        assert!(satisfied(
            Some(&record("org/a", true, Access::Public)),
            &both
        ));
        let private = record("org/a", true, Access::Namespaces(team_a.clone()));
        assert!(satisfied(Some(&private), &none));
        assert!(satisfied(Some(&private), &team_a));
        assert!(!satisfied(Some(&private), &both));
        assert_eq!(
            records_by_key(std::slice::from_ref(&private))["org/a@main"],
            &private
        );
    }

    #[test]
    fn a_fetch_spares_the_models_in_use_and_those_more_needed() {
        let wanted = [
            model("org/a", &[], false),
            model("org/b", &[], false),
            model("org/c", &[], true),
            model("org/d", &[], false),
        ];
        let keys = |list: &[&str]| -> BTreeSet<String> {
            list.iter().map(|k| format!("{k}@main")).collect()
        };
        assert_eq!(protected_keys(&wanted, &wanted[0]), keys(&["org/c"]));
        assert_eq!(
            protected_keys(&wanted, &wanted[1]),
            keys(&["org/a", "org/c"])
        );
        assert_eq!(
            protected_keys(&wanted, &wanted[3]),
            keys(&["org/a", "org/b", "org/c"])
        );
    }

    #[test]
    fn eviction_reads_the_spec_as_it_is_when_it_evicts() {
        let at_start = [model("org/a", &[], false), model("org/b", &[], false)];
        let started = protected_keys(&at_start, &at_start[1]);
        // Since the fetch of b began, c is mounted and d is wanted ahead of b.
        let latest = [
            model("org/d", &[], false),
            model("org/b", &[], false),
            model("org/c", &[], true),
        ];
        let keys = |list: &[&str]| -> BTreeSet<String> {
            list.iter().map(|k| format!("{k}@main")).collect()
        };
        assert_eq!(
            protected_now(Some(&latest), &at_start[1], &started),
            keys(&["org/c", "org/d"])
        );
        assert_eq!(protected_now(None, &at_start[1], &started), started);
        // b is no longer wanted: nothing wanted may make room for it.
        let without_b = [model("org/d", &[], false), model("org/c", &[], true)];
        assert_eq!(
            protected_now(Some(&without_b), &at_start[1], &started),
            keys(&["org/c", "org/d"])
        );
    }

    #[test]
    fn a_model_listed_twice_is_one_model_with_every_namespace() {
        let wanted = distinct(&[
            model("org/a", &["team-a"], false),
            model("org/b", &[], false),
            model("org/a", &["team-b", "team-a"], true),
        ]);
        assert_eq!(wanted.len(), 2);
        assert_eq!(wanted[0].namespaces, ["team-a", "team-b"]);
        assert!(wanted[0].in_use);
        assert_eq!(
            in_use_keys(&wanted),
            BTreeSet::from(["org/a@main".to_string()])
        );
    }
}
