//! Exponential backoff for API retries: doubling from `initial` up to `max`, with up to a
//! quarter taken off at random so that a fleet of agents does not retry in lock-step after an
//! API server outage.
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// First retry delay.
pub const DEFAULT_INITIAL: Duration = Duration::from_secs(1);
/// Longest retry delay.
pub const DEFAULT_MAX: Duration = Duration::from_secs(60);

/// Retry delays: `initial`, `2 × initial`, ... capped at `max`, each with jitter.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(DEFAULT_INITIAL, DEFAULT_MAX)
    }
}

impl Backoff {
    /// Delays from `initial` doubling up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.min(max);
        Self {
            initial,
            max,
            next: initial,
        }
    }

    /// The delay before the next retry (with jitter), and doubles the one after.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        base.saturating_sub(base.mul_f64(jitter_fraction()))
    }

    /// After a success: the next failure starts again from `initial`.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

/// A random fraction in [0, 0.25), from the standard library's randomly keyed hasher.
fn jitter_fraction() -> f64 {
    let random = RandomState::new().build_hasher().finish();
    (random % 1000) as f64 / 4000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_reset() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(8));
        let bases = [1, 2, 4, 8, 8, 8];
        for base in bases {
            let delay = backoff.next_delay();
            let base = Duration::from_secs(base);
            assert!(delay <= base, "{delay:?} > {base:?}");
            assert!(delay >= base.mul_f64(0.75), "{delay:?} < 3/4 of {base:?}");
        }
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_secs(1));
    }

    #[test]
    fn the_cap_bounds_the_first_delay_too() {
        let mut backoff = Backoff::new(Duration::from_secs(10), Duration::from_secs(2));
        assert!(backoff.next_delay() <= Duration::from_secs(2));
    }
}
