//! `serve.autoscaling`: a served job's replicas follow their load, measured on each replica's
//! own metrics against the concurrency planned for its class (docs/autoscaling.md), and what
//! the autoscaler last saw and did (`status.autoscaling`).
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Target load per replica when the job names none, percent of its planned concurrency.
pub const DEFAULT_TARGET_UTILIZATION_PERCENT: u32 = 70;
/// Seconds of recommendations a scale-down waits through when the job names none (HPA's).
pub const DEFAULT_SCALE_DOWN_WINDOW_SECONDS: u32 = 300;

/// How a served job scales on its load.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.maxReplicas >= self.minReplicas").message("autoscaling.maxReplicas must be at least minReplicas"))]
pub struct AutoscalingSpec {
    /// Fewest replicas (default 1). At least 1: the replicas' own metrics are the signal.
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 1, max = 100))]
    pub min_replicas: u32,
    /// Most replicas.
    #[schemars(range(min = 1, max = 100))]
    pub max_replicas: u32,
    /// Load the autoscaler keeps each replica at, percent of the concurrency planned for its
    /// class (`--max-num-seqs`, `--parallel`). Default 70.
    #[serde(default = "default_target")]
    #[schemars(range(min = 10, max = 100))]
    pub target_utilization_percent: u32,
    /// The gauge that counts a replica's requests in flight (running and queued), for the
    /// `transformers` and `custom` runtimes (required there; vLLM and llama.cpp are read by
    /// their own metrics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<CustomMetric>,
    /// How fast replicas are added and removed (the meaning HPA's `behavior` gives them).
    #[serde(default)]
    pub behavior: ScalingBehavior,
}

fn default_min_replicas() -> u32 {
    1
}

fn default_target() -> u32 {
    DEFAULT_TARGET_UTILIZATION_PERCENT
}

/// A runtime's own gauge of requests in flight, read from its Prometheus endpoint.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CustomMetric {
    /// Metric name (its series are summed).
    #[schemars(
        length(min = 1, max = 200),
        regex(pattern = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    )]
    pub name: String,
    /// HTTP path of the metrics on the serving port. Default `/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256), regex(pattern = r"^/[^\s]*$"))]
    pub path: Option<String>,
}

impl CustomMetric {
    /// The metrics path.
    pub fn path(&self) -> &str {
        self.path.as_deref().unwrap_or("/metrics")
    }
}

/// Scale-up and scale-down rules.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScalingBehavior {
    /// Adding replicas. Default: no window; at most 4 replicas or 100 % more per 15 s,
    /// whichever is more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up: Option<ScalingRules>,
    /// Removing replicas. Default: the highest recommendation of the last 300 s; up to 100 %
    /// per 15 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down: Option<ScalingRules>,
}

/// One direction's rules.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScalingRules {
    /// Seconds of past recommendations considered: scaling up takes the lowest of them,
    /// scaling down the highest, so a brief change in load moves nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub stabilization_window_seconds: Option<u32>,
    /// Which policy wins when several allow different changes: `Max` (default, the largest
    /// change), `Min`, or `Disabled` (never scale this way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select_policy: Option<SelectPolicy>,
    /// Limits on the change within a period; empty takes the default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub policies: Vec<ScalingPolicy>,
}

/// Which policy applies.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectPolicy {
    /// The policy that allows the largest change.
    Max,
    /// The policy that allows the smallest change.
    Min,
    /// No scaling in this direction.
    Disabled,
}

/// At most `value` replicas (`Pods`) or `value` percent (`Percent`) of change within
/// `periodSeconds`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScalingPolicy {
    /// `Pods` or `Percent`.
    #[serde(rename = "type")]
    pub kind: PolicyKind,
    /// The most change within the period.
    #[schemars(range(min = 1, max = 1000))]
    pub value: u32,
    /// The period, seconds.
    #[schemars(range(min = 1, max = 1800))]
    pub period_seconds: u32,
}

/// What a policy's value counts.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// Replicas.
    Pods,
    /// Percent of the replicas at the period's start.
    Percent,
}

/// What the autoscaler last saw and did.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingStatus {
    /// Replicas the autoscaler wants: what it last wrote to `spec.serve.replicas`, or took
    /// from it. A `spec.serve.replicas` that differs is a person's change, which it holds to
    /// for the scale-down window.
    pub desired_replicas: u32,
    /// Replicas whose metrics were read in the last pass.
    pub read_replicas: u32,
    /// Requests in flight and queued over the read replicas, in units of their planned
    /// concurrency: the job's load, percent (unset when no replica was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_percent: Option<u32>,
    /// Sum of the read replicas' planned concurrency (sequences served at once).
    #[serde(default)]
    pub capacity: u32,
    /// When it last changed the replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
}
