//! What a fine-tuning workload reports when it ends (docs/workload-contract.md): a loss that
//! became NaN or infinite (`LossCheckFailed`, the training counterpart of garbage output), or
//! its figures (`TrainingResult`: steps, tokens, seconds, final loss, peak memory). Both are
//! lines of the same `vramfit.io/v1` termination message as [`crate::workload_report`].
use serde::Deserialize;

use crate::workload_report::{JobResult, WorkSummary};

/// A loss check that failed: the loss became NaN or infinite at a step.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LossCheck {
    /// The check: `non-finite-loss`.
    pub check: String,
    /// The loss as the workload saw it: `nan`, `inf` or `-inf`.
    pub loss: String,
    /// The optimizer step it was seen at.
    pub step: u64,
    /// The compute dtype the model trained in (`bfloat16`, `float16`).
    pub dtype: String,
}

impl LossCheck {
    /// Whether the report is well formed: a named check, a non-finite loss, a dtype.
    pub fn is_valid(&self) -> bool {
        !self.check.is_empty()
            && ["nan", "inf", "-inf"].contains(&self.loss.as_str())
            && !self.dtype.is_empty()
    }
}

/// A finished training run's own figures.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainingSummary {
    /// Optimizer steps done.
    pub steps: u64,
    /// Training tokens processed (sequences × their tokens, over all GPUs).
    pub tokens: u64,
    /// Wall time of the training, seconds.
    pub seconds: f64,
    /// The loss at the last step.
    #[serde(default)]
    pub final_loss: Option<f64>,
    /// Peak memory allocated per visible GPU, MiB.
    #[serde(default)]
    pub peak_gpu_memory_mib: Vec<u64>,
    /// The LoRA adapter the run wrote to its output volume (methods `lora` and `qlora`).
    #[serde(default)]
    pub adapter: Option<crate::adapters::TrainedAdapter>,
}

impl TrainingSummary {
    /// The tokens as the work items of [`WorkSummary`], so that the same bounds apply.
    pub fn work(&self) -> WorkSummary {
        WorkSummary {
            items: self.tokens,
            seconds: self.seconds,
            peak_gpu_memory_mib: self.peak_gpu_memory_mib.clone(),
        }
    }

    /// Whether the report is well formed: finite, non-negative seconds, a finite loss, and an
    /// adapter report (if any) that is well formed.
    pub fn is_valid(&self) -> bool {
        self.seconds.is_finite()
            && self.seconds >= 0.0
            && self.final_loss.is_none_or(f64::is_finite)
            && self
                .adapter
                .as_ref()
                .is_none_or(crate::adapters::TrainedAdapter::is_valid)
    }
}

impl JobResult {
    /// The status figures of a training run: its tokens are the items (tokens per hour, and
    /// with a price the cost of a million tokens), with the steps, tokens per second and final
    /// loss. `work` is `summary.work()` as [`WorkSummary::bounded`] leaves it.
    pub fn of_training(
        summary: &TrainingSummary,
        work: &WorkSummary,
        hourly_price_cents: u32,
    ) -> Self {
        let mut result = JobResult::of(work, hourly_price_cents);
        let per_second = result.items_per_hour / 3600.0;
        result.steps = Some(summary.steps.min(crate::workload_report::MAX_ITEMS));
        result.tokens_per_second = Some(round(per_second, 1));
        result.final_loss = summary
            .final_loss
            .filter(|l| l.is_finite())
            .map(|l| round(l, 4));
        // Per million tokens from the unrounded figures: a token costs far less than the
        // 4 decimals of a cent that `cost_per_item_cents` keeps.
        result.cost_per_million_tokens_cents = (hourly_price_cents > 0 && result.items > 0)
            .then(|| {
                f64::from(hourly_price_cents) * result.seconds / 3600.0 / result.items as f64 * 1e6
            })
            .filter(|c| c.is_finite())
            .map(|c| round(c, 2));
        result.cost_per_item_cents = None;
        result.adapter = summary.adapter.clone();
        result
    }
}

fn round(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    let rounded = (value * scale).round() / scale;
    if rounded.is_finite() { rounded } else { value }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload_report::{WorkloadReport, parse};

    const DIVERGED: &str = r#"vramfit.io/v1 {"kind":"LossCheckFailed","check":"non-finite-loss","loss":"nan","step":12,"dtype":"float16"}"#;
    const TRAINED: &str = r#"vramfit.io/v1 {"kind":"TrainingResult","steps":100,"tokens":1638400,"seconds":3600.0,"tokensPerSecond":455.1,"finalLoss":1.2345678,"peakGpuMemoryMib":[17000]}"#;

    #[test]
    fn the_documented_training_reports_parse() {
        let Some(WorkloadReport::LossCheckFailed(check)) = parse(DIVERGED) else {
            panic!("{DIVERGED}");
        };
        assert_eq!(
            (check.loss.as_str(), check.step, check.dtype.as_str()),
            ("nan", 12, "float16")
        );
        let Some(WorkloadReport::TrainingResult(summary)) = parse(TRAINED) else {
            panic!("{TRAINED}");
        };
        assert_eq!((summary.steps, summary.tokens), (100, 1_638_400));
        assert_eq!(summary.final_loss, Some(1.2345678));
    }

    #[test]
    fn malformed_training_reports_are_no_report() {
        for message in [
            r#"vramfit.io/v1 {"kind":"LossCheckFailed","check":"non-finite-loss","loss":"1.5","step":1,"dtype":"float16"}"#,
            r#"vramfit.io/v1 {"kind":"LossCheckFailed","check":"non-finite-loss","loss":"nan","step":1,"dtype":""}"#,
            r#"vramfit.io/v1 {"kind":"LossCheckFailed","loss":"nan","step":1,"dtype":"float16"}"#,
            r#"vramfit.io/v1 {"kind":"TrainingResult","steps":1,"tokens":1,"seconds":-1}"#,
            r#"vramfit.io/v1 {"kind":"TrainingResult","steps":-1,"tokens":1,"seconds":1}"#,
            r#"vramfit.io/v1 {"kind":"TrainingResult","steps":1,"seconds":1}"#,
        ] {
            assert_eq!(parse(message), None, "{message}");
        }
    }

    #[test]
    fn a_training_result_is_priced_per_million_tokens() {
        let Some(WorkloadReport::TrainingResult(summary)) = parse(TRAINED) else {
            panic!("{TRAINED}");
        };
        // 1,638,400 tokens in an hour at 60 cents an hour: 36.62 cents per million tokens.
        let result = JobResult::of_training(&summary, &summary.work().bounded(None), 60);
        assert_eq!(result.items, 1_638_400);
        assert_eq!(result.tokens_per_second, Some(455.1));
        assert_eq!(result.cost_per_million_tokens_cents, Some(36.62));
        assert_eq!(result.cost_per_item_cents, None);
        assert_eq!(result.final_loss, Some(1.2346));
        assert_eq!(result.steps, Some(100));
        let unpriced = JobResult::of_training(&summary, &summary.work(), 0);
        assert_eq!(unpriced.cost_per_million_tokens_cents, None);
    }

    /// The line the scripted workload writes after a LoRA run (workload/examples/scripted).
    const TRAINED_ADAPTER: &str = r#"vramfit.io/v1 {"kind":"TrainingResult","steps":3,"tokens":6144,"seconds":0.03,"tokensPerSecond":201876.9,"finalLoss":2.307692,"peakGpuMemoryMib":[],"adapter":{"files":["adapter_config.json","adapter_model.gguf"],"rank":8,"alpha":16.0,"targetModules":["q_proj","v_proj"],"baseModel":"example/tiny-llama","bytes":66336}}"#;

    #[test]
    fn a_reported_adapter_reaches_the_result_and_a_malformed_one_refuses_the_report() {
        let Some(WorkloadReport::TrainingResult(summary)) = parse(TRAINED_ADAPTER) else {
            panic!("{TRAINED_ADAPTER}");
        };
        let result = JobResult::of_training(&summary, &summary.work(), 0);
        let adapter = result.adapter.expect("the adapter in status.result");
        assert_eq!(
            (adapter.rank, adapter.file_ending(".gguf")),
            (8, Some("adapter_model.gguf"))
        );
        for bad in [
            r#""files":["../etc/passwd"],"rank":8"#,
            r#""files":["/abs.gguf"],"rank":8"#,
            r#""files":[],"rank":8"#,
            r#""files":["a.gguf"],"rank":0"#,
            r#""files":["a.gguf"],"rank":8,"alpha":-1"#,
            r#""files":["a.gguf"],"rank":8,"targetModules":["q proj"]"#,
        ] {
            let line = format!(
                r#"vramfit.io/v1 {{"kind":"TrainingResult","steps":1,"tokens":1,"seconds":1,"adapter":{{{bad}}}}}"#
            );
            assert_eq!(parse(&line), None, "{line}");
        }
    }
}
