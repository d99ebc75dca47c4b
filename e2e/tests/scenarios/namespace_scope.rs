//! The namespace-scoped install: the operator runs with `--watch-namespaces <test namespace>`
//! under a service account that holds only what the chart grants with
//! `operator.watchNamespaces` (its render, `install-tests/rendered/watch-namespaces.yaml`: a
//! read-only ClusterRole and, moved to the test namespace, the Role of a watched namespace).
//! A job in the test namespace gets its pod; a job in another namespace is left alone: no
//! status, no pod, for as long as the suite gives a job to settle.
use std::time::Instant;

use anyhow::{Context as _, Result, ensure};
use serde_json::json;
use vramfit_e2e::rbac::{OPERATOR_ACCOUNT, RbacTarget, declared, operator_rbac};
use vramfit_e2e::{
    PREFIX, SETTLE, Suite, check_placed_job, consistently, namespaces, read_yaml_documents,
};
use vramfit_operator::permissions::Install;

/// The ServiceAccount the scenario's operator acts as: not the install's name, so that what
/// `operator-under-chart-rbac` bound to that one cannot widen what is tested here.
const ACCOUNT: &str = "vramfit-operator-scoped";

/// The render of the chart with `operator.watchNamespaces`.
const RENDER: &str = "install-tests/rendered/watch-namespaces.yaml";

pub async fn namespace_scoped_install(s: &mut Suite) -> Result<()> {
    s.stop_operators();
    let watched = s.ns.clone();
    let other = s.other_namespace("other").await?;

    // The chart's namespace-scoped RBAC: the Role of its first watched namespace goes to the
    // test namespace; the other watched namespace's and the Lease's are left out.
    let manifests = read_yaml_documents(&s.root.join(RENDER))?;
    let template = manifests
        .iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == OPERATOR_ACCOUNT)
        .and_then(|d| d["metadata"]["namespace"].as_str())
        .map(str::to_string)
        .with_context(|| format!("{RENDER} has no Role {OPERATOR_ACCOUNT}"))?;
    let suffix = format!("{PREFIX}{}-scoped", s.run);
    let into_watched = |from: &str| (from == template).then(|| watched.clone());
    let target = RbacTarget {
        namespace: &s.ns,
        account: ACCOUNT,
        suffix: &suffix,
        roles: &into_watched,
    };
    for doc in operator_rbac(&manifests, &target)? {
        s.apply_rbac(&doc).await?;
    }
    let kubeconfig = s.service_account_kubeconfig(ACCOUNT, "operator-scoped.kubeconfig")?;

    scoped_operator(s, &watched, &other, &kubeconfig).await?;
    s.ensure_operator_not_forbidden(ACCOUNT)?;
    s.stop_operators();

    // The service account holds exactly what the code declares for this install: the job
    // verbs in the watched namespace, only the cluster-wide reads in the other.
    for (namespace, is_watched) in [(watched.as_str(), true), (other.as_str(), false)] {
        let expected = declared(Install::WatchedNamespaces, is_watched, false);
        s.ensure_can_i_list(ACCOUNT, namespace, &expected)?;
    }
    println!("     kubectl auth can-i --list: exactly operator/src/permissions.rs, per namespace");
    namespaces::remove(&s.client, &other, SETTLE).await
}

async fn scoped_operator(
    s: &mut Suite,
    watched: &str,
    other: &str,
    kubeconfig: &std::path::Path,
) -> Result<()> {
    let env = [("KUBECONFIG", kubeconfig.display().to_string())];
    s.start_operator_with_env("scoped", &["--watch-namespaces", watched], &env, true)
        .await?;

    // First the job it must leave alone, then the one it must place.
    let (elsewhere, here) = ("scoped-elsewhere", "scoped-here");
    let mut job = s.own_job(elsewhere, 1);
    job["spec"]["gpus"] = json!({"min": 1, "max": 1});
    s.apply_job_in(other, job).await?;
    let created = Instant::now();
    let mut job = s.own_job(here, 1);
    job["spec"]["gpus"] = json!({"min": 1, "max": 1});
    s.apply_job(job).await?;
    let (job, pod) = s.wait_pod(here, 1).await?;
    check_placed_job(&job, &pod, &s.sim_nodes().await?)?;
    println!("     {watched}/{here} got its pod");

    // The other namespace's job: no status and no pod, until it has waited as long as any
    // job is given to settle.
    let left_alone = || async {
        let job = s.jobs_in(other).get(elsewhere).await?;
        ensure!(
            job.status.is_none(),
            "{other}/{elsewhere} has a status: {:?}",
            job.status
        );
        let pods = s.pods_of(&job).await?;
        ensure!(
            pods.is_empty(),
            "{other}/{elsewhere} has {} pod(s)",
            pods.len()
        );
        Ok(())
    };
    consistently(
        &format!("{other}/{elsewhere} to be left alone"),
        SETTLE.saturating_sub(created.elapsed()),
        left_alone,
    )
    .await?;
    left_alone().await?;
    println!("     {other}/{elsewhere}: no status, no pod after {SETTLE:?}");
    s.delete_jobs(&[here.to_string()]).await
}
