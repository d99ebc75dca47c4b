//! The autoscaler's decision: capacity-weighted load, HPA's windows and rates, bounds, a
//! person's change, an HPA in charge, and no oscillation under a steady load.
use std::time::{Duration, Instant};

use proptest::prelude::*;
use vramfit_api::autoscaling::{
    AutoscalingSpec, PolicyKind, ScalingBehavior, ScalingPolicy, ScalingRules, SelectPolicy,
};

use super::*;
use crate::autoscaling::recommend::{Load, Why, recommend};

fn spec(min: u32, max: u32) -> AutoscalingSpec {
    AutoscalingSpec {
        min_replicas: min,
        max_replicas: max,
        target_utilization_percent: 70,
        metric: None,
        behavior: ScalingBehavior::default(),
    }
}

fn busy(capacity: u32, in_flight: f64) -> Replica {
    Replica {
        capacity,
        state: ReplicaState::Read(Reading {
            running: in_flight.min(f64::from(capacity)),
            waiting: (in_flight - f64::from(capacity)).max(0.0),
            kv_cache_usage: None,
        }),
    }
}

fn pass(
    spec: &AutoscalingSpec,
    replicas: &[Replica],
    current: u32,
    history: &mut History,
    at: Instant,
) -> Decision {
    decide(
        &Inputs {
            spec,
            replicas,
            current,
            last_scaled: Some(current),
            next_capacity: 64,
            external: None,
            now: at,
        },
        history,
    )
}

#[test]
fn a_saturated_small_replica_beside_an_idle_large_one_is_a_lightly_loaded_job() {
    // 8 in flight on a V100 replica of 8, 0 on an H100 replica of 64: 8 of 72, 11 %.
    let replicas = [busy(8, 8.0), busy(64, 0.0)];
    let r = recommend(&Load {
        replicas: &replicas,
        current: 2,
        target: 0.7,
        next_capacity: 64,
    });
    assert_eq!(r.why, Why::BelowTarget);
    // It drops the replica of least capacity: the H100 one alone holds 8 at 12.5 %.
    assert_eq!(r.replicas, 1);
    // Counted alike (each "100 %" and "0 %" of one replica), the job would look half loaded.
    let alike = [busy(1, 1.0), busy(1, 0.0)];
    let r = recommend(&Load {
        replicas: &alike,
        current: 2,
        target: 0.7,
        next_capacity: 1,
    });
    assert_eq!(r.replicas, 2, "alike: 50 % against 70 %, neither can go");
}

#[test]
fn the_replica_planned_for_less_concurrency_counts_as_more_loaded() {
    let small = busy(8, 6.0).state;
    let large = busy(64, 6.0).state;
    let (ReplicaState::Read(small), ReplicaState::Read(large)) = (small, large) else {
        unreachable!()
    };
    assert!(small.utilization(8) > 0.7 && large.utilization(64) < 0.1);
}

#[test]
fn load_above_target_adds_replicas_of_the_next_class_s_capacity() {
    // 2 replicas of 16, 60 in flight: 187 % against 70 %; 60 / 0.7 = 86 of capacity needed,
    // 32 there, 54 more = one replica of 64.
    let replicas = [busy(16, 30.0), busy(16, 30.0)];
    let r = recommend(&Load {
        replicas: &replicas,
        current: 2,
        target: 0.7,
        next_capacity: 64,
    });
    assert_eq!((r.replicas, r.why), (3, Why::AboveTarget));
}

#[test]
fn replicas_starting_cover_the_load_they_were_added_for() {
    let replicas = [
        busy(16, 30.0),
        busy(16, 30.0),
        Replica {
            capacity: 64,
            state: ReplicaState::Starting,
        },
    ];
    let r = recommend(&Load {
        replicas: &replicas,
        current: 3,
        target: 0.7,
        next_capacity: 64,
    });
    assert_eq!((r.replicas, r.why), (3, Why::Starting));
    // A replica with no pod yet (waiting for room) counts the same.
    let r = recommend(&Load {
        replicas: &replicas[..2],
        current: 3,
        target: 0.7,
        next_capacity: 64,
    });
    assert_eq!((r.replicas, r.why), (3, Why::Starting));
}

#[test]
fn an_unread_replica_counts_as_full_for_a_scale_down() {
    let replicas = [
        busy(16, 0.0),
        Replica {
            capacity: 16,
            state: ReplicaState::Unread,
        },
    ];
    let r = recommend(&Load {
        replicas: &replicas,
        current: 2,
        target: 0.7,
        next_capacity: 16,
    });
    assert_eq!(
        r.replicas, 2,
        "16 of 32 taken as busy: 50 %, two still needed"
    );
}

#[test]
fn the_kv_cache_s_fill_counts_when_it_is_higher_than_the_requests() {
    let reading = Reading {
        running: 1.0,
        waiting: 0.0,
        kv_cache_usage: Some(0.95),
    };
    assert_eq!(reading.utilization(32), 0.95);
}

#[test]
fn scale_down_waits_for_the_window_then_goes() {
    let spec = spec(1, 5);
    let start = Instant::now();
    let mut history = History::starting_at(start, 3);
    let idle = [busy(16, 0.0), busy(16, 0.0), busy(16, 0.0)];
    let early = pass(
        &spec,
        &idle,
        3,
        &mut history,
        start + Duration::from_secs(60),
    );
    assert_eq!(early.write, None);
    assert_eq!(early.outcome, Outcome::Stabilizing, "{}", early.message);
    let late = pass(
        &spec,
        &idle,
        3,
        &mut history,
        start + Duration::from_secs(301),
    );
    assert_eq!(late.write, Some(1), "{}", late.message);
    assert_eq!(late.outcome, Outcome::ScaledDown);
}

#[test]
fn scale_up_is_limited_to_four_replicas_or_double_per_period() {
    let spec = spec(1, 50);
    let now = Instant::now();
    let mut history = History::default();
    let flooded = [busy(1, 1000.0)];
    let d = pass(&spec, &flooded, 1, &mut history, now);
    assert_eq!(d.write, Some(5), "max(1 + 4, 1 × 2): {}", d.message);
    // Within the same 15 s, nothing more: the period started at 1.
    let flooded5 = [busy(1, 100.0); 5];
    let d = pass(
        &spec,
        &flooded5,
        5,
        &mut history,
        now + Duration::from_secs(5),
    );
    assert_eq!(d.write, None, "{}", d.message);
    let d = pass(
        &spec,
        &flooded5,
        5,
        &mut history,
        now + Duration::from_secs(16),
    );
    assert_eq!(d.write, Some(10), "5 × 2 after the period: {}", d.message);
}

#[test]
fn bounds_hold_both_ways() {
    let spec = spec(2, 3);
    let now = Instant::now();
    let mut history = History::default();
    let d = pass(&spec, &[busy(1, 100.0); 3], 3, &mut history, now);
    assert_eq!((d.write, d.outcome), (None, Outcome::AtMaxReplicas));
    let mut history = History::default();
    let d = pass(&spec, &[busy(4, 3.0)], 1, &mut history, now);
    assert_eq!(d.write, Some(2), "below minReplicas: {}", d.message);
}

#[test]
fn a_person_s_change_is_held_for_the_scale_down_window() {
    let spec = spec(1, 10);
    let start = Instant::now();
    let mut history = History::starting_at(start, 1);
    let idle = [busy(16, 0.0); 6];
    let inputs = |at| Inputs {
        spec: &spec,
        replicas: &idle,
        current: 6,
        last_scaled: Some(1),
        next_capacity: 16,
        external: None,
        now: at,
    };
    let d = decide(&inputs(start + Duration::from_secs(400)), &mut history);
    assert_eq!(
        (d.write, d.outcome),
        (None, Outcome::ManualChange),
        "{}",
        d.message
    );
    // The status now says 6 (desired): the next passes are no longer a change by hand.
    let later = |at| Inputs {
        last_scaled: Some(6),
        ..inputs(at)
    };
    let d = decide(&later(start + Duration::from_secs(600)), &mut history);
    assert_eq!(
        d.write, None,
        "still within 300 s of the change: {}",
        d.message
    );
    let d = decide(&later(start + Duration::from_secs(701)), &mut history);
    assert_eq!(d.write, Some(1), "{}", d.message);
}

#[test]
fn the_autoscaler_s_own_write_is_not_taken_for_a_person_s() {
    let spec = spec(1, 10);
    let now = Instant::now();
    let mut history = History::default();
    let d = pass(&spec, &[busy(16, 40.0)], 1, &mut history, now);
    assert_eq!(d.write, Some(2), "one more replica of 64: {}", d.message);
    // The next pass sees the spec at 2 while the status (not written by a scaling pass)
    // still says 1.
    let d = decide(
        &Inputs {
            spec: &spec,
            replicas: &[busy(16, 40.0)],
            current: 2,
            last_scaled: Some(1),
            next_capacity: 64,
            external: None,
            now: now + Duration::from_secs(1),
        },
        &mut history,
    );
    assert_ne!(d.outcome, Outcome::ManualChange, "{}", d.message);
}

#[test]
fn an_hpa_or_zero_replicas_keep_the_autoscaler_out() {
    let spec = spec(1, 10);
    let mut history = History::default();
    let flooded = [busy(1, 100.0)];
    let d = decide(
        &Inputs {
            spec: &spec,
            replicas: &flooded,
            current: 1,
            last_scaled: None,
            next_capacity: 1,
            external: Some("keda-hpa-chat"),
            now: Instant::now(),
        },
        &mut history,
    );
    assert_eq!((d.write, d.outcome), (None, Outcome::ExternalAutoscaler));
    assert!(d.message.contains("keda-hpa-chat"));
    assert!(!d.outcome.active());
    let d = pass(&spec, &[], 0, &mut history, Instant::now());
    assert_eq!((d.write, d.outcome), (None, Outcome::ScaledToZero));
}

#[test]
fn no_reading_keeps_the_replicas_and_says_so() {
    let spec = spec(1, 10);
    let unread = [Replica {
        capacity: 16,
        state: ReplicaState::Unread,
    }; 2];
    let d = pass(&spec, &unread, 2, &mut History::default(), Instant::now());
    assert_eq!((d.write, d.outcome), (None, Outcome::MetricsUnavailable));
}

#[test]
fn select_policy_min_and_disabled_limit_the_change() {
    let rules = ScalingRules {
        stabilization_window_seconds: Some(0),
        select_policy: Some(SelectPolicy::Min),
        policies: vec![
            ScalingPolicy {
                kind: PolicyKind::Pods,
                value: 1,
                period_seconds: 60,
            },
            ScalingPolicy {
                kind: PolicyKind::Percent,
                value: 100,
                period_seconds: 60,
            },
        ],
    };
    let mut spec = spec(1, 20);
    spec.behavior.scale_up = Some(rules.clone());
    let d = pass(
        &spec,
        &[busy(1, 100.0); 4],
        4,
        &mut History::default(),
        Instant::now(),
    );
    assert_eq!(d.write, Some(5), "min(4 + 1, 4 × 2): {}", d.message);
    spec.behavior.scale_up = Some(ScalingRules {
        select_policy: Some(SelectPolicy::Disabled),
        ..rules
    });
    let d = pass(
        &spec,
        &[busy(1, 100.0); 4],
        4,
        &mut History::default(),
        Instant::now(),
    );
    assert_eq!(d.write, None);
}

proptest! {
    /// Under a steady load the replicas settle: at most one change of direction (a scale-up
    /// that added replicas larger than needed may be trimmed once, after the scale-down
    /// window), never up, down and up again; and every count is within bounds.
    #[test]
    fn a_steady_load_settles_and_never_flaps(
        in_flight in 0.0f64..400.0,
        capacities in proptest::collection::vec(prop_oneof![Just(8u32), Just(16), Just(64)], 1..6),
        min in 1u32..3,
        extra in 0u32..12,
    ) {
        let spec = spec(min, min + extra);
        let start = Instant::now();
        let mut history = History::starting_at(start, u32::try_from(capacities.len()).unwrap());
        let mut replicas: Vec<u32> = capacities.clone();
        let mut directions = Vec::new();
        for step in 0..120u64 {
            let at = start + Duration::from_secs(step * 15);
            let total: u32 = replicas.iter().sum();
            // The load spreads over the replicas in proportion to their capacity.
            let observed: Vec<Replica> = replicas
                .iter()
                .map(|&c| busy(c, in_flight * f64::from(c) / f64::from(total.max(1))))
                .collect();
            let current = u32::try_from(replicas.len()).unwrap();
            let d = pass(&spec, &observed, current, &mut history, at);
            prop_assert!(d.desired >= min.min(current) && d.desired <= (min + extra).max(current));
            if let Some(to) = d.write {
                directions.push(to > current);
                if to > current {
                    replicas.extend(std::iter::repeat_n(64, (to - current) as usize));
                } else {
                    replicas.sort_unstable();
                    replicas.drain(..(current - to) as usize);
                }
            }
        }
        let reversals = directions.windows(2).filter(|w| w[0] != w[1]).count();
        prop_assert!(reversals <= 1, "directions {directions:?}");
    }
}
