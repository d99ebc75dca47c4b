//! A worker's failure ends its group: every pod of the group is deleted, and the next attempt
//! is a new group, created whole.
use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt as _;
use kube::api::Api;
use vramfit_api::pod_keys::group_name;
use vramfit_api::{AttemptOutcome, Phase};
use vramfit_e2e::{SETTLE, Suite, check_group, eventually, two_node_job};

/// A 2-node group runs; its worker (rank 1) fails with exit code 1: both pods are deleted,
/// attempt 1's outcome is the failure, attempt 2's group of 2 is created whole with its own
/// Service and NetworkPolicy, and attempt 1's are removed.
pub async fn worker_failure_replaces_group(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let nodes = s.group_nodes("worker").await?;
    let name = "e2e-group-worker";
    let outcome = async {
        nodes.add(s, 4, 2).await?;
        s.apply_job(two_node_job(s, name)).await?;
        let (job, pods) = s.wait_group(name, 1).await?;
        for pod in &pods {
            s.set_pod_running(pod).await?;
        }
        s.wait_phase(name, &[Phase::Running]).await?;
        s.set_pod_ended(
            &pods[1],
            1,
            "Error",
            "ray worker: lost connection to the GCS",
        )
        .await?;

        s.wait_group_deleted(&job, 1).await?;
        let (job, second) = s.wait_group(name, 2).await?;
        check_group(&job, 2, &second, &s.sim_nodes().await?)?;
        s.check_group_objects(&job, 2, &second).await?;
        let status = job.status.clone().unwrap_or_default();
        ensure!(
            status.attempts.len() == 2,
            "status.attempts should have 2 entries: {:?}",
            status.attempts
        );
        ensure!(
            status.attempts[0]
                .outcome
                .as_ref()
                .is_some_and(|o| *o != AttemptOutcome::Succeeded),
            "attempt 1 should end with the worker's failure: {:?}",
            status.attempts[0]
        );
        println!("     attempt 1: {:?}", status.attempts[0]);

        // Attempt 1's Service and NetworkPolicy go with its pods.
        let first = group_name(name, 1);
        let services: Api<Service> = Api::namespaced(s.client.clone(), &s.ns);
        let policies: Api<NetworkPolicy> = Api::namespaced(s.client.clone(), &s.ns);
        eventually(
            &format!("the Service and NetworkPolicy of group {first} to be deleted"),
            SETTLE,
            || async {
                let service = services.get_opt(&first).await?;
                let policy = policies.get_opt(&first).await?;
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
    .await;
    s.delete_jobs(&[name.to_string()]).await?;
    nodes.remove_all(s).await?;
    outcome
}
