//! One job's bug stays that job's, and a controller that ends takes its process down: the
//! operator's test-only faults (`fault-injection` feature, armed by environment variables)
//! make one job's reconcile panic, then the controller itself.
use std::time::Duration;

use anyhow::{Result, anyhow, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use vramfit_api::Phase;
use vramfit_api::event_reasons::EventReason;
use vramfit_e2e::{PREFIX, Skipped, Suite, conditions_of, eventually, http_get, http_status};

/// What the operator logs for each fault it arms (operator/src/fault_injection.rs).
const ARMED: &str = "fault injection armed";

/// Replaces the running operators by one replica `replica` with leader election (its own
/// Lease, named after it) and the fault `variable=job` armed; returns the Lease's name. Skipped
/// when the binary was built without the fault-injection feature.
async fn start_faulty_leader(
    s: &mut Suite,
    replica: &str,
    (variable, job): (&str, &str),
) -> Result<String> {
    s.stop_operators();
    let lease_name = format!("{PREFIX}{}-{replica}", s.run);
    let flags = s.leader_flags(&lease_name);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    s.start_operator_with_env(replica, &flags, &[(variable, job.to_string())], true)
        .await?;
    if !s.last_operator_log().contains(ARMED) {
        s.stop_operators();
        return Err(Skipped(
            "the operator binary was built without the fault-injection feature".into(),
        )
        .into());
    }
    Ok(lease_name)
}

/// A leader-elected operator whose reconcile of one job panics every time: that job reports
/// `ReconcileFailed=True` (`InternalError`) with a Warning event, the panic is counted, and
/// jobs created before and after it are placed all the same; the replica stays ready.
pub async fn a_panicking_reconcile_is_contained(s: &mut Suite) -> Result<()> {
    let bad = "reconcile-panics";
    start_faulty_leader(s, "contained", ("VRAMFIT_FAULT_PANIC_IN_RECONCILE", bad)).await?;
    let names: Vec<String> = ["steady-before", bad, "steady-after"]
        .map(String::from)
        .to_vec();
    s.apply_job(s.own_job(&names[0], 1)).await?;
    s.apply_job(s.own_job(bad, 1)).await?;
    let failed = eventually(
        &format!("job {bad} to report the failed reconcile"),
        Duration::from_secs(90),
        || async {
            let job = s.job(bad).await?;
            let condition = job
                .status
                .iter()
                .flat_map(|st| &st.conditions)
                .find(|c| c.type_ == "ReconcileFailed")
                .cloned()
                .ok_or_else(|| anyhow!("no ReconcileFailed yet: {:?}", conditions_of(&job)))?;
            ensure!(
                condition.status == "True" && condition.reason == "InternalError",
                "{condition:?}"
            );
            Ok(condition.message)
        },
    )
    .await?;
    ensure!(
        failed.contains("fault injection: the reconcile of reconcile-panics panics"),
        "the condition names the panic: {failed}"
    );
    s.wait_events(bad, &[EventReason::ReconcileFailed]).await?;
    // The other jobs are placed: the one created before the panic and one created after.
    s.wait_pod(&names[0], 1).await?;
    s.apply_job(s.own_job(&names[2], 1)).await?;
    s.wait_pod(&names[2], 1).await?;
    let job = s.job(bad).await?;
    ensure!(
        s.pods_of(&job).await?.is_empty(),
        "the panicking job got no pod"
    );
    let addr = s
        .operators
        .last()
        .map(|o| o.addr.clone())
        .unwrap_or_default();
    let (code, metrics) = http_get(&addr, "/metrics").await?;
    ensure!(code == 200, "/metrics answered {code}");
    ensure!(
        metrics.contains("vramfit_reconcile_errors_total{kind=\"panic\"}"),
        "the panic is counted"
    );
    ensure!(
        http_status(&addr, "/readyz").await? == 200,
        "the replica stays ready"
    );
    for op in &mut s.operators {
        op.check_alive()?;
    }
    println!(
        "     {bad} reports ReconcileFailed; {} and {} were placed",
        names[0], names[2]
    );
    s.stop_operators();
    s.delete_jobs(&names).await
}

/// A leader-elected operator whose controller panics (outside the reconcile boundary) after it
/// reconciled one job: the process exits non-zero, `/readyz` stops answering 200, and the Lease
/// is handed over (no holder) instead of being held by a replica that reconciles nothing.
pub async fn an_ended_controller_ends_the_process(s: &mut Suite) -> Result<()> {
    let trigger = "controller-panics";
    let lease_name =
        start_faulty_leader(s, "ends", ("VRAMFIT_FAULT_PANIC_IN_CONTROLLER", trigger)).await?;
    let addr = s
        .operators
        .last()
        .map(|o| o.addr.clone())
        .unwrap_or_default();
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), &s.ns);
    let holder = |lease: Option<Lease>| {
        lease
            .and_then(|l| l.spec)
            .and_then(|spec| spec.holder_identity)
            .filter(|h| !h.is_empty())
    };
    ensure!(
        holder(leases.get_opt(&lease_name).await?).as_deref() == Some("ends"),
        "the replica leads before the fault"
    );
    s.apply_job(s.own_job(trigger, 1)).await?;
    let status = eventually(
        "the operator process to exit",
        Duration::from_secs(60),
        || {
            let status = s.operators.last_mut().and_then(|op| op.exit_status());
            async move { status.ok_or_else(|| anyhow!("still running")) }
        },
    )
    .await?;
    ensure!(!status.success(), "it exits non-zero: {status}");
    let log = s.last_operator_log();
    ensure!(
        log.contains("the controller ended unexpectedly")
            && log.contains("fault injection: the controller panics after reconciling"),
        "the log says why: {}",
        s.operators
            .last()
            .map(|o| o.log_tail(15))
            .unwrap_or_default()
    );
    ensure!(
        http_status(&addr, "/readyz").await.ok() != Some(200),
        "/readyz no longer answers 200"
    );
    let lease = leases.get_opt(&lease_name).await?;
    ensure!(
        holder(lease.clone()).is_none(),
        "the Lease is handed over: {:?}",
        lease.and_then(|l| l.spec)
    );
    println!("     the operator exited ({status}) and released its Lease");
    s.stop_operators();
    // A healthy operator finishes the job: nothing was lost.
    s.ensure_single_operator().await?;
    s.wait_phase(trigger, &[Phase::Scheduled, Phase::Running])
        .await?;
    s.delete_jobs(&[trigger.to_string()]).await
}
