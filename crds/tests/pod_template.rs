//! `spec.pod` fields that decide what a workload pod may do or reveal: their defaults, how
//! they serialize (a default must not appear in a server-side apply), and their schema.
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
