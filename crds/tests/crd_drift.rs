//! The committed CRD YAML must be exactly what the Rust types generate.
//! Regenerate with `cargo run -p vramfit-cli -- crds --output-dir crds/`.
use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use vramfit_api::crdgen::crd_documents;

#[test]
fn committed_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, generated) in crd_documents().expect("CRDs serialize") {
        let committed = std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("crds/{file} is missing ({e}); run `cargo run -p vramfit-cli -- crds --output-dir crds/`"));
        assert!(
            committed == generated,
            "crds/{file} differs from the types; run `cargo run -p vramfit-cli -- crds --output-dir crds/`"
        );
    }
}

#[test]
fn crds_are_structural_with_status_and_printer_columns() {
    for (file, yaml) in crd_documents().expect("CRDs serialize") {
        let crd: CustomResourceDefinition = serde_yaml::from_str(&yaml).expect("parses as a CRD");
        let version = &crd.spec.versions[0];
        assert!(version.served && version.storage, "{file}");
        let columns = version
            .additional_printer_columns
            .as_ref()
            .expect("printer columns");
        assert!(columns.iter().any(|c| c.name == "Age"), "{file}");
        let schema = serde_json::to_value(&version.schema).unwrap();
        assert_untyped_nodes_are_int_or_string_or_preserved(&schema["openAPIV3Schema"], file);
    }
}

#[test]
fn inference_job_has_status_subresource_short_name_and_category() {
    let yaml = &crd_documents().unwrap()[0].1;
    let crd: CustomResourceDefinition = serde_yaml::from_str(yaml).unwrap();
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["ij".to_string()][..])
    );
    assert_eq!(
        crd.spec.names.categories.as_deref(),
        Some(&["vramfit".to_string()][..])
    );
    let version = &crd.spec.versions[0];
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let names: Vec<&str> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    for column in ["Phase", "Class", "GPUs", "Dtype", "Quant", "Age"] {
        assert!(
            names.contains(&column),
            "missing printer column {column}: {names:?}"
        );
    }
}

/// A structural schema gives every node a type, except int-or-string and preserved nodes.
fn assert_untyped_nodes_are_int_or_string_or_preserved(node: &serde_json::Value, file: &str) {
    let Some(object) = node.as_object() else {
        return;
    };
    let special = object.contains_key("x-kubernetes-int-or-string")
        || object.contains_key("x-kubernetes-preserve-unknown-fields");
    assert!(
        object.contains_key("type") || special,
        "{file}: untyped schema node {node}"
    );
    assert!(
        !object.contains_key("anyOf") || special,
        "{file}: anyOf outside int-or-string: {node}"
    );
    assert!(
        !object.contains_key("oneOf"),
        "{file}: oneOf is not structural: {node}"
    );
    if let Some(props) = object.get("properties").and_then(|p| p.as_object()) {
        for child in props.values() {
            assert_untyped_nodes_are_int_or_string_or_preserved(child, file);
        }
    }
    if let Some(items) = object.get("items") {
        assert_untyped_nodes_are_int_or_string_or_preserved(items, file);
    }
    if let Some(additional) = object.get("additionalProperties") {
        assert_untyped_nodes_are_int_or_string_or_preserved(additional, file);
    }
}
