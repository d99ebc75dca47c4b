//! deploy/: every object is typed (no unknown field), in the right namespace, and the
//! install is complete. The namespace-scoped render (install-tests/rendered/) is typed too.

use std::collections::BTreeSet;

use vramfit_install_tests::{
    NAMESPACE, deploy_objects, typed_round_trip, watch_namespaces_objects,
};

#[test]
fn every_deploy_object_round_trips_through_its_typed_struct() {
    let failures: Vec<String> = deploy_objects()
        .iter()
        .chain(&watch_namespaces_objects())
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
        ("CustomResourceDefinition", "modelcaches.vramfit.io"),
        ("ServiceAccount", "vramfit-operator"),
        ("ServiceAccount", "vramfit-agent"),
        ("ClusterRole", "vramfit-operator"),
        ("ClusterRoleBinding", "vramfit-operator"),
        ("Role", "vramfit-operator-leader-election"),
        ("RoleBinding", "vramfit-operator-leader-election"),
        ("ClusterRole", "vramfit-agent"),
        ("ClusterRoleBinding", "vramfit-agent"),
        ("ClusterRole", "vramfit-edit"),
        ("ClusterRole", "vramfit-view"),
        ("Deployment", "vramfit-operator"),
        ("Service", "vramfit-operator-metrics"),
        ("DaemonSet", "vramfit-agent"),
        ("Service", "vramfit-agent-metrics"),
        ("ValidatingAdmissionPolicy", "vramfit-agent-label-guard"),
        (
            "ValidatingAdmissionPolicyBinding",
            "vramfit-agent-label-guard",
        ),
        (
            "ValidatingAdmissionPolicy",
            "vramfit-inferencejob-pod-trust",
        ),
        (
            "ValidatingAdmissionPolicyBinding",
            "vramfit-inferencejob-pod-trust",
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

/// Every `fieldRef` anywhere in `value`, with where it is.
fn field_refs<'a>(
    value: &'a serde_json::Value,
    path: String,
    out: &mut Vec<(String, &'a serde_json::Value)>,
) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, child) in map {
                let here = format!("{path}.{key}");
                if key == "fieldRef" {
                    out.push((here.clone(), child));
                }
                field_refs(child, here, out);
            }
        }
        serde_json::Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                field_refs(child, format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Regression (seen on a real API server): server-side apply replaces `fieldRef` and a
/// policy's `matchConstraints` as a whole, and the server fills in what the manifest leaves
/// out; a Helm install over a kubectl one then conflicts with manager "kubectl" over those
/// defaults. The manifests spell them out.
#[test]
fn atomic_fields_carry_the_server_defaults() {
    let mut missing = vec![];
    for object in deploy_objects() {
        let mut refs = vec![];
        field_refs(&object.value, String::new(), &mut refs);
        for (path, field_ref) in refs {
            if field_ref.get("apiVersion").is_none() {
                missing.push(format!("{object}: {path}.apiVersion"));
            }
        }
        if object.kind() == "ValidatingAdmissionPolicy" {
            let constraints = &object.value["spec"]["matchConstraints"];
            for key in ["matchPolicy", "namespaceSelector", "objectSelector"] {
                if constraints.get(key).is_none() {
                    missing.push(format!("{object}: spec.matchConstraints.{key}"));
                }
            }
            for (i, rule) in constraints["resourceRules"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                if rule.get("scope").is_none() {
                    missing.push(format!(
                        "{object}: spec.matchConstraints.resourceRules[{i}].scope"
                    ));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "server defaults left out:\n{}",
        missing.join("\n")
    );
}
