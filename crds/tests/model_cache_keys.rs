//! A ModelCache's `spec.models[]`: the operator's Rust check of an entry
//! (`WantedModel::problem`) accepts exactly what the CRD accepts (its bounds and its CEL rules,
//! evaluated client-side), so that the operator leaves a bad entry out instead of writing a
//! spec the API server refuses whole.
mod support;

use kube::core::cel::Validator;
use serde_json::json;
use vramfit_api::ModelCache;
use vramfit_api::model_cache::WantedModel;
use vramfit_api::schema_check::{check, openapi_schema};

use support::crd_schema;

/// Whether the API server would store a ModelCache whose spec holds `model` alone.
fn crd_accepts(model: &WantedModel) -> bool {
    let mut object = json!({
        "apiVersion": "vramfit.io/v1alpha1", "kind": "ModelCache",
        "metadata": {"name": "gpu-1"},
        "spec": {"models": [model]},
    });
    let bounds = check(&openapi_schema::<ModelCache>(), &mut object).is_empty();
    let rules = Validator::new()
        .validate(&crd_schema::<ModelCache>(), &object, None)
        .is_ok();
    bounds && rules
}

fn wanted(repo: &str, revision: &str, namespaces: &[&str]) -> WantedModel {
    WantedModel {
        repo: repo.to_string(),
        revision: revision.to_string(),
        namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        in_use: false,
    }
}

#[test]
fn the_operator_s_check_of_an_entry_is_the_crd_s() {
    let long_repo = format!("o/{}", "m".repeat(95));
    let longest_repo = format!("o/{}", "m".repeat(94));
    let long_revision = "r".repeat(256);
    let longest_revision = "r".repeat(255);
    let long_namespace = "n".repeat(64);
    let many: Vec<String> = (0..33).map(|i| format!("ns-{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let cases = [
        wanted("Qwen/Qwen3-8B", "main", &["team-a"]),
        wanted("gpt2", "v1.0", &[]),
        wanted("o/m.v2_x-y", "refs/pr/1", &[]),
        wanted(&longest_repo, &longest_revision, &[]),
        wanted("o/m", "0123456789abcdef0123456789abcdef01234567", &[]),
        // Refused:
        wanted("", "main", &[]),
        wanted("o/m", "", &[]),
        wanted(&long_repo, "main", &[]),
        wanted("o/m", &long_revision, &[]),
        wanted("../etc", "main", &[]),
        wanted("o/m/x", "main", &[]),
        wanted("o/.hidden", "main", &[]),
        wanted("/m", "main", &[]),
        wanted("o/", "main", &[]),
        wanted("o m/x", "main", &[]),
        wanted("o/m@x", "main", &[]),
        wanted("o/m", "..", &[]),
        wanted("o/m", "a/../b", &[]),
        wanted("o/m", ".git", &[]),
        wanted("o/m", "main", &[""]),
        wanted("o/m", "main", &[&long_namespace]),
        wanted("o/m", "main", &many),
    ];
    for model in &cases {
        assert_eq!(
            model.problem().is_none(),
            crd_accepts(model),
            "{model:?}: the operator says {:?}",
            model.problem()
        );
    }
    let accepted = cases.iter().filter(|m| m.problem().is_none()).count();
    assert_eq!(accepted, 5, "the first five are valid, the rest are not");
}
