//! Placement when a class is full: overflow to another class that fits, Unschedulable with
//! the reason when none does, and starting by itself when a GPU frees up.
use std::time::Duration;

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

/// A job whose pod no node of its class can take holds nothing for long: one that asks for an
/// extended resource no node of the class offers (`example.com/never: 1`) gets no pod at all
/// (Unschedulable, the resource named); one whose pod the real scheduler cannot place (4 GPUs
/// and more memory than any node has) holds the class's four GPUs only until its schedule
/// deadline (30 s): then its pod is deleted, the attempt ends `ScheduleTimeout`, the job fails
/// (no other class allowed), and a job that waited for the class's GPUs starts by itself.
pub async fn unschedulable_pod_frees_its_class(s: &mut Suite) -> Result<()> {
    use anyhow::anyhow;
    use serde_json::json;
    use vramfit_api::AttemptOutcome;
    use vramfit_e2e::eventually;

    s.ensure_single_operator().await?;
    let nodes = s.sim_nodes().await?;
    let class = "a10g-x4";
    let names: Vec<String> = ["never-offered", "never-scheduled", "waits-for-the-class"]
        .map(String::from)
        .to_vec();
    let four_gpus = |name: &str| {
        let mut job = pinned_job(s, name, &[class], "quality");
        job["spec"]["gpus"] = json!({"min": 4, "max": 4});
        job
    };

    let mut never_offered = four_gpus(&names[0]);
    never_offered["spec"]["pod"] =
        json!({ "resources": { "limits": { "example.com/never": "1" } } });
    s.apply_job(never_offered).await?;
    let job = s.wait_phase(&names[0], &[Phase::Unschedulable]).await?;
    let status = job.status.clone().unwrap_or_default();
    ensure!(
        status.rejected_classes.iter().any(|r| r.node_class == class
            && r.reason
                == "spec.pod.resources asks for 1 example.com/never, which no node of the class offers"),
        "rejectedClasses should name the resource: {:?}",
        status.rejected_classes
    );
    ensure!(s.pods_of(&job).await?.is_empty(), "it got a pod");

    let mut never_scheduled = four_gpus(&names[1]);
    never_scheduled["spec"]["scheduleDeadlineSeconds"] = json!(30);
    never_scheduled["spec"]["pod"] = json!({ "resources": { "requests": { "memory": "4Ti" } } });
    s.apply_job(never_scheduled).await?;
    let pod = eventually(
        &format!("job {} to get its (unschedulable) pod", names[1]),
        Duration::from_secs(90),
        || async {
            let job = s.job(&names[1]).await?;
            let pods = s.pods_of(&job).await?;
            let pod = pods.first().cloned().ok_or_else(|| anyhow!("no pod yet"))?;
            ensure!(node_of(&pod).is_none(), "bound: {:?}", node_of(&pod));
            Ok(pod)
        },
    )
    .await?;
    // While it waits for the scheduler it holds the class's four GPUs.
    s.apply_job(four_gpus(&names[2])).await?;
    let waiting = s.wait_phase(&names[2], &[Phase::Unschedulable]).await?;
    ensure!(
        waiting
            .status
            .iter()
            .flat_map(|st| &st.rejected_classes)
            .any(|r| r.node_class == class && r.reason.contains("no free GPUs")),
        "the held class has no free GPUs: {:?}",
        conditions_of(&waiting)
    );

    // Past its deadline: the pod goes, the attempt ends, the job fails (its one class is used).
    let failed = s.wait_phase(&names[1], &[Phase::Failed]).await?;
    let status = failed.status.clone().unwrap_or_default();
    let attempt = status
        .attempts
        .first()
        .ok_or_else(|| anyhow!("no attempt recorded"))?;
    expect_eq(
        "outcome of the unscheduled attempt",
        attempt.outcome.clone(),
        Some(AttemptOutcome::ScheduleTimeout),
    )?;
    let message = attempt.message.clone().unwrap_or_default();
    ensure!(
        message.contains("was not scheduled to a node of class a10g-x4 within 30 s")
            && message.contains("Insufficient memory"),
        "the attempt's message gives the scheduler's reason: {message}"
    );
    ensure!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.reason == "ScheduleDeadlineExceeded"),
        "{:?}",
        conditions_of(&failed)
    );
    s.wait_events(&names[1], &[EventReason::ScheduleDeadlineExceeded])
        .await?;
    eventually(
        &format!("pod {:?} to be deleted", pod.metadata.name),
        Duration::from_secs(30),
        || async {
            let left = s.pods_of(&failed).await?;
            ensure!(left.is_empty(), "{} pod(s) left", left.len());
            Ok(())
        },
    )
    .await?;

    // The class is free again: the waiting job starts by itself.
    let (job, pod) = s.wait_pod(&names[2], 1).await?;
    check_placed_job(&job, &pod, &nodes)?;
    expect_eq(
        "node of the job that waited",
        node_of(&pod),
        Some(s.node_name("a10gx4").as_str()),
    )?;
    println!(
        "     {} rejected up front; {}'s pod deleted after 30 s unscheduled; {} then placed",
        names[0], names[1], names[2]
    );
    s.delete_jobs(&names).await
}
