//! RBAC of the chart's renders: least privilege, exactly the verbs the code uses, no wildcard.
//! Checked in both installs: `deploy/` (the default render: the operator watches every
//! namespace) and `install-tests/rendered/watch-namespaces.yaml` (`operator.watchNamespaces`:
//! a Role per watched namespace, a read-only ClusterRole).

use std::collections::BTreeSet;

use clap::Parser as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding, Subject};
use vramfit_install_tests::{
    AGENT_NAME, CACHE_AGENT_NAME, NAMESPACE, OPERATOR_NAME, Object, WATCHED_NAMESPACES,
    deploy_objects, model_cache_objects, watch_namespaces_objects,
};
use vramfit_operator::cli::Args;
use vramfit_operator::permissions::{self, Grant, Install};

/// Where a permission holds: the whole cluster, or one namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    Cluster,
    Namespace(String),
}

/// (scope, API group, resource, verb): one permission.
type Grants = BTreeSet<(Scope, String, String, String)>;

/// The verbs the agent code uses: read its Node, server-side apply its vramfit.io/ labels.
const AGENT_CLUSTER_VERBS: &[(&str, &str, &[&str])] = &[("", "nodes", &["get", "patch"])];

/// The verbs the cache agent code uses: watch its ModelCache, server-side apply its status.
const CACHE_AGENT_CLUSTER_VERBS: &[(&str, &str, &[&str])] = &[
    ("vramfit.io", "modelcaches", &["get", "list", "watch"]),
    (
        "vramfit.io",
        "modelcaches/status",
        &["get", "patch", "update"],
    ),
];

/// Each verb of `list` in `scope`.
fn expand(scope: &Scope, list: &[(&str, &str, &[&str])]) -> Grants {
    list.iter()
        .flat_map(|(group, resource, verbs)| {
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
}

fn grants(scope: &Scope, rules: &[PolicyRule]) -> Grants {
    let mut out = Grants::new();
    for rule in rules {
        assert!(
            rule.non_resource_urls.is_none() && rule.resource_names.is_none(),
            "unexpected non-resource URL or resourceNames rule: {rule:?}"
        );
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    out.insert((scope.clone(), group.clone(), resource.clone(), verb.clone()));
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
        .unwrap_or_else(|| panic!("the render lacks the {kind} {name} that a binding refers to"))
}

/// Every permission `objects` grant to the ServiceAccount `account` of the release namespace.
fn granted_to(objects: &[Object], account: &str) -> Grants {
    let mut out = Grants::new();
    for object in objects {
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
                let role: ClusterRole = find(objects, "ClusterRole", &role_ref.name, None).typed();
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
                let role: Role = find(objects, "Role", &role_ref.name, Some(namespace)).typed();
                role.rules.unwrap_or_default()
            }
            other => panic!("{object}: roleRef kind {other}"),
        };
        out.extend(grants(&scope, &rules));
    }
    out
}

fn assert_same(what: &str, actual: &Grants, expected: &Grants) {
    let extra: Vec<_> = actual.difference(expected).collect();
    let missing: Vec<_> = expected.difference(actual).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "RBAC of {what}:\n  granted but not used by the code: {extra:?}\n  used by the code but not granted: {missing:?}"
    );
}

/// What the operator's code declares (`vramfit_operator::permissions`) for `install`, where
/// the Roles of [`Grant::WatchedNamespaceRole`] are in `watched` and the Lease in the release
/// namespace.
fn operator_permissions(install: Install, watched: &[&str]) -> Grants {
    declared(permissions::PERMISSIONS, install, watched)
}

/// The grants `list` declares for `install`.
fn declared(list: &[permissions::Permission], install: Install, watched: &[&str]) -> Grants {
    let mut out = Grants::new();
    for p in list {
        let scopes = match p.scope.granted_by(install) {
            Grant::ClusterRole => vec![Scope::Cluster],
            Grant::WatchedNamespaceRole => watched
                .iter()
                .map(|namespace| Scope::Namespace(namespace.to_string()))
                .collect(),
            Grant::LeaseNamespaceRole => vec![Scope::Namespace(NAMESPACE.into())],
        };
        for scope in scopes {
            out.extend(expand(&scope, &[(p.api_group, p.resource, p.verbs)]));
        }
    }
    out
}

/// Every kept render, named.
fn renders() -> [(&'static str, Vec<Object>); 3] {
    [
        ("deploy/", deploy_objects()),
        (
            "install-tests/rendered/watch-namespaces.yaml",
            watch_namespaces_objects(),
        ),
        (
            "install-tests/rendered/model-cache.yaml",
            model_cache_objects(),
        ),
    ]
}

/// The operator's flags in `objects`' Deployment, as the operator reads them.
fn operator_args(objects: &[Object]) -> Args {
    let deployment: Deployment =
        find(objects, "Deployment", OPERATOR_NAME, Some(NAMESPACE)).typed();
    let container = deployment
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .expect("the operator Deployment has a container");
    let argv = container
        .command
        .unwrap_or_default()
        .into_iter()
        .chain(container.args.unwrap_or_default());
    Args::try_parse_from(argv)
        .unwrap_or_else(|e| panic!("the operator refuses the chart's flags: {e}"))
}

#[test]
fn operator_gets_exactly_the_verbs_its_code_uses() {
    let objects = deploy_objects();
    assert_eq!(
        operator_args(&objects).watch_namespaces.listed(),
        None,
        "the default install watches every namespace"
    );
    assert_same(
        &format!("ServiceAccount {OPERATOR_NAME} in deploy/"),
        &granted_to(&objects, OPERATOR_NAME),
        &operator_permissions(Install::AllNamespaces, &[]),
    );
}

#[test]
fn operator_with_the_model_cache_gets_exactly_the_verbs_its_code_uses() {
    let objects = model_cache_objects();
    assert!(
        operator_args(&objects).model_cache,
        "the model-cache render starts the operator with --model-cache"
    );
    let mut expected = operator_permissions(Install::AllNamespaces, &[]);
    expected.extend(declared(
        permissions::MODEL_CACHE,
        Install::AllNamespaces,
        &[],
    ));
    assert_same(
        &format!("ServiceAccount {OPERATOR_NAME} with modelCache.enabled"),
        &granted_to(&objects, OPERATOR_NAME),
        &expected,
    );
}

#[test]
fn operator_watching_listed_namespaces_gets_exactly_the_verbs_its_code_uses() {
    let objects = watch_namespaces_objects();
    let watched: Vec<String> = WATCHED_NAMESPACES.iter().map(|n| n.to_string()).collect();
    assert_eq!(
        operator_args(&objects).watch_namespaces.listed(),
        Some(watched.as_slice()),
        "the operator is started with --watch-namespaces naming the namespaces of its Roles"
    );
    let granted = granted_to(&objects, OPERATOR_NAME);
    assert_same(
        &format!("ServiceAccount {OPERATOR_NAME} in the namespace-scoped render"),
        &granted,
        &operator_permissions(Install::WatchedNamespaces, &WATCHED_NAMESPACES),
    );
    let cluster_writes: Vec<_> = granted
        .iter()
        .filter(|(scope, _, _, verb)| {
            *scope == Scope::Cluster && !["get", "list", "watch"].contains(&verb.as_str())
        })
        .collect();
    assert!(
        cluster_writes.is_empty(),
        "cluster-wide, the namespace-scoped operator only reads: {cluster_writes:?}"
    );
}

#[test]
fn agent_may_only_get_and_patch_nodes() {
    for (render, objects) in renders() {
        assert_same(
            &format!("ServiceAccount {AGENT_NAME} in {render}"),
            &granted_to(&objects, AGENT_NAME),
            &expand(&Scope::Cluster, AGENT_CLUSTER_VERBS),
        );
    }
}

#[test]
fn cache_agent_may_only_read_model_caches_and_write_their_status() {
    assert_same(
        &format!("ServiceAccount {CACHE_AGENT_NAME} with modelCache.enabled"),
        &granted_to(&model_cache_objects(), CACHE_AGENT_NAME),
        &expand(&Scope::Cluster, CACHE_AGENT_CLUSTER_VERBS),
    );
    // Its ClusterRole exactly: two rules, no Secret (the Hub token is a mounted file).
    let role: ClusterRole = find(
        &model_cache_objects(),
        "ClusterRole",
        CACHE_AGENT_NAME,
        None,
    )
    .typed();
    assert_eq!(
        grants(&Scope::Cluster, &role.rules.unwrap_or_default()),
        expand(&Scope::Cluster, CACHE_AGENT_CLUSTER_VERBS)
    );
    // Off by default: nothing is granted to it, and there is no such ServiceAccount.
    for objects in [deploy_objects(), watch_namespaces_objects()] {
        assert!(granted_to(&objects, CACHE_AGENT_NAME).is_empty());
        assert!(!objects.iter().any(|o| o.name() == CACHE_AGENT_NAME));
    }
}

#[test]
fn the_cache_agent_status_guard_names_its_service_account_and_denies() {
    let objects = model_cache_objects();
    let policy = find(
        &objects,
        "ValidatingAdmissionPolicy",
        "vramfit-cache-agent-status-guard",
        None,
    );
    let condition = policy.value["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap();
    assert_eq!(
        condition,
        format!(
            "request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{CACHE_AGENT_NAME}'"
        )
    );
    let rules = &policy.value["spec"]["matchConstraints"]["resourceRules"][0];
    assert_eq!(
        rules["resources"],
        serde_json::json!(["modelcaches", "modelcaches/status"])
    );
    let binding = find(
        &objects,
        "ValidatingAdmissionPolicyBinding",
        "vramfit-cache-agent-status-guard",
        None,
    );
    assert_eq!(
        binding.value["spec"]["validationActions"],
        serde_json::json!(["Deny"])
    );
}

#[test]
fn no_rule_uses_a_wildcard() {
    for object in renders().into_iter().flat_map(|(_, objects)| objects) {
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
    for object in renders().into_iter().flat_map(|(_, objects)| objects) {
        if !matches!(object.kind(), "ClusterRoleBinding" | "RoleBinding") {
            continue;
        }
        let subjects: Vec<Subject> =
            serde_json::from_value(object.value["subjects"].clone()).expect("typed subjects");
        for subject in subjects {
            assert!(
                subject.kind == "ServiceAccount"
                    && [OPERATOR_NAME, AGENT_NAME, CACHE_AGENT_NAME]
                        .contains(&subject.name.as_str())
                    && subject.namespace.as_deref() == Some(NAMESPACE),
                "{object} binds {subject:?}"
            );
        }
    }
}
