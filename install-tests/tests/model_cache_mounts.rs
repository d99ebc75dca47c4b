//! The node model cache's mounts as the chart renders them (ci/model-cache-values.yaml,
//! kept in install-tests/rendered/model-cache.yaml): the cache agent's privileged init
//! container makes `served/` read-only with Bidirectional propagation, and no other container
//! propagates mounts; the pod guard and the volume guard key on the names and paths the
//! operator and the agent use. The guards' CEL is evaluated case by case by
//! scripts/helm-check.sh (cel-python).
use clap::Parser as _;
use serde_json::Value;
use vramfit_install_tests::{Object, model_cache_objects};

fn cache_agent_pod(objects: &[Object]) -> Value {
    objects
        .iter()
        .find(|o| {
            o.kind() == "DaemonSet"
                && o.value["metadata"]["labels"]["app.kubernetes.io/component"] == "cache-agent"
        })
        .expect("the model-cache render has the cache agent DaemonSet")
        .value["spec"]["template"]["spec"]
        .clone()
}

fn policy<'o>(objects: &'o [Object], suffix: &str) -> &'o Value {
    &objects
        .iter()
        .find(|o| o.kind() == "ValidatingAdmissionPolicy" && o.name().ends_with(suffix))
        .unwrap_or_else(|| panic!("no ValidatingAdmissionPolicy *{suffix}"))
        .value
}

fn expressions(policy: &Value) -> String {
    policy["spec"]["validations"]
        .as_array()
        .expect("validations")
        .iter()
        .map(|v| v["expression"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `container`'s command and args as the agent's command line.
fn agent_args(container: &Value) -> vramfit_cache_agent::cli::Args {
    let line: Vec<String> = ["command", "args"]
        .iter()
        .flat_map(|k| container[k].as_array().cloned().unwrap_or_default())
        .map(|v| {
            v.as_str()
                .unwrap_or_default()
                .replace("$(NODE_NAME)", "gpu-1")
        })
        .collect();
    vramfit_cache_agent::cli::Args::try_parse_from(&line)
        .unwrap_or_else(|e| panic!("{line:?} is not the agent's command line: {e}"))
}

#[test]
fn a_privileged_init_container_makes_the_served_mount_and_only_it_propagates() {
    let objects = model_cache_objects();
    let pod = cache_agent_pod(&objects);
    let inits = pod["initContainers"].as_array().expect("init containers");
    let serve = inits
        .iter()
        .find(|c| c["name"] == "serve-read-only")
        .expect("a serve-read-only init container");
    let args = agent_args(serve);
    assert!(args.serve_read_only, "it runs --serve-read-only");
    assert_eq!(serve["securityContext"]["privileged"], true);
    assert_eq!(serve["securityContext"]["readOnlyRootFilesystem"], true);
    let mounts = serve["volumeMounts"].as_array().expect("mounts");
    let cache = mounts
        .iter()
        .find(|m| m["name"] == "cache")
        .expect("the cache");
    assert_eq!(cache["mountPropagation"], "Bidirectional");
    assert_eq!(
        cache["mountPath"].as_str(),
        Some(args.cache_root.to_str().unwrap())
    );
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == "tmp" && m["mountPath"] == "/tmp"),
        "the staging folder is the pod's emptyDir, which propagates nothing: {mounts:?}"
    );
    let position = |name: &str| inits.iter().position(|c| c["name"] == name);
    assert!(
        position("own-cache-root") < position("serve-read-only"),
        "models/ is made for the agent's user after the root is given to it"
    );
    // Every other container, init or not, propagates nothing and is not privileged.
    let others = inits
        .iter()
        .chain(pod["containers"].as_array().expect("containers"))
        .filter(|c| c["name"] != "serve-read-only");
    for container in others {
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            assert!(
                mount.get("mountPropagation").is_none(),
                "{}: {mount}",
                container["name"]
            );
        }
        assert_ne!(
            container["securityContext"]["privileged"], true,
            "{}",
            container["name"]
        );
    }
}

#[test]
fn the_pod_guard_requires_read_only_model_claims_by_the_operators_claim_prefix() {
    let objects = model_cache_objects();
    let guard = policy(&objects, "-model-cache-pod-guard");
    let rules = &guard["spec"]["matchConstraints"]["resourceRules"];
    assert_eq!(rules[0]["resources"], serde_json::json!(["pods"]));
    assert_eq!(rules[0]["operations"], serde_json::json!(["CREATE"]));
    assert!(guard["spec"].get("matchConditions").is_none(), "every user");
    let cel = expressions(guard);
    let prefix = vramfit_operator::model_cache::mount::CLAIM_PREFIX;
    assert!(
        cel.contains(&format!("claimName.startsWith('{prefix}')")),
        "{cel}"
    );
    assert!(cel.contains("v.persistentVolumeClaim.readOnly"), "{cel}");
    assert!(cel.contains("ephemeral.volumeClaimTemplate"), "{cel}");
    let claim = vramfit_operator::model_cache::mount::claim_name("chat", "o/m@main");
    assert!(claim.starts_with(prefix), "{claim}");
    assert!(
        objects
            .iter()
            .any(|o| o.kind() == "ValidatingAdmissionPolicyBinding"
                && o.value["spec"]["policyName"] == guard["metadata"]["name"]
                && o.value["spec"]["validationActions"] == serde_json::json!(["Deny"])),
        "bound with Deny"
    );
}

#[test]
fn the_volume_guard_admits_only_the_served_folders_and_covers_deletion() {
    let objects = model_cache_objects();
    let guard = policy(&objects, "-model-cache-volume-guard");
    let operations = &guard["spec"]["matchConstraints"]["resourceRules"][0]["operations"];
    assert_eq!(
        *operations,
        serde_json::json!(["CREATE", "UPDATE", "DELETE"])
    );
    let root = agent_args(&cache_agent_pod(&objects)["containers"][0]).cache_root;
    let served = vramfit_cache::layout::Layout::new(&root).served_dir();
    let cel = expressions(guard);
    assert!(
        cel.contains(&format!("startsWith('{}/')", served.display())),
        "{cel}"
    );
    // The served root's segments, then owner--name and revision: exactly that many.
    let segments = served.components().count() - 1 + 2;
    assert!(
        cel.contains(&format!("{{{segments}}}$')")),
        "exactly two levels below {}: {cel}",
        served.display()
    );
    assert!(
        !cel.contains("/models/"),
        "never the writable models/: {cel}"
    );
    assert!(
        cel.contains("oldObject.metadata.labels['vramfit.io/model-cache'] == 'true'"),
        "deletes only model volumes: {cel}"
    );
    assert!(
        cel.contains(&format!(
            "claimRef.name.startsWith('{}')",
            vramfit_operator::model_cache::mount::CLAIM_PREFIX
        )),
        "{cel}"
    );
}
