//! What a comparison counts: the items of an inference job (images captioned, prompts
//! answered), or the training tokens of a fine-tuning job. The figures and their words follow.
use serde::Serialize;
use vramfit_planner::JobInput;

/// The unit of a comparison's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Unit {
    /// Items: seconds per item, items per minute, dollars per 1,000 items.
    #[default]
    Items,
    /// Training tokens: tokens per second, dollars per million tokens.
    TrainingTokens,
}

impl Unit {
    /// A fine-tuning job counts tokens; any other, items.
    pub fn of(input: &JobInput) -> Self {
        if input.tuning.is_some() {
            Unit::TrainingTokens
        } else {
            Unit::Items
        }
    }

    /// The rate column's header.
    pub fn rate_header(self) -> &'static str {
        match self {
            Unit::Items => "ITEMS/MIN",
            Unit::TrainingTokens => "TOKENS/S",
        }
    }

    /// The cost column's header.
    pub fn cost_header(self) -> &'static str {
        match self {
            Unit::Items => "$/1K ITEMS",
            Unit::TrainingTokens => "$/1M TOKENS",
        }
    }

    /// The rate in words.
    pub fn rate_words(self) -> &'static str {
        match self {
            Unit::Items => "items per minute",
            Unit::TrainingTokens => "training tokens per second",
        }
    }

    /// What the cost is of, in words.
    pub fn cost_words(self) -> &'static str {
        match self {
            Unit::Items => "per 1,000 items",
            Unit::TrainingTokens => "per million training tokens",
        }
    }

    /// The rate of `items` in `seconds`.
    pub fn rate(self, items: u64, seconds: f64) -> f64 {
        match self {
            Unit::Items => items as f64 * 60.0 / seconds,
            Unit::TrainingTokens => items as f64 / seconds,
        }
    }

    /// Dollars for the cost's quantity (1,000 items, a million tokens) at `dollars_per_hour`.
    pub fn cost(self, dollars_per_hour: f64, items: u64, seconds: f64) -> f64 {
        let per_item = dollars_per_hour * seconds / 3600.0 / items as f64;
        match self {
            Unit::Items => per_item * 1000.0,
            Unit::TrainingTokens => per_item * 1e6,
        }
    }

    /// The formulas, for the Markdown report.
    pub fn formulas(self) -> &'static str {
        match self {
            Unit::Items => {
                "Seconds per item = seconds / items; items per minute = 60 × items / seconds; \
                 $/1K items = $/h × seconds / 3600 / items × 1000; speed-up = optimized items per \
                 minute / baseline items per minute."
            }
            Unit::TrainingTokens => {
                "Tokens per second = training tokens / seconds; $/1M tokens = $/h × seconds / 3600 \
                 / tokens × 1,000,000; speed-up = optimized tokens per second / baseline tokens per \
                 second."
            }
        }
    }
}
