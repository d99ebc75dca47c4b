//! On a real node: the operator's pods run in a real container runtime, the workload writes
//! `/dev/termination-log` and the kubelet copies it into the pod's status; no status is
//! written by the suite. The workload is the scripted generator
//! (`workload/examples/scripted`): the workload package's real path around a deterministic
//! text generator that the job's env scripts. Each scenario is skipped, saying why, where
//! the cluster has no schedulable real node holding the image (e2e/README.md).
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use serde_json::{Value, json};
use vramfit_api::conditions::ConditionType;
use vramfit_api::event_reasons::EventReason;
use vramfit_api::workload_report::{self, WorkloadReport};
use vramfit_api::{AttemptOutcome, Dtype, InferenceJob, Phase};
use vramfit_e2e::{RealNode, Suite, container_state, eventually, expect_eq, is_live, node_of};

use crate::pod_security::{enforce, rejection};

/// Answers each job's generator gives.
const ITEMS: u64 = 12;

/// A job for the real node's class: the scripted generator with `env` (its script), one or
/// two GPUs (an out-of-memory step adds one).
fn real_job(s: &Suite, name: &str, node: &RealNode, image: &str, env: &[(&str, &str)]) -> Value {
    let mut job = s.own_job(name, 2);
    job["spec"]["image"] = json!(image);
    job["spec"]["command"] = json!(["python", "-m", "scripted"]);
    job["spec"]["args"] = json!(["--items", ITEMS.to_string()]);
    job["spec"]["gpus"] = json!({"min": 1, "max": 2});
    job["spec"]["nodeClasses"] = json!({"allowed": [node.class()]});
    let env: Vec<Value> = env
        .iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    job["spec"]["pod"] = json!({"env": env});
    job
}

/// Waits until the job's pod of `attempt` has ended in the container runtime (the kubelet
/// wrote its terminated state), on the real node.
async fn ended_pod(s: &Suite, name: &str, attempt: u32, node: &RealNode) -> Result<Pod> {
    let (_, pod) = s.wait_pod(name, attempt).await?;
    expect_eq("node of the pod", node_of(&pod), Some(node.name.as_str()))?;
    eventually(
        &format!("pod {} to end", pod.name_any()),
        Duration::from_secs(120),
        || async {
            let pod = s.pods().get(&pod.name_any()).await?;
            match terminated(&pod) {
                Some(_) => Ok(pod),
                None => bail!(
                    "status {:?}",
                    pod.status.as_ref().map(|st| &st.container_statuses)
                ),
            }
        },
    )
    .await
}

/// The workload container's terminated state (exit code, message), once it has one.
fn terminated(pod: &Pod) -> Option<(i32, String)> {
    let status = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    // A real kubelet names the image it ran by digest; the suite's simulated one does not.
    if status.image_id.is_empty() {
        return None;
    }
    let state = status.state.as_ref()?.terminated.as_ref()?;
    Some((state.exit_code, state.message.clone().unwrap_or_default()))
}

/// Checks that the job succeeded and that `status.result` is the Result the container wrote.
fn expect_result(job: &InferenceJob, pod: &Pod) -> Result<()> {
    let (code, message) = terminated(pod).context("the pod has not ended")?;
    expect_eq("exit code of the workload", code, 0)?;
    let Some(WorkloadReport::Result(written)) = workload_report::parse(&message) else {
        bail!("the container wrote no Result message: {message:?}");
    };
    expect_eq("items the container wrote", written.items, ITEMS)?;
    let status = job.status.clone().unwrap_or_default();
    expect_eq("phase", status.phase, Some(Phase::Succeeded))?;
    let result = status.result.context("no status.result")?;
    expect_eq("status.result.items", result.items, written.items)?;
    expect_eq("status.result.seconds", result.seconds, written.seconds)?;
    println!(
        "     {}: the container wrote {message}; status.result {} items in {} s",
        job.name_any(),
        result.items,
        result.seconds
    );
    Ok(())
}

/// Applies `job` and follows it on the real node through `attempts` pods, each to its end
/// in the container runtime, and the job to its end: the pods, oldest first, and the job.
async fn run_to_end(
    s: &Suite,
    job: Value,
    attempts: u32,
    node: &RealNode,
) -> Result<(Vec<Pod>, InferenceJob)> {
    let name = job["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    s.apply_job(job).await?;
    let mut pods = vec![];
    for attempt in 1..=attempts {
        pods.push(ended_pod(s, &name, attempt, node).await?);
    }
    let job = s
        .wait_phase(&name, &[Phase::Succeeded, Phase::Failed])
        .await?;
    Ok((pods, job))
}

pub async fn runs_a_job(s: &mut Suite) -> Result<()> {
    let (node, image) = s.real_node().await?;
    // The simulated scenarios ran before, while the node formed no class: none of their
    // pods may have landed on it.
    let strays: Vec<String> = s
        .pods()
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|p| node_of(p) == Some(node.name.as_str()))
        .map(|p| p.name_any())
        .collect();
    ensure!(
        strays.is_empty(),
        "pods of the simulated scenarios bound to the real node {}: {strays:?}",
        node.name
    );
    s.ensure_single_operator().await?;
    let name = "real-runs";
    let (pods, job) = run_to_end(s, real_job(s, name, &node, &image, &[]), 1, &node).await?;
    expect_result(&job, &pods[0])?;
    s.delete_jobs(&[name.to_string()]).await
}

pub async fn garbage_then_float16(s: &mut Suite) -> Result<()> {
    let (node, image) = s.real_node().await?;
    s.ensure_single_operator().await?;
    let name = "real-garbage";
    let script = [("SCRIPTED_GARBAGE_WHEN", "VRAMFIT_DTYPE=bfloat16")];
    let job = real_job(s, name, &node, &image, &script);
    let (pods, job) = run_to_end(s, job, 2, &node).await?;
    let (code, message) = terminated(&pods[0]).context("attempt 1 has not ended")?;
    expect_eq("exit code of attempt 1 (the output check)", code, 3)?;
    ensure!(
        message.contains(r#""kind":"OutputCheckFailed""#)
            && message.contains(r#""dtype":"bfloat16""#),
        "attempt 1 wrote {message:?}"
    );
    println!("     attempt 1 (bfloat16) wrote {message}");
    let status = job.status.clone().unwrap_or_default();
    expect_eq(
        "dtype of attempt 2",
        status.plan.as_ref().map(|p| p.dtype),
        Some(Dtype::Float16),
    )?;
    expect_eq(
        "outcome of attempt 1",
        status.attempts.first().and_then(|a| a.outcome.clone()),
        Some(AttemptOutcome::BadOutput),
    )?;
    s.wait_events(name, &[EventReason::BadOutput, EventReason::SteppedDown])
        .await?;
    expect_result(&job, &pods[1])?;
    s.delete_jobs(&[name.to_string()]).await
}

pub async fn oom_steps_down(s: &mut Suite) -> Result<()> {
    let (node, image) = s.real_node().await?;
    s.ensure_single_operator().await?;
    let name = "real-oom";
    let script = [("SCRIPTED_OOM_WHEN", "VRAMFIT_GPU_COUNT=1")];
    let job = real_job(s, name, &node, &image, &script);
    let (pods, job) = run_to_end(s, job, 2, &node).await?;
    let (code, message) = terminated(&pods[0]).context("attempt 1 has not ended")?;
    ensure!(
        code != 0 && message.contains("CUDA out of memory"),
        "attempt 1 ended with {code} and {message:?}"
    );
    println!("     attempt 1 (1 GPU) wrote {message}");
    let status = job.status.clone().unwrap_or_default();
    expect_eq(
        "outcome of attempt 1",
        status.attempts.first().and_then(|a| a.outcome.clone()),
        Some(AttemptOutcome::OutOfMemory),
    )?;
    let step = status.attempts.get(1).and_then(|a| a.step.clone());
    ensure!(step.is_some(), "attempt 2 has no step");
    expect_eq(
        "GPUs of attempt 2",
        status.plan.as_ref().map(|p| p.gpu_count),
        Some(2),
    )?;
    s.wait_events(name, &[EventReason::OutOfMemory, EventReason::SteppedDown])
        .await?;
    println!("     attempt 2: {}", step.unwrap_or_default());
    expect_result(&job, &pods[1])?;
    s.delete_jobs(&[name.to_string()]).await
}

pub async fn restricted_namespace(s: &mut Suite) -> Result<()> {
    let (node, image) = s.real_node().await?;
    s.ensure_single_operator().await?;
    enforce(s, Some("restricted")).await?;
    let outcome = restricted_jobs(s, &node, &image).await;
    enforce(s, None).await?;
    outcome
}

async fn restricted_jobs(s: &mut Suite, node: &RealNode, image: &str) -> Result<()> {
    let (non_root, root) = ("real-restricted-uid", "real-restricted-root");
    let mut job = real_job(s, non_root, node, image, &[]);
    // A UID the image does not know: HOME (where the answers go) must be writable for it.
    job["spec"]["pod"]["securityContext"] = json!({"runAsUser": 1000, "runAsGroup": 1000});
    let (pods, job) = run_to_end(s, job, 1, node).await?;
    expect_result(&job, &pods[0])?;

    s.apply_job(real_job(s, root, node, image, &[])).await?;
    let condition = rejection(s, root).await?;
    ensure!(
        condition.message.contains("restricted") || condition.message.contains("runAsNonRoot"),
        "the refusal does not say why: {}",
        condition.message
    );
    println!("     without runAsUser: {}", condition.message);
    s.delete_jobs(&[non_root.to_string(), root.to_string()])
        .await
}

pub async fn image_pull_fails(s: &mut Suite) -> Result<()> {
    let (node, image) = s.real_node().await?;
    s.ensure_single_operator().await?;
    let name = "real-pull";
    // `:latest` makes the pull policy Always: the kubelet pulls even a name it holds, from a
    // registry that is not there.
    let named = image.split('@').next().unwrap_or(&image);
    let repository = match named.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => repository,
        _ => named,
    };
    let mut job = real_job(s, name, &node, &format!("{repository}:latest"), &[]);
    job["spec"]["startDeadlineSeconds"] = json!(30);
    s.apply_job(job).await?;
    let (_, pod) = s.wait_pod(name, 1).await?;
    expect_eq("node of the pod", node_of(&pod), Some(node.name.as_str()))?;
    let pod_name = pod.name_any();
    let waiting = eventually(
        &format!("pod {pod_name} to wait on its image"),
        Duration::from_secs(60),
        || async {
            let pod = s.pods().get(&pod_name).await?;
            let reason = container_state(&pod)
                .and_then(|st| st.waiting)
                .and_then(|w| w.reason);
            match reason.as_deref() {
                Some(r @ ("ErrImagePull" | "ImagePullBackOff")) => Ok(r.to_string()),
                other => bail!("waiting reason {other:?}"),
            }
        },
    )
    .await?;
    println!("     the kubelet: {waiting}");

    let job = s.wait_phase(name, &[Phase::Failed]).await?;
    let status = job.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Ready.as_str())
        .context("no Ready condition")?;
    expect_eq(
        "reason of the failure",
        ready.reason.as_str(),
        "StartDeadlineExceeded",
    )?;
    ensure!(
        ready.message.contains("ErrImagePull") || ready.message.contains("ImagePullBackOff"),
        "the failure does not name the pull: {}",
        ready.message
    );
    expect_eq(
        "outcome of attempt 1",
        status.attempts.first().and_then(|a| a.outcome.clone()),
        Some(AttemptOutcome::StartTimeout),
    )?;
    // The GPUs are free once no live pod of the job holds them.
    eventually(
        &format!("pod {pod_name} to be gone"),
        Duration::from_secs(60),
        || async {
            let live: Vec<_> = s.pods_of(&job).await?.into_iter().filter(is_live).collect();
            ensure!(
                live.is_empty(),
                "live pods {:?}",
                live.iter().map(|p| p.name_any()).collect::<Vec<_>>()
            );
            Ok(())
        },
    )
    .await?;
    println!("     {}", ready.message);
    s.delete_jobs(&[name.to_string()]).await
}
