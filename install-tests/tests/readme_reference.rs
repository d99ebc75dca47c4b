//! The README's InferenceJob reference names every field of the spec the CRD accepts (to the
//! second level: `gpus.min`, `pod.env`), so that a field added to the types is documented
//! where a newcomer reads, and names no field the CRD does not have.
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::collections::BTreeSet;

use serde_json::Value;
use vramfit_install_tests::{generated_crd, markdown_section, repo_root};

/// `a.b`, `a.{b,c}` and `a.b.{c,d}` as the paths they name.
fn expand(cell: &str) -> Vec<String> {
    match cell.split_once(".{") {
        Some((head, rest)) => rest
            .trim_end_matches('}')
            .split(',')
            .map(|leaf| format!("{head}.{}", leaf.trim()))
            .collect(),
        None => vec![cell.to_string()],
    }
}

/// The field paths of the first column of the README's "InferenceJob reference" table.
fn documented(readme: &str) -> BTreeSet<String> {
    let section = markdown_section(readme, "InferenceJob reference")
        .expect("the README's InferenceJob reference");
    let mut paths = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split(" | ").next().unwrap_or("");
        for code in first.split('`').skip(1).step_by(2) {
            paths.extend(expand(code));
        }
    }
    paths
}

/// The spec's fields, and each object field's own fields (`pod.env`).
fn spec_fields(spec: &Value) -> BTreeSet<String> {
    let mut fields = BTreeSet::new();
    for (name, schema) in spec["properties"].as_object().unwrap() {
        match schema["properties"].as_object() {
            Some(children) => {
                fields.extend(children.keys().map(|child| format!("{name}.{child}")));
            }
            None => {
                fields.insert(name.clone());
            }
        }
    }
    fields
}

#[test]
fn the_readme_reference_names_every_spec_field() {
    let crd: Value = generated_crd("inferencejobs.vramfit.io.yaml").typed();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let fields = spec_fields(spec);
    assert!(fields.len() > 30, "{fields:?}");
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let documented = documented(&readme);
    // `pod.securityContext.{runAsUser,…}` documents `pod.securityContext`.
    let covers = |field: &String| {
        documented
            .iter()
            .any(|d| d == field || d.starts_with(&format!("{field}.")))
    };
    let missing: Vec<&String> = fields.iter().filter(|f| !covers(f)).collect();
    assert!(
        missing.is_empty(),
        "README.md's InferenceJob reference lacks {missing:?}"
    );
    let unknown: Vec<&String> = documented
        .iter()
        .filter(|d| {
            !fields
                .iter()
                .any(|f| *d == f || d.starts_with(&format!("{f}.")))
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "README.md's InferenceJob reference names fields the CRD lacks: {unknown:?}"
    );
}

#[test]
fn table_cells_expand_to_paths() {
    assert_eq!(expand("gpus.min"), ["gpus.min"]);
    assert_eq!(expand("model.{a, b}"), ["model.a", "model.b"]);
    assert_eq!(
        expand("pod.securityContext.{runAsUser,fsGroup}"),
        [
            "pod.securityContext.runAsUser",
            "pod.securityContext.fsGroup"
        ]
    );
    let readme = "## InferenceJob reference\n\n| field | meaning |\n|---|---|\n| `a`, `b.{c,d}` | x `e` |\n| bounds | y |\n## Next\n| `z` | w |\n";
    assert_eq!(
        documented(&format!("x\n{readme}")),
        BTreeSet::from(["a".into(), "b.c".into(), "b.d".into()])
    );
}
