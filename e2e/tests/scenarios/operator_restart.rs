//! An operator killed mid-run and started again: no duplicate pods, the existing ones kept,
//! and a job created while it was down placed.
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use kube::ResourceExt as _;
use kube::api::ListParams;
use vramfit_api::Phase;
use vramfit_e2e::{Suite, consistently, expect_eq, one_live_pod_per_job};

/// Killing the operator mid-run and starting a new one creates no duplicate pods, keeps
/// the existing ones, and picks up a job created while it was down.
pub async fn restart_keeps_one_pod(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let before: BTreeMap<String, Option<String>> = s
        .jobs()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|j| j.status.as_ref().and_then(|st| st.phase) == Some(Phase::Scheduled))
        .map(|j| (j.name_any(), j.status.and_then(|st| st.pod_name)))
        .collect();
    s.stop_operators();
    let name = "e2e-while-down";
    s.apply_job(s.own_job(name, 3)).await?;
    s.start_operator("restarted", &[], true).await?;
    s.wait_pod(name, 1).await?;
    consistently(
        "one live pod per job after the restart",
        Duration::from_secs(10),
        || one_live_pod_per_job(s),
    )
    .await?;
    for (job, pod) in before {
        let now = s.job(&job).await?.status.and_then(|st| st.pod_name);
        expect_eq(
            &format!("status.podName of {job} across the restart"),
            now,
            pod,
        )?;
    }
    // Free the GPUs the examples hold for the scenarios that follow.
    let mut done = s.example_jobs.clone();
    done.push(name.to_string());
    s.delete_jobs(&done).await
}
