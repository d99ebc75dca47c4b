//! Faults mid-run: the operator killed with SIGKILL during a burst of creates, and the API
//! server stopped and started again. After each, every job reaches the state it should, no
//! job is lost, no job has two live pods, and the operator converges without a restart.
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use vramfit_api::Phase;
use vramfit_e2e::{
    Skipped, Suite, consistently, eventually, exactly_one_pod, node_name, node_of,
    one_live_pod_per_job,
};

/// Jobs of the burst; each takes one GPU, so the simulated nodes hold all of them.
const BURST: usize = 12;

/// Commands that stop and start the cluster's API server (data kept), from the environment.
const STOP_COMMAND: &str = "VRAMFIT_E2E_APISERVER_STOP";
const START_COMMAND: &str = "VRAMFIT_E2E_APISERVER_START";
/// How long the API server stays down (default 30 s).
const OUTAGE_SECONDS: &str = "VRAMFIT_E2E_OUTAGE_SECONDS";

fn one_gpu_job(s: &Suite, name: &str) -> Value {
    let mut job = s.own_job(name, 3);
    job["spec"]["gpus"] = json!({"min": 1, "max": 1});
    job
}

/// SIGKILL the operator while jobs are being created; a new one places every job once.
pub async fn sigkill_during_burst(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let names: Vec<String> = (0..BURST).map(|i| format!("burst-{i}")).collect();
    let (first, rest) = names.split_at(BURST / 2);
    for name in first {
        s.apply_job(one_gpu_job(s, name)).await?;
    }
    // The operator is mid-way through reconciling the first half: cut it off there.
    s.stop_operators();
    for name in rest {
        s.apply_job(one_gpu_job(s, name)).await?;
    }
    s.start_operator("after-sigkill", &[], true).await?;
    for name in &names {
        let (job, pod) = s.wait_pod(name, 1).await?;
        exactly_one_pod(&s.pods_of(&job).await?)
            .with_context(|| format!("job {name} after the SIGKILL"))?;
        ensure!(
            pod.name_any() == format!("{name}-1"),
            "job {name}: pod {} is not the first attempt's",
            pod.name_any()
        );
    }
    consistently(
        "one live pod per job after the SIGKILL",
        Duration::from_secs(10),
        || one_live_pod_per_job(s),
    )
    .await?;
    for operator in &mut s.operators {
        operator.check_alive()?;
    }
    println!("     {BURST} jobs created around a SIGKILL: each has exactly its first pod");
    s.delete_jobs(&names).await
}

/// Runs a shell command of the environment (stopping or starting the API server).
async fn run_command(variable: &str, command: &str) -> Result<()> {
    let output = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .output(),
    )
    .await
    .with_context(|| format!("{variable} ({command}) did not finish within 180 s"))??;
    if !output.status.success() {
        bail!(
            "{variable} ({command}) failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// The commands that stop and start the API server, or why the scenario is skipped.
fn outage_commands() -> Result<(String, String)> {
    match (std::env::var(STOP_COMMAND), std::env::var(START_COMMAND)) {
        (Ok(stop), Ok(start)) => Ok((stop, start)),
        _ => Err(Skipped(format!(
            "set {STOP_COMMAND} and {START_COMMAND} to commands that stop and start the API server (e2e/README.md)"
        ))
        .into()),
    }
}

/// Starts the API server again and waits until it answers, then until the cluster schedules
/// again: the scheduler's watches, refused while the new server's RBAC was loading, come back
/// after a backoff, and a pod created meanwhile could wait past the next scenario's limit.
async fn start_api_server(s: &Suite, start: &str) -> Result<()> {
    run_command(START_COMMAND, start).await?;
    eventually(
        "the API server to answer again",
        Duration::from_secs(120),
        || async {
            s.client.apiserver_version().await?;
            Ok(())
        },
    )
    .await?;
    scheduler_binds_again(s).await
}

/// A throwaway pod for the node without GPUs is bound by the scheduler, then deleted.
async fn scheduler_binds_again(s: &Suite) -> Result<()> {
    let name = format!("scheduler-probe-{}", std::process::id());
    let probe: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": s.ns},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node_name(&s.run, "nogpu")},
            "containers": [{"name": "probe", "image": "registry.invalid/probe:1"}],
        }
    }))?;
    let pods = s.pods();
    pods.create(&PostParams::default(), &probe).await?;
    let started = Instant::now();
    let bound = eventually(
        "the scheduler to bind a pod again after the outage",
        Duration::from_secs(300),
        || async {
            let pod = pods.get(&name).await?;
            ensure!(node_of(&pod).is_some(), "{name} is not bound yet");
            Ok(())
        },
    )
    .await;
    let _ = pods
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await;
    bound?;
    println!(
        "     the scheduler bound a pod {:.1} s after the API server answered again",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The API server stops for 30 s with a job running, then comes back (data kept): the same
/// operator process finishes that job and places a new one, and no job gets a second pod.
pub async fn api_server_outage(s: &mut Suite) -> Result<()> {
    let (stop, start) = outage_commands()?;
    let outage = std::env::var(OUTAGE_SECONDS)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    s.ensure_single_operator().await?;
    let (running, after) = ("outage-running", "outage-after");
    s.apply_job(one_gpu_job(s, running)).await?;
    let (_, pod) = s.wait_pod(running, 1).await?;
    s.set_pod_running(&pod).await?;
    s.wait_phase(running, &[Phase::Running]).await?;

    run_command(STOP_COMMAND, &stop).await?;
    eventually(
        &format!("the API server to stop answering after {STOP_COMMAND}"),
        Duration::from_secs(60),
        || async {
            ensure!(
                s.client.apiserver_version().await.is_err(),
                "it still answers"
            );
            Ok(())
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(outage)).await;
    for operator in &mut s.operators {
        operator
            .check_alive()
            .context("the operator should ride out the outage")?;
    }
    start_api_server(s, &start).await?;
    println!("     the API server was down for {outage} s");

    // The kubelet reports the pod finished; a new job arrives. The same process handles both.
    eventually(
        "the pod's end to be written",
        Duration::from_secs(60),
        || s.set_pod_ended(&pod, 0, "Completed", ""),
    )
    .await?;
    s.wait_phase(running, &[Phase::Succeeded]).await?;
    s.apply_job(one_gpu_job(s, after)).await?;
    let (_, pod) = s.wait_pod(after, 1).await?;
    ensure!(
        node_of(&pod).is_some(),
        "pod {} is not bound",
        pod.name_any()
    );
    consistently(
        "one live pod per job after the outage",
        Duration::from_secs(5),
        || one_live_pod_per_job(s),
    )
    .await?;
    for operator in &mut s.operators {
        operator
            .check_alive()
            .context("the operator should converge without a restart")?;
    }
    s.delete_jobs(&[running.to_string(), after.to_string()])
        .await
}

/// A leader cut off from the API server stops before its Lease can expire: with the API
/// server down, the leader-elected operator exits (non-zero, to restart as a standby) within
/// the Lease's validity, saying why, instead of going on as a leader nobody can see.
pub async fn leader_fences_itself_in_an_outage(s: &mut Suite) -> Result<()> {
    let (stop, start) = outage_commands()?;
    s.stop_operators();
    let lease_name = format!("{}fence-{}", vramfit_e2e::PREFIX, s.run);
    let flags = s.leader_flags(&lease_name);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    s.start_operator("fenced-leader", &flags, true).await?;
    run_command(STOP_COMMAND, &stop).await?;
    // A plain loop: the probe needs the operator mutably. 20 s of Lease validity, and the
    // fence stops the leader 3 s before that: 30 s is plenty.
    let mut exited = None;
    let watching = std::time::Instant::now();
    while exited.is_none() && watching.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Some(Err(exit)) = s.operators.last_mut().map(|op| op.check_alive()) {
            exited = Some(format!("{exit:#}"));
        }
    }
    start_api_server(s, &start).await?;
    let exit = exited.context("the leader still ran 30 s after the API server went down")?;
    ensure!(
        exit.contains("no renewal of the lease seen in time"),
        "the leader exited, but not by its fence: {exit}"
    );
    // When it stopped, by its own log (the stop command may have run on for seconds after).
    let log = s.last_operator_log();
    let exited_at: std::time::SystemTime = log
        .lines()
        .find(|l| l.contains("no renewal of the lease seen in time"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(std::time::SystemTime::from)
        .context("no timestamped fence line in the leader's log")?;
    // The property: it stopped before its last renewal could expire, which is when a
    // standby may take over.
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(s.client.clone(), &s.ns);
    let lease = leases.get(&lease_name).await?;
    let spec = lease.spec.unwrap_or_default();
    let renewed = spec
        .renew_time
        .map(|t| std::time::SystemTime::from(t.0))
        .context("the Lease has no renewTime")?;
    let expiry = renewed
        + Duration::from_secs(
            spec.lease_duration_seconds
                .unwrap_or(0)
                .try_into()
                .unwrap_or(0),
        );
    let margin = expiry.duration_since(exited_at).map_err(|late| {
        anyhow::anyhow!(
            "the leader stopped {:?} after its lease expired",
            late.duration()
        )
    })?;
    println!("     the leader stopped {margin:.1?} before its last renewal could expire");
    s.stop_operators();
    s.ensure_single_operator().await
}
