//! The CRDs: generated from the Rust types into crds/, copied verbatim into the chart
//! (charts/vramfit/crds-src/, by scripts/sync-chart-crds.sh), rendered into deploy/.

use std::fs;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;
use vramfit_install_tests::{
    CRD_FILES, deploy_objects, first_difference, generated_crd, repo_root, typed_round_trip,
};

#[test]
fn generated_crds_are_custom_resource_definitions() {
    for file in CRD_FILES {
        let object = generated_crd(file);
        if let Err(e) = typed_round_trip(&object) {
            panic!("crds/{file}: {e}");
        }
        let crd: CustomResourceDefinition = object.typed();
        let name = crd.metadata.name.as_deref().unwrap_or_default();
        assert_eq!(format!("{name}.yaml"), file, "crds/{file}: metadata.name");
        assert_eq!(crd.spec.group, "vramfit.io", "crds/{file}: spec.group");
        assert!(
            crd.spec.versions.iter().filter(|v| v.storage).count() == 1,
            "crds/{file}: exactly one storage version"
        );
    }
}

#[test]
fn inference_jobs_are_namespaced_with_a_status_subresource() {
    let crd: CustomResourceDefinition = generated_crd("inferencejobs.vramfit.io.yaml").typed();
    assert_eq!(crd.spec.names.plural, "inferencejobs");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert!(
        crd.spec
            .names
            .short_names
            .unwrap_or_default()
            .contains(&"ij".to_string()),
        "NOTES.txt tells users to run `kubectl get ij`"
    );
    for version in &crd.spec.versions {
        assert!(
            version
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some()),
            "inferencejobs {}: the operator patches inferencejobs/status",
            version.name
        );
    }
}

#[test]
fn gpu_node_classes_are_cluster_scoped() {
    let crd: CustomResourceDefinition = generated_crd("gpunodeclasses.vramfit.io.yaml").typed();
    assert_eq!(crd.spec.names.plural, "gpunodeclasses");
    assert_eq!(crd.spec.scope, "Cluster");
}

#[test]
fn chart_crd_copy_equals_the_generated_crds() {
    let copies = repo_root().join("charts/vramfit/crds-src");
    for file in CRD_FILES {
        generated_crd(file); // fails clearly when crds/ has not been generated
        let source = fs::read(repo_root().join("crds").join(file)).expect("crds/ file readable");
        let copy = fs::read(copies.join(file)).unwrap_or_else(|e| {
            panic!("charts/vramfit/crds-src/{file}: {e}; run scripts/sync-chart-crds.sh")
        });
        assert!(
            source == copy,
            "charts/vramfit/crds-src/{file} differs from crds/{file}: run scripts/sync-chart-crds.sh \
             (then scripts/helm-check.sh --update)"
        );
    }
    let mut in_chart: Vec<String> = fs::read_dir(&copies)
        .expect("charts/vramfit/crds-src/ exists")
        .map(|e| {
            e.expect("readable entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    in_chart.sort();
    let mut expected: Vec<String> = CRD_FILES.iter().map(|f| f.to_string()).collect();
    expected.sort();
    assert_eq!(
        in_chart, expected,
        "charts/vramfit/crds-src/ must hold exactly the generated CRDs"
    );
}

#[test]
fn deploy_crds_equal_the_generated_crds() {
    let deployed = deploy_objects();
    for file in CRD_FILES {
        let generated = generated_crd(file);
        let rendered = deployed
            .iter()
            .find(|o| o.kind() == "CustomResourceDefinition" && o.name() == generated.name())
            .unwrap_or_else(|| {
                panic!(
                    "deploy/ lacks CRD {}: run scripts/helm-check.sh --update",
                    generated.name()
                )
            });
        // The chart adds its labels and the keep policy; everything else is the generated CRD.
        let mut without_chart_metadata = rendered.value.clone();
        let metadata = without_chart_metadata["metadata"]
            .as_object_mut()
            .expect("a CRD has metadata");
        for key in ["labels", "annotations"] {
            if generated.value["metadata"].get(key).is_none() {
                metadata.remove(key);
            }
        }
        if let Some(difference) = first_difference(&without_chart_metadata, &generated.value) {
            panic!(
                "{rendered} differs from crds/{file} at {difference}: run scripts/helm-check.sh --update"
            );
        }
        assert_eq!(
            rendered.value["metadata"]["annotations"]["helm.sh/resource-policy"],
            Value::from("keep"),
            "{rendered}: uninstalling must not delete the CRDs (and every custom resource)"
        );
    }
}
