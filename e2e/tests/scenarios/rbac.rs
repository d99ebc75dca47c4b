//! The operator runs under its install's service account (impersonation in its kubeconfig)
//! through a whole job life, with the RBAC that `deploy/` (the chart's render) grants; then
//! `kubectl auth can-i --list` shows that identity holds exactly what the code declares.
use std::collections::{BTreeMap, BTreeSet};
use vramfit_api::event_reasons::EventReason;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;
use vramfit_api::Phase;
use vramfit_e2e::rbac::{
    OPERATOR_ACCOUNT, can_i_resource, impersonating_kubeconfig, operator_rbac, parse_can_i_list,
    service_account_user,
};
use vramfit_e2e::{MANAGER, PREFIX, Suite, check_placed_job, kubectl, read_yaml_documents};
use vramfit_operator::permissions::{PERMISSIONS, Scope};

/// Server-side applies one RBAC document of the install.
async fn apply(s: &Suite, doc: &Value) -> Result<()> {
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let params = PatchParams::apply(MANAGER).force();
    let client = s.client.clone();
    let kind = doc["kind"].as_str().unwrap_or_default();
    match kind {
        "ServiceAccount" => {
            Api::<ServiceAccount>::namespaced(client, &s.ns)
                .patch(name, &params, &Patch::Apply(doc))
                .await?;
        }
        "Role" => {
            Api::<Role>::namespaced(client, &s.ns)
                .patch(name, &params, &Patch::Apply(doc))
                .await?;
        }
        "RoleBinding" => {
            Api::<RoleBinding>::namespaced(client, &s.ns)
                .patch(name, &params, &Patch::Apply(doc))
                .await?;
        }
        "ClusterRole" => {
            Api::<ClusterRole>::all(client)
                .patch(name, &params, &Patch::Apply(doc))
                .await?;
        }
        _ => {
            Api::<ClusterRoleBinding>::all(client)
                .patch(name, &params, &Patch::Apply(doc))
                .await?;
        }
    }
    if kind.starts_with("Cluster") {
        s.cleanup
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cluster_objects
            .push((kind.to_string(), name.to_string()));
    }
    Ok(())
}

/// What the code declares, as `can-i --list` prints it, in the lease namespace or another.
fn declared(in_lease_namespace: bool) -> BTreeMap<String, BTreeSet<String>> {
    let mut rules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in PERMISSIONS {
        if p.scope == Scope::LeaseNamespace && !in_lease_namespace {
            continue;
        }
        rules
            .entry(can_i_resource(p.api_group, p.resource))
            .or_default()
            .extend(p.verbs.iter().map(|v| v.to_string()));
    }
    rules
}

pub async fn operator_under_chart_rbac(s: &mut Suite) -> Result<()> {
    s.stop_operators();
    let manifests = read_yaml_documents(&s.root.join("deploy/vramfit.yaml"))?;
    for doc in operator_rbac(&manifests, &s.ns, &format!("{PREFIX}{}", s.run))? {
        apply(s, &doc)
            .await
            .with_context(|| format!("applying {} {}", doc["kind"], doc["metadata"]["name"]))?;
    }
    let raw = kubectl(&["config", "view", "--raw", "--minify", "--flatten"])?;
    let kubeconfig = s.logs.join("operator-service-account.kubeconfig");
    std::fs::create_dir_all(&s.logs)?;
    std::fs::write(
        &kubeconfig,
        impersonating_kubeconfig(&raw, &s.ns, OPERATOR_ACCOUNT)?,
    )?;

    // The whole life of a job, every write made as the service account.
    let lease = format!("{PREFIX}{}-rbac", s.run);
    let ns = s.ns.clone();
    let flags = [
        "--leader-election",
        "--lease-name",
        lease.as_str(),
        "--lease-namespace",
        ns.as_str(),
    ];
    let env = [("KUBECONFIG", kubeconfig.display().to_string())];
    s.start_operator_with_env("service-account", &flags, &env, true)
        .await?;
    let name = "rbac-life";
    s.apply_job(s.own_job(name, 3)).await?;
    let (job, pod) = s.wait_pod(name, 1).await?;
    check_placed_job(&job, &pod, &s.sim_nodes().await?)?;
    s.set_pod_running(&pod).await?;
    s.wait_phase(name, &[Phase::Running]).await?;
    s.set_pod_ended(&pod, 0, "Completed", "").await?;
    s.wait_phase(name, &[Phase::Succeeded]).await?;
    s.wait_events(
        name,
        &[
            EventReason::PodCreated,
            EventReason::Running,
            EventReason::Succeeded,
        ],
    )
    .await?;
    let log = s.last_operator_log();
    let forbidden: Vec<&str> = log.lines().filter(|l| l.contains("forbidden")).collect();
    ensure!(
        forbidden.is_empty(),
        "the operator was refused as its service account:\n{}",
        forbidden.join("\n")
    );
    s.stop_operators();
    println!("     a job ran to Succeeded with the operator acting as {OPERATOR_ACCOUNT}");

    // Exactly the declared permissions: in the lease namespace, and in any other.
    let user = service_account_user(&s.ns, OPERATOR_ACCOUNT);
    for (namespace, in_lease_namespace) in [(s.ns.as_str(), true), ("default", false)] {
        let listed = kubectl(&["auth", "can-i", "--list", "--as", &user, "-n", namespace])?;
        let granted = parse_can_i_list(&listed)?;
        let expected = declared(in_lease_namespace);
        ensure!(
            granted == expected,
            "in namespace {namespace}, {user} holds\n{granted:?}\nbut the code declares\n{expected:?}"
        );
    }
    println!("     kubectl auth can-i --list: exactly operator/src/permissions.rs");
    s.delete_jobs(&[name.to_string()]).await
}
