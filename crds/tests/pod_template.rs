//! `spec.pod` fields that decide what a workload pod may do or reveal: their defaults, how
//! they serialize (a default must not appear in a server-side apply), and their schema.
// Test and benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use vramfit_api::PodTemplate;

fn template(yaml: &str) -> PodTemplate {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"))
}

#[test]
fn log_tails_are_off_unless_asked_for() {
    assert!(!template("{}").termination_message_from_logs);
    assert!(template("terminationMessageFromLogs: true").termination_message_from_logs);
    let written = serde_json::to_value(template("{}")).unwrap();
    assert_eq!(written, serde_json::json!({}), "false is not written");
    let written = serde_json::to_value(template("terminationMessageFromLogs: true")).unwrap();
    assert_eq!(written["terminationMessageFromLogs"], true);
}

#[test]
fn the_schema_documents_log_tails_as_a_boolean() {
    let crd = serde_json::to_value(<vramfit_api::InferenceJob as kube::CustomResourceExt>::crd())
        .unwrap();
    let field = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["pod"]["properties"]["terminationMessageFromLogs"];
    assert_eq!(field["type"], "boolean");
    let doc = field["description"].as_str().unwrap_or_default();
    assert!(doc.contains("/dev/termination-log"), "{doc}");
}

fn job_with_pod(pod: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob", "metadata": {"name": "j"},
        "spec": {"model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "vllm",
                 "image": "vllm/vllm-openai:v0.10.1", "pod": pod}
    })
}

fn cel(object: &serde_json::Value) -> Result<(), String> {
    let crd = <vramfit_api::InferenceJob as kube::CustomResourceExt>::crd();
    let schema = serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("a schema"),
    )
    .unwrap();
    kube::core::cel::Validator::new()
        .validate(&schema, object, None)
        .map_err(|e| e.to_string())
}

#[test]
fn security_context_passes_only_the_identity_fields() {
    let yaml =
        "securityContext: {runAsUser: 1000, runAsGroup: 1000, runAsNonRoot: true, fsGroup: 2000}";
    let identity = template(yaml).security_context.expect("parsed");
    assert_eq!(identity.run_as_user, Some(1000));
    assert_eq!(identity.run_as_group, Some(1000));
    assert_eq!(identity.run_as_non_root, Some(true));
    assert_eq!(identity.fs_group, Some(2000));
    let crd = serde_json::to_value(<vramfit_api::InferenceJob as kube::CustomResourceExt>::crd())
        .unwrap();
    let field = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["pod"]["properties"]["securityContext"];
    let mut names: Vec<&str> = field["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["fsGroup", "runAsGroup", "runAsNonRoot", "runAsUser"],
        "privileged, capabilities and the like stay vramfit's (the API server prunes them)"
    );
    for id in ["runAsUser", "runAsGroup", "fsGroup"] {
        assert_eq!(field["properties"][id]["minimum"], 0.0, "{id}");
        assert_eq!(field["properties"][id]["maximum"], 2147483647.0, "{id}");
    }
}

#[test]
fn root_and_run_as_non_root_together_are_refused() {
    let contradiction = job_with_pod(serde_json::json!({
        "securityContext": {"runAsUser": 0, "runAsNonRoot": true}
    }));
    let error = cel(&contradiction).expect_err("refused");
    assert!(
        error.contains("runAsNonRoot true contradicts runAsUser 0"),
        "{error}"
    );
    for fine in [
        serde_json::json!({"securityContext": {"runAsUser": 1000, "runAsNonRoot": true}}),
        serde_json::json!({"securityContext": {"runAsUser": 0}}),
        serde_json::json!({"securityContext": {"runAsNonRoot": true}}),
        serde_json::json!({"securityContext": {}}),
    ] {
        let job = job_with_pod(fine.clone());
        assert_eq!(cel(&job), Ok(()), "{fine}");
    }
}

/// Keys the CRD's rules and the operator's check must agree on: reserved ones of both maps,
/// and ordinary ones (including look-alikes) that pass.
const SAMPLE_KEYS: [&str; 14] = [
    "vramfit.io/job",
    "vramfit.io/plan",
    "vramfit.io/something-new",
    "app.kubernetes.io/name",
    "app.kubernetes.io/managed-by",
    "container.apparmor.security.beta.kubernetes.io/inference",
    "seccomp.security.alpha.kubernetes.io/pod",
    "container.seccomp.security.alpha.kubernetes.io/inference",
    "io.kubernetes.cri-o.Devices",
    "cdi.k8s.io/gpus",
    "team",
    "app.kubernetes.io/part-of",
    "example.com/vramfit.io",
    "prometheus.io/scrape",
];

#[test]
fn reserved_pod_keys_are_refused_by_the_crd_as_by_the_operator() {
    use vramfit_api::reserved_pod_keys::{PodKeyField, reserved};
    let mut refused = 0;
    for (field, name) in [
        (PodKeyField::Labels, "labels"),
        (PodKeyField::Annotations, "annotations"),
    ] {
        for key in SAMPLE_KEYS {
            let job = job_with_pod(serde_json::json!({ name: {"team": "a", key: "x"} }));
            match (reserved(field, key), cel(&job)) {
                (None, Ok(())) => {}
                (Some(why), Err(error)) => {
                    refused += 1;
                    let wanted = format!("spec.pod.{name} may not set {key}: {why}");
                    assert!(error.contains(&wanted), "{wanted}\n{error}");
                }
                (expected, seen) => {
                    panic!("{name} {key}: the operator says {expected:?}, the CRD {seen:?}")
                }
            }
        }
    }
    assert_eq!(
        refused,
        5 + 8,
        "labels: 5 of vramfit's; annotations: 3 of vramfit's, 5 security"
    );
}
