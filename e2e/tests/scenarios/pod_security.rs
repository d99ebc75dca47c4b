//! Pod Security Admission, enforced by the real API server: in a namespace labelled
//! `restricted`, a job that says it runs as non-root gets its pod; one that does not is told
//! why, in its status, instead of looping.
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use std::time::Duration;

use vramfit_api::Condition;
use vramfit_api::conditions::ConditionType;
use vramfit_e2e::{Suite, eventually};

const ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// Sets (or removes, with `None`) the namespace's enforced Pod Security level.
pub async fn enforce(s: &Suite, level: Option<&str>) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(s.client.clone());
    let patch = json!({"metadata": {"labels": {ENFORCE: level}}});
    namespaces
        .patch(&s.ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("labelling namespace {} {ENFORCE}={level:?}", s.ns))?;
    Ok(())
}

pub async fn restricted_namespace(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    enforce(s, Some("restricted")).await?;
    let outcome = restricted_jobs(s).await;
    enforce(s, None).await?;
    outcome
}

async fn restricted_jobs(s: &mut Suite) -> Result<()> {
    let (non_root, root) = ("restricted-non-root", "restricted-root");
    let mut job = s.own_job(non_root, 1);
    job["spec"]["gpus"] = json!({"min": 1, "max": 1});
    job["spec"]["pod"] = json!({"securityContext": {"runAsUser": 1000}});
    s.apply_job(job).await?;
    let (_, pod) = s.wait_pod(non_root, 1).await?;
    let spec = pod.spec.clone().unwrap_or_default();
    let container = spec.containers.first().cloned().unwrap_or_default();
    let context = container.security_context.unwrap_or_default();
    ensure!(
        context.allow_privilege_escalation == Some(false),
        "pod {}: allowPrivilegeEscalation is {:?}",
        pod.name_any(),
        context.allow_privilege_escalation
    );
    ensure!(
        spec.automount_service_account_token == Some(false),
        "pod {}: a ServiceAccount token is mounted",
        pod.name_any()
    );
    println!(
        "     pod {} admitted under Pod Security restricted",
        pod.name_any()
    );

    let mut job = s.own_job(root, 1);
    job["spec"]["gpus"] = json!({"min": 1, "max": 1});
    s.apply_job(job).await?;
    let condition = rejection(s, root).await?;
    ensure!(
        condition.message.contains("restricted") || condition.message.contains("runAsNonRoot"),
        "the refusal does not say why: {}",
        condition.message
    );
    ensure!(
        s.pods_of(&s.job(root).await?).await?.is_empty(),
        "a pod exists for {root}"
    );
    println!("     a job without runAsNonRoot: {}", condition.message);
    s.delete_jobs(&[non_root.to_string(), root.to_string()])
        .await
}

/// The job's `Scheduled` condition once it says `PodRejected`.
pub async fn rejection(s: &Suite, name: &str) -> Result<Condition> {
    let scheduled = async || -> Result<Option<Condition>> {
        let job = s.job(name).await?;
        let conditions = job.status.map(|st| st.conditions).unwrap_or_default();
        Ok(conditions
            .into_iter()
            .find(|c| c.type_ == ConditionType::Scheduled.as_str()))
    };
    eventually(
        &format!("job {name} to report PodRejected"),
        Duration::from_secs(60),
        || async {
            let condition = scheduled().await?;
            ensure!(
                condition
                    .as_ref()
                    .is_some_and(|c| c.reason == "PodRejected"),
                "Scheduled is {condition:?}"
            );
            Ok(())
        },
    )
    .await?;
    scheduled().await?.context("no Scheduled condition")
}
