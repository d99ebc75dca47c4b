//! How a fine-tuning job's effective batch (sequences per optimizer step, a hyperparameter its
//! learning-rate schedule is tuned for) splits into micro-batch × GPUs × gradient accumulation
//! (docs/tuning.md). Exactly the asked number whenever a micro-batch no larger than the
//! largest that fits makes it; otherwise the smallest overshoot.

/// Micro-batch per GPU, accumulation steps, and the effective batch they make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchSplit {
    /// Sequences per GPU per forward pass.
    pub micro_batch: u32,
    /// Micro-batches accumulated per optimizer step.
    pub accumulation: u32,
    /// Sequences per optimizer step over all GPUs: micro-batch × GPUs × accumulation.
    pub effective: u32,
}

impl BatchSplit {
    /// Whether the split makes exactly `asked` sequences per step.
    pub fn is_exact(&self, asked: u32) -> bool {
        self.effective == asked
    }
}

/// The split of `asked` sequences per optimizer step over `gpus` GPUs, each taking at most
/// `largest` sequences at once (the largest micro-batch that fits). The largest micro-batch
/// that makes `asked` exactly (micro-batch × GPUs divides it); when none does (the GPU count
/// does not divide `asked`), the one whose effective batch overshoots least, the larger
/// micro-batch on a tie (fewer accumulation steps). Never fewer sequences than asked.
pub fn split(asked: u32, gpus: u32, largest: u32) -> BatchSplit {
    let asked = u64::from(asked.max(1));
    let gpus = u64::from(gpus.max(1));
    // (overshoot, split) of one micro-batch; in u64, where no u32 input comes near overflowing
    // (the saturating operations never saturate).
    let with = |micro_batch: u32| {
        let per_step = u64::from(micro_batch).saturating_mul(gpus);
        let accumulation = asked.div_ceil(per_step);
        let effective = per_step.saturating_mul(accumulation);
        let split = BatchSplit {
            micro_batch,
            accumulation: u32::try_from(accumulation).unwrap_or(u32::MAX),
            effective: u32::try_from(effective).unwrap_or(u32::MAX),
        };
        (effective.saturating_sub(asked), split)
    };
    // Largest first, so that the first exact split is the largest exact micro-batch and a
    // tie in overshoot keeps the larger micro-batch. At most `largest` (≤ 65,536) steps.
    let largest = largest.max(1);
    let mut best = with(largest);
    for micro_batch in (1..largest).rev() {
        if best.0 == 0 {
            break;
        }
        let candidate = with(micro_batch);
        if candidate.0 < best.0 {
            best = candidate;
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(asked: u32, gpus: u32, largest: u32) -> (u32, u32, u32) {
        let s = split(asked, gpus, largest);
        (s.micro_batch, s.accumulation, s.effective)
    }

    #[test]
    fn an_exact_split_takes_the_largest_micro_batch_that_divides_the_effective_batch() {
        // QLoRA of Mistral-7B on an A10 fits 7 sequences of 512 tokens.
        assert_eq!(of(8, 1, 7), (4, 2, 8));
        assert_eq!(of(16, 1, 7), (4, 4, 16));
        assert_eq!(of(16, 1, 8), (8, 2, 16));
        assert_eq!(of(16, 1, 16), (16, 1, 16));
        assert_eq!(of(32, 1, 7), (4, 8, 32));
        assert_eq!(of(12, 1, 7), (6, 2, 12));
        // A prime effective batch: micro-batch 1, still exact.
        assert_eq!(of(13, 1, 7), (1, 13, 13));
        // Over GPUs: micro-batch × GPUs divides it.
        assert_eq!(of(32, 4, 7), (4, 2, 32));
        assert_eq!(of(24, 2, 5), (4, 3, 24));
    }

    #[test]
    fn without_an_exact_split_the_overshoot_is_the_smallest() {
        // 10 over 4 GPUs: micro-batch 3 → 12 (1 step), 1 → 12 (3 steps), 2 → 16. The larger.
        assert_eq!(of(10, 4, 3), (3, 1, 12));
        assert_eq!(of(10, 4, 2), (1, 3, 12));
        // 7 over 2 GPUs: 8 at best.
        assert_eq!(of(7, 2, 4), (4, 1, 8));
        assert_eq!(of(7, 2, 3), (2, 2, 8));
    }

    #[test]
    fn degenerate_inputs_still_split() {
        assert_eq!(of(0, 0, 0), (1, 1, 1));
        assert_eq!(of(65_536, 1, 65_536), (65_536, 1, 65_536));
        assert_eq!(of(65_536, 64, 1), (1, 1_024, 65_536));
    }
}
