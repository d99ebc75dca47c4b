//! Failed fetches and when each may be tried again: 30 s after the first failure, doubling to
//! at most 10 min, forgotten after a success (or once the model is no longer wanted).
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The wait after a model's first failure.
pub const FIRST_RETRY: Duration = Duration::from_secs(30);
/// The longest wait between tries.
pub const MAX_RETRY: Duration = Duration::from_secs(600);

/// The wait after the `failures`-th failure in a row (1 for the first).
pub fn retry_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

/// One model's failures in a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Failures in a row.
    pub count: u32,
    /// Not tried again before.
    pub retry_at: Instant,
    /// Why the last try failed, in one line.
    pub message: String,
}

/// The models whose last fetch failed, by `owner/name@revision`.
#[derive(Clone, Debug, Default)]
pub struct Failures {
    by_key: BTreeMap<String, Failure>,
}

impl Failures {
    /// Records a failure of `key` at `now`; the wait before the next try.
    pub fn record(&mut self, key: &str, message: &str, now: Instant) -> Duration {
        let count = self
            .by_key
            .get(key)
            .map_or(1, |f| f.count.saturating_add(1));
        let delay = retry_delay(count);
        self.by_key.insert(
            key.to_string(),
            Failure {
                count,
                retry_at: now + delay,
                message: one_line(message),
            },
        );
        delay
    }

    /// `key` was fetched: its next failure waits [`FIRST_RETRY`] again.
    pub fn clear(&mut self, key: &str) {
        self.by_key.remove(key);
    }

    /// The failure of `key`, if its last fetch failed.
    pub fn get(&self, key: &str) -> Option<&Failure> {
        self.by_key.get(key)
    }

    /// Whether `key` may be fetched at `now`.
    pub fn may_try(&self, key: &str, now: Instant) -> bool {
        self.by_key.get(key).is_none_or(|f| f.retry_at <= now)
    }

    /// Forgets the failures of models `wanted` says no (they start afresh when wanted again).
    pub fn retain(&mut self, wanted: impl Fn(&str) -> bool) {
        self.by_key.retain(|key, _| wanted(key));
    }

    /// The earliest time a failed model may be tried again.
    pub fn next_retry(&self) -> Option<Instant> {
        self.by_key.values().map(|f| f.retry_at).min()
    }
}

/// The first line of `message`, at most 512 characters: a status message is one line.
pub fn one_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default().trim();
    match line.char_indices().nth(512) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_from_30_seconds_to_10_minutes() {
        let waits: Vec<u64> = (1..=7).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(waits, [30, 60, 120, 240, 480, 600, 600]);
        assert_eq!(retry_delay(u32::MAX), MAX_RETRY);
    }

    #[test]
    fn a_failure_waits_and_a_success_resets_the_backoff() {
        let now = Instant::now();
        let mut failures = Failures::default();
        assert!(failures.may_try("org/m@main", now));
        assert_eq!(
            failures.record("org/m@main", "boom\nstack", now),
            FIRST_RETRY
        );
        assert_eq!(failures.get("org/m@main").unwrap().message, "boom");
        assert!(!failures.may_try("org/m@main", now + Duration::from_secs(29)));
        assert!(failures.may_try("org/m@main", now + FIRST_RETRY));
        assert_eq!(
            failures.record("org/m@main", "again", now + FIRST_RETRY),
            Duration::from_secs(60)
        );
        assert_eq!(failures.next_retry(), Some(now + Duration::from_secs(90)));
        failures.clear("org/m@main");
        assert!(failures.may_try("org/m@main", now));
        assert_eq!(failures.record("org/m@main", "x", now), FIRST_RETRY);
    }

    #[test]
    fn models_no_longer_wanted_are_forgotten() {
        let now = Instant::now();
        let mut failures = Failures::default();
        failures.record("a/x@main", "no", now);
        failures.record("b/y@main", "no", now);
        failures.retain(|key| key.starts_with("a/"));
        assert!(failures.get("a/x@main").is_some());
        assert!(failures.get("b/y@main").is_none());
    }

    #[test]
    fn a_message_is_one_bounded_line() {
        assert_eq!(one_line("  a  \nb"), "a");
        let long = "é".repeat(600);
        let cut = one_line(&long);
        assert_eq!(cut.chars().count(), 513);
        assert!(cut.ends_with('…'));
    }
}
