//! A batch attempt whose pod the kubelet refused at admission (pure): the next attempt runs the
//! same plan, within `maxAttempts`, after a backoff — 10 s after the first refusal in a row,
//! doubling to at most 5 minutes, counted from when the refusal was seen (`attempts[].endTime`).
//! A node whose device plugin fails `Allocate` refuses every pod placed there: a new pod at
//! once would be refused at once too. Evictions, preemptions and drains start the next
//! attempt at once (`Start::AfterDisruption`).
use vramfit_api::conditions::{ConditionType, Reason};
use vramfit_api::{Attempt, AttemptOutcome, Fallback, Phase};

use super::{Draft, Start};
use crate::backoff::{Backoff, is_before, until};

impl Draft<'_> {
    /// Rule 1 after a refusal at admission: the same fallback and the step's text, or `None`
    /// when the job ended (no attempt left) or waits for its backoff (recorded, with a wake).
    pub(super) fn after_admission_refusal(
        &mut self,
        how: Start,
        current: &Fallback,
    ) -> Option<(Start, Fallback, Option<String>)> {
        let previous = self.status.attempt_count;
        let max = self.obs.job.spec.max_attempts;
        let why = self.last_failure_message();
        if previous >= max {
            let message = format!(
                "attempt {previous} was refused by the kubelet at admission and all {max} attempts are used: {why}"
            );
            self.fail(Reason::AttemptsExhausted, message, false);
            return None;
        }
        let refusals = refusals_in_a_row(&self.status.attempts);
        let backoff = Backoff::default();
        let due = self
            .status
            .attempts
            .last()
            .and_then(|a| a.end_time.as_ref())
            .map(|ended| backoff.retry_at(ended, refusals));
        if let Some(due) = due.filter(|due| is_before(self.now(), due)) {
            let wait = backoff.delay(refusals).as_secs();
            self.status.phase = Some(Phase::Pending);
            self.set(
                ConditionType::Scheduled,
                false,
                Reason::AdmissionRefused,
                format!(
                    "attempt {previous}'s pod was refused by the kubelet at admission ({refusals} in a row): {why}; attempt {} at {} ({wait} s backoff)",
                    previous + 1,
                    due.0
                ),
            );
            self.set(
                ConditionType::Ready,
                false,
                Reason::NotRunning,
                "no pod runs",
            );
            self.wake_in = Some(until(self.now(), &due));
            return None;
        }
        Some((
            how,
            current.clone(),
            Some(format!("same plan again after a backoff: {why}")),
        ))
    }
}

/// How many of the last attempts in a row the kubelet refused at admission.
fn refusals_in_a_row(attempts: &[Attempt]) -> u32 {
    let refused = attempts
        .iter()
        .rev()
        .take_while(|a| a.outcome == Some(AttemptOutcome::AdmissionRefused))
        .count();
    u32::try_from(refused).unwrap_or(u32::MAX)
}
