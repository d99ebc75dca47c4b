//! The leader's success is the job's: a group whose rank 0 ends with exit code 0 makes the job
//! Succeeded, and its workers (still running) are deleted, freeing their GPUs.
use anyhow::{Result, ensure};
use vramfit_api::Phase;
use vramfit_e2e::{Suite, two_node_job};

/// A 2-node group Running; the leader ends with exit code 0: the job is Succeeded, the worker
/// is deleted, and no attempt 2 is created.
pub async fn leader_success_ends_the_job(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let nodes = s.group_nodes("leader").await?;
    let name = "e2e-group-leader";
    let outcome = async {
        nodes.add(s, 4, 2).await?;
        s.apply_job(two_node_job(s, name)).await?;
        let (job, pods) = s.wait_group(name, 1).await?;
        s.set_group_running(name, &pods).await?;
        s.set_pod_ended(&pods[0], 0, "Completed", "").await?;
        s.wait_phase(name, &[Phase::Succeeded]).await?;
        s.wait_member_deleted(&job, &pods[1], "worker").await?;
        let job = s.job(name).await?;
        let status = job.status.clone().unwrap_or_default();
        ensure!(
            status.attempt_count == 1 && s.group_pods(&job, 2).await?.is_empty(),
            "no attempt 2 after the leader's success: attemptCount {}",
            status.attempt_count
        );
        Ok(())
    }
    .await;
    s.delete_jobs(&[name.to_string()]).await?;
    nodes.remove_all(s).await?;
    outcome
}
