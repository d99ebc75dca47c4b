//! One pass of a job's autoscaler: the load's recommendation held to the job's bounds, its
//! windows and its rates; a person's change held to for the scale-down window; nothing at
//! all while an HPA or KEDA autoscaler targets the job, or while a person keeps it at zero.
use std::time::Instant;

use vramfit_api::autoscaling::AutoscalingSpec;

use super::behavior::{self, History, Rules};
use super::load::{JobLoad, Replica};
use super::recommend::{self, Load, Why};

/// What one pass decides from.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// `serve.autoscaling`.
    pub spec: &'a AutoscalingSpec,
    /// The replicas that have a pod, with their capacity and load.
    pub replicas: &'a [Replica],
    /// `spec.serve.replicas`.
    pub current: u32,
    /// `status.autoscaling.desiredReplicas`: what the autoscaler wrote or took last (its own
    /// memory of it comes first).
    pub last_scaled: Option<u32>,
    /// Concurrency of the replica the job would add next.
    pub next_capacity: u32,
    /// The HorizontalPodAutoscaler (KEDA's included) that targets the job, by name.
    pub external: Option<&'a str>,
    /// Now.
    pub now: Instant,
}

/// What the pass concluded, as the `Autoscaling` condition's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Replicas added.
    ScaledUp,
    /// Replicas removed.
    ScaledDown,
    /// The load is at the target.
    WithinTarget,
    /// The load is above the target, and the replicas starting cover it.
    ReplicasStarting,
    /// The load asks for a change that the window or the rate limit holds back.
    Stabilizing,
    /// The load asks for more than `maxReplicas`.
    AtMaxReplicas,
    /// A person changed the replicas: held to for the scale-down window.
    ManualChange,
    /// No replica's metrics could be read: the replicas stay.
    MetricsUnavailable,
    /// A person set the replicas to 0: the autoscaler stays out until they are above 0.
    ScaledToZero,
    /// An HPA or a KEDA ScaledObject targets the job: the autoscaler stays out.
    ExternalAutoscaler,
}

impl Outcome {
    /// Whether the autoscaler is acting (the condition's status).
    pub fn active(self) -> bool {
        !matches!(
            self,
            Outcome::MetricsUnavailable | Outcome::ScaledToZero | Outcome::ExternalAutoscaler
        )
    }
}

/// One pass's decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Replicas the autoscaler wants.
    pub desired: u32,
    /// Replicas to write to `spec.serve.replicas`, when they change.
    pub write: Option<u32>,
    /// The load over the read replicas.
    pub load: JobLoad,
    /// The outcome.
    pub outcome: Outcome,
    /// One line for the condition and the event.
    pub message: String,
}

/// Decides one pass, recording it in `history`.
pub fn decide(inputs: &Inputs, history: &mut History) -> Decision {
    let load = JobLoad::of(inputs.replicas);
    let current = inputs.current;
    let stay = |outcome, message: String| Decision {
        desired: current,
        write: None,
        load,
        outcome,
        message,
    };
    if let Some(hpa) = inputs.external {
        *history = History::default();
        return stay(
            Outcome::ExternalAutoscaler,
            format!(
                "HorizontalPodAutoscaler {hpa} scales this job: vramfit's autoscaler stays out while it does"
            ),
        );
    }
    if current == 0 {
        *history = History::default();
        return stay(
            Outcome::ScaledToZero,
            "serve.replicas is 0: the autoscaler resumes once it is set above 0".to_string(),
        );
    }
    let (up, down) = (
        Rules::up(&inputs.spec.behavior),
        Rules::down(&inputs.spec.behavior),
    );
    history.forget_before(inputs.now, &up, &down);
    // What the autoscaler wrote last: its own memory (the status of a pass that wrote is not
    // written), else the status.
    let known = history.acknowledged().or(inputs.last_scaled);
    let manual = known.is_some_and(|written| written != current);
    history.acknowledge(current);
    if history.is_empty() || manual {
        // A new history (a new leader) or a person's value: a scale-down waits a whole
        // window past it; a scale-up the load asks for is not held back.
        history.hold(inputs.now, current);
    }
    let recommendation = recommend::recommend(&Load {
        replicas: inputs.replicas,
        current,
        target: f64::from(inputs.spec.target_utilization_percent) / 100.0,
        next_capacity: inputs.next_capacity,
    });
    let (min, max) = (
        inputs.spec.min_replicas.max(1),
        inputs
            .spec
            .max_replicas
            .max(inputs.spec.min_replicas.max(1)),
    );
    let bounded = recommendation.replicas.clamp(min, max);
    let stable = behavior::stabilize(history, inputs.now, bounded, current, &up, &down);
    let desired = behavior::limit(history, inputs.now, current, stable, &up, &down);
    let utilization = describe(&load);
    if desired != current {
        history.changed(inputs.now, i64::from(desired) - i64::from(current));
        history.acknowledge(desired);
        let outcome = if desired > current {
            Outcome::ScaledUp
        } else {
            Outcome::ScaledDown
        };
        return Decision {
            desired,
            write: Some(desired),
            load,
            outcome,
            message: format!("{current} → {desired} replicas: {utilization}"),
        };
    }
    let (outcome, message) = if recommendation.why == Why::NoReading {
        (
            Outcome::MetricsUnavailable,
            format!("no replica's metrics could be read: {current} replicas stay"),
        )
    } else if recommendation.why == Why::Starting {
        (
            Outcome::ReplicasStarting,
            format!("{current} replicas, some starting, which cover the {utilization}"),
        )
    } else if manual && bounded != current {
        (
            Outcome::ManualChange,
            format!(
                "{current} replicas set by hand, held for the scale-down window ({utilization})"
            ),
        )
    } else if recommendation.replicas > max && current >= max {
        (
            Outcome::AtMaxReplicas,
            format!("at maxReplicas {max}: {utilization}"),
        )
    } else if bounded != current {
        (
            Outcome::Stabilizing,
            format!(
                "the load asks for {bounded} replicas; held at {current} by the stabilization window or rate limit ({utilization})"
            ),
        )
    } else {
        (
            Outcome::WithinTarget,
            format!("{current} replicas: {utilization}"),
        )
    };
    Decision {
        desired,
        write: None,
        load,
        outcome,
        message,
    }
}

/// "load 83 % of 72 sequences on 2 replicas read (target 70 %)"-like line, without target.
fn describe(load: &JobLoad) -> String {
    match load.utilization() {
        Some(u) => format!(
            "load {:.0} % of {} sequences planned on {} replica{} read",
            u * 100.0,
            load.read_capacity,
            load.read,
            if load.read == 1 { "" } else { "s" }
        ),
        None => "no replica read".to_string(),
    }
}
