//! What the API server checks of an object against its CRD's structural schema before it
//! stores it, with strict field validation (`kubectl apply`'s default): unknown fields at any
//! depth, types, bounds (`minimum`/`maximum`, lengths, item and entry counts), enums, required
//! fields and list sets. The CLI applies it to the manifests it plans, so that it accepts what
//! the cluster accepts; the bounds come from the generated schema, the one source.
//!
//! The CRD's CEL rules (`x-kubernetes-validations`) are not evaluated here: the CLI evaluates
//! them from the same schema.
use std::fmt;

use kube::CustomResourceExt;
use serde_json::{Map, Value};

/// The `openAPIV3Schema` of a CRD as JSON, with `metadata` described as the API server checks it
/// (every ObjectMeta field, so that a misspelt one is refused like any other).
pub fn openapi_schema<K: CustomResourceExt>() -> Value {
    let crd = K::crd();
    let mut schema = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null);
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        properties.insert("apiVersion".into(), json_type("string"));
        properties.insert("kind".into(), json_type("string"));
        properties.insert("metadata".into(), object_meta_schema());
    }
    schema
}

fn json_type(name: &str) -> Value {
    serde_json::json!({ "type": name })
}

/// ObjectMeta's schema, inlined, from k8s-openapi's types.
fn object_meta_schema() -> Value {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    serde_json::to_value(generator.into_root_schema_for::<ObjectMeta>())
        .unwrap_or_else(|_| json_type("object"))
}

/// One way an object breaks its schema, at a field path such as `spec.pod.env[3].name`.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// The field, `spec.batchSize`; `<root>` for the object itself.
    pub path: String,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a field.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// The schema has no such field; the nearest known one, when one is near.
    UnknownField { suggestion: Option<String> },
    /// A required field is missing.
    Required,
    /// The value has the wrong JSON type.
    WrongType {
        expected: &'static str,
        found: &'static str,
    },
    /// A number below `minimum`.
    BelowMinimum { value: String, minimum: f64 },
    /// A number above `maximum`.
    AboveMaximum { value: String, maximum: f64 },
    /// A string shorter than `minLength` (in characters).
    TooShort { length: usize, minimum: u64 },
    /// A string longer than `maxLength` (in characters).
    TooLong { length: usize, maximum: u64 },
    /// A list with fewer than `minItems`.
    TooFewItems { count: usize, minimum: u64 },
    /// A list with more than `maxItems`.
    TooManyItems { count: usize, maximum: u64 },
    /// A map with more than `maxProperties` entries.
    TooManyEntries { count: usize, maximum: u64 },
    /// A value outside `enum`.
    NotInEnum {
        value: String,
        allowed: Vec<String>,
        suggestion: Option<String>,
    },
    /// A second equal item in an `x-kubernetes-list-type: set` list.
    Duplicate { value: String },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.path)?;
        match &self.problem {
            Problem::UnknownField { suggestion: None } => write!(f, "unknown field"),
            Problem::UnknownField {
                suggestion: Some(near),
            } => write!(f, "unknown field; did you mean {near}?"),
            Problem::Required => write!(f, "required"),
            Problem::WrongType { expected, found } => {
                write!(f, "expected {expected}, found {found}")
            }
            Problem::BelowMinimum { value, minimum } => {
                write!(f, "{value} is below the minimum {}", number(*minimum))
            }
            Problem::AboveMaximum { value, maximum } => {
                write!(f, "{value} is above the maximum {}", number(*maximum))
            }
            Problem::TooShort { length, minimum } => {
                write!(f, "{length} characters, fewer than the minimum {minimum}")
            }
            Problem::TooLong { length, maximum } => {
                write!(f, "{length} characters, more than the maximum {maximum}")
            }
            Problem::TooFewItems { count, minimum } => {
                write!(f, "{count} items, fewer than the minimum {minimum}")
            }
            Problem::TooManyItems { count, maximum } => {
                write!(f, "{count} items, more than the maximum {maximum}")
            }
            Problem::TooManyEntries { count, maximum } => {
                write!(f, "{count} entries, more than the maximum {maximum}")
            }
            Problem::NotInEnum {
                value,
                allowed,
                suggestion,
            } => {
                write!(f, "{value} is not one of {}", allowed.join(", "))?;
                match suggestion {
                    Some(near) => write!(f, "; did you mean {near}?"),
                    None => Ok(()),
                }
            }
            Problem::Duplicate { value } => write!(f, "{value} appears twice in a set"),
        }
    }
}

/// A bound as the schema writes it (`1024.0`), as a person writes it (`1024`).
fn number(bound: f64) -> String {
    if bound.fract() == 0.0 && bound.abs() < 1e15 {
        format!("{bound:.0}")
    } else {
        bound.to_string()
    }
}

/// `spec.model` of an InferenceJob against the CRD's bounds, as the API server checks it in a
/// whole job: the one rule for numbers a manifest does not write itself, read from a checkpoint
/// (`vramfit plan --model-from/--hub` admits the filled manifest through [`check`] with the same
/// schema) or from the Hub by the operator (which calls this on the filled model). Each
/// violation names its field (`spec.model.layers`).
pub fn model_violations(model: &crate::ModelSpec) -> Vec<Violation> {
    static SCHEMA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    let schema = SCHEMA.get_or_init(|| {
        let job = openapi_schema::<crate::InferenceJob>();
        let model = job
            .pointer("/properties/spec/properties/model")
            .cloned()
            .unwrap_or_else(|| json_type("object"));
        serde_json::json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"model": model}}}})
    });
    let Ok(model) = serde_json::to_value(model) else {
        return Vec::new();
    };
    let mut object = serde_json::json!({"spec": {"model": model}});
    check(schema, &mut object)
}

/// Checks `object` against `schema` as the API server would, and rewrites it as the server
/// stores it: nulls of non-nullable fields dropped, integral floats (`1e6`) made integers. Every
/// violation, in document order.
pub fn check(schema: &Value, object: &mut Value) -> Vec<Violation> {
    let mut violations = Vec::new();
    walk(schema, object, &mut String::new(), &mut violations);
    violations
}

fn walk(schema: &Value, value: &mut Value, path: &mut String, out: &mut Vec<Violation>) {
    let mut report = |problem| {
        out.push(Violation {
            path: if path.is_empty() {
                "<root>".to_string()
            } else {
                path.clone()
            },
            problem,
        })
    };
    if value.is_null() {
        if !flag(schema, "nullable") {
            report(Problem::WrongType {
                expected: expected_type(schema),
                found: "null",
            });
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !(value.is_string() || integral(value).is_some()) {
            report(Problem::WrongType {
                expected: "an integer or a string",
                found: type_name(value),
            });
        } else if let Some(n) = integral(value) {
            *value = n;
        }
        return;
    }
    if let Some(problem) = enum_problem(schema, value) {
        report(problem);
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {
            let Some(object) = value.as_object_mut() else {
                return report(wrong_type("an object", value));
            };
            if let Some(max) = uint(schema, "maxProperties")
                && too_many(object.len(), max)
            {
                report(Problem::TooManyEntries {
                    count: object.len(),
                    maximum: max,
                });
            }
            check_object(schema, object, path, out);
        }
        Some("array") => {
            let Some(items) = value.as_array_mut() else {
                return report(wrong_type("a list", value));
            };
            if let Some(max) = uint(schema, "maxItems")
                && too_many(items.len(), max)
            {
                report(Problem::TooManyItems {
                    count: items.len(),
                    maximum: max,
                });
            }
            if let Some(min) = uint(schema, "minItems")
                && too_few(items.len(), min)
            {
                report(Problem::TooFewItems {
                    count: items.len(),
                    minimum: min,
                });
            }
            if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("set")
                && let Some(value) = first_duplicate(items)
            {
                report(Problem::Duplicate { value });
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    walk(item_schema, item, path, out);
                    path.truncate(len);
                }
            }
        }
        Some("string") => {
            let Some(text) = value.as_str() else {
                return report(wrong_type("a string", value));
            };
            let length = text.chars().count();
            if let Some(max) = uint(schema, "maxLength")
                && too_many(length, max)
            {
                report(Problem::TooLong {
                    length,
                    maximum: max,
                });
            }
            if let Some(min) = uint(schema, "minLength")
                && too_few(length, min)
            {
                report(Problem::TooShort {
                    length,
                    minimum: min,
                });
            }
        }
        Some("integer") => {
            let Some(n) = integral(value) else {
                return report(wrong_type("an integer", value));
            };
            *value = n;
            range(schema, value, &mut report);
        }
        Some("number") => {
            if !value.is_number() {
                return report(wrong_type("a number", value));
            }
            range(schema, value, &mut report);
        }
        Some("boolean") if !value.is_boolean() => report(wrong_type("true or false", value)),
        _ => {}
    }
}

fn check_object(
    schema: &Value,
    object: &mut Map<String, Value>,
    path: &mut String,
    out: &mut Vec<Violation>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    // A null in a field that is not nullable is dropped, as the API server prunes it.
    object.retain(|key, value| {
        let field_schema = properties.and_then(|p| p.get(key)).or(additional);
        !(value.is_null() && field_schema.is_some_and(|s| !flag(s, "nullable")))
    });
    for (key, value) in object.iter_mut() {
        let len = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
        match properties.and_then(|p| p.get(key)).or(additional) {
            Some(field_schema) => walk(field_schema, value, path, out),
            None if preserve => {}
            None => out.push(Violation {
                path: path.clone(),
                problem: Problem::UnknownField {
                    suggestion: properties.and_then(|p| nearest(key, p.keys())),
                },
            }),
        }
        path.truncate(len);
    }
    let required = schema.get("required").and_then(Value::as_array);
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        if !object.contains_key(name) {
            let prefix = if path.is_empty() { "" } else { "." };
            out.push(Violation {
                path: format!("{path}{prefix}{name}"),
                problem: Problem::Required,
            });
        }
    }
}

fn range(schema: &Value, value: &Value, report: &mut impl FnMut(Problem)) {
    let Some(n) = value.as_f64() else { return };
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
        && n < min
    {
        report(Problem::BelowMinimum {
            value: value.to_string(),
            minimum: min,
        });
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
        && n > max
    {
        report(Problem::AboveMaximum {
            value: value.to_string(),
            maximum: max,
        });
    }
}

fn enum_problem(schema: &Value, value: &Value) -> Option<Problem> {
    let allowed = schema.get("enum")?.as_array()?;
    if allowed.contains(value) {
        return None;
    }
    let names: Vec<String> = allowed
        .iter()
        .map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_string))
        .collect();
    Some(Problem::NotInEnum {
        value: value.to_string(),
        suggestion: value.as_str().and_then(|v| nearest(v, names.iter())),
        allowed: names,
    })
}

/// An integer as JSON has it, or a float with an integral value (`1e6`), which the API server
/// takes as an integer too.
fn integral(value: &Value) -> Option<Value> {
    if value.is_i64() || value.is_u64() {
        return Some(value.clone());
    }
    let f = value.as_f64()?;
    if f.fract() != 0.0 || !f.is_finite() {
        return None;
    }
    // Integral floats within i64 become integers; larger ones keep their (out-of-range) value.
    if (-9.2e18..9.2e18).contains(&f) {
        #[expect(clippy::cast_possible_truncation, reason = "integral and within i64")]
        let n = f as i64;
        return Some(Value::from(n));
    }
    Some(value.clone())
}

fn wrong_type(expected: &'static str, value: &Value) -> Problem {
    Problem::WrongType {
        expected,
        found: type_name(value),
    }
}

fn expected_type(schema: &Value) -> &'static str {
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => "an object",
        Some("array") => "a list",
        Some("string") => "a string",
        Some("integer") => "an integer",
        Some("number") => "a number",
        Some("boolean") => "true or false",
        _ => "a value",
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a fractional number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn uint(schema: &Value, key: &str) -> Option<u64> {
    schema.get(key).and_then(Value::as_u64)
}

fn too_many(count: usize, max: u64) -> bool {
    u64::try_from(count).map_or(true, |c| c > max)
}

fn too_few(count: usize, min: u64) -> bool {
    u64::try_from(count).is_ok_and(|c| c < min)
}

fn first_duplicate(items: &[Value]) -> Option<String> {
    items
        .iter()
        .enumerate()
        .find(|(i, item)| items.iter().take(*i).any(|earlier| earlier == *item))
        .map(|(_, item)| item.to_string())
}

/// The candidate nearest to `word` by edit distance (case-insensitive), when it is near: at
/// most a third of the word's length, and at least one edit allowed.
pub fn nearest<'a>(word: &str, candidates: impl Iterator<Item = &'a String>) -> Option<String> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .map(|c| (edit_distance(&word.to_lowercase(), &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.clone())
}

/// Edits between two words, in characters: insertions, deletions, substitutions and swaps
/// of two neighbours (`cuont` → `count` is one), as optimal string alignment counts them.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len().saturating_add(1);
    // d[i * width + j]: edits between the first i characters of a and the first j of b.
    let mut d: Vec<usize> = vec![0; a.len().saturating_add(1).saturating_mul(width)];
    for (i, cell) in d.iter_mut().step_by(width).enumerate() {
        *cell = i;
    }
    for (j, cell) in d.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let at = |i: usize, j: usize| i.saturating_mul(width).saturating_add(j);
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[at(i - 1, j)] + 1)
                .min(d[at(i, j - 1)] + 1)
                .min(d[at(i - 1, j - 1)] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[at(i - 2, j - 2)] + 1);
            }
            d[at(i, j)] = best;
        }
    }
    d.last().copied().unwrap_or(0)
}

/// A bounded integer field of a schema: its path (`spec.gpus.max`, `[]` for list items, `.*`
/// for map values) and its bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct IntegerBound {
    /// Field path from the object's root.
    pub path: String,
    /// `minimum`, when set.
    pub minimum: Option<f64>,
    /// `maximum`, when set.
    pub maximum: Option<f64>,
}

/// Every `type: integer` field under `schema`, with its bounds, in schema order.
pub fn integer_fields(schema: &Value) -> Vec<IntegerBound> {
    fn collect(schema: &Value, path: String, out: &mut Vec<IntegerBound>) {
        if schema.get("type").and_then(Value::as_str) == Some("integer") {
            out.push(IntegerBound {
                path: path.clone(),
                minimum: schema.get("minimum").and_then(Value::as_f64),
                maximum: schema.get("maximum").and_then(Value::as_f64),
            });
        }
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (key, child) in properties {
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                collect(child, child_path, out);
            }
        }
        if let Some(items) = schema.get("items") {
            collect(items, format!("{path}[]"), out);
        }
        if let Some(values) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            collect(values, format!("{path}.*"), out);
        }
    }
    let mut out = Vec::new();
    collect(schema, String::new(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn near_misspellings_are_suggested_and_far_ones_not() {
        let known: Vec<String> = ["contextLength", "batchSize", "image"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            nearest("contxtLength", known.iter()).as_deref(),
            Some("contextLength")
        );
        assert_eq!(
            nearest("batchsize", known.iter()).as_deref(),
            Some("batchSize")
        );
        assert_eq!(nearest("imgae", known.iter()).as_deref(), Some("image"));
        assert_eq!(nearest("replicas", known.iter()), None);
    }

    #[test]
    fn every_kind_of_violation_names_its_field() {
        let schema = json!({
            "type": "object",
            "required": ["name"],
            "properties": {
                "count": {"type": "integer", "minimum": 1.0, "maximum": 10.0},
                "name": {"type": "string", "minLength": 1, "maxLength": 3},
                "tags": {"type": "array", "maxItems": 1, "x-kubernetes-list-type": "set",
                         "items": {"type": "string"}},
                "kind": {"type": "string", "enum": ["vllm", "custom"]},
                "labels": {"type": "object", "maxProperties": 1,
                           "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "maybe": {"type": "integer", "nullable": true},
                "never": {"type": "integer"},
            }
        });
        let mut object = json!({
            "count": -5, "tags": ["a", "a"], "kind": "vlm", "labels": {"a": "1", "b": 2},
            "free": {"anything": [1]}, "maybe": null, "never": null, "cuont": 1,
        });
        let messages: Vec<String> = check(&schema, &mut object)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            messages,
            [
                "count: -5 is below the minimum 1",
                "cuont: unknown field; did you mean count?",
                "kind: \"vlm\" is not one of vllm, custom; did you mean vllm?",
                "labels: 2 entries, more than the maximum 1",
                "labels.b: expected a string, found an integer",
                "tags: 2 items, more than the maximum 1",
                "tags: \"a\" appears twice in a set",
                "name: required",
            ]
        );
        assert_eq!(object.get("never"), None, "a null is dropped");
        assert_eq!(object.get("maybe"), Some(&Value::Null));
        let mut long = json!({"name": "abcd", "count": 1e15});
        let messages: Vec<String> = check(&schema, &mut long)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            messages,
            [
                "count: 1000000000000000 is above the maximum 10",
                "name: 4 characters, more than the maximum 3"
            ]
        );
        let mut float = json!({"name": "a", "count": 2.0});
        assert!(check(&schema, &mut float).is_empty());
        assert_eq!(
            float["count"],
            json!(2),
            "an integral float becomes an integer"
        );
        let mut fraction = json!({"name": "a", "count": 2.5});
        assert_eq!(
            check(&schema, &mut fraction)[0].to_string(),
            "count: expected an integer, found a fractional number"
        );
    }

    #[test]
    fn a_model_is_checked_against_the_bounds_of_spec_model() {
        let model = crate::ModelSpec {
            layers: Some(5000),
            hidden_size: Some(4096),
            ..Default::default()
        };
        let messages: Vec<String> = model_violations(&model)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            messages,
            ["spec.model.layers: 5000 is above the maximum 1024"]
        );
        assert!(
            model_violations(&crate::ModelSpec {
                layers: Some(32),
                ..Default::default()
            })
            .is_empty()
        );
    }
}
