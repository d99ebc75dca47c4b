//! The API server's checks of a manifest, applied before planning it: `vramfit plan` is the
//! dry run of `kubectl apply`, so it refuses what the cluster refuses. Both the structural
//! checks (strict fields, bounds, enums, required) and the CEL rules (`x-kubernetes-
//! validations`) come from the CRD generated from the Rust types: there is no second copy of
//! a bound or a rule to drift.
use kube::CustomResourceExt;
use kube::core::cel::{Validator, apply_defaults};
use serde_json::Value;
use vramfit_api::schema_check::{self, Problem, openapi_schema};

/// Checks `object` against `K`'s CRD as the API server admits it, and leaves it as the server
/// would store it (nulls pruned, integral floats made integers, schema defaults applied).
/// Every refusal as one line naming its field, in the API server's order: unknown fields
/// (strict decoding stops there), then the structural checks, then the rules; none when
/// admitted.
pub fn admit<K: CustomResourceExt>(object: &mut Value) -> Vec<String> {
    let schema = openapi_schema::<K>();
    let violations = schema_check::check(&schema, object);
    // Strict decoding fails on an unknown field before any other check runs: only those.
    let unknown: Vec<String> = violations
        .iter()
        .filter(|v| matches!(v.problem, Problem::UnknownField { .. }))
        .map(ToString::to_string)
        .collect();
    if !unknown.is_empty() {
        return unknown;
    }
    let structural: Vec<String> = violations.iter().map(ToString::to_string).collect();
    if !structural.is_empty() {
        // The rules read typed values: on a structurally broken object they would only add
        // noise (the API server reports the structural errors first too).
        return structural;
    }
    *object = apply_defaults(&schema, object);
    match Validator::new().validate(&schema, object, None) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

/// The CEL rules of `K`'s CRD that a create is judged by, as `(field path, rule)`: what
/// [`admit`] evaluates, listed for the test that each one is shown refusing something.
pub fn cel_rules<K: CustomResourceExt>() -> Vec<(String, String)> {
    fn walk(schema: &Value, path: &str, out: &mut Vec<(String, String)>) {
        for rule in schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // A transition rule (`oldSelf`) judges an update against the stored object: a
            // manifest planned on its own is a create, which such a rule never refuses.
            if let Some(text) = rule
                .get("rule")
                .and_then(Value::as_str)
                .filter(|text| !text.contains("oldSelf"))
            {
                out.push((path.to_string(), text.to_string()));
            }
        }
        for (key, child) in schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let child_path = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            walk(child, &child_path, out);
        }
        if let Some(items) = schema.get("items") {
            walk(items, &format!("{path}[]"), out);
        }
    }
    let mut out = Vec::new();
    walk(&openapi_schema::<K>(), "", &mut out);
    out
}
