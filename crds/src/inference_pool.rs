//! The Gateway API Inference Extension's `InferencePool` (`inference.networking.k8s.io/v1`),
//! as vramfit writes it for a served job with `serve.inferencePool` (docs/serving.md): these
//! types follow `api/v1/inferencepool_types.go` and `api/v1/shared_types.go` of the
//! extension's v1.0.0 release, field by field (docs/serving.md, "A pool for gateways"). vramfit
//! does not install this CRD; the e2e suite makes it from these types.
//!
//! v1.0.0 is the oldest v1: what is written here is valid under every later v1 release too
//! (v1.1.0 allows up to 8 target ports, v1.4.0 adds `appProtocol`, v1.6.0 makes
//! `endpointPickerRef` optional; vramfit sets one port and always names a picker).
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group.
pub const GROUP: &str = "inference.networking.k8s.io";
/// The CRD's name.
pub const CRD_NAME: &str = "inferencepools.inference.networking.k8s.io";

/// A pool of model servers a gateway routes to through an endpoint picker.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "inference.networking.k8s.io",
    version = "v1",
    kind = "InferencePool",
    namespaced,
    shortname = "infpool",
    status = "InferencePoolStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolSpec {
    /// The pods of the pool (`matchLabels` only).
    pub selector: LabelSelector,
    /// The port the model servers listen on (exactly one at v1.0.0).
    #[schemars(length(min = 1, max = 1))]
    pub target_ports: Vec<Port>,
    /// The endpoint picker that scores the pool's pods.
    pub endpoint_picker_ref: EndpointPickerRef,
}

/// `matchLabels` only.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels a pod must have.
    pub match_labels: BTreeMap<String, String>,
}

/// A port.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Port {
    /// 1 to 65535.
    #[schemars(range(min = 1, max = 65535))]
    pub number: i32,
}

/// The picker: a Service (by default) and its port.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPickerRef {
    /// API group of the picker (`""`: core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub group: Option<String>,
    /// Its kind (`Service`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub kind: Option<String>,
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Its port (required for a Service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<Port>,
    /// `FailOpen` or `FailClose` (the default): what the gateway does when the picker does
    /// not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_mode: Option<FailureMode>,
}

/// What a gateway does when the picker fails.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureMode {
    /// Route to any pod of the pool.
    FailOpen,
    /// Refuse the request.
    FailClose,
}

/// What the gateways that use the pool report (vramfit only reads it).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolStatus {
    /// One entry per parent (Gateway), at most 32.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<ParentStatus>,
}

/// A parent's report.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ParentStatus {
    /// `Accepted`, `ResolvedRefs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The parent.
    pub parent_ref: ParentReference,
}

/// A parent (a Gateway by default).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// Its group (`gateway.networking.k8s.io` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Its kind (`Gateway` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Its name.
    pub name: String,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}
