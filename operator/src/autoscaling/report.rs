//! What one pass puts in the job's status: `status.autoscaling` and the `Autoscaling`
//! condition (pure). The served pipelines write it with the rest of the status.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use vramfit_api::InferenceJobStatus;
use vramfit_api::autoscaling::AutoscalingStatus;
use vramfit_api::conditions::{ConditionType, ConditionsUpdate, Reason};

use super::decide::{Decision, Outcome};

/// A pass's status.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// `status.autoscaling`.
    pub status: AutoscalingStatus,
    /// The condition's reason.
    pub outcome: Outcome,
    /// The condition's message.
    pub message: String,
}

impl Report {
    /// The report of `decision`, keeping the last scale's time from `previous` unless this
    /// pass scaled (at `now`).
    pub fn of(decision: &Decision, previous: Option<&AutoscalingStatus>, now: &Time) -> Self {
        let load = decision.load;
        Report {
            status: AutoscalingStatus {
                desired_replicas: decision.desired,
                read_replicas: load.read,
                utilization_percent: load
                    .utilization()
                    .map(|u| (u * 100.0).round().clamp(0.0, 1e6) as u32),
                capacity: load.read_capacity,
                last_scale_time: if decision.write.is_some() {
                    Some(now.clone())
                } else {
                    previous.and_then(|p| p.last_scale_time.clone())
                },
            },
            outcome: decision.outcome,
            message: decision.message.clone(),
        }
    }

    /// Sets `status.autoscaling` and the `Autoscaling` condition of `status`.
    pub fn apply(&self, status: &mut InferenceJobStatus, generation: Option<i64>, now: &Time) {
        status.autoscaling = Some(self.status.clone());
        ConditionsUpdate::new(&mut status.conditions, generation, now).set(
            ConditionType::Autoscaling,
            self.outcome.active(),
            self.outcome.reason(),
            self.message.clone(),
        );
    }
}

impl Report {
    /// The report the job's status holds (`status.autoscaling` and the `Autoscaling`
    /// condition), to keep as it is; none where it holds no complete one.
    pub fn kept(status: &InferenceJobStatus) -> Option<Self> {
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::Autoscaling.as_str())?;
        Some(Report {
            status: status.autoscaling.clone()?,
            outcome: Outcome::from_reason(&condition.reason)?,
            message: condition.message.clone(),
        })
    }
}

/// A job that no longer autoscales: its autoscaling status and condition are removed.
pub fn clear(status: &mut InferenceJobStatus) {
    status.autoscaling = None;
    status
        .conditions
        .retain(|c| c.type_ != ConditionType::Autoscaling.as_str());
}

impl Outcome {
    /// Every outcome.
    const ALL: [Outcome; 10] = [
        Outcome::ScaledUp,
        Outcome::ScaledDown,
        Outcome::WithinTarget,
        Outcome::ReplicasStarting,
        Outcome::Stabilizing,
        Outcome::AtMaxReplicas,
        Outcome::ManualChange,
        Outcome::MetricsUnavailable,
        Outcome::ScaledToZero,
        Outcome::ExternalAutoscaler,
    ];

    /// The outcome whose condition reason is `reason`.
    pub fn from_reason(reason: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|outcome| outcome.reason().as_str() == reason)
    }

    /// The condition's reason.
    pub fn reason(self) -> Reason {
        match self {
            Outcome::ScaledUp => Reason::ScaledUp,
            Outcome::ScaledDown => Reason::ScaledDown,
            Outcome::WithinTarget => Reason::WithinTarget,
            Outcome::ReplicasStarting => Reason::ReplicasStarting,
            Outcome::Stabilizing => Reason::Stabilizing,
            Outcome::AtMaxReplicas => Reason::AtMaxReplicas,
            Outcome::ManualChange => Reason::ManualChange,
            Outcome::MetricsUnavailable => Reason::MetricsUnavailable,
            Outcome::ScaledToZero => Reason::ScaledToZero,
            Outcome::ExternalAutoscaler => Reason::ExternalAutoscaler,
        }
    }
}
