//! How an attempt ended (`status.attempts[].outcome`). Written as a plain string; a value this
//! version does not know (from a newer operator) is kept as it is, never rejected or rewritten.
use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The outcome of one attempt.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AttemptOutcome {
    /// The pod finished successfully.
    Succeeded,
    /// The pod ran out of GPU memory.
    OutOfMemory,
    /// The pod was killed at its host memory limit (`OOMKilled`).
    HostOutOfMemory,
    /// The workload's output check found garbage.
    BadOutput,
    /// The pod did not start within the job's start deadline.
    StartTimeout,
    /// The pod was not scheduled to a node within the job's schedule deadline.
    ScheduleTimeout,
    /// The pod failed otherwise.
    Failed,
    /// The pod was deleted for a new one after a spec change.
    Replaced,
    /// Kubernetes ended the pod (eviction, preemption, drain, node shutdown).
    Disrupted,
    /// The kubelet refused the pod at admission (`UnexpectedAdmissionError` from a device
    /// plugin's `Allocate`, `OutOf<resource>`, `NodeAffinity`, …): the next attempt waits a
    /// backoff, as a node that refuses once may refuse again.
    AdmissionRefused,
    /// A value this version does not know, kept verbatim.
    Unknown(String),
}

impl AttemptOutcome {
    /// Every outcome this version writes.
    pub const KNOWN: [AttemptOutcome; 10] = [
        Self::Succeeded,
        Self::OutOfMemory,
        Self::HostOutOfMemory,
        Self::BadOutput,
        Self::StartTimeout,
        Self::ScheduleTimeout,
        Self::Failed,
        Self::Replaced,
        Self::Disrupted,
        Self::AdmissionRefused,
    ];

    /// The value as written in status.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Succeeded => "Succeeded",
            Self::OutOfMemory => "OutOfMemory",
            Self::HostOutOfMemory => "HostOutOfMemory",
            Self::BadOutput => "BadOutput",
            Self::StartTimeout => "StartTimeout",
            Self::ScheduleTimeout => "ScheduleTimeout",
            Self::Failed => "Failed",
            Self::Replaced => "Replaced",
            Self::Disrupted => "Disrupted",
            Self::AdmissionRefused => "AdmissionRefused",
            Self::Unknown(other) => other,
        }
    }

    /// The outcome a status value names (`Unknown` for any other).
    pub fn parse(value: &str) -> Self {
        Self::KNOWN
            .into_iter()
            .find(|known| known.as_str() == value)
            .unwrap_or_else(|| Self::Unknown(value.to_string()))
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for AttemptOutcome {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for AttemptOutcome {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self::parse(&String::deserialize(deserializer)?))
    }
}

/// A plain string in the CRD: no enum, so a newer operator's values pass the schema.
impl JsonSchema for AttemptOutcome {
    fn schema_name() -> Cow<'static, str> {
        String::schema_name()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        String::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_round_trip_and_unknown_ones_are_kept() {
        for known in AttemptOutcome::KNOWN {
            let json = serde_json::to_string(&known).unwrap();
            assert_eq!(json, format!("\"{}\"", known.as_str()));
            assert_eq!(
                serde_json::from_str::<AttemptOutcome>(&json).unwrap(),
                known
            );
        }
        let newer: AttemptOutcome = serde_json::from_str("\"Preempted\"").unwrap();
        assert_eq!(newer, AttemptOutcome::Unknown("Preempted".into()));
        assert_eq!(serde_json::to_string(&newer).unwrap(), "\"Preempted\"");
    }
}
