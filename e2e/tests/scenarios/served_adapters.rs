//! `serve.adapters` on the real API server (docs/serving.md, "LoRA adapters"): a served vLLM
//! job names fine-tuning jobs of its namespace. Refused — no such job, a full fine-tune, another
//! base model, a job that has not succeeded — it is held with `AdaptersReady=False`, the reason
//! and an `AdapterRefused` event, and a replica already serving is left as it is. Accepted, its
//! replica's pod mounts the tuning job's output volume read-only and gets vLLM's LoRA flags,
//! the adapter's label and annotation, and the replica line lists it.
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use kube::ResourceExt as _;
use serde_json::{Value, json};
use vramfit_api::conditions::{ConditionType, Reason};
use vramfit_api::event_reasons::EventReason;
use vramfit_api::{InferenceJob, Phase};
use vramfit_e2e::{Suite, conditions_of, eventually, expect_eq};

use crate::tuning::tuning_job;

/// What a LoRA run on Mistral-7B reports, its adapter included.
const TRAINED_ADAPTER: &str = r#"vramfit.io/v1 {"kind":"TrainingResult","steps":20,"tokens":327680,"seconds":600,"finalLoss":1.42,"peakGpuMemoryMib":[17500],"adapter":{"files":["adapter_config.json","adapter_model.safetensors"],"rank":16,"alpha":32,"targetModules":["q_proj","v_proj"],"baseModel":"mistralai/Mistral-7B-Instruct-v0.3","bytes":13631488}}"#;

/// A LoRA fine-tune of Mistral-7B on `class` writing to claim `claim`.
fn lora_job(s: &Suite, name: &str, class: &str, claim: &str) -> Value {
    let mut job = tuning_job(s, name, class);
    job["spec"]["tuning"]["method"] = json!("lora");
    job["spec"]["tuning"]["outputVolume"] = json!("out");
    job["spec"]["pod"] =
        json!({"volumes": [{"name": "out", "persistentVolumeClaim": {"claimName": claim}}]});
    job
}

/// The served job, naming `adapters` (tuning job names, each served under its own name).
fn served(s: &Suite, name: &str, adapters: &[&str]) -> Value {
    let mut job = vramfit_e2e::served_job(s, name, 1, &["a10g-x1"]);
    job["spec"]["serve"]["adapters"] = adapters
        .iter()
        .map(|a| json!({"name": a, "tuningJob": {"name": a}}))
        .collect();
    job
}

/// Waits until `AdaptersReady` of job `name` has `status` and `reason`.
async fn wait_adapters(
    s: &Suite,
    name: &str,
    status: &str,
    reason: Reason,
) -> Result<InferenceJob> {
    eventually(
        &format!("AdaptersReady={status} ({reason}) on {name}"),
        Duration::from_secs(60),
        || async {
            let job = s.job(name).await?;
            let found = job.status.as_ref().and_then(|st| {
                vramfit_api::conditions::get(&st.conditions, ConditionType::AdaptersReady).cloned()
            });
            ensure!(
                found
                    .as_ref()
                    .is_some_and(|c| c.status == status && c.reason == reason.as_str()),
                "conditions {:?}",
                conditions_of(&job)
            );
            Ok(job)
        },
    )
    .await
}

fn message(job: &InferenceJob) -> String {
    job.status
        .as_ref()
        .and_then(|st| vramfit_api::conditions::get(&st.conditions, ConditionType::AdaptersReady))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// The words after `flag` up to the next flag.
fn after<'a>(args: &'a [String], flag: &str) -> Vec<&'a str> {
    args.iter()
        .skip_while(|a| *a != flag)
        .skip(1)
        .take_while(|a| !a.starts_with("--"))
        .map(String::as_str)
        .collect()
}

pub async fn refusals_then_served(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let (good, full, pending, other) = (
        "adapter-sql",
        "adapter-full",
        "adapter-pending",
        "adapter-llama",
    );
    // A LoRA run that succeeds and reports its adapter.
    let lora = lora_job(s, good, "a10g-x1", "adapter-sql-out");
    s.provide_claims(&lora).await?;
    s.apply_job(lora).await?;
    let (_, pod) = s.wait_pod(good, 1).await?;
    s.set_pod_running(&pod).await?;
    s.set_pod_ended(&pod, 0, "Completed", TRAINED_ADAPTER)
        .await?;
    let trained = s.wait_phase(good, &[Phase::Succeeded]).await?;
    let reported = trained
        .status
        .as_ref()
        .and_then(|st| st.result.as_ref())
        .and_then(|r| r.adapter.clone())
        .context("the tuning job's status.result has no adapter")?;
    expect_eq("reported rank", reported.rank, 16)?;
    // A full fine-tune, a run that has not ended, and a LoRA run of another model (on the
    // 4-GPU class: the served replica takes the one A10G of the other).
    let mut full_job = tuning_job(s, full, "a10g-x4");
    full_job["spec"]["tuning"]["method"] = json!("full");
    s.apply_job(full_job).await?;
    let waiting = lora_job(s, pending, "a10g-x4", "adapter-pending-out");
    s.provide_claims(&waiting).await?;
    s.apply_job(waiting).await?;
    let mut llama = lora_job(s, other, "a10g-x4", "adapter-llama-out");
    llama["spec"]["model"] = json!({"preset": "llama-3.1-8b-instruct"});
    s.provide_claims(&llama).await?;
    s.apply_job(llama).await?;

    // No such job: held, nothing created.
    let name = "served-adapters";
    s.apply_job(served(s, name, &["missing"])).await?;
    let held = wait_adapters(s, name, "False", Reason::AdapterJobNotFound).await?;
    ensure!(
        message(&held).contains("missing"),
        "the message names the job: {}",
        message(&held)
    );
    s.wait_events(name, &[EventReason::AdapterRefused]).await?;
    ensure!(
        s.pods_of(&held).await?.is_empty(),
        "a job held for its adapters has no pod"
    );
    println!("     no such job: {}", message(&held));

    // Accepted: the replica mounts the output volume and gets vLLM's LoRA flags.
    s.apply_job(served(s, name, &[good])).await?;
    let accepted = wait_adapters(s, name, "True", Reason::AdaptersAccepted).await?;
    let (job, pods) = s.wait_replicas(name, 1).await?;
    let pod = pods.first().context("no replica pod")?.clone();
    let status = job.status.clone().unwrap_or_default();
    expect_eq(
        "status.adapters",
        status
            .adapters
            .iter()
            .map(|a| (a.name.as_str(), a.rank, a.path.as_str()))
            .collect::<Vec<_>>(),
        vec![(good, 16, "/vramfit/adapters/adapter-sql")],
    )?;
    let args = vramfit_e2e::args_of(&pod);
    ensure!(args.iter().any(|a| a == "--enable-lora"), "args {args:?}");
    expect_eq(
        "--lora-modules",
        after(&args, "--lora-modules"),
        vec!["adapter-sql=/vramfit/adapters/adapter-sql"],
    )?;
    expect_eq(
        "--max-lora-rank",
        after(&args, "--max-lora-rank"),
        vec!["16"],
    )?;
    let spec = pod.spec.clone().unwrap_or_default();
    let volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "vramfit-adapter-adapter-sql")
        .context("the pod has no adapter volume")?;
    expect_eq(
        "the adapter volume's claim",
        volume
            .persistent_volume_claim
            .as_ref()
            .map(|c| c.claim_name.as_str()),
        Some("adapter-sql-out"),
    )?;
    let mount = spec.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "vramfit-adapter-adapter-sql")
        .context("the container does not mount the adapter")?;
    expect_eq(
        "the adapter mount",
        (mount.mount_path.as_str(), mount.read_only),
        ("/vramfit/adapters/adapter-sql", Some(true)),
    )?;
    expect_eq(
        "the adapters annotation",
        pod.annotations()
            .get("vramfit.io/adapters")
            .map(String::as_str),
        Some("adapter-sql"),
    )?;
    expect_eq(
        "the adapter label",
        pod.labels()
            .get("adapter.vramfit.io/adapter-sql")
            .map(String::as_str),
        Some("true"),
    )?;
    let plan = status.plan.clone().context("no plan")?;
    let share = plan
        .adapters
        .clone()
        .context("the plan has no adapters part")?;
    ensure!(
        share.memory_mib > 0 && plan.memory.adapters_mib == share.memory_mib,
        "plan {share:?}"
    );
    println!(
        "     accepted: {}; {} MiB of LoRA buffers per GPU on {}",
        message(&accepted),
        share.memory_mib,
        plan.node_class
    );
    s.set_pod_serving(&pod, true).await?;
    eventually(
        "the replica line to list the adapter",
        Duration::from_secs(30),
        || async {
            let job = s.job(name).await?;
            let lines = job.status.unwrap_or_default().replica_statuses;
            ensure!(
                lines.len() == 1 && lines[0].ready && lines[0].adapters == vec![good.to_string()],
                "lines {:?}",
                lines
                    .iter()
                    .map(|l| (&l.pod_name, l.ready, &l.adapters))
                    .collect::<Vec<_>>()
            );
            Ok(())
        },
    )
    .await?;

    // Each refusal holds the job; the serving replica stays.
    for (adapters, reason) in [
        (vec![good, pending], Reason::AdapterJobNotSucceeded),
        (vec![good, full], Reason::AdapterNotLora),
        (vec![good, other], Reason::AdapterBaseMismatch),
    ] {
        s.apply_job(served(s, name, &adapters)).await?;
        let held = wait_adapters(s, name, "False", reason).await?;
        println!("     {reason}: {}", message(&held));
        tokio::time::sleep(Duration::from_secs(3)).await;
        let job = s.job(name).await?;
        let pods = s.pods_of(&job).await?;
        ensure!(
            pods.len() == 1
                && pods[0].name_any() == pod.name_any()
                && pods[0].metadata.deletion_timestamp.is_none(),
            "the serving replica is left as it was: {:?}",
            pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
        );
        let status = job.status.unwrap_or_default();
        expect_eq(
            "ready replicas while held",
            status.ready.as_deref(),
            Some("1/1"),
        )?;
        expect_eq(
            "the list last accepted",
            status
                .adapters
                .iter()
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>(),
            vec![good],
        )?;
    }
    s.delete_jobs(&[
        name.to_string(),
        good.to_string(),
        full.to_string(),
        pending.to_string(),
        other.to_string(),
    ])
    .await?;
    Ok(())
}
