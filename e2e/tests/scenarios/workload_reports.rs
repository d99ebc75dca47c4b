//! What the workload reports in its termination message (docs/workload-contract.md), written
//! by the simulated kubelet as a real one copies `/dev/termination-log`: garbage output in
//! bfloat16 starts the next attempt in float16; a result summary lands in `status.result`
//! and in `kubectl get ij -o wide`.
use anyhow::{Context as _, Result};
use vramfit_api::event_reasons::EventReason;
use vramfit_api::{AttemptOutcome, Dtype, Phase};
use vramfit_e2e::{Suite, cell, expect_eq, parse_table, pinned_job};

const GARBAGE_BF16: &str = r#"vramfit.io/v1 {"kind":"OutputCheckFailed","check":"degenerate-output","pattern":"exclamation","ratio":0.97,"threshold":0.3,"dtype":"bfloat16","samples":8}"#;
const RESULT: &str = r#"vramfit.io/v1 {"kind":"Result","items":120,"seconds":300,"itemsPerSecond":0.4,"peakGpuMemoryMib":[15000]}"#;

pub async fn garbage_then_result(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "reports-garbage-then-result";
    s.apply_job(pinned_job(s, name, &["a10g-x1"], "quality"))
        .await?;
    let (job, first) = s.wait_pod(name, 1).await?;
    let plan = job.status.and_then(|st| st.plan).context("no plan")?;
    expect_eq("dtype of attempt 1", plan.dtype, Dtype::Bfloat16)?;
    s.set_pod_running(&first).await?;
    s.set_pod_ended(&first, 3, "Error", GARBAGE_BF16).await?;

    let (job, second) = s.wait_pod(name, 2).await?;
    let status = job.status.clone().unwrap_or_default();
    let plan = status.plan.clone().context("no plan for attempt 2")?;
    expect_eq("dtype of attempt 2", plan.dtype, Dtype::Float16)?;
    expect_eq(
        "outcome of attempt 1",
        status.attempts.first().and_then(|a| a.outcome.clone()),
        Some(AttemptOutcome::BadOutput),
    )?;
    expect_eq(
        "step of attempt 2",
        status.attempts.get(1).and_then(|a| a.step.clone()),
        Some("float16 instead of bfloat16".to_string()),
    )?;
    s.wait_events(name, &[EventReason::BadOutput, EventReason::SteppedDown])
        .await?;

    s.set_pod_running(&second).await?;
    s.set_pod_ended(&second, 0, "Completed", RESULT).await?;
    let job = s.wait_phase(name, &[Phase::Succeeded]).await?;
    let result = job
        .status
        .and_then(|st| st.result)
        .context("a finished job with a Result message has no status.result")?;
    expect_eq("result items", result.items, 120)?;
    expect_eq("result items per hour", result.items_per_hour, 1440.0)?;

    let text = s.kubectl_get_jobs(&[name, "-o", "wide"]).await?;
    parse_table(&text, &["NAME", "PHASE", "ITEMS/H"], &[name])?;
    // A batch job's READY and ENDPOINT cells are empty: read the column by its position.
    expect_eq(
        "ITEMS/H column",
        cell(&text, "ITEMS/H", name)?.as_str(),
        "1440",
    )?;
    s.delete_jobs(&[name.to_string()]).await?;
    outlandish_result(s).await
}

/// A report whose figures no container could produce (`seconds: 1e306`, `items` at u64's
/// maximum) still finishes the job: its figures are bounded by the container's own run time
/// (the simulated kubelet's container ran for an hour) and the status write, which a `null` or
/// an integer beyond int64 would make the API server refuse, is accepted.
async fn outlandish_result(s: &mut Suite) -> Result<()> {
    let name = "reports-outlandish-figures";
    let message = format!(
        r#"vramfit.io/v1 {{"kind":"Result","items":{},"seconds":1e306,"peakGpuMemoryMib":[{}]}}"#,
        u64::MAX,
        u64::MAX
    );
    s.apply_job(pinned_job(s, name, &["a10g-x1"], "quality"))
        .await?;
    let (_, pod) = s.wait_pod(name, 1).await?;
    s.set_pod_running(&pod).await?;
    s.set_pod_ended(&pod, 0, "Completed", &message).await?;
    let job = s.wait_phase(name, &[Phase::Succeeded]).await?;
    let result = job
        .status
        .and_then(|st| st.result)
        .context("the finished job has no status.result")?;
    expect_eq("items, at most 2^53", result.items, 1u64 << 53)?;
    anyhow::ensure!(
        result.seconds > 3500.0 && result.seconds <= 3601.0,
        "seconds within the container's hour: {}",
        result.seconds
    );
    expect_eq(
        "peak GPU memory, at most 1 TiB",
        result.peak_gpu_memory_mib,
        vec![1u64 << 20],
    )?;
    println!(
        "     {name}: Succeeded with items {}, seconds {}, {} items/h",
        result.items, result.seconds, result.items_per_hour
    );
    s.delete_jobs(&[name.to_string()]).await
}
