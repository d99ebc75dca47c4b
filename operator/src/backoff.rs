//! How long a failed replica waits before its next pod (pure): exponential, bounded, and
//! forgotten once the replica has served for a while — the kubelet's CrashLoopBackOff numbers,
//! kept by the operator because a replica's next pod may need a new plan (docs/serving.md).
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;

/// Failures in a row from which a replica counts as crash-looping (Degraded `CrashLoop`).
pub const CRASH_LOOP_FAILURES: u32 = 3;

/// The backoff settings of served replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the first failure; it doubles with each failure in a row.
    pub base: Duration,
    /// The longest wait.
    pub max: Duration,
    /// How long a replica must have been Ready for its failures to be forgotten.
    pub stable: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
            stable: Duration::from_secs(600),
        }
    }
}

impl Backoff {
    /// The wait after `failures` failures in a row: base × 2^(failures−1), at most `max`.
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
        self.base.saturating_mul(factor).min(self.max)
    }

    /// When a replica that failed for the `failures`th time in a row at `now` may get its next
    /// pod.
    pub fn retry_at(&self, now: &Time, failures: u32) -> Time {
        add(now, self.delay(failures))
    }

    /// Whether a replica Ready since `since` has served long enough at `now` for its failures
    /// to be forgotten.
    pub fn is_stable(&self, since: Option<&Time>, now: &Time) -> bool {
        since.is_some_and(|since| !is_before(now, &add(since, self.stable)))
    }
}

/// `at` + `by`.
pub fn add(at: &Time, by: Duration) -> Time {
    let by = SignedDuration::try_from(by).unwrap_or(SignedDuration::MAX);
    Time(at.0.saturating_add(by).unwrap_or(at.0))
}

/// Whether `a` is strictly before `b`.
pub fn is_before(a: &Time, b: &Time) -> bool {
    a.0 < b.0
}

/// How long from `now` until `at` (zero when it has passed).
pub fn until(now: &Time, at: &Time) -> Duration {
    let left = at.0.duration_since(now.0);
    Duration::try_from(left).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    #[test]
    fn the_wait_doubles_and_is_bounded() {
        let backoff = Backoff::default();
        let waits: Vec<u64> = (1..=8).map(|f| backoff.delay(f).as_secs()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(300));
        assert_eq!(backoff.retry_at(&at(100), 2), at(120));
        assert_eq!(until(&at(100), &at(130)), Duration::from_secs(30));
        assert_eq!(until(&at(130), &at(100)), Duration::ZERO);
    }

    #[test]
    fn failures_are_forgotten_after_ten_minutes_of_serving() {
        let backoff = Backoff::default();
        assert!(!backoff.is_stable(Some(&at(0)), &at(599)));
        assert!(backoff.is_stable(Some(&at(0)), &at(600)));
        assert!(!backoff.is_stable(None, &at(10_000)));
    }
}
