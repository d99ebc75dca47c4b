//! The goals of each mode and the table that ends every report: figure | goal | previous | now |
//! met/missed, the previous operator's figure beside the current one's (`--previous-operator`;
//! "—" without it). A goal is stated at one size (e.g. a rolling update of 500 jobs × 3
//! replicas): at another size the figure is shown and no verdict is given.
use super::Args;

/// The sizes of a run, which say whether a goal stated at some size applies.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sizes {
    pub jobs: usize,
    pub nodes: usize,
    pub serve_replicas: usize,
    pub group_nodes: usize,
}

impl Sizes {
    pub fn of(args: &Args) -> Self {
        Self {
            jobs: args.jobs,
            nodes: args.nodes,
            serve_replicas: args.serve_replicas,
            group_nodes: args.group_nodes,
        }
    }
}

/// At most `limit`, in the unit of the figure's value; `applies` when the run has the size the
/// goal is stated at.
#[derive(Clone, Debug, PartialEq)]
pub struct Goal {
    pub text: String,
    pub limit: f64,
    pub applies: bool,
}

impl Goal {
    /// `≤ limit unit`, stated at the size `at` (none: any size), which this run has or not.
    pub fn at_most(limit: f64, unit: &str, at: Option<&str>, applies: bool) -> Self {
        let mut text = format!("≤ {limit}{unit}");
        if let Some(at) = at {
            text.push_str(&format!(" at {at}"));
        }
        Self {
            text,
            limit,
            applies,
        }
    }
}

/// One row of the table: the value a goal compares (none: not measured), and as shown.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    pub name: String,
    pub goal: Option<Goal>,
    pub value: Option<f64>,
    pub text: String,
}

impl Figure {
    pub fn new(
        name: impl Into<String>,
        goal: Option<Goal>,
        value: Option<f64>,
        text: String,
    ) -> Self {
        Self {
            name: name.into(),
            goal,
            value,
            text,
        }
    }

    /// A figure shown for context, with no goal.
    pub fn shown(name: impl Into<String>, text: String) -> Self {
        Self::new(name, None, None, text)
    }

    /// "met" or "MISSED" where the goal applies to this run and the figure was measured.
    pub fn verdict(&self) -> String {
        match (&self.goal, self.value) {
            (None, _) => String::new(),
            (Some(goal), _) if !goal.applies => "— (another size)".to_string(),
            (Some(_), None) => "— (not measured)".to_string(),
            (Some(goal), Some(value)) if value <= goal.limit + 1e-9 => "met".to_string(),
            (Some(_), Some(_)) => "MISSED".to_string(),
        }
    }
}

/// The table: one row per figure of `now`, the same figure of `previous` (by name) beside it.
pub fn table(now: &[Figure], previous: Option<&[Figure]>) -> String {
    let mut out =
        String::from("| figure | goal | previous | now | met/missed |\n|---|---|---|---|---|\n");
    for figure in now {
        let before = previous
            .and_then(|p| p.iter().find(|f| f.name == figure.name))
            .map_or("—", |f| f.text.as_str());
        let goal = figure.goal.as_ref().map_or("—", |g| g.text.as_str());
        out.push_str(&format!(
            "| {} | {goal} | {before} | {} | {} |\n",
            figure.name,
            figure.text,
            figure.verdict()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss(value: f64, applies: bool) -> Figure {
        Figure::new(
            "operator peak RSS",
            Some(Goal::at_most(64.0, " MiB", Some("5,000 jobs"), applies)),
            Some(value),
            format!("{value} MiB"),
        )
    }

    #[test]
    fn a_goal_is_met_at_its_limit_missed_above_and_not_judged_at_another_size() {
        assert_eq!(rss(64.0, true).verdict(), "met");
        assert_eq!(rss(64.5, true).verdict(), "MISSED");
        assert_eq!(rss(80.0, false).verdict(), "— (another size)");
        let unmeasured = Figure {
            value: None,
            ..rss(1.0, true)
        };
        assert_eq!(unmeasured.verdict(), "— (not measured)");
        assert_eq!(Figure::shown("ratio", "0.2×".into()).verdict(), "");
    }

    #[test]
    fn the_table_puts_the_previous_figure_of_the_same_name_beside_the_current_one() {
        let now = [rss(60.0, true), Figure::shown("ratio", "0.26×".into())];
        let previous = [rss(75.5, true)];
        let text = table(&now, Some(&previous));
        assert_eq!(
            text,
            "| figure | goal | previous | now | met/missed |\n|---|---|---|---|---|\n\
             | operator peak RSS | ≤ 64 MiB at 5,000 jobs | 75.5 MiB | 60 MiB | met |\n\
             | ratio | — | — | 0.26× |  |\n"
        );
        assert!(table(&now, None).contains("| ≤ 64 MiB at 5,000 jobs | — | 60 MiB | met |"));
    }
}
