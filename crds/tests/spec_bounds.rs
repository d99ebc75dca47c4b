//! Every list, map and string a tenant writes into an InferenceJob's spec is bounded by the
//! CRD schema, so that one job cannot make the operator's cache of jobs grow without limit
//! (the API server rejects a job beyond the bounds before the operator sees it).
use serde_json::Value;
use vramfit_api::crdgen::crd_documents;

/// The paths in `schema` where a list has no `maxItems`, a map no `maxProperties`, or a
/// free string no `maxLength` (enums, formats and int-or-string are bounded already).
fn unbounded(schema: &Value, path: &str, found: &mut Vec<String>) {
    let Some(object) = schema.as_object() else {
        return;
    };
    match object.get("type").and_then(Value::as_str) {
        Some("array") if !object.contains_key("maxItems") => found.push(format!("{path}[]")),
        Some("string")
            if !["maxLength", "enum", "format"]
                .iter()
                .any(|k| object.contains_key(*k)) =>
        {
            found.push(path.to_string())
        }
        Some("object")
            if object.contains_key("additionalProperties")
                && !object.contains_key("maxProperties") =>
        {
            found.push(format!("{path}{{}}"))
        }
        _ => {}
    }
    if let Some(items) = object.get("items") {
        unbounded(items, &format!("{path}[]"), found);
    }
    if let Some(values) = object.get("additionalProperties") {
        unbounded(values, &format!("{path}{{}}"), found);
    }
    for (name, property) in object
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        unbounded(property, &format!("{path}.{name}"), found);
    }
}

#[test]
fn every_list_map_and_string_of_the_job_spec_is_bounded() {
    let (_, yaml) = crd_documents()
        .expect("CRDs serialize")
        .into_iter()
        .find(|(file, _)| file.starts_with("inferencejobs"))
        .expect("the InferenceJob CRD");
    let crd: Value = serde_yaml::from_str(&yaml).expect("parses");
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert!(spec.is_object(), "no spec schema");
    let mut found = Vec::new();
    unbounded(spec, "spec", &mut found);
    assert!(
        found.is_empty(),
        "unbounded in the InferenceJob spec: {found:?}"
    );
}

/// Every integer a tenant or an admin writes has a physical minimum and maximum in the schema,
/// so that no number the planner multiplies can be arbitrarily large (`gpuLayers`, an int or
/// `auto`, is bounded by its CEL rule; see `cel_rules.rs`).
#[test]
fn every_integer_of_both_specs_has_a_minimum_and_a_maximum() {
    use vramfit_api::schema_check::{integer_fields, openapi_schema};
    use vramfit_api::{GpuNodeClass, InferenceJob};
    for schema in [
        openapi_schema::<InferenceJob>(),
        openapi_schema::<GpuNodeClass>(),
    ] {
        let fields: Vec<_> = integer_fields(&schema)
            .into_iter()
            .filter(|f| f.path.starts_with("spec."))
            .collect();
        assert!(fields.len() >= 6, "{fields:?}");
        for field in fields {
            assert!(
                field.minimum.is_some() && field.maximum.is_some(),
                "{} is unbounded: {field:?}",
                field.path
            );
        }
    }
}
