//! The operator's RBAC as the install ships it, moved into a test namespace, what
//! `kubectl auth can-i --list` says an identity may do, and what the operator's code declares
//! (pure, so unit-tested here); applying that RBAC and a kubeconfig that acts as its
//! ServiceAccount, for the scenarios that run the operator under it.
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use vramfit_operator::permissions::{Grant, Install, PERMISSIONS};

use crate::{MANAGER, Suite, kubectl};

/// The operator's service account in the install (chart and `deploy/`).
pub const OPERATOR_ACCOUNT: &str = "vramfit-operator";

/// Rules every authenticated identity holds (`system:basic-user`, `system:discovery`,
/// `system:public-info-viewer`): not the operator's own.
const GRANTED_TO_EVERYONE: [&str; 3] = [
    "selfsubjectaccessreviews.authorization.k8s.io",
    "selfsubjectrulesreviews.authorization.k8s.io",
    "selfsubjectreviews.authentication.k8s.io",
];

/// Where [`operator_rbac`] puts the install's operator RBAC.
pub struct RbacTarget<'a> {
    /// The namespace of the ServiceAccount.
    pub namespace: &'a str,
    /// The ServiceAccount's name there (the install's [`OPERATOR_ACCOUNT`], renamed so that
    /// what another scenario bound to it cannot add to what is tested).
    pub account: &'a str,
    /// Appended to cluster-scoped names, so they cannot clash with a real install.
    pub suffix: &'a str,
    /// Where the Roles and RoleBindings of an install namespace go (`None`: left out).
    pub roles: &'a (dyn Fn(&str) -> Option<String> + Sync),
}

/// The operator's ServiceAccount, ClusterRole(s) and bindings, Role(s) and bindings from the
/// install manifests, moved as `target` says.
pub fn operator_rbac(manifests: &[Value], target: &RbacTarget<'_>) -> Result<Vec<Value>> {
    let mut out = vec![];
    for doc in manifests {
        let kind = doc["kind"].as_str().unwrap_or_default();
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        if !name.starts_with(OPERATOR_ACCOUNT) {
            continue;
        }
        let mut doc = doc.clone();
        match kind {
            "ServiceAccount" => {
                doc["metadata"]["namespace"] = json!(target.namespace);
                doc["metadata"]["name"] = json!(target.account);
            }
            "Role" | "RoleBinding" => {
                let from = doc["metadata"]["namespace"].as_str().unwrap_or_default();
                let Some(to) = (target.roles)(from) else {
                    continue;
                };
                doc["metadata"]["namespace"] = json!(to);
            }
            "ClusterRole" | "ClusterRoleBinding" => {
                doc["metadata"]["name"] = json!(format!("{name}-{}", target.suffix));
            }
            _ => continue,
        }
        if kind == "ClusterRoleBinding" {
            let role = doc["roleRef"]["name"].as_str().unwrap_or_default();
            doc["roleRef"]["name"] = json!(format!("{role}-{}", target.suffix));
        }
        // `get_mut`, not indexing: indexing would add `subjects: null` to every kind.
        if let Some(subjects) = doc.get_mut("subjects").and_then(Value::as_array_mut) {
            for subject in subjects {
                subject["namespace"] = json!(target.namespace);
                subject["name"] = json!(target.account);
            }
        }
        out.push(doc);
    }
    for kind in ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"] {
        if !out.iter().any(|d| d["kind"] == kind) {
            bail!("the install manifests have no {kind} {OPERATOR_ACCOUNT}*");
        }
    }
    Ok(out)
}

/// What the operator's code declares (`operator/src/permissions.rs`) that it holds in a
/// namespace, as `kubectl auth can-i --list` prints it: in `install`, in a namespace that is
/// (or not) one it watches with `--watch-namespaces` (every namespace is, without it) and
/// (or not) the lease's.
pub fn declared(
    install: Install,
    watched: bool,
    lease: bool,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut rules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in PERMISSIONS {
        let holds = match p.scope.granted_by(install) {
            Grant::ClusterRole => true,
            Grant::WatchedNamespaceRole => watched,
            Grant::LeaseNamespaceRole => lease,
        };
        if holds {
            rules
                .entry(can_i_resource(p.api_group, p.resource))
                .or_default()
                .extend(p.verbs.iter().map(|v| v.to_string()));
        }
    }
    rules
}

impl Suite {
    /// Server-side applies one RBAC document of [`operator_rbac`]; cluster-scoped ones are
    /// removed by the suite's cleanup.
    pub async fn apply_rbac(&self, doc: &Value) -> Result<()> {
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = doc["metadata"]["namespace"].as_str().unwrap_or(&self.ns);
        let params = PatchParams::apply(MANAGER).force();
        let client = self.client.clone();
        let kind = doc["kind"].as_str().unwrap_or_default();
        let applied = match kind {
            "ServiceAccount" => Api::<ServiceAccount>::namespaced(client, namespace)
                .patch(name, &params, &Patch::Apply(doc))
                .await
                .map(drop),
            "Role" => Api::<Role>::namespaced(client, namespace)
                .patch(name, &params, &Patch::Apply(doc))
                .await
                .map(drop),
            "RoleBinding" => Api::<RoleBinding>::namespaced(client, namespace)
                .patch(name, &params, &Patch::Apply(doc))
                .await
                .map(drop),
            "ClusterRole" => Api::<ClusterRole>::all(client)
                .patch(name, &params, &Patch::Apply(doc))
                .await
                .map(drop),
            "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(client)
                .patch(name, &params, &Patch::Apply(doc))
                .await
                .map(drop),
            other => bail!("not an RBAC kind: {other} {name}"),
        };
        applied.with_context(|| format!("applying {kind} {name}"))?;
        if kind.starts_with("Cluster") {
            self.cleanup
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .cluster_objects
                .push((kind.to_string(), name.to_string()));
        }
        Ok(())
    }

    /// A kubeconfig (written under the run's logs as `file`) whose user is the suite's, acting
    /// as ServiceAccount `account` of the test namespace.
    pub fn service_account_kubeconfig(&self, account: &str, file: &str) -> Result<PathBuf> {
        let raw = kubectl(&["config", "view", "--raw", "--minify", "--flatten"])?;
        let path = self.logs.join(file);
        std::fs::create_dir_all(&self.logs)?;
        std::fs::write(&path, impersonating_kubeconfig(&raw, &self.ns, account)?)?;
        Ok(path)
    }

    /// Fails with the lines of the last operator's log that say it was refused (`forbidden`).
    pub fn ensure_operator_not_forbidden(&self, account: &str) -> Result<()> {
        let log = self.last_operator_log();
        let forbidden: Vec<&str> = log.lines().filter(|l| l.contains("forbidden")).collect();
        ensure!(
            forbidden.is_empty(),
            "the operator was refused as its service account {account}:\n{}",
            forbidden.join("\n")
        );
        Ok(())
    }

    /// Fails unless `kubectl auth can-i --list` grants ServiceAccount `account` of the test
    /// namespace exactly `expected` in `namespace`.
    pub fn ensure_can_i_list(
        &self,
        account: &str,
        namespace: &str,
        expected: &BTreeMap<String, BTreeSet<String>>,
    ) -> Result<()> {
        let user = service_account_user(&self.ns, account);
        let listed = kubectl(&["auth", "can-i", "--list", "--as", &user, "-n", namespace])?;
        let granted = parse_can_i_list(&listed)?;
        ensure!(
            &granted == expected,
            "in namespace {namespace}, {user} holds\n{granted:?}\nbut the code declares\n{expected:?}"
        );
        Ok(())
    }
}

/// The user name of a service account, as the API server authenticates its token.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// A kubeconfig (from `kubectl config view --raw --minify --flatten`) whose user acts as the
/// service account: the groups are those its token would carry.
pub fn impersonating_kubeconfig(kubeconfig: &str, namespace: &str, name: &str) -> Result<String> {
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(kubeconfig).context("reading the kubeconfig")?;
    let users = config
        .get_mut("users")
        .and_then(|u| u.as_sequence_mut())
        .filter(|u| !u.is_empty())
        .ok_or_else(|| anyhow!("the kubeconfig has no users"))?;
    for user in users {
        let auth = user
            .get_mut("user")
            .and_then(|u| u.as_mapping_mut())
            .ok_or_else(|| anyhow!("a kubeconfig user without credentials"))?;
        auth.insert("as".into(), service_account_user(namespace, name).into());
        auth.insert(
            "as-groups".into(),
            serde_yaml::Value::Sequence(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}").into(),
                "system:authenticated".into(),
            ]),
        );
    }
    Ok(serde_yaml::to_string(&config)?)
}

/// `kubectl auth can-i --list` as resource → verbs (resource as kubectl prints it:
/// `pods`, `inferencejobs.vramfit.io/status`), leaving out non-resource URLs and the rules
/// every authenticated identity holds.
pub fn parse_can_i_list(output: &str) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let mut lines = output.lines();
    let header = lines
        .next()
        .ok_or_else(|| anyhow!("kubectl auth can-i --list printed nothing"))?;
    if !header.starts_with("Resources") {
        bail!("unexpected can-i header {header:?}");
    }
    let mut rules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in lines {
        // Non-resource rows start with spaces (an empty Resources column).
        if line.starts_with(' ') || line.trim().is_empty() {
            continue;
        }
        let resource = line.split_whitespace().next().unwrap_or_default();
        if GRANTED_TO_EVERYONE.contains(&resource) {
            continue;
        }
        let verbs = line
            .rfind('[')
            .zip(line.rfind(']'))
            .map(|(open, close)| &line[open + 1..close])
            .ok_or_else(|| anyhow!("no verbs in can-i row {line:?}"))?;
        rules
            .entry(resource.to_string())
            .or_default()
            .extend(verbs.split_whitespace().map(str::to_string));
    }
    Ok(rules)
}

/// Resource and group as `kubectl auth can-i --list` prints them.
pub fn can_i_resource(api_group: &str, resource: &str) -> String {
    match (api_group, resource.split_once('/')) {
        ("", _) => resource.to_string(),
        (group, Some((plural, sub))) => format!("{plural}.{group}/{sub}"),
        (group, None) => format!("{resource}.{group}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operators_rbac_moves_to_the_test_namespace() {
        let manifests = vec![
            json!({"kind": "ServiceAccount", "metadata": {"name": "vramfit-operator", "namespace": "vramfit"}}),
            json!({"kind": "ServiceAccount", "metadata": {"name": "vramfit-agent", "namespace": "vramfit"}}),
            json!({"kind": "ClusterRole", "metadata": {"name": "vramfit-operator"}, "rules": []}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "vramfit-operator"},
                   "roleRef": {"kind": "ClusterRole", "name": "vramfit-operator"},
                   "subjects": [{"kind": "ServiceAccount", "name": "vramfit-operator", "namespace": "vramfit"}]}),
            json!({"kind": "Role", "metadata": {"name": "vramfit-operator-leader-election", "namespace": "vramfit"}}),
            json!({"kind": "Role", "metadata": {"name": "vramfit-operator", "namespace": "team-a"}}),
        ];
        let everything_here = |_: &str| Some("e2e".to_string());
        let target = RbacTarget {
            namespace: "e2e",
            account: OPERATOR_ACCOUNT,
            suffix: "run1",
            roles: &everything_here,
        };
        let moved = operator_rbac(&manifests, &target).unwrap();
        assert_eq!(moved.len(), 5, "the agent's account is not the operator's");
        assert_eq!(moved[0]["metadata"]["namespace"], "e2e");
        assert!(moved[0].get("subjects").is_none(), "{:?}", moved[0]);
        assert_eq!(moved[1]["metadata"]["name"], "vramfit-operator-run1");
        assert_eq!(moved[2]["roleRef"]["name"], "vramfit-operator-run1");
        assert_eq!(moved[2]["subjects"][0]["namespace"], "e2e");
        assert_eq!(moved[3]["metadata"]["namespace"], "e2e");
        assert_eq!(moved[4]["metadata"]["namespace"], "e2e");
        assert!(operator_rbac(&manifests[..1], &target).is_err());

        // Only team-a's Role, into e2e, for another account.
        let team_a_only = |from: &str| (from == "team-a").then(|| "e2e".to_string());
        let target = RbacTarget {
            account: "scoped",
            roles: &team_a_only,
            ..target
        };
        let moved = operator_rbac(&manifests, &target).unwrap();
        let kinds: Vec<&str> = moved.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role"
            ]
        );
        assert_eq!(moved[0]["metadata"]["name"], "scoped");
        assert_eq!(moved[2]["subjects"][0]["name"], "scoped");
        assert_eq!(moved[3]["metadata"]["name"], "vramfit-operator");
        assert_eq!(moved[3]["metadata"]["namespace"], "e2e");
    }

    #[test]
    fn what_the_code_declares_per_namespace() {
        let all = declared(Install::AllNamespaces, true, false);
        assert_eq!(all["pods"].len(), 6, "{all:?}");
        assert!(!all.contains_key("leases.coordination.k8s.io"));
        assert!(
            declared(Install::AllNamespaces, true, true).contains_key("leases.coordination.k8s.io")
        );
        let unwatched = declared(Install::WatchedNamespaces, false, false);
        assert_eq!(
            unwatched.keys().collect::<Vec<_>>(),
            [
                "customresourcedefinitions.apiextensions.k8s.io",
                "gpunodeclasses.vramfit.io",
                "nodes",
                "pods"
            ]
        );
        assert_eq!(
            unwatched["pods"],
            ["get", "list", "watch"].map(String::from).into()
        );
        let watched = declared(Install::WatchedNamespaces, true, false);
        assert_eq!(
            watched, all,
            "a watched namespace: what every namespace gets without the flag"
        );
    }

    #[test]
    fn the_kubeconfig_acts_as_the_service_account() {
        let config = "users:\n- name: admin\n  user:\n    token: abc\n";
        let out = impersonating_kubeconfig(config, "ns", "op").unwrap();
        let value: serde_yaml::Value = serde_yaml::from_str(&out).unwrap();
        let user = &value["users"][0]["user"];
        assert_eq!(user["as"], "system:serviceaccount:ns:op");
        assert_eq!(user["as-groups"][1], "system:serviceaccounts:ns");
        assert_eq!(user["token"], "abc");
        assert!(impersonating_kubeconfig("users: []", "ns", "op").is_err());
    }

    #[test]
    fn can_i_lists_are_read_without_what_everyone_holds() {
        let output = "\
Resources                                       Non-Resource URLs   Resource Names   Verbs
pods                                            []                  []               [get list watch create patch delete]
inferencejobs.vramfit.io/status                 []                  []               [get patch]
selfsubjectreviews.authentication.k8s.io        []                  []               [create]
                                                [/api/*]            []               [get]
";
        let rules = parse_can_i_list(output).unwrap();
        assert_eq!(rules.len(), 2, "{rules:?}");
        assert!(rules["pods"].contains("delete"));
        assert_eq!(rules["inferencejobs.vramfit.io/status"].len(), 2);
        assert!(parse_can_i_list("").is_err());
        assert_eq!(can_i_resource("", "pods"), "pods");
        assert_eq!(
            can_i_resource("vramfit.io", "inferencejobs/status"),
            "inferencejobs.vramfit.io/status"
        );
        assert_eq!(
            can_i_resource("coordination.k8s.io", "leases"),
            "leases.coordination.k8s.io"
        );
    }
}
