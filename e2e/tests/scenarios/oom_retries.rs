//! The OOM ladder: a CUDA out-of-memory failure starts the next attempt one step down, until
//! `maxAttempts` fails the job.
use std::time::Duration;
use vramfit_api::event_reasons::EventReason;

use anyhow::{Result, ensure};
use kube::ResourceExt as _;
use vramfit_api::{AttemptOutcome, Phase};
use vramfit_e2e::{
    ATTEMPT_LABEL, CUDA_OOM_MESSAGE, Suite, check_placed_job, consistently, expect_eq,
};

/// A CUDA out-of-memory failure leads to attempt 2, one step down; a second one, with
/// maxAttempts 2, fails the job.
pub async fn oom_steps_down(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-oom";
    s.apply_job(s.own_job(name, 2)).await?;
    let (_, first) = s.wait_pod(name, 1).await?;
    s.set_pod_running(&first).await?;
    s.wait_phase(name, &[Phase::Running]).await?;
    s.set_pod_ended(&first, 1, "Error", CUDA_OOM_MESSAGE)
        .await?;

    let (job, second) = s.wait_pod(name, 2).await?;
    ensure!(
        second.name_any() != first.name_any(),
        "attempt 2 reuses pod {}",
        first.name_any()
    );
    let status = job.status.clone().unwrap_or_default();
    ensure!(
        status.attempts.len() == 2,
        "status.attempts should have 2 entries: {:?}",
        status.attempts
    );
    expect_eq(
        "attempts[0].outcome",
        status.attempts[0].outcome.clone(),
        Some(AttemptOutcome::OutOfMemory),
    )?;
    ensure!(
        status.attempts[1]
            .step
            .as_deref()
            .is_some_and(|s| !s.is_empty()),
        "attempts[1].step should say what was stepped down: {:?}",
        status.attempts[1]
    );
    println!("     step after OOM: {:?}", status.attempts[1].step);
    let nodes = s.sim_nodes().await?;
    check_placed_job(&job, &second, &nodes)?;
    s.wait_events(name, &[EventReason::OutOfMemory, EventReason::SteppedDown])
        .await?;

    s.set_pod_ended(&second, 1, "Error", CUDA_OOM_MESSAGE)
        .await?;
    let job = s.wait_phase(name, &[Phase::Failed]).await?;
    s.wait_events(name, &[EventReason::Failed]).await?;
    consistently("no third attempt", Duration::from_secs(5), || async {
        let pods = s.pods_of(&job).await?;
        ensure!(
            pods.len() == 2,
            "pods {:?}",
            pods.iter()
                .map(|p| (p.name_any(), p.labels().get(ATTEMPT_LABEL).cloned()))
                .collect::<Vec<_>>()
        );
        Ok(())
    })
    .await
}
