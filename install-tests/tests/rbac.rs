//! RBAC in deploy/: least privilege, exactly the verbs the code uses, no wildcard.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding, Subject};
use vramfit_install_tests::{AGENT_NAME, NAMESPACE, OPERATOR_NAME, Object, deploy_objects};
use vramfit_operator::permissions;

/// Where a permission holds: the whole cluster, or one namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    Cluster,
    Namespace(String),
}

/// (scope, API group, resource, verb): one permission.
type Grant = (Scope, String, String, String);

/// The verbs the agent code uses: read its Node, server-side apply its vramfit.io/ labels.
const AGENT_CLUSTER_VERBS: &[(&str, &str, &[&str])] = &[("", "nodes", &["get", "patch"])];

fn expected(
    cluster: &[(&str, &str, &[&str])],
    namespaced: &[(&str, &str, &[&str])],
) -> BTreeSet<Grant> {
    let expand = |scope: Scope, list: &[(&str, &str, &[&str])]| -> Vec<Grant> {
        list.iter()
            .flat_map(|(group, resource, verbs)| {
                let scope = scope.clone();
                verbs.iter().map(move |verb| {
                    (
                        scope.clone(),
                        group.to_string(),
                        resource.to_string(),
                        verb.to_string(),
                    )
                })
            })
            .collect()
    };
    expand(Scope::Cluster, cluster)
        .into_iter()
        .chain(expand(Scope::Namespace(NAMESPACE.into()), namespaced))
        .collect()
}

fn grants(scope: &Scope, rules: &[PolicyRule]) -> Vec<Grant> {
    let mut out = Vec::new();
    for rule in rules {
        assert!(
            rule.non_resource_urls.is_none() && rule.resource_names.is_none(),
            "unexpected non-resource URL or resourceNames rule: {rule:?}"
        );
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    out.push((scope.clone(), group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    out
}

fn binds_service_account(subjects: &Option<Vec<Subject>>, account: &str) -> bool {
    subjects.iter().flatten().any(|s| {
        s.kind == "ServiceAccount" && s.name == account && s.namespace.as_deref() == Some(NAMESPACE)
    })
}

fn find<'a>(objects: &'a [Object], kind: &str, name: &str, namespace: Option<&str>) -> &'a Object {
    objects
        .iter()
        .find(|o| o.kind() == kind && o.name() == name && o.namespace() == namespace)
        .unwrap_or_else(|| panic!("deploy/ lacks the {kind} {name} that a binding refers to"))
}

/// Every permission deploy/ grants to the ServiceAccount `account` of the release namespace.
fn granted_to(account: &str) -> BTreeSet<Grant> {
    let objects = deploy_objects();
    let mut out = BTreeSet::new();
    for object in &objects {
        let (scope, subjects, role_ref) = match object.kind() {
            "ClusterRoleBinding" => {
                let b: k8s_openapi::api::rbac::v1::ClusterRoleBinding = object.typed();
                (Scope::Cluster, b.subjects, b.role_ref)
            }
            "RoleBinding" => {
                let b: RoleBinding = object.typed();
                let namespace = b
                    .metadata
                    .namespace
                    .clone()
                    .expect("a RoleBinding has a namespace");
                (Scope::Namespace(namespace), b.subjects, b.role_ref)
            }
            _ => continue,
        };
        if !binds_service_account(&subjects, account) {
            continue;
        }
        let rules = match role_ref.kind.as_str() {
            "ClusterRole" => {
                let role: ClusterRole = find(&objects, "ClusterRole", &role_ref.name, None).typed();
                assert!(
                    role.aggregation_rule.is_none(),
                    "{}: no aggregation",
                    role_ref.name
                );
                role.rules.unwrap_or_default()
            }
            "Role" => {
                let Scope::Namespace(namespace) = &scope else {
                    unreachable!("a ClusterRoleBinding cannot refer to a Role")
                };
                let role: Role = find(&objects, "Role", &role_ref.name, Some(namespace)).typed();
                role.rules.unwrap_or_default()
            }
            other => panic!("{object}: roleRef kind {other}"),
        };
        out.extend(grants(&scope, &rules));
    }
    out
}

fn assert_same(account: &str, actual: &BTreeSet<Grant>, expected: &BTreeSet<Grant>) {
    let extra: Vec<&Grant> = actual.difference(expected).collect();
    let missing: Vec<&Grant> = expected.difference(actual).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "RBAC of ServiceAccount {account}:\n  granted but not used by the code: {extra:?}\n  used by the code but not granted: {missing:?}"
    );
}

/// The operator's permissions as its code declares them (`vramfit_operator::permissions`).
fn operator_permissions(
    scope: permissions::Scope,
) -> Vec<(&'static str, &'static str, &'static [&'static str])> {
    permissions::PERMISSIONS
        .iter()
        .filter(|p| p.scope == scope)
        .map(|p| (p.api_group, p.resource, p.verbs))
        .collect()
}

#[test]
fn operator_gets_exactly_the_verbs_its_code_uses() {
    assert_same(
        OPERATOR_NAME,
        &granted_to(OPERATOR_NAME),
        &expected(
            &operator_permissions(permissions::Scope::Cluster),
            &operator_permissions(permissions::Scope::LeaseNamespace),
        ),
    );
}

#[test]
fn agent_may_only_get_and_patch_nodes() {
    assert_same(
        AGENT_NAME,
        &granted_to(AGENT_NAME),
        &expected(AGENT_CLUSTER_VERBS, &[]),
    );
}

#[test]
fn no_rule_uses_a_wildcard() {
    for object in deploy_objects() {
        if !matches!(object.kind(), "ClusterRole" | "Role") {
            continue;
        }
        for rule in object.value["rules"].as_array().into_iter().flatten() {
            for field in [
                "apiGroups",
                "resources",
                "verbs",
                "resourceNames",
                "nonResourceURLs",
            ] {
                for entry in rule[field].as_array().into_iter().flatten() {
                    let entry = entry.as_str().unwrap_or_default();
                    assert!(
                        !entry.contains('*'),
                        "{object}: wildcard {entry:?} in {field}"
                    );
                }
            }
        }
    }
}

#[test]
fn only_the_chart_service_accounts_are_bound() {
    for object in deploy_objects() {
        if !matches!(object.kind(), "ClusterRoleBinding" | "RoleBinding") {
            continue;
        }
        let subjects: Vec<Subject> =
            serde_json::from_value(object.value["subjects"].clone()).expect("typed subjects");
        for subject in subjects {
            assert!(
                subject.kind == "ServiceAccount"
                    && [OPERATOR_NAME, AGENT_NAME].contains(&subject.name.as_str())
                    && subject.namespace.as_deref() == Some(NAMESPACE),
                "{object} binds {subject:?}"
            );
        }
    }
}
