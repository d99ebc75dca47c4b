//! deploy/: every object is typed (no unknown field), in the right namespace, and the
//! install is complete.

use std::collections::BTreeSet;

use vramfit_install_tests::{NAMESPACE, deploy_objects, typed_round_trip};

#[test]
fn every_deploy_object_round_trips_through_its_typed_struct() {
    let failures: Vec<String> = deploy_objects()
        .iter()
        .filter_map(|object| {
            typed_round_trip(object)
                .err()
                .map(|e| format!("{object}: {e}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "objects k8s-openapi does not fully understand:\n{}",
        failures.join("\n")
    );
}

#[test]
fn deploy_installs_everything() {
    let present: BTreeSet<(String, String)> = deploy_objects()
        .iter()
        .map(|o| (o.kind().to_string(), o.name().to_string()))
        .collect();
    let expected = [
        ("Namespace", "vramfit"),
        ("CustomResourceDefinition", "inferencejobs.vramfit.io"),
        ("CustomResourceDefinition", "gpunodeclasses.vramfit.io"),
        ("ServiceAccount", "vramfit-operator"),
        ("ServiceAccount", "vramfit-agent"),
        ("ClusterRole", "vramfit-operator"),
        ("ClusterRoleBinding", "vramfit-operator"),
        ("Role", "vramfit-operator-leader-election"),
        ("RoleBinding", "vramfit-operator-leader-election"),
        ("ClusterRole", "vramfit-agent"),
        ("ClusterRoleBinding", "vramfit-agent"),
        ("Deployment", "vramfit-operator"),
        ("Service", "vramfit-operator-metrics"),
        ("DaemonSet", "vramfit-agent"),
        ("Service", "vramfit-agent-metrics"),
        ("ValidatingAdmissionPolicy", "vramfit-agent-label-guard"),
        (
            "ValidatingAdmissionPolicyBinding",
            "vramfit-agent-label-guard",
        ),
        ("ConfigMap", "vramfit-dashboard"),
    ];
    let missing: Vec<String> = expected
        .iter()
        .filter(|(kind, name)| !present.contains(&(kind.to_string(), name.to_string())))
        .map(|(kind, name)| format!("{kind} {name}"))
        .collect();
    assert!(missing.is_empty(), "deploy/ lacks: {}", missing.join(", "));
    assert_eq!(
        present.len(),
        expected.len(),
        "deploy/ holds objects this test does not know: {present:?}"
    );
}

#[test]
fn namespaced_objects_are_in_the_release_namespace() {
    const CLUSTER_SCOPED: [&str; 6] = [
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    for object in deploy_objects() {
        if CLUSTER_SCOPED.contains(&object.kind()) {
            assert_eq!(
                object.namespace(),
                None,
                "{object} is cluster-scoped: no namespace"
            );
        } else {
            assert_eq!(
                object.namespace(),
                Some(NAMESPACE),
                "{object} must say its namespace, so that `kubectl apply -f deploy/` puts it there"
            );
        }
    }
}

#[test]
fn every_object_carries_the_standard_labels() {
    for object in deploy_objects() {
        let labels = &object.value["metadata"]["labels"];
        assert_eq!(
            labels["app.kubernetes.io/part-of"].as_str(),
            Some("vramfit"),
            "{object}: label app.kubernetes.io/part-of"
        );
        if object.kind() != "Namespace" {
            assert_eq!(
                labels["app.kubernetes.io/instance"].as_str(),
                Some("vramfit"),
                "{object}"
            );
            assert!(
                labels["app.kubernetes.io/version"].is_string(),
                "{object}: app.kubernetes.io/version"
            );
        }
    }
}
