//! The operator Deployment and the agent DaemonSet in deploy/: the binaries' contract
//! (flags, env, ports, probes), pod security, scheduling, and the admission guard.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, Service, ServiceAccount};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use vramfit_install_tests::{
    AGENT_NAME, NAMESPACE, OPERATOR_NAME, Object, deploy_objects, expected_image,
};

fn object(kind: &str, name: &str) -> Object {
    deploy_objects()
        .into_iter()
        .find(|o| o.kind() == kind && o.name() == name)
        .unwrap_or_else(|| panic!("deploy/ lacks {kind} {name}"))
}

fn has_object(kind: &str, name: &str) -> bool {
    deploy_objects()
        .iter()
        .any(|o| o.kind() == kind && o.name() == name)
}

fn operator() -> Deployment {
    object("Deployment", OPERATOR_NAME).typed()
}

fn agent() -> DaemonSet {
    object("DaemonSet", AGENT_NAME).typed()
}

fn pod_spec(template: &PodTemplateSpec) -> &PodSpec {
    template.spec.as_ref().expect("a pod template has a spec")
}

fn only_container(spec: &PodSpec) -> &Container {
    assert_eq!(spec.containers.len(), 1, "one container per pod");
    assert!(spec.init_containers.is_none(), "no init container");
    &spec.containers[0]
}

fn env_value<'a>(container: &'a Container, name: &str) -> Option<&'a str> {
    container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.as_deref())
}

fn env_field_path<'a>(container: &'a Container, name: &str) -> Option<&'a str> {
    container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.as_str())
}

/// The restricted Pod Security Standard and more: non-root with a fixed UID, read-only
/// root filesystem, nothing to escalate, RuntimeDefault seccomp, bounded resources.
fn assert_locked_down(what: &str, spec: &PodSpec) {
    let pod = spec.security_context.as_ref().expect("pod securityContext");
    assert_eq!(pod.run_as_non_root, Some(true), "{what}: runAsNonRoot");
    assert!(
        pod.run_as_user.is_some_and(|uid| uid > 0),
        "{what}: a fixed non-root UID"
    );
    assert_eq!(
        pod.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
        Some("RuntimeDefault"),
        "{what}: seccomp"
    );
    assert_eq!(spec.host_network, None, "{what}: hostNetwork");
    assert_eq!(spec.host_pid, None, "{what}: hostPID");
    assert_eq!(spec.host_ipc, None, "{what}: hostIPC");
    for volume in spec.volumes.iter().flatten() {
        assert!(
            volume.empty_dir.is_some(),
            "{what}: volume {} is not an emptyDir",
            volume.name
        );
    }
    // Both talk to the API server, so both mount their token, explicitly.
    assert_eq!(
        spec.automount_service_account_token,
        Some(true),
        "{what}: automountServiceAccountToken"
    );

    let container = only_container(spec);
    let security = container
        .security_context
        .as_ref()
        .expect("container securityContext");
    assert_eq!(security.run_as_non_root, Some(true), "{what}: runAsNonRoot");
    assert_eq!(
        security.allow_privilege_escalation,
        Some(false),
        "{what}: allowPrivilegeEscalation"
    );
    assert_ne!(security.privileged, Some(true), "{what}: privileged");
    assert_eq!(
        security.read_only_root_filesystem,
        Some(true),
        "{what}: readOnlyRootFilesystem"
    );
    let capabilities = security.capabilities.as_ref().expect("capabilities");
    assert_eq!(
        capabilities.drop.as_deref(),
        Some(&["ALL".to_string()][..]),
        "{what}: drop ALL"
    );
    assert_eq!(capabilities.add, None, "{what}: no capability added");
    let resources = container.resources.as_ref().expect("resources");
    for (kind, list) in [
        ("requests", &resources.requests),
        ("limits", &resources.limits),
    ] {
        let list = list
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: resource {kind}"));
        for resource in ["cpu", "memory"] {
            assert!(list.contains_key(resource), "{what}: {kind}.{resource}");
        }
    }
}

fn assert_health_probes(what: &str, container: &Container, port: i32) {
    let metrics = container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .unwrap_or_else(|| panic!("{what}: a port named metrics"));
    assert_eq!(metrics.container_port, port, "{what}: metrics port");
    for (probe, path) in [
        (&container.liveness_probe, "/healthz"),
        (&container.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("{what}: an HTTP probe on {path}"));
        assert_eq!(get.path.as_deref(), Some(path), "{what}");
        assert_eq!(get.port, IntOrString::String("metrics".into()), "{what}");
    }
}

#[test]
fn operator_runs_two_replicas_with_leader_election() {
    let deployment = operator();
    let spec = deployment.spec.as_ref().expect("spec");
    assert_eq!(spec.replicas, Some(2));
    let pod = pod_spec(&spec.template);
    let container = only_container(pod);
    let args = container.args.clone().unwrap_or_default();
    for expected in [
        "--metrics-addr=0.0.0.0:8080",
        "--leader-election",
        "--lease-name=vramfit-operator",
        "--log-format=json",
        "--concurrency=64",
    ] {
        assert!(
            args.iter().any(|a| a == expected),
            "operator args {args:?} lack {expected}"
        );
    }
    assert_eq!(
        container.command.as_deref(),
        Some(&["/vramfit-operator".to_string()][..])
    );
    assert_eq!(
        container.image.as_deref(),
        Some(expected_image("operator").as_str())
    );
    assert_eq!(env_field_path(container, "POD_NAME"), Some("metadata.name"));
    assert_eq!(
        env_field_path(container, "POD_NAMESPACE"),
        Some("metadata.namespace")
    );
    assert_health_probes("operator", container, 8080);
    assert_eq!(pod.service_account_name.as_deref(), Some(OPERATOR_NAME));
}

#[test]
fn operator_pods_are_locked_down() {
    let deployment = operator();
    assert_locked_down(
        "operator",
        pod_spec(&deployment.spec.expect("spec").template),
    );
}

#[test]
fn operator_has_no_disruption_budget_by_default() {
    // With leader election only the leader is Ready, so a budget over two replicas would
    // count the standby as disrupted and block draining the leader's node.
    assert!(
        !has_object("PodDisruptionBudget", OPERATOR_NAME),
        "deploy/ must not ship an operator PodDisruptionBudget by default"
    );
}

#[test]
fn agent_reads_gpus_through_the_nvidia_runtime_without_privileges() {
    let daemonset = agent();
    let pod = pod_spec(&daemonset.spec.as_ref().expect("spec").template).clone();
    assert_eq!(pod.runtime_class_name.as_deref(), Some("nvidia"));
    let container = only_container(&pod);
    assert_eq!(env_value(container, "NVIDIA_VISIBLE_DEVICES"), Some("all"));
    assert_eq!(
        env_value(container, "NVIDIA_DRIVER_CAPABILITIES"),
        Some("utility")
    );
    assert_eq!(
        env_field_path(container, "NODE_NAME"),
        Some("spec.nodeName")
    );
    let args = container.args.clone().unwrap_or_default();
    for expected in [
        "--node-name=$(NODE_NAME)",
        "--interval-seconds=60",
        "--listen=0.0.0.0:9102",
        "--log-format=json",
    ] {
        assert!(
            args.iter().any(|a| a == expected),
            "agent args {args:?} lack {expected}"
        );
    }
    assert_eq!(
        container.image.as_deref(),
        Some(expected_image("agent").as_str())
    );
    assert_health_probes("agent", container, 9102);
    assert_locked_down("agent", &pod);
    assert_eq!(pod.service_account_name.as_deref(), Some(AGENT_NAME));
}

#[test]
fn agent_runs_on_nvidia_gpu_nodes_despite_their_taint() {
    let daemonset = agent();
    let pod = pod_spec(&daemonset.spec.as_ref().expect("spec").template).clone();
    let terms = pod
        .affinity
        .and_then(|a| a.node_affinity)
        .and_then(|n| n.required_during_scheduling_ignored_during_execution)
        .expect("a required node affinity")
        .node_selector_terms;
    // Terms are ORed: one per label that marks an NVIDIA GPU node.
    let keys: Vec<(String, Vec<String>)> = terms
        .iter()
        .map(|t| {
            let expressions = t.match_expressions.clone().unwrap_or_default();
            assert_eq!(expressions.len(), 1, "one requirement per term");
            let e = &expressions[0];
            assert_eq!(e.operator, "In");
            (e.key.clone(), e.values.clone().unwrap_or_default())
        })
        .collect();
    assert_eq!(
        keys,
        vec![
            (
                "nvidia.com/gpu.present".to_string(),
                vec!["true".to_string()]
            ),
            (
                "feature.node.kubernetes.io/pci-10de.present".to_string(),
                vec!["true".to_string()]
            ),
            (
                "feature.node.kubernetes.io/pci-0302_10de.present".to_string(),
                vec!["true".to_string()]
            ),
            (
                "feature.node.kubernetes.io/pci-0300_10de.present".to_string(),
                vec!["true".to_string()]
            ),
        ]
    );
    assert!(
        pod.tolerations.iter().flatten().any(|t| {
            t.key.as_deref() == Some("nvidia.com/gpu")
                && t.operator.as_deref() == Some("Exists")
                && t.effect.is_none()
        }),
        "the agent tolerates the nvidia.com/gpu taint"
    );
}

#[test]
fn service_accounts_do_not_hand_out_tokens_by_default() {
    for name in [OPERATOR_NAME, AGENT_NAME] {
        let account: ServiceAccount = object("ServiceAccount", name).typed();
        assert_eq!(
            account.automount_service_account_token,
            Some(false),
            "ServiceAccount {name}: pods that need a token ask for it"
        );
    }
}

fn assert_selects(
    what: &str,
    selector: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) {
    assert!(!selector.is_empty(), "{what}: empty selector");
    for (key, value) in selector {
        assert_eq!(
            labels.get(key),
            Some(value),
            "{what}: selector {key}={value} does not match the pods"
        );
    }
}

#[test]
fn metrics_services_select_their_pods() {
    let operator_labels = operator()
        .spec
        .expect("spec")
        .template
        .metadata
        .and_then(|m| m.labels)
        .expect("labels");
    let agent_labels = agent()
        .spec
        .expect("spec")
        .template
        .metadata
        .and_then(|m| m.labels)
        .expect("labels");
    for (service, labels, port) in [
        ("vramfit-operator-metrics", operator_labels, 8080),
        ("vramfit-agent-metrics", agent_labels, 9102),
    ] {
        let svc: Service = object("Service", service).typed();
        let spec = svc.spec.expect("spec");
        assert_selects(service, &spec.selector.clone().unwrap_or_default(), &labels);
        let ports = spec.ports.unwrap_or_default();
        assert!(
            ports.iter().any(|p| p.name.as_deref() == Some("metrics")
                && p.port == port
                && p.target_port == Some(IntOrString::String("metrics".into()))),
            "{service}: port metrics {port}"
        );
    }
}

#[test]
fn label_guard_applies_to_the_agent_service_account() {
    let policy: ValidatingAdmissionPolicy =
        object("ValidatingAdmissionPolicy", "vramfit-agent-label-guard").typed();
    let spec = policy.spec.expect("spec");
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let conditions = spec.match_conditions.unwrap_or_default();
    let user = format!("system:serviceaccount:{NAMESPACE}:{AGENT_NAME}");
    assert!(
        conditions
            .iter()
            .any(|c| c.expression == format!("request.userInfo.username == '{user}'")),
        "the policy must match the agent's user {user}: {conditions:?}"
    );
    let rules = spec
        .match_constraints
        .and_then(|m| m.resource_rules)
        .unwrap_or_default();
    assert!(
        rules.iter().any(
            |r| r.resources.as_deref() == Some(&["nodes".to_string()][..])
                && r.operations.iter().flatten().any(|o| o == "UPDATE")
        ),
        "the policy must cover updates of nodes: {rules:?}"
    );
    let expressions: Vec<String> = spec
        .validations
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.expression)
        .collect();
    for needle in [
        "startsWith('vramfit.io/')",
        "metadata.annotations",
        "object.spec == oldObject.spec",
    ] {
        assert!(
            expressions.iter().any(|e| e.contains(needle)),
            "no validation checks {needle}"
        );
    }

    let binding: ValidatingAdmissionPolicyBinding = object(
        "ValidatingAdmissionPolicyBinding",
        "vramfit-agent-label-guard",
    )
    .typed();
    let binding = binding.spec.expect("spec");
    assert_eq!(
        binding.policy_name.as_deref(),
        Some("vramfit-agent-label-guard")
    );
    assert_eq!(
        binding.validation_actions.as_deref(),
        Some(&["Deny".to_string()][..])
    );
}
