//! Fine-tuning jobs (docs/tuning.md) on the real API server: the same tuning job pinned to
//! two classes gets each class's own method and micro-batch; an out-of-memory termination
//! halves the micro-batch (the accumulation doubles) on the next attempt; a NaN-loss report
//! switches the dtype; a training result lands in status and `kubectl get ij -o wide` shows
//! the method, micro-batch × accumulation and checkpointing.
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use vramfit_api::event_reasons::EventReason;
use vramfit_api::tuning::{TuningMethod, TuningPlan};
use vramfit_api::{AttemptOutcome, Dtype, InferenceJob, Phase};
use vramfit_e2e::{CUDA_OOM_MESSAGE, Suite, cell, check_placed_job, expect_eq};

const NAN_BF16: &str = r#"vramfit.io/v1 {"kind":"LossCheckFailed","check":"non-finite-loss","loss":"nan","step":12,"dtype":"bfloat16"}"#;
pub(crate) const TRAINED: &str = r#"vramfit.io/v1 {"kind":"TrainingResult","steps":20,"tokens":327680,"seconds":600,"tokensPerSecond":546.1,"finalLoss":1.42,"peakGpuMemoryMib":[17500]}"#;

/// Mistral-7B, `method: auto` under quality, sequence 512, effective batch 32, on `class`.
pub(crate) fn tuning_job(s: &Suite, name: &str, class: &str) -> serde_json::Value {
    let mut job = s.own_job(name, 4);
    let spec = &mut job["spec"];
    let object = spec.as_object_mut().expect("a job spec is an object");
    object.remove("contextLength");
    object.remove("allowedQuantizations");
    spec["command"] = json!(["python", "-m", "trainer"]);
    spec["gpus"] = json!({"min": 1, "max": 8});
    spec["nodeClasses"] = json!({ "allowed": [class] });
    spec["tuning"] = json!({"sequenceLength": 512, "effectiveBatch": 32});
    job
}

fn tuning_plan(job: &InferenceJob) -> Result<TuningPlan> {
    job.status
        .as_ref()
        .and_then(|s| s.plan.as_ref())
        .and_then(|p| p.tuning.clone())
        .context("the job's plan has no tuning part")
}

fn env(pod: &Pod, name: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

pub async fn tuning_jobs(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let (small, large) = ("tuning-on-a10g", "tuning-on-h100");
    s.apply_job(tuning_job(s, small, "a10g-x1")).await?;
    s.apply_job(tuning_job(s, large, "h100-80gb-hbm3-x8"))
        .await?;
    let (a10g, first) = s.wait_pod(small, 1).await?;
    let (h100, h100_pod) = s.wait_pod(large, 1).await?;
    let nodes = s.sim_nodes().await?;
    check_placed_job(&a10g, &first, &nodes)?;
    check_placed_job(&h100, &h100_pod, &nodes)?;
    let (a, h) = (tuning_plan(&a10g)?, tuning_plan(&h100)?);
    println!(
        "     a10g-x1: {} {} ({} GPU); h100-80gb-hbm3-x8: {} {} ({} GPUs, {})",
        a.method.as_str(),
        a.batch,
        a10g.status
            .as_ref()
            .and_then(|s| s.plan.as_ref())
            .map_or(0, |p| p.gpu_count),
        h.method.as_str(),
        h.batch,
        h100.status
            .as_ref()
            .and_then(|s| s.plan.as_ref())
            .map_or(0, |p| p.gpu_count),
        h.parallelism.as_str()
    );
    ensure!(
        a.method != h.method || a.micro_batch != h.micro_batch,
        "the two classes got the same plan: {} {}",
        a.method.as_str(),
        a.batch
    );
    expect_eq("method on the 80 GB H100s", h.method, TuningMethod::Full)?;
    ensure!(
        a.method > h.method,
        "the 24 GB A10G gets a cheaper method than full: {}",
        a.method.as_str()
    );
    expect_eq(
        "VRAMFIT_MICRO_BATCH of the A10G pod",
        env(&first, "VRAMFIT_MICRO_BATCH"),
        Some(a.micro_batch.to_string()),
    )?;
    expect_eq(
        "VRAMFIT_TUNING_METHOD of the H100 pod",
        env(&h100_pod, "VRAMFIT_TUNING_METHOD"),
        Some("full".to_string()),
    )?;

    // Out of memory: the micro-batch halves, the accumulation doubles.
    s.set_pod_running(&first).await?;
    s.set_pod_ended(&first, 1, "Error", CUDA_OOM_MESSAGE)
        .await?;
    let (job, second) = s.wait_pod(small, 2).await?;
    let after_oom = tuning_plan(&job)?;
    let status = job.status.clone().unwrap_or_default();
    expect_eq(
        "micro-batch after OOM",
        after_oom.micro_batch,
        a.micro_batch / 2,
    )?;
    ensure!(
        after_oom.effective_batch >= 32
            && after_oom.gradient_accumulation >= 2 * a.gradient_accumulation - 1,
        "the effective batch is kept: {} → {}",
        a.batch,
        after_oom.batch
    );
    expect_eq(
        "outcome of attempt 1",
        status.attempts.first().and_then(|a| a.outcome.clone()),
        Some(AttemptOutcome::OutOfMemory),
    )?;
    let step = status
        .attempts
        .get(1)
        .and_then(|a| a.step.clone())
        .unwrap_or_default();
    ensure!(
        step.starts_with(&format!(
            "micro-batch {} → {}",
            a.micro_batch,
            a.micro_batch / 2
        )),
        "step of attempt 2: {step}"
    );
    expect_eq(
        "VRAMFIT_MICRO_BATCH of attempt 2",
        env(&second, "VRAMFIT_MICRO_BATCH"),
        Some(after_oom.micro_batch.to_string()),
    )?;
    s.wait_events(small, &[EventReason::OutOfMemory, EventReason::SteppedDown])
        .await?;
    println!("     after out of memory: {step}");

    // A NaN loss in bfloat16: the next attempt trains in float16, same micro-batch.
    s.set_pod_running(&second).await?;
    s.set_pod_ended(&second, 3, "Error", NAN_BF16).await?;
    let (job, third) = s.wait_pod(small, 3).await?;
    let status = job.status.clone().unwrap_or_default();
    let plan = status.plan.clone().context("no plan for attempt 3")?;
    expect_eq("dtype after a NaN loss", plan.dtype, Dtype::Float16)?;
    expect_eq(
        "outcome of attempt 2",
        status.attempts.get(1).and_then(|a| a.outcome.clone()),
        Some(AttemptOutcome::BadOutput),
    )?;
    expect_eq(
        "step of attempt 3",
        status.attempts.get(2).and_then(|a| a.step.clone()),
        Some("float16 with loss scaling instead of bfloat16".to_string()),
    )?;
    expect_eq(
        "TORCH_DTYPE of attempt 3",
        env(&third, "TORCH_DTYPE"),
        Some("float16".to_string()),
    )?;
    expect_eq(
        "micro-batch kept",
        tuning_plan(&job)?.micro_batch,
        after_oom.micro_batch,
    )?;
    s.wait_events(small, &[EventReason::BadOutput]).await?;
    check_placed_job(&job, &third, &nodes)?;

    // The run finishes: tokens per second in status, the plan in kubectl's wide columns.
    s.set_pod_running(&third).await?;
    s.set_pod_ended(&third, 0, "Completed", TRAINED).await?;
    let job = s.wait_phase(small, &[Phase::Succeeded]).await?;
    let result = job
        .status
        .as_ref()
        .and_then(|st| st.result.clone())
        .context("a finished tuning job has no status.result")?;
    expect_eq("training tokens", result.items, 327_680)?;
    expect_eq("tokens per second", result.tokens_per_second, Some(546.1))?;
    expect_eq("final loss", result.final_loss, Some(1.42))?;
    let last = tuning_plan(&job)?;
    let text = s.kubectl_get_jobs(&[small, "-o", "wide"]).await?;
    // Read by position: a batch job's READY and ENDPOINT cells are empty.
    let checkpointing = if last.gradient_checkpointing {
        "true"
    } else {
        "false"
    };
    for (column, want) in [
        ("METHOD", last.method.as_str()),
        ("BATCH", last.batch.as_str()),
        ("CKPT", checkpointing),
    ] {
        expect_eq(
            &format!("{column} column"),
            cell(&text, column, small)?,
            want.to_string(),
        )?;
    }
    s.delete_jobs(&[small.to_string(), large.to_string()]).await
}
