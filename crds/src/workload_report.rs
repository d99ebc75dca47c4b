//! What a workload container reports when it ends: one line in its termination message,
//! `vramfit.io/v1 {json}` (docs/workload-contract.md; written by the `vramfit_workload`
//! Python package). Anything else in the message is not a report.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The prefix of a version-1 report.
pub const PREFIX: &str = "vramfit.io/v1 ";
/// Kubernetes keeps at most this many bytes of a termination message; a longer text was not
/// written by a conforming workload.
pub const MAX_BYTES: usize = 4096;

/// A report the operator acts on.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadReport {
    /// The model's output was garbage.
    OutputCheckFailed(OutputCheck),
    /// The work finished.
    Result(WorkSummary),
    /// A fine-tuning run's loss became NaN or infinite.
    LossCheckFailed(crate::training_report::LossCheck),
    /// A fine-tuning run finished.
    TrainingResult(crate::training_report::TrainingSummary),
}

/// The numbers of a failed output check.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputCheck {
    /// The check: `degenerate-output`.
    pub check: String,
    /// The pattern that weighed most: `exclamation`, `repeated-char`, …
    pub pattern: String,
    /// Share of degenerate output, 0 to 1.
    pub ratio: f64,
    /// The ratio above which output is garbage.
    pub threshold: f64,
    /// The dtype the model ran in.
    pub dtype: String,
    /// Outputs the ratio is over.
    pub samples: u64,
}

/// A finished workload's own figures.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkSummary {
    /// Items done.
    pub items: u64,
    /// Wall time of the work, seconds.
    pub seconds: f64,
    /// Peak memory allocated per visible GPU, MiB.
    #[serde(default)]
    pub peak_gpu_memory_mib: Vec<u64>,
}

/// Most items a report may claim: 2^53, the largest whole number every JSON reader holds
/// exactly, and far below where a counter of them could wrap.
pub const MAX_ITEMS: u64 = 1 << 53;
/// Most seconds a report may claim when its container's run time is unknown: a year.
pub const MAX_SECONDS_UNTIMED: f64 = 366.0 * 86_400.0;
/// Largest peak memory per GPU a report may claim, MiB (1 TiB).
pub const MAX_GPU_MEMORY_MIB: u64 = 1 << 20;

impl WorkSummary {
    /// The figures as far as the pod's own facts allow: the seconds within the container's run
    /// time `run_seconds` (from its start and finish times, which Kubernetes keeps to the
    /// second: one more second is allowed; [`MAX_SECONDS_UNTIMED`] when unknown), a
    /// non-finite or negative figure as 0, items at most [`MAX_ITEMS`], one peak per GPU a node
    /// can have, each at most [`MAX_GPU_MEMORY_MIB`]. A workload's report is its own claim: what
    /// reaches status and metrics must not be able to break either.
    pub fn bounded(&self, run_seconds: Option<f64>) -> Self {
        let limit = run_seconds
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map_or(MAX_SECONDS_UNTIMED, |s| (s + 1.0).min(MAX_SECONDS_UNTIMED));
        let seconds = if self.seconds.is_finite() {
            self.seconds.clamp(0.0, limit)
        } else {
            0.0
        };
        Self {
            items: self.items.min(MAX_ITEMS),
            seconds,
            peak_gpu_memory_mib: self
                .peak_gpu_memory_mib
                .iter()
                .take(crate::labels::MAX_GPUS_PER_NODE as usize)
                .map(|mib| (*mib).min(MAX_GPU_MEMORY_MIB))
                .collect(),
        }
    }
}

/// A finished job's figures, in its status: the workload's summary and what it cost at the
/// class's price.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobResult {
    /// Items done.
    pub items: u64,
    /// Wall time of the work, seconds.
    pub seconds: f64,
    /// Items per hour of work.
    pub items_per_hour: f64,
    /// Peak GPU memory per GPU, MiB.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peak_gpu_memory_mib: Vec<u64>,
    /// Cost of one item in US cents at the class's hourly price (absent without a price or
    /// without items).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_per_item_cents: Option<f64>,
    /// Fine-tuning: optimizer steps done (the items are the training tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    /// Fine-tuning: training tokens per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_second: Option<f64>,
    /// Fine-tuning: the loss at the last step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_loss: Option<f64>,
    /// Fine-tuning: cost of a million training tokens in US cents at the class's price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_per_million_tokens_cents: Option<f64>,
    /// Fine-tuning: the adapter the run wrote to its output volume, as it reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<crate::adapters::TrainedAdapter>,
}

impl JobResult {
    /// The status figures of `summary` (as [`WorkSummary::bounded`] leaves it) for a plan
    /// priced at `hourly_price_cents` (0: unknown). Every figure is finite: a non-finite one
    /// would be written as `null` into a required field, and the status write would fail.
    pub fn of(summary: &WorkSummary, hourly_price_cents: u32) -> Self {
        let seconds = round(finite_or_zero(summary.seconds), 3);
        // Items per hour over the seconds as status keeps them (to the millisecond): a report
        // of a few items in a femtosecond is not a rate.
        let per_hour = if seconds > 0.0 {
            summary.items as f64 * 3600.0 / seconds
        } else {
            0.0
        };
        let cost = (hourly_price_cents > 0 && summary.items > 0)
            .then(|| f64::from(hourly_price_cents) * seconds / 3600.0 / summary.items as f64)
            .filter(|c| c.is_finite());
        Self {
            items: summary.items.min(MAX_ITEMS),
            seconds,
            items_per_hour: round(finite_or_zero(per_hour), 1),
            peak_gpu_memory_mib: summary.peak_gpu_memory_mib.clone(),
            cost_per_item_cents: cost.map(|c| round(c, 4)),
            steps: None,
            tokens_per_second: None,
            final_loss: None,
            cost_per_million_tokens_cents: None,
            adapter: None,
        }
    }
}

fn finite_or_zero(value: f64) -> f64 {
    if value.is_finite() { value } else { 0.0 }
}

/// `value` rounded to `decimals`, or as it is where rounding would leave the finite numbers.
fn round(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    let rounded = (value * scale).round() / scale;
    if rounded.is_finite() { rounded } else { value }
}

/// The kinds this reader knows; any other kind is no report.
#[derive(Deserialize)]
#[serde(tag = "kind")]
enum Wire {
    OutputCheckFailed(OutputCheck),
    Result(WorkSummary),
    LossCheckFailed(crate::training_report::LossCheck),
    TrainingResult(crate::training_report::TrainingSummary),
}

/// The report in a container's termination message: the whole message, or its last line
/// (a job that takes its log tail as the message prints the report last). `None` for any
/// other text, an oversized one, a kind this reader does not know, or numbers out of range.
pub fn parse(message: &str) -> Option<WorkloadReport> {
    if message.len() > MAX_BYTES {
        return None;
    }
    let text = message.trim();
    parse_line(text).or_else(|| parse_line(text.lines().last()?.trim()))
}

fn parse_line(line: &str) -> Option<WorkloadReport> {
    let json = line.strip_prefix(PREFIX)?;
    match serde_json::from_str(json).ok()? {
        Wire::OutputCheckFailed(check) => {
            let in_unit = |x: f64| (0.0..=1.0).contains(&x);
            (in_unit(check.ratio) && in_unit(check.threshold) && !check.dtype.is_empty())
                .then_some(WorkloadReport::OutputCheckFailed(check))
        }
        Wire::Result(summary) => (summary.seconds.is_finite() && summary.seconds >= 0.0)
            .then_some(WorkloadReport::Result(summary)),
        Wire::LossCheckFailed(check) => check
            .is_valid()
            .then_some(WorkloadReport::LossCheckFailed(check)),
        Wire::TrainingResult(summary) => summary
            .is_valid()
            .then_some(WorkloadReport::TrainingResult(summary)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GARBAGE: &str = r#"vramfit.io/v1 {"kind":"OutputCheckFailed","check":"degenerate-output","pattern":"exclamation","ratio":0.97,"threshold":0.3,"dtype":"bfloat16","samples":8}"#;
    const RESULT: &str = r#"vramfit.io/v1 {"kind":"Result","items":120,"seconds":300.5,"itemsPerSecond":0.3993,"peakGpuMemoryMib":[15000,14900]}"#;

    #[test]
    fn both_kinds_of_the_documented_examples_parse() {
        let Some(WorkloadReport::OutputCheckFailed(check)) = parse(GARBAGE) else {
            panic!("{GARBAGE}");
        };
        assert_eq!(
            (
                check.pattern.as_str(),
                check.ratio,
                check.dtype.as_str(),
                check.samples
            ),
            ("exclamation", 0.97, "bfloat16", 8)
        );
        let Some(WorkloadReport::Result(summary)) = parse(&format!("{RESULT}\n")) else {
            panic!("{RESULT}");
        };
        assert_eq!(summary.items, 120);
        assert_eq!(summary.peak_gpu_memory_mib, [15000, 14900]);
    }

    #[test]
    fn the_report_may_be_the_last_line_of_a_log_tail() {
        let tail = format!("loading weights\ncaptioned 120 images\n{RESULT}");
        assert!(matches!(parse(&tail), Some(WorkloadReport::Result(_))));
        let earlier = format!("{RESULT}\ntraceback follows");
        assert_eq!(parse(&earlier), None, "only the last line counts");
    }

    #[test]
    fn malformed_messages_are_no_report() {
        for message in [
            "",
            "Error: CUDA out of memory",
            r#"{"kind":"Result","items":1,"seconds":1}"#,
            r#"vramfit.io/v2 {"kind":"Result","items":1,"seconds":1}"#,
            r#"vramfit.io/v1{"kind":"Result","items":1,"seconds":1}"#,
            r#"vramfit.io/v1 {"kind":"Result","items":1,"seconds":1"#,
            r#"vramfit.io/v1 {"kind":"Progress","items":1}"#,
            r#"vramfit.io/v1 {"kind":"Result","items":-1,"seconds":1}"#,
            r#"vramfit.io/v1 {"kind":"Result","items":1,"seconds":-2}"#,
            r#"vramfit.io/v1 {"kind":"OutputCheckFailed","check":"x","pattern":"y","ratio":1.5,"threshold":0.3,"dtype":"float16","samples":1}"#,
            r#"vramfit.io/v1 {"kind":"OutputCheckFailed","check":"x","pattern":"y","ratio":0.9,"threshold":0.3,"dtype":"","samples":1}"#,
        ] {
            assert_eq!(parse(message), None, "{message}");
        }
    }

    #[test]
    fn oversized_messages_are_no_report() {
        let padded = format!("{RESULT}{}", " ".repeat(MAX_BYTES));
        assert!(padded.trim().len() < MAX_BYTES);
        assert_eq!(parse(&padded), None, "over 4096 bytes as written");
        let unknown_fields = RESULT.replace(
            "\"items\":120",
            &format!("\"note\":\"{}\",\"items\":120", "x".repeat(100)),
        );
        assert!(
            matches!(parse(&unknown_fields), Some(WorkloadReport::Result(_))),
            "unknown fields are ignored"
        );
    }

    /// Regression: `seconds: 1e306` became `inf` when rounded, and `items: u64::MAX` over a
    /// tiny `seconds` an infinite rate: both serialised as `null` into required status
    /// fields, and the job's status write failed for ever.
    #[test]
    fn reported_figures_are_bounded_and_always_finite() {
        let huge = WorkSummary {
            items: u64::MAX,
            seconds: 1e306,
            peak_gpu_memory_mib: vec![u64::MAX; 1000],
        };
        let bounded = huge.bounded(Some(300.0));
        assert_eq!(bounded.items, MAX_ITEMS);
        assert_eq!(bounded.seconds, 301.0, "the container ran 300 s");
        assert_eq!(
            bounded.peak_gpu_memory_mib.len(),
            crate::labels::MAX_GPUS_PER_NODE as usize
        );
        assert!(
            bounded
                .peak_gpu_memory_mib
                .iter()
                .all(|m| *m == MAX_GPU_MEMORY_MIB)
        );
        assert_eq!(huge.bounded(None).seconds, MAX_SECONDS_UNTIMED);

        let fast = WorkSummary {
            items: u64::MAX,
            seconds: 1e-300,
            peak_gpu_memory_mib: vec![],
        };
        let tiny = JobResult::of(&fast.bounded(Some(1.0)), 400);
        for summary in [
            huge.bounded(Some(300.0)),
            fast.bounded(Some(1.0)),
            huge,
            fast,
        ] {
            let result = JobResult::of(&summary, 400);
            let json = serde_json::to_value(&result).unwrap();
            for field in ["items", "seconds", "itemsPerHour"] {
                assert!(json[field].is_number(), "{field} in {json}");
            }
            assert!(
                json["costPerItemCents"].is_number() || json.get("costPerItemCents").is_none(),
                "{json}"
            );
            assert!(result.items_per_hour.is_finite() && result.seconds.is_finite());
        }
        assert_eq!(
            (tiny.seconds, tiny.items_per_hour),
            (0.0, 0.0),
            "a rate over less than the millisecond status keeps is no rate"
        );
    }

    #[test]
    fn results_get_items_per_hour_and_cost_per_item() {
        let summary = WorkSummary {
            items: 120,
            seconds: 300.0,
            peak_gpu_memory_mib: vec![15000],
        };
        let result = JobResult::of(&summary, 60);
        assert_eq!(result.items_per_hour, 1440.0);
        // 60 cents an hour for 5 minutes is 5 cents, over 120 items.
        assert_eq!(result.cost_per_item_cents, Some(0.0417));
        assert_eq!(JobResult::of(&summary, 0).cost_per_item_cents, None);
        let idle = WorkSummary {
            items: 0,
            seconds: 0.0,
            peak_gpu_memory_mib: vec![],
        };
        let result = JobResult::of(&idle, 60);
        assert_eq!(
            (result.items_per_hour, result.cost_per_item_cents),
            (0.0, None)
        );
    }
}
