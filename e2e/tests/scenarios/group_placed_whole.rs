//! Groups placed whole on the real scheduler: a job no node of its class holds gets as many
//! pods as its plan has nodes, one per node, with a headless Service and a NetworkPolicy of
//! the group's own; a 2-node and a 4-node group side by side in one namespace.
use anyhow::Result;
use vramfit_e2e::{Suite, check_group, four_node_job, two_node_job};

/// A 2-node group (Mixtral-8x7B on `a10-x4`) and a 4-node group (Qwen3-32B on `a10-x1`), each
/// created whole on distinct nodes; each group's Service and NetworkPolicy select exactly its
/// own pods although the other group's pods share the namespace.
pub async fn placed_whole(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let nodes = s.group_nodes("placed").await?;
    let jobs = ["e2e-group-two".to_string(), "e2e-group-four".to_string()];
    let outcome = async {
        nodes.add(s, 4, 2).await?;
        nodes.add(s, 1, 4).await?;
        s.apply_job(two_node_job(s, &jobs[0])).await?;
        s.apply_job(four_node_job(s, &jobs[1])).await?;
        let (two, two_pods) = s.wait_group(&jobs[0], 1).await?;
        let (four, four_pods) = s.wait_group(&jobs[1], 1).await?;
        let sim = s.sim_nodes().await?;
        check_group(&two, 1, &two_pods, &sim)?;
        check_group(&four, 1, &four_pods, &sim)?;
        vramfit_e2e::expect_eq("pods of the 2-node group", two_pods.len(), 2)?;
        vramfit_e2e::expect_eq("pods of the 4-node group", four_pods.len(), 4)?;
        s.check_group_objects(&two, 1, &two_pods).await?;
        s.check_group_objects(&four, 1, &four_pods).await?;
        // Running, each attempt lists every member's node.
        s.set_group_running(&jobs[0], &two_pods).await?;
        s.set_group_running(&jobs[1], &four_pods).await?;
        Ok(())
    }
    .await;
    s.delete_jobs(&jobs).await?;
    nodes.remove_all(s).await?;
    outcome
}
