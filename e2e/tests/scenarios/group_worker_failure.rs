//! A worker's failure ends its group: every pod of the group is deleted. A worker Kubernetes
//! ended (evicted: not the plan's fault) makes the next attempt a new group, created whole; a
//! worker whose program failed fails the job, as a one-pod job's failure does (the running
//! pods deleted, the finished ones kept for their logs).
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt as _;
use kube::api::Api;
use vramfit_api::pod_keys::group_name;
use vramfit_api::{AttemptOutcome, Phase};
use vramfit_e2e::{SETTLE, Suite, consistently, eventually, expect_eq, is_live, two_node_job};

/// A 2-node group runs; its worker (rank 1) is evicted by the kubelet: both pods are deleted,
/// attempt 1's outcome is `Disrupted`, attempt 2's group of 2 is created whole with its own
/// Service and NetworkPolicy, and attempt 1's are removed. Then attempt 2's worker ends with
/// exit code 1: the job is Failed, its running leader is deleted, the failed worker is kept for
/// its logs, and no attempt 3 is created.
pub async fn worker_failure_replaces_group(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let nodes = s.group_nodes("worker").await?;
    let name = "e2e-group-worker";
    let outcome = async {
        nodes.add(s, 4, 2).await?;
        s.apply_job(two_node_job(s, name)).await?;
        let (job, pods) = s.wait_group(name, 1).await?;
        s.set_group_running(name, &pods).await?;
        s.set_pod_failed_by_kubelet(
            &pods[1],
            "Evicted",
            "The node was low on resource: ephemeral-storage.",
        )
        .await?;

        let (job, second) = s
            .wait_group_replaced(&job, AttemptOutcome::Disrupted)
            .await?;
        let status = job.status.clone().unwrap_or_default();
        println!("     attempt 1: {:?}", status.attempts[0].message);
        objects_deleted(s, &group_name(name, 1)).await?;

        // A program's failure on a worker is the job's, as on a one-pod job.
        s.set_group_running(name, &second).await?;
        s.set_pod_ended(
            &second[1],
            1,
            "Error",
            "ray worker: lost connection to the GCS",
        )
        .await?;
        let job = s.wait_phase(name, &[Phase::Failed]).await?;
        // Its running leader is deleted; the failed worker (no GPUs) stays for its logs.
        s.wait_member_deleted(&job, &second[0], "leader of the failed job")
            .await?;
        let live: Vec<String> = s
            .group_pods(&job, 2)
            .await?
            .iter()
            .filter(|p| is_live(p))
            .map(|p| p.name_any())
            .collect();
        ensure!(
            live.is_empty(),
            "live pods of the failed job's group: {live:?}"
        );
        let worker = s.pods().get_opt(&second[1].name_any()).await?;
        ensure!(
            worker
                .as_ref()
                .is_some_and(|p| p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Failed")),
            "the failed worker {} should be kept, Failed, for its logs: {:?}",
            second[1].name_any(),
            worker.map(|p| (
                p.metadata.deletion_timestamp,
                p.status.and_then(|st| st.phase)
            ))
        );
        let status = job.status.clone().unwrap_or_default();
        expect_eq(
            "attempts[1].outcome",
            status.attempts.get(1).and_then(|a| a.outcome.clone()),
            Some(AttemptOutcome::Failed),
        )?;
        consistently("no attempt 3", Duration::from_secs(5), || async {
            let job = s.job(name).await?;
            let attempts = job.status.as_ref().map_or(0, |st| st.attempt_count);
            ensure!(
                attempts == 2 && s.group_pods(&job, 3).await?.is_empty(),
                "attemptCount {attempts}"
            );
            Ok(())
        })
        .await
    }
    .await;
    s.delete_jobs(&[name.to_string()]).await?;
    nodes.remove_all(s).await?;
    outcome
}

/// Waits until the group's Service and NetworkPolicy are deleted (they go with its pods).
async fn objects_deleted(s: &Suite, group: &str) -> Result<()> {
    let services: Api<Service> = Api::namespaced(s.client.clone(), &s.ns);
    let policies: Api<NetworkPolicy> = Api::namespaced(s.client.clone(), &s.ns);
    eventually(
        &format!("the Service and NetworkPolicy of group {group} to be deleted"),
        SETTLE,
        || async {
            let service = services.get_opt(group).await?;
            let policy = policies.get_opt(group).await?;
            ensure!(
                service
                    .as_ref()
                    .is_none_or(|o| o.metadata.deletion_timestamp.is_some())
                    && policy
                        .as_ref()
                        .is_none_or(|o| o.metadata.deletion_timestamp.is_some()),
                "Service {:?}, NetworkPolicy {:?}",
                service.map(|o| o.name_any()),
                policy.map(|o| o.name_any())
            );
            Ok(())
        },
    )
    .await
}
