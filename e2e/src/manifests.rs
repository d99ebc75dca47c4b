//! Manifests read from the workspace (`examples/`, `deploy/`, `crds/`).
use std::path::Path;

use anyhow::{Context as _, Result, anyhow};
use serde_json::Value;

/// Sets `metadata.namespace` of a manifest (examples are written for `default`).
pub fn with_namespace(mut manifest: Value, namespace: &str) -> Result<Value> {
    let metadata = manifest
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| anyhow!("manifest has no metadata"))?;
    metadata.insert("namespace".into(), Value::String(namespace.into()));
    Ok(manifest)
}

/// Reads every YAML document of a file (skipping empty ones).
pub fn read_yaml_documents(path: &Path) -> Result<Vec<Value>> {
    use serde::Deserialize as _;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs = vec![];
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value =
            Value::deserialize(doc).with_context(|| format!("parsing {}", path.display()))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace_root;

    #[test]
    fn examples_parse_and_move_to_the_test_namespace() {
        let dir = workspace_root().join("examples");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            for doc in read_yaml_documents(&path).unwrap() {
                assert_eq!(doc["kind"], "InferenceJob", "{}", path.display());
                let moved = with_namespace(doc, "vramfit-e2e-x").unwrap();
                assert_eq!(moved["metadata"]["namespace"], "vramfit-e2e-x");
                seen += 1;
            }
        }
        assert!(seen > 0);
    }
}
