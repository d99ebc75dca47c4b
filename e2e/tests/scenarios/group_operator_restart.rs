//! A restarted operator finds a running group as it left it, and writes nothing: not the job,
//! not a pod, not the group's Service or NetworkPolicy.
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use kube::ResourceExt as _;
use vramfit_e2e::{Suite, consistently, eventually, expect_eq, two_node_job};

/// A 2-node group runs; the operator is killed and a new one started: for 15 s, the
/// resourceVersions of the job, the group's pods, Service and NetworkPolicy stay what they were.
pub async fn restart_writes_nothing(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let nodes = s.group_nodes("restart").await?;
    let name = "e2e-group-restart";
    let outcome = async {
        nodes.add(s, 4, 2).await?;
        s.apply_job(two_node_job(s, name)).await?;
        let (_, pods) = s.wait_group(name, 1).await?;
        s.set_group_running(name, &pods).await?;
        // Settled: nothing changes for 5 s under the running operator.
        let settled = eventually(
            "the running group to settle",
            Duration::from_secs(60),
            || async {
                let before = versions(s, name).await?;
                tokio::time::sleep(Duration::from_secs(5)).await;
                expect_eq(
                    "resourceVersions 5 s later",
                    versions(s, name).await?,
                    before.clone(),
                )?;
                Ok(before)
            },
        )
        .await?;
        println!("     before the restart: {settled:?}");
        s.stop_operators();
        s.start_operator("group-restarted", &[], true).await?;
        consistently(
            "no write by the restarted operator",
            Duration::from_secs(15),
            || async {
                expect_eq(
                    "resourceVersions after the restart",
                    versions(s, name).await?,
                    settled.clone(),
                )
            },
        )
        .await
    }
    .await;
    s.delete_jobs(&[name.to_string()]).await?;
    nodes.remove_all(s).await?;
    outcome
}

/// The resourceVersions of job `name`, its group's pods (attempt 1), Service and NetworkPolicy.
async fn versions(s: &Suite, name: &str) -> Result<BTreeMap<String, String>> {
    let job = s.job(name).await?;
    let pods = s.group_pods(&job, 1).await?;
    let mut seen = BTreeMap::from([(
        format!("InferenceJob/{name}"),
        job.resource_version().unwrap_or_default(),
    )]);
    for pod in &pods {
        seen.insert(
            format!("Pod/{}", pod.name_any()),
            pod.resource_version().unwrap_or_default(),
        );
    }
    let (service, policy) = s.check_group_objects(&job, 1, &pods).await?;
    seen.insert(
        format!("Service/{}", service.name_any()),
        service.resource_version().unwrap_or_default(),
    );
    seen.insert(
        format!("NetworkPolicy/{}", policy.name_any()),
        policy.resource_version().unwrap_or_default(),
    );
    Ok(seen)
}
