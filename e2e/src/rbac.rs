//! The operator's RBAC as the install ships it, moved into a test namespace, and what
//! `kubectl auth can-i --list` says an identity may do (pure, so unit-tested here).
use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::{Value, json};

/// The operator's service account in the install (chart and `deploy/`).
pub const OPERATOR_ACCOUNT: &str = "vramfit-operator";

/// Rules every authenticated identity holds (`system:basic-user`, `system:discovery`,
/// `system:public-info-viewer`): not the operator's own.
const GRANTED_TO_EVERYONE: [&str; 3] = [
    "selfsubjectaccessreviews.authorization.k8s.io",
    "selfsubjectrulesreviews.authorization.k8s.io",
    "selfsubjectreviews.authentication.k8s.io",
];

/// The operator's ServiceAccount, ClusterRole(s) and bindings, Role(s) and bindings from the
/// install manifests, moved to `namespace`; cluster-scoped names get `suffix` so they cannot
/// clash with a real install.
pub fn operator_rbac(manifests: &[Value], namespace: &str, suffix: &str) -> Result<Vec<Value>> {
    let mut out = vec![];
    for doc in manifests {
        let kind = doc["kind"].as_str().unwrap_or_default();
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        if !name.starts_with(OPERATOR_ACCOUNT) {
            continue;
        }
        let mut doc = doc.clone();
        match kind {
            "ServiceAccount" | "Role" | "RoleBinding" => {
                doc["metadata"]["namespace"] = json!(namespace);
            }
            "ClusterRole" | "ClusterRoleBinding" => {
                doc["metadata"]["name"] = json!(format!("{name}-{suffix}"));
            }
            _ => continue,
        }
        if kind == "ClusterRoleBinding" {
            let role = doc["roleRef"]["name"].as_str().unwrap_or_default();
            doc["roleRef"]["name"] = json!(format!("{role}-{suffix}"));
        }
        // `get_mut`, not indexing: indexing would add `subjects: null` to every kind.
        if let Some(subjects) = doc.get_mut("subjects").and_then(Value::as_array_mut) {
            for subject in subjects {
                subject["namespace"] = json!(namespace);
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
        ];
        let moved = operator_rbac(&manifests, "e2e", "run1").unwrap();
        assert_eq!(moved.len(), 4, "the agent's account is not the operator's");
        assert_eq!(moved[0]["metadata"]["namespace"], "e2e");
        assert!(moved[0].get("subjects").is_none(), "{:?}", moved[0]);
        assert_eq!(moved[1]["metadata"]["name"], "vramfit-operator-run1");
        assert_eq!(moved[2]["roleRef"]["name"], "vramfit-operator-run1");
        assert_eq!(moved[2]["subjects"][0]["namespace"], "e2e");
        assert_eq!(moved[3]["metadata"]["namespace"], "e2e");
        assert!(operator_rbac(&manifests[..1], "e2e", "x").is_err());
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
