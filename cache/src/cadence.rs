//! When a fetch writes its record while files arrive: after every file, a record of a
//! repository of thousands of small files is rewritten thousands of times (each write the whole
//! record, which names every file), which costs more than the files. Written at most every
//! `EVERY` or every `FILES` files, and always at the end. A crash in between loses only the
//! note that the last files were verified: they are hashed again on the next fetch, never
//! served unverified.
use std::time::{Duration, Instant};

/// Longest time between two writes while files arrive.
pub const EVERY: Duration = Duration::from_secs(5);
/// Most files verified between two writes.
pub const FILES: usize = 256;

/// The writes of one fetch's record.
#[derive(Clone, Copy, Debug)]
pub struct Cadence {
    last: Instant,
    files: usize,
}

impl Cadence {
    /// A cadence whose last write was at `now`.
    pub fn new(now: Instant) -> Cadence {
        Cadence {
            last: now,
            files: 0,
        }
    }

    /// One more file verified at `now`: whether to write the record now (and, if so, the
    /// count starts again).
    pub fn file_done(&mut self, now: Instant) -> bool {
        self.files += 1;
        if self.files >= FILES || now.saturating_duration_since(self.last) >= EVERY {
            *self = Cadence::new(now);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_thousand_quick_files_write_the_record_sixteen_times_not_four_thousand() {
        let start = Instant::now();
        let mut cadence = Cadence::new(start);
        let writes = (0..4000)
            .filter(|i| cadence.file_done(start + Duration::from_millis(*i / 4)))
            .count();
        assert_eq!(writes, 4000 / FILES);
    }

    #[test]
    fn a_slow_file_is_recorded_once_the_period_is_over() {
        let start = Instant::now();
        let mut cadence = Cadence::new(start);
        assert!(!cadence.file_done(start + Duration::from_secs(1)));
        assert!(cadence.file_done(start + EVERY));
        assert!(!cadence.file_done(start + EVERY + Duration::from_secs(1)));
    }
}
