//! Stabilization windows and rate limits with the meaning HPA's `behavior` gives them
//! (autoscaling/v2; the HPA controller's `stabilizeRecommendationWithBehaviors` and
//! `calculateScale{Up,Down}LimitWithScalingRules`):
//!
//! - a scale-up takes the lowest recommendation of its window, a scale-down the highest of
//!   its own, so a load that dips or spikes briefly moves nothing;
//! - each policy allows `value` replicas (`Pods`) or `value` percent (`Percent`) of change
//!   from the replicas the period started with; `selectPolicy` `Max` takes the policy that
//!   allows the most change, `Min` the least, `Disabled` none.
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use vramfit_api::autoscaling::{
    DEFAULT_SCALE_DOWN_WINDOW_SECONDS, PolicyKind, ScalingBehavior, ScalingPolicy, ScalingRules,
    SelectPolicy,
};

/// One direction's rules with the defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The stabilization window.
    pub window: Duration,
    /// Which policy wins.
    pub select: SelectPolicy,
    /// The policies.
    pub policies: Vec<ScalingPolicy>,
}

impl Rules {
    /// Scale-up rules: HPA's defaults (no window; 4 replicas or 100 % per 15 s, the larger)
    /// where the job leaves them unset.
    pub fn up(behavior: &ScalingBehavior) -> Self {
        Self::filled(
            behavior.scale_up.as_ref(),
            0,
            &[
                policy(PolicyKind::Pods, 4, 15),
                policy(PolicyKind::Percent, 100, 15),
            ],
        )
    }

    /// Scale-down rules: HPA's defaults (a 300 s window; 100 % per 15 s) where unset.
    pub fn down(behavior: &ScalingBehavior) -> Self {
        Self::filled(
            behavior.scale_down.as_ref(),
            DEFAULT_SCALE_DOWN_WINDOW_SECONDS,
            &[policy(PolicyKind::Percent, 100, 15)],
        )
    }

    fn filled(rules: Option<&ScalingRules>, window: u32, policies: &[ScalingPolicy]) -> Self {
        let rules = rules.cloned().unwrap_or_default();
        Rules {
            window: Duration::from_secs(u64::from(
                rules.stabilization_window_seconds.unwrap_or(window),
            )),
            select: rules.select_policy.unwrap_or(SelectPolicy::Max),
            policies: if rules.policies.is_empty() {
                policies.to_vec()
            } else {
                rules.policies
            },
        }
    }

    /// The longest period of a policy (how long scale events are kept).
    fn longest_period(&self) -> Duration {
        let seconds = self.policies.iter().map(|p| p.period_seconds).max();
        Duration::from_secs(u64::from(seconds.unwrap_or(0)))
    }
}

fn policy(kind: PolicyKind, value: u32, period_seconds: u32) -> ScalingPolicy {
    ScalingPolicy {
        kind,
        value,
        period_seconds,
    }
}

/// What a job's autoscaler remembers between passes: its recent recommendations and
/// changes. Kept in memory, as the HPA controller keeps them; a new leader starts a new
/// history holding the current replicas (so it scales down only after a full window).
#[derive(Clone, Debug, Default)]
pub struct History {
    recommendations: VecDeque<(Instant, u32)>,
    /// Counts held against a scale-down only: a new history's replicas, a person's change.
    holds: VecDeque<(Instant, u32)>,
    changes: VecDeque<(Instant, i64)>,
    /// The replicas the autoscaler last wrote or took as they were.
    acknowledged: Option<u32>,
}

impl History {
    /// The replicas the autoscaler last wrote or took as they were, if it remembers.
    pub fn acknowledged(&self) -> Option<u32> {
        self.acknowledged
    }

    /// Remembers `replicas` as written or taken.
    pub fn acknowledge(&mut self, replicas: u32) {
        self.acknowledged = Some(replicas);
    }

    /// A history that begins holding `replicas` at `now` (a scale-down waits a window past).
    pub fn starting_at(now: Instant, replicas: u32) -> Self {
        let mut history = History::default();
        history.hold(now, replicas);
        history
    }

    /// Records a recommendation.
    pub fn recommend(&mut self, now: Instant, replicas: u32) {
        self.recommendations.push_back((now, replicas));
    }

    /// Holds `replicas` against a scale-down for the scale-down window from `now` (a new
    /// leader's count, a person's change); a scale-up is not held back by it.
    pub fn hold(&mut self, now: Instant, replicas: u32) {
        self.holds.push_back((now, replicas));
    }

    /// Records a change of the replicas by the autoscaler.
    pub fn changed(&mut self, now: Instant, by: i64) {
        if by != 0 {
            self.changes.push_back((now, by));
        }
    }

    /// Forgets what no window or period can reach any more.
    pub fn forget_before(&mut self, now: Instant, up: &Rules, down: &Rules) {
        let keep = up.window.max(down.window);
        let keep_changes = up.longest_period().max(down.longest_period());
        self.recommendations
            .retain(|(at, _)| now.saturating_duration_since(*at) <= keep);
        self.holds
            .retain(|(at, _)| now.saturating_duration_since(*at) <= down.window);
        self.changes
            .retain(|(at, _)| now.saturating_duration_since(*at) <= keep_changes);
    }

    /// Recommendations within the history, oldest first (for status and tests).
    pub fn len(&self) -> usize {
        self.recommendations.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.recommendations.is_empty() && self.holds.is_empty() && self.changes.is_empty()
    }

    fn within(&self, now: Instant, window: Duration) -> impl Iterator<Item = u32> + '_ {
        self.recommendations
            .iter()
            .filter(move |(at, _)| now.saturating_duration_since(*at) <= window)
            .map(|(_, replicas)| *replicas)
    }

    /// Replicas added and removed by the autoscaler within `period` before `now`.
    fn changed_within(&self, now: Instant, period: Duration) -> (i64, i64) {
        self.changes
            .iter()
            .filter(|(at, _)| now.saturating_duration_since(*at) <= period)
            .fold((0, 0), |(added, removed), (_, by)| {
                if *by > 0 {
                    (added + by, removed)
                } else {
                    (added, removed - by)
                }
            })
    }
}

/// `recommendation` held to the windows: a scale-up to the lowest recommendation of the
/// scale-up window, a scale-down to the highest of the scale-down window (`recommendation`
/// itself included in both). Records `recommendation` in `history`.
pub fn stabilize(
    history: &mut History,
    now: Instant,
    recommendation: u32,
    current: u32,
    up: &Rules,
    down: &Rules,
) -> u32 {
    let lowest_up = history
        .within(now, up.window)
        .fold(recommendation, u32::min);
    let held = history
        .holds
        .iter()
        .filter(|(at, _)| now.saturating_duration_since(*at) <= down.window)
        .map(|(_, replicas)| *replicas);
    let highest_down = history
        .within(now, down.window)
        .chain(held)
        .fold(recommendation, u32::max);
    history.recommend(now, recommendation);
    if lowest_up > current {
        lowest_up
    } else if highest_down < current {
        highest_down
    } else {
        current
    }
}

/// `desired` held to the rate limits of the direction it moves in.
pub fn limit(
    history: &History,
    now: Instant,
    current: u32,
    desired: u32,
    up: &Rules,
    down: &Rules,
) -> u32 {
    if desired > current {
        desired.min(up_limit(history, now, current, up))
    } else if desired < current {
        desired.max(down_limit(history, now, current, down))
    } else {
        current
    }
}

fn up_limit(history: &History, now: Instant, current: u32, rules: &Rules) -> u32 {
    if rules.select == SelectPolicy::Disabled {
        return current;
    }
    let limits = rules.policies.iter().map(|policy| {
        let (added, removed) = history.changed_within(now, period(policy));
        let start = (i64::from(current) - added + removed).max(0) as f64;
        let limit = match policy.kind {
            PolicyKind::Pods => start + f64::from(policy.value),
            PolicyKind::Percent => (start * (1.0 + f64::from(policy.value) / 100.0)).ceil(),
        };
        to_u32(limit)
    });
    let chosen = match rules.select {
        SelectPolicy::Min => limits.min(),
        _ => limits.max(),
    };
    chosen.unwrap_or(current).max(current)
}

fn down_limit(history: &History, now: Instant, current: u32, rules: &Rules) -> u32 {
    if rules.select == SelectPolicy::Disabled {
        return current;
    }
    let limits = rules.policies.iter().map(|policy| {
        let (_, removed) = history.changed_within(now, period(policy));
        let start = (i64::from(current) + removed).max(0) as f64;
        let limit = match policy.kind {
            PolicyKind::Pods => start - f64::from(policy.value),
            PolicyKind::Percent => (start * (1.0 - f64::from(policy.value) / 100.0)).floor(),
        };
        to_u32(limit)
    });
    // The policy that allows the most change is the lowest limit.
    let chosen = match rules.select {
        SelectPolicy::Min => limits.max(),
        _ => limits.min(),
    };
    chosen.unwrap_or(current).min(current)
}

fn period(policy: &ScalingPolicy) -> Duration {
    Duration::from_secs(u64::from(policy.period_seconds))
}

fn to_u32(value: f64) -> u32 {
    if value.is_finite() && value > 0.0 {
        value.min(f64::from(u32::MAX)) as u32
    } else {
        0
    }
}
