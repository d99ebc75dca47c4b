//! The operator runs under its install's service account (impersonation in its kubeconfig)
//! through a whole job life, with the RBAC that `deploy/` (the chart's render) grants; then
//! `kubectl auth can-i --list` shows that identity holds exactly what the code declares.
use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use vramfit_api::Phase;
use vramfit_api::event_reasons::EventReason;
use vramfit_e2e::rbac::{OPERATOR_ACCOUNT, RbacTarget, declared, operator_rbac};
use vramfit_e2e::{PREFIX, SETTLE, Suite, check_placed_job, eventually, read_yaml_documents};
use vramfit_operator::permissions::Install;

pub async fn operator_under_chart_rbac(s: &mut Suite) -> Result<()> {
    s.stop_operators();
    let manifests = read_yaml_documents(&s.root.join("deploy/vramfit.yaml"))?;
    let suffix = format!("{PREFIX}{}", s.run);
    let here = |_: &str| Some(s.ns.clone());
    let target = RbacTarget {
        namespace: &s.ns,
        account: OPERATOR_ACCOUNT,
        suffix: &suffix,
        roles: &here,
    };
    for doc in operator_rbac(&manifests, &target)? {
        s.apply_rbac(&doc).await?;
    }
    let kubeconfig =
        s.service_account_kubeconfig(OPERATOR_ACCOUNT, "operator-service-account.kubeconfig")?;

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
    // A served job too: its Service and PodDisruptionBudget are created, and scaling it below
    // two replicas deletes the budget, all as the service account.
    let served = "rbac-served";
    let mut manifest = s.own_job(served, 3);
    manifest["spec"]["gpus"] = serde_json::json!({"min": 1, "max": 1});
    manifest["spec"]["serve"] = serde_json::json!({"replicas": 2, "healthPath": "/ready"});
    s.apply_job(manifest.clone()).await?;
    s.wait_replicas(served, 2).await?;
    let services: Api<Service> = Api::namespaced(s.client.clone(), &s.ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.ns);
    eventually("the served job's Service and PDB", SETTLE, || async {
        ensure!(services.get_opt(served).await?.is_some(), "no Service");
        ensure!(pdbs.get_opt(served).await?.is_some(), "no PDB");
        Ok(())
    })
    .await?;
    manifest["spec"]["serve"]["replicas"] = serde_json::json!(1);
    s.apply_job(manifest).await?;
    eventually(
        "the PDB to be deleted below two replicas",
        SETTLE,
        || async {
            ensure!(pdbs.get_opt(served).await?.is_none(), "PDB still there");
            Ok(())
        },
    )
    .await?;
    s.ensure_operator_not_forbidden(OPERATOR_ACCOUNT)?;
    s.stop_operators();
    println!(
        "     a job ran to Succeeded, and a served job got its Service and PDB, with the operator acting as {OPERATOR_ACCOUNT}"
    );

    // Exactly the declared permissions: in the lease namespace, and in any other.
    for (namespace, in_lease_namespace) in [(s.ns.as_str(), true), ("default", false)] {
        let expected = declared(Install::AllNamespaces, true, in_lease_namespace);
        s.ensure_can_i_list(OPERATOR_ACCOUNT, namespace, &expected)?;
    }
    println!("     kubectl auth can-i --list: exactly operator/src/permissions.rs");
    s.delete_jobs(&[name.to_string(), served.to_string()]).await
}
