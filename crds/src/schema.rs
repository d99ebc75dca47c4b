//! Hand-written schema fragments for shapes schemars cannot express structurally.
use schemars::{Schema, generate::SchemaGenerator, json_schema};

use crate::reserved_pod_keys::{PodKeyField, cel_rules};

/// `conditions`: a list-map keyed by `type`, as `kubectl` and dashboards expect.
pub fn conditions(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "reason", "message", "lastTransitionTime"],
            "properties": {
                "type": { "type": "string", "description": "Condition type, e.g. Ready, Scheduled, InvalidSpec." },
                "status": { "type": "string", "enum": ["True", "False", "Unknown"] },
                "reason": { "type": "string", "description": "CamelCase reason, stable for alerting." },
                "message": { "type": "string", "description": "Human-readable explanation." },
                "observedGeneration": { "type": "integer", "format": "int64" },
                "lastTransitionTime": { "type": "string", "format": "date-time" }
            }
        }
    })
}

/// `gpuLayers`: an integer, or the string `auto`.
pub fn int_or_auto(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "description": "`auto` (default) or a number of layers to offload.",
        "x-kubernetes-validations": [{
            "rule": "string(self) == 'auto' || (string(self).matches('^[0-9]{1,4}$') && int(string(self)) <= 1025)",
            "message": "gpuLayers must be `auto` or a number of layers from 0 to 1025 (model.layers is at most 1024, plus the output layer)"
        }]
    })
}

/// A string set (`x-kubernetes-list-type: set`) of class names.
pub fn name_set(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "set",
        "maxItems": 64,
        "items": { "type": "string", "maxLength": 253 }
    })
}

/// Free-form Kubernetes objects passed through to the pod untouched: validated by the API
/// server when the pod is created, and bounded in number here so that one job cannot make
/// the operator's cache of jobs grow without limit.
fn bounded_passthrough_list(max_items: u32) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": max_items,
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
    })
}

/// `env`: at most 128 variables; a name of at most 256 and a value of at most 32 KiB
/// characters (`valueFrom` passes through as written). The reserved names
/// ([`crate::reserved_env`]) are refused by the API server itself, one rule per reason.
pub fn env_list(_: &mut SchemaGenerator) -> Schema {
    let validations: Vec<serde_json::Value> = crate::reserved_env::cel_rules()
        .into_iter()
        .map(|rule| {
            serde_json::json!({
                "rule": rule.rule,
                "message": rule.message,
            })
        })
        .collect();
    json_schema!({
        "type": "array",
        "maxItems": 128,
        "items": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {
                "name": { "type": "string", "maxLength": 256 },
                "value": { "type": "string", "maxLength": 32768 }
            }
        },
        "x-kubernetes-validations": validations
    })
}

/// `volumes` and `volumeMounts`: at most 64.
pub fn volume_list(_: &mut SchemaGenerator) -> Schema {
    bounded_passthrough_list(64)
}

/// `tolerations`: at most 32.
pub fn toleration_list(_: &mut SchemaGenerator) -> Schema {
    bounded_passthrough_list(32)
}

/// A string map (labels, annotations, a node selector): at most 64 entries of at most 4 KiB.
pub fn bounded_string_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "maxProperties": 64,
        "additionalProperties": { "type": "string", "maxLength": 4096 }
    })
}

/// `pod.labels`: a bounded string map without the keys vramfit sets itself.
pub fn pod_labels(generator: &mut SchemaGenerator) -> Schema {
    with_rules(
        bounded_string_map(generator),
        cel_rules(PodKeyField::Labels),
    )
}

/// `pod.annotations`: a bounded string map without vramfit's keys and those that would change
/// the pod's security.
pub fn pod_annotations(generator: &mut SchemaGenerator) -> Schema {
    with_rules(
        bounded_string_map(generator),
        cel_rules(PodKeyField::Annotations),
    )
}

fn with_rules(mut schema: Schema, rules: Vec<serde_json::Value>) -> Schema {
    schema.insert("x-kubernetes-validations".into(), rules.into());
    schema
}

/// A free-form object (resource requirements), passed to the pod as written.
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}
