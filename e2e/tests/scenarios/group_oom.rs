//! Out of memory in a group: the leader's CUDA out-of-memory failure ends the group, and the
//! next attempt's group is planned one step down (one more node, or quantization) and
//! created whole.
use anyhow::{Result, ensure};
use vramfit_api::AttemptOutcome;
use vramfit_api::event_reasons::EventReason;
use vramfit_e2e::{CUDA_OOM_MESSAGE, Suite, two_node_job};

/// A 2-node group (three nodes of its class, room for one more) runs; the leader ends out of
/// memory: attempt 2's plan takes more nodes or a quantization (its step says which), and its
/// whole group is created.
pub async fn oom_steps_down(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let nodes = s.group_nodes("oom").await?;
    let name = "e2e-group-oom";
    let outcome = async {
        nodes.add(s, 4, 3).await?;
        let mut manifest = two_node_job(s, name);
        manifest["spec"]["allowedQuantizations"] = serde_json::json!(["none", "int8"]);
        s.apply_job(manifest).await?;
        let (job, pods) = s.wait_group(name, 1).await?;
        let first = job
            .status
            .as_ref()
            .and_then(|st| st.plan.clone())
            .ok_or_else(|| anyhow::anyhow!("job {name}: no plan"))?;
        s.set_group_running(name, &pods).await?;
        s.set_pod_ended(&pods[0], 1, "Error", CUDA_OOM_MESSAGE)
            .await?;

        let (job, _) = s
            .wait_group_replaced(&job, AttemptOutcome::OutOfMemory)
            .await?;
        let status = job.status.clone().unwrap_or_default();
        let step = status.attempts[1].step.clone().unwrap_or_default();
        ensure!(
            !step.is_empty(),
            "attempts[1].step should say what was stepped down: {:?}",
            status.attempts[1]
        );
        let plan = status
            .plan
            .ok_or_else(|| anyhow::anyhow!("job {name}: no plan"))?;
        ensure!(
            plan.nodes() > first.nodes() || plan.quantization != first.quantization,
            "attempt 2 should be one step down from {} nodes in {:?}: {} nodes in {:?} (step {step:?})",
            first.nodes(),
            first.quantization,
            plan.nodes(),
            plan.quantization
        );
        println!(
            "     step after OOM: {step:?}: {} → {} nodes, {:?} → {:?}",
            first.nodes(),
            plan.nodes(),
            first.quantization,
            plan.quantization
        );
        s.wait_events(name, &[EventReason::OutOfMemory, EventReason::SteppedDown])
            .await
    }
    .await;
    s.delete_jobs(&[name.to_string()]).await?;
    nodes.remove_all(s).await?;
    outcome
}
