//! A job's status and events follow its pod as the simulated kubelet runs and finishes it.
use std::time::Duration;
use vramfit_api::event_reasons::EventReason;

use anyhow::{Result, ensure};
use vramfit_api::{AttemptOutcome, Phase};
use vramfit_e2e::{Suite, consistently, exactly_one_pod};

/// A simulated kubelet runs the pod then finishes it: the job follows to Succeeded.
pub async fn kubelet_success(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-succeeds";
    s.apply_job(s.own_job(name, 3)).await?;
    let (_, pod) = s.wait_pod(name, 1).await?;
    s.set_pod_running(&pod).await?;
    s.wait_phase(name, &[Phase::Running]).await?;
    s.wait_events(name, &[EventReason::Running]).await?;
    s.set_pod_ended(&pod, 0, "Completed", "").await?;
    let job = s.wait_phase(name, &[Phase::Succeeded]).await?;
    let status = job.status.clone().unwrap_or_default();
    ensure!(
        status.completion_time.is_some(),
        "Succeeded job has no completionTime"
    );
    ensure!(
        status.attempts.first().and_then(|a| a.outcome.clone()) == Some(AttemptOutcome::Succeeded),
        "attempts[0].outcome should be Succeeded: {:?}",
        status.attempts
    );
    s.wait_events(name, &[EventReason::Succeeded]).await?;
    consistently(
        "exactly one pod for the Succeeded job",
        Duration::from_secs(5),
        || async {
            exactly_one_pod(&s.pods_of(&job).await?)?;
            Ok(())
        },
    )
    .await
}
