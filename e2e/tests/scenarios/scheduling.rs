//! Placement when a class is full: overflow to another class that fits, Unschedulable with
//! the reason when none does, and starting by itself when a GPU frees up.
use anyhow::{Result, ensure};
use vramfit_api::Phase;
use vramfit_api::event_reasons::EventReason;
use vramfit_e2e::{Suite, check_placed_job, conditions_of, expect_eq, node_of, pinned_job};

/// Fills a class (its one GPU taken by a running job): the next job goes to another class
/// that fits, a job allowed only the full class waits Unschedulable with the reason, and it
/// starts by itself when the running pod finishes. Pods are bound by the real scheduler.
pub async fn full_class_overflows_then_frees(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let nodes = s.sim_nodes().await?;
    let (small, big) = ("a10g-x1", "a10g-x4");
    let names: Vec<String> = ["fill-first", "fill-overflow", "fill-waits"]
        .map(String::from)
        .to_vec();

    s.apply_job(pinned_job(s, &names[0], &[small], "economy"))
        .await?;
    let (job, first_pod) = s.wait_pod(&names[0], 1).await?;
    check_placed_job(&job, &first_pod, &nodes)?;
    expect_eq(
        "class of the first job",
        job.status.as_ref().and_then(|st| st.node_class.as_deref()),
        Some(small),
    )?;
    expect_eq(
        "node of the first pod",
        node_of(&first_pod),
        Some(s.node_name("a10gx1").as_str()),
    )?;
    s.set_pod_running(&first_pod).await?;
    s.wait_phase(&names[0], &[Phase::Running]).await?;

    // Economy prefers the one-GPU class; it is full, so the job goes to the other A10G class.
    s.apply_job(pinned_job(s, &names[1], &[small, big], "economy"))
        .await?;
    let (job, pod) = s.wait_pod(&names[1], 1).await?;
    check_placed_job(&job, &pod, &nodes)?;
    expect_eq(
        "class of the overflow job",
        job.status.as_ref().and_then(|st| st.node_class.as_deref()),
        Some(big),
    )?;
    expect_eq(
        "node of the overflow pod",
        node_of(&pod),
        Some(s.node_name("a10gx4").as_str()),
    )?;

    // Only the full class allowed: Unschedulable, saying why, and no pod.
    s.apply_job(pinned_job(s, &names[2], &[small], "economy"))
        .await?;
    let job = s.wait_phase(&names[2], &[Phase::Unschedulable]).await?;
    let status = job.status.clone().unwrap_or_default();
    ensure!(
        status
            .rejected_classes
            .iter()
            .any(|r| r.node_class == small && r.reason.contains("no free GPUs")),
        "rejectedClasses should say {small} has no free GPUs: {:?}",
        status.rejected_classes
    );
    ensure!(
        status
            .conditions
            .iter()
            .any(|c| c.status == "False" && c.message.contains(small)),
        "no False condition names {small}: {:?}",
        conditions_of(&job)
    );
    s.wait_events(&names[2], &[EventReason::Unschedulable])
        .await?;
    ensure!(
        s.pods_of(&job).await?.is_empty(),
        "an Unschedulable job has a pod"
    );

    // The running pod finishes: its GPU is free, and the waiting job starts by itself.
    s.set_pod_ended(&first_pod, 0, "Completed", "").await?;
    s.wait_phase(&names[0], &[Phase::Succeeded]).await?;
    let (job, pod) = s.wait_pod(&names[2], 1).await?;
    check_placed_job(&job, &pod, &nodes)?;
    expect_eq(
        "node of the waiting job's pod",
        node_of(&pod),
        Some(s.node_name("a10gx1").as_str()),
    )?;
    println!(
        "     {} waited Unschedulable, then started on {} once {} finished",
        names[2], small, names[0]
    );
    s.delete_jobs(&names).await
}
