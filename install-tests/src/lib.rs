//! Shared by the tests in `tests/`: where the install artefacts are, how to read them,
//! and how to check that an object means exactly what its typed k8s-openapi struct
//! understands.
//!
//! The artefacts themselves are rendered by Helm (`scripts/helm-check.sh`); these tests
//! need neither Helm nor a cluster.
#![forbid(unsafe_code)]

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::{Deserialize, DeserializeOwned};
use serde_json::Value;

/// The release namespace `deploy/` is rendered for.
pub const NAMESPACE: &str = "vramfit";
/// The operator's and the agent's ServiceAccounts (and workload names) in `deploy/`.
pub const OPERATOR_NAME: &str = "vramfit-operator";
pub const AGENT_NAME: &str = "vramfit-agent";
/// The node cache agent's objects' name (DaemonSet, ServiceAccount, ClusterRole) with
/// `modelCache.enabled`.
pub const CACHE_AGENT_NAME: &str = "vramfit-cache-agent";
/// The namespaces whose InferenceJobs the namespace-scoped render's operator reconciles
/// (`charts/vramfit/ci/watch-namespaces-values.yaml`).
pub const WATCHED_NAMESPACES: [&str; 2] = ["team-a", "team-b"];
/// The generated CRD files, in `crds/` and copied into the chart.
pub const CRD_FILES: [&str; 3] = [
    "inferencejobs.vramfit.io.yaml",
    "gpunodeclasses.vramfit.io.yaml",
    "modelcaches.vramfit.io.yaml",
];

/// The repository root (this crate lives in `install-tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("install-tests/ has a parent folder")
        .to_path_buf()
}

/// One YAML document of a manifest file, as a JSON value.
#[derive(Clone, Debug)]
pub struct Object {
    /// Where it comes from: "deploy/vramfit.yaml#3".
    pub source: String,
    pub value: Value,
}

impl Object {
    pub fn api_version(&self) -> &str {
        self.value["apiVersion"].as_str().unwrap_or_default()
    }
    pub fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }
    pub fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }
    pub fn namespace(&self) -> Option<&str> {
        self.value["metadata"]["namespace"].as_str()
    }
    /// The object as its typed struct; panics with the object's source if it does not fit.
    pub fn typed<T: DeserializeOwned>(&self) -> T {
        serde_json::from_value(self.value.clone())
            .unwrap_or_else(|e| panic!("{self}: not a valid {}: {e}", self.kind()))
    }
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} {})", self.source, self.kind(), self.name())
    }
}

/// Every non-empty YAML document of `path`, in order. Panics with a clear message when
/// the file is missing or is not YAML: a test cannot go on without it.
pub fn read_yaml_documents(path: &Path) -> Vec<Object> {
    let relative = path
        .strip_prefix(repo_root())
        .unwrap_or(path)
        .display()
        .to_string();
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {relative}: {e} (see scripts/helm-check.sh)"));
    serde_yaml::Deserializer::from_str(&text)
        .enumerate()
        .filter_map(|(index, document)| {
            let value = Value::deserialize(document)
                .unwrap_or_else(|e| panic!("{relative}, document {index}: not YAML: {e}"));
            (!value.is_null()).then(|| Object {
                source: format!("{relative}#{index}"),
                value,
            })
        })
        .collect()
}

/// Every object in `deploy/*.yaml`, files in name order.
pub fn deploy_objects() -> Vec<Object> {
    let dir = repo_root().join("deploy");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a readable deploy/ entry").path())
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
        })
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "deploy/ holds no manifest: run scripts/helm-check.sh --update"
    );
    files.iter().flat_map(|f| read_yaml_documents(f)).collect()
}

/// Every object of the chart rendered with `ci/watch-namespaces-values.yaml` (the operator
/// reconciles [`WATCHED_NAMESPACES`] only), kept in `install-tests/rendered/` by
/// `scripts/helm-check.sh` (`deploy/` holds only the default render).
pub fn watch_namespaces_objects() -> Vec<Object> {
    read_yaml_documents(
        &repo_root()
            .join("install-tests")
            .join("rendered")
            .join("watch-namespaces.yaml"),
    )
}

/// Every object of the chart rendered with `ci/model-cache-values.yaml` (the node model
/// cache on), kept in `install-tests/rendered/` by `scripts/helm-check.sh`.
pub fn model_cache_objects() -> Vec<Object> {
    read_yaml_documents(
        &repo_root()
            .join("install-tests")
            .join("rendered")
            .join("model-cache.yaml"),
    )
}

/// The generated CRD `file` in `crds/`; fails clearly when it has not been generated.
pub fn generated_crd(file: &str) -> Object {
    let path = repo_root().join("crds").join(file);
    assert!(
        path.exists(),
        "crds/{file} is missing: generate the CRDs from the Rust types (the crds crate's crdgen), \
         then run scripts/sync-chart-crds.sh"
    );
    let mut documents = read_yaml_documents(&path);
    assert_eq!(
        documents.len(),
        1,
        "crds/{file} must hold exactly one YAML document"
    );
    documents.remove(0)
}

/// The first place where `actual` and `expected` differ, as a JSON path with both values,
/// or `None`. Numbers compare by value (`1` equals `1.0`: YAML writers differ on that).
pub fn first_difference(actual: &Value, expected: &Value) -> Option<String> {
    fn walk(path: &str, a: &Value, b: &Value) -> Option<String> {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
                keys.sort();
                keys.dedup();
                keys.into_iter().find_map(|key| {
                    let here = format!("{path}.{key}");
                    match (a.get(key), b.get(key)) {
                        (Some(x), Some(y)) => walk(&here, x, y),
                        (Some(x), None) => Some(format!("{here}: {x} is not expected")),
                        (None, Some(y)) => Some(format!("{here}: missing, expected {y}")),
                        (None, None) => None,
                    }
                })
            }
            (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
                .iter()
                .zip(b)
                .enumerate()
                .find_map(|(i, (x, y))| walk(&format!("{path}[{i}]"), x, y)),
            (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => None,
            _ if a == b => None,
            _ => Some(format!("{path}: {a} differs from expected {b}")),
        }
    }
    walk("", actual, expected)
}

/// Deserialize `value` into `T`, serialize it back, and demand the original: k8s-openapi
/// drops fields it does not know, so a misspelled or unsupported field shows up here.
pub fn round_trip<T: DeserializeOwned + Serialize>(value: &Value) -> Result<(), String> {
    let typed: T = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    match first_difference(value, &back) {
        None => Ok(()),
        Some(difference) => Err(format!(
            "changed by a typed round trip (an unknown or misspelled field, or a wrong type): {difference}"
        )),
    }
}

/// [`round_trip`] through the k8s-openapi struct of the object's apiVersion and kind.
pub fn typed_round_trip(object: &Object) -> Result<(), String> {
    use k8s_openapi::api::admissionregistration::v1 as admission;
    use k8s_openapi::api::apps::v1 as apps;
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::api::policy::v1 as policy;
    use k8s_openapi::api::rbac::v1 as rbac;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;

    let value = &object.value;
    match (object.api_version(), object.kind()) {
        ("v1", "Namespace") => round_trip::<core::Namespace>(value),
        ("v1", "ServiceAccount") => round_trip::<core::ServiceAccount>(value),
        ("v1", "ConfigMap") => round_trip::<core::ConfigMap>(value),
        ("v1", "Service") => round_trip::<core::Service>(value),
        ("apps/v1", "Deployment") => round_trip::<apps::Deployment>(value),
        ("apps/v1", "DaemonSet") => round_trip::<apps::DaemonSet>(value),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<rbac::ClusterRole>(value),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            round_trip::<rbac::ClusterRoleBinding>(value)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<rbac::Role>(value),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<rbac::RoleBinding>(value),
        ("policy/v1", "PodDisruptionBudget") => round_trip::<policy::PodDisruptionBudget>(value),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            round_trip::<apiextensions::CustomResourceDefinition>(value)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
            round_trip::<admission::ValidatingAdmissionPolicy>(value)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
            round_trip::<admission::ValidatingAdmissionPolicyBinding>(value)
        }
        (api_version, kind) => Err(format!(
            "no typed k8s-openapi struct is mapped for {api_version} {kind}: add it to typed_round_trip"
        )),
    }
}

/// The chart's appVersion (the default image tag), read from Chart.yaml.
pub fn chart_app_version() -> String {
    let chart = read_yaml_documents(&repo_root().join("charts/vramfit/Chart.yaml"));
    chart[0].value["appVersion"]
        .as_str()
        .expect("Chart.yaml has a string appVersion")
        .to_string()
}

/// The image deploy/ must run for `component` (`operator`, `agent`): `repository@digest`
/// when the chart's values.yaml pins it (a release's), else `repository:<appVersion>` (between
/// releases deploy/ is rendered with images.allowTags).
pub fn expected_image(component: &str) -> String {
    let values = read_yaml_documents(&repo_root().join("charts/vramfit/values.yaml"));
    let image = &values[0].value[component]["image"];
    let repository = image["repository"]
        .as_str()
        .expect("values.yaml has <component>.image.repository");
    match image["digest"].as_str().filter(|d| !d.is_empty()) {
        Some(digest) => format!("{repository}@{digest}"),
        None => format!("{repository}:{}", chart_app_version()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_compare_by_value() {
        assert_eq!(
            first_difference(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})),
            None
        );
    }

    #[test]
    fn a_dropped_field_is_a_difference() {
        let difference = first_difference(&json!({"spec": {"replicaz": 2}}), &json!({"spec": {}}));
        assert_eq!(
            difference.as_deref(),
            Some(".spec.replicaz: 2 is not expected")
        );
    }

    #[test]
    fn a_misspelled_field_fails_the_typed_round_trip() {
        let object = Object {
            source: "test".into(),
            value: json!({
                "apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "x"},
                "automountServiceAccountTokn": false,
            }),
        };
        let error = typed_round_trip(&object).unwrap_err();
        assert!(error.contains("automountServiceAccountTokn"), "{error}");
    }
}

/// The text of the Markdown section `## <heading>` (up to the next `## `); `None` without one.
pub fn markdown_section<'a>(text: &'a str, heading: &str) -> Option<&'a str> {
    let rest = text.split(&format!("\n## {heading}\n")).nth(1)?;
    rest.split("\n## ").next()
}

/// The `vramfit_…` words of a text (metric names, and bare prefixes such as `vramfit_`).
pub fn vramfit_words(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("vramfit_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        words.push(&tail[..end]);
        rest = &tail[end..];
    }
    words
}

#[cfg(test)]
mod text_tests {
    use super::*;

    #[test]
    fn sections_and_metric_words_are_found() {
        let text = "# t\n## A\na\n### A.1\nb\n## B\nc\n";
        assert_eq!(markdown_section(text, "A"), Some("a\n### A.1\nb"));
        assert_eq!(markdown_section(text, "C"), None);
        assert_eq!(
            vramfit_words("`vramfit_jobs{phase}`, rate(vramfit_x_total[1m]) vramfit_"),
            ["vramfit_jobs", "vramfit_x_total", "vramfit_"]
        );
    }
}
