//! `vramfit compare` against the real API server (docs/compare.md): per class a baseline and
//! an optimized job, labelled as one comparison; the simulated kubelet finishes each with a
//! result summary, and the report has the expected figures; a class without nodes and an
//! unknown class get a line each; a second run re-attaches; `--delete` removes the jobs.
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, ensure};
use kube::api::{Api, ListParams};
use serde_json::json;
use vramfit_api::InferenceJob;
use vramfit_cli::compare::follow::{FollowEnd, FollowOptions};
use vramfit_cli::compare::jobs::RunPhase;
use vramfit_cli::compare::{self, Request};
use vramfit_e2e::{Suite, eventually, expect_eq};

const CLASSES: [&str; 4] = ["a10g-x1", "a10g-x4", "t4-x1", "b200-x8"];
/// Seconds of work the simulated kubelet reports: optimized is 1.5× as fast.
fn seconds(phase: RunPhase) -> u32 {
    match phase {
        RunPhase::Baseline => 300,
        RunPhase::Optimized => 200,
    }
}

pub async fn compare_classes(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let mut manifest = s.own_job("cmp", 1);
    manifest["spec"]["gpus"] = json!({"min": 1, "max": 1});
    let job: InferenceJob = serde_json::from_value(manifest)?;
    let request = Request {
        classes: CLASSES.map(String::from).to_vec(),
        repeat: 1,
        prices: [("a10g-x1".to_string(), 0.60)].into(),
        ..Request::default()
    };
    let cmp = compare::prepare(&job, &vramfit_planner::builtin_classes(), &request, &s.ns)
        .map_err(|e| anyhow!("prepare: {e}"))?;
    let options = FollowOptions {
        timeout: Duration::from_secs(180),
        poll: Duration::from_secs(1),
        progress: false,
    };
    let running = {
        let (client, cmp) = (s.client.clone(), cmp.clone());
        tokio::spawn(
            async move { compare::run(client, &cmp, options, std::future::pending()).await },
        )
    };

    // The kubelet: run and finish every job on a class with nodes. a10g-x1 has one GPU, so its
    // two jobs run one after the other.
    for planned in cmp.jobs.iter().filter(|j| j.key.class.starts_with("a10g")) {
        let name = planned.name();
        let (_, pod) = s.wait_pod(&name, 1).await?;
        s.set_pod_running(&pod).await?;
        let result = format!(
            r#"vramfit.io/v1 {{"kind":"Result","items":120,"seconds":{},"peakGpuMemoryMib":[15000]}}"#,
            seconds(planned.key.phase)
        );
        s.set_pod_ended(&pod, 0, "Completed", &result).await?;
    }
    let finished = tokio::time::timeout(Duration::from_secs(240), running)
        .await
        .context("the comparison did not end")??
        .map_err(|e| anyhow!("compare: {e}"))?;
    expect_eq("how following ended", finished.end, FollowEnd::Done)?;
    expect_eq(
        "jobs created",
        finished.started.created.len(),
        cmp.jobs.len(),
    )?;
    let table = compare::report::table(&finished.report);
    print!(
        "{}",
        table
            .lines()
            .map(|l| format!("     {l}\n"))
            .collect::<String>()
    );
    let class = |name: &str| {
        finished
            .report
            .classes
            .iter()
            .find(|c| c.node_class == name)
            .ok_or_else(|| anyhow!("no {name} in the report"))
    };
    for name in ["a10g-x1", "a10g-x4"] {
        let c = class(name)?;
        expect_eq(&format!("{name} speed-up"), c.speedup, Some(1.5))?;
        let baseline = c.phases.first().context("no baseline phase")?;
        expect_eq(
            &format!("{name} baseline items per minute"),
            baseline.items_per_minute.map(|s| s.median),
            Some(24.0),
        )?;
    }
    let a10g = class("a10g-x1")?;
    expect_eq(
        "a10g-x1 $/hour",
        a10g.phases.first().and_then(|p| p.dollars_per_hour),
        Some(0.60),
    )?;
    let problems = |name: &str| -> Result<String> {
        Ok(class(name)?
            .phases
            .iter()
            .flat_map(|p| p.problems.clone())
            .collect::<Vec<_>>()
            .join("; "))
    };
    let t4 = problems("t4-x1")?;
    ensure!(t4.contains("class t4-x1 has no nodes"), "t4-x1: {t4}");
    let b200 = format!("{:?}", class("b200-x8")?);
    ensure!(b200.contains("unknown class b200-x8"), "b200-x8: {b200}");
    let fastest = finished
        .report
        .fastest
        .clone()
        .context("no fastest class")?;
    ensure!(
        fastest.node_class.starts_with("a10g") && fastest.phase == RunPhase::Optimized,
        "fastest: {fastest:?}"
    );

    // The jobs carry the comparison's labels.
    let jobs: Api<InferenceJob> = Api::namespaced(s.client.clone(), &s.ns);
    let labelled = jobs
        .list(&ListParams::default().labels(&format!("vramfit.io/comparison={}", cmp.id)))
        .await?;
    expect_eq("labelled jobs", labelled.items.len(), cmp.jobs.len())?;
    for job in &labelled.items {
        let labels = job.metadata.labels.clone().unwrap_or_default();
        for key in [
            "vramfit.io/comparison-class",
            "vramfit.io/comparison-phase",
            "vramfit.io/comparison-run",
        ] {
            ensure!(labels.contains_key(key), "job without {key}: {labels:?}");
        }
    }

    // Running it again re-attaches: nothing is created, the report is the same.
    let again = compare::run(s.client.clone(), &cmp, options, std::future::pending())
        .await
        .map_err(|e| anyhow!("compare again: {e}"))?;
    expect_eq("created on re-attach", again.started.created.len(), 0)?;
    expect_eq(
        "re-attached",
        again.started.reattached.len(),
        cmp.jobs.len(),
    )?;
    ensure!(
        again.report == finished.report,
        "the re-attached report differs"
    );

    let deleted = compare::delete(s.client.clone(), &s.ns, &cmp.id)
        .await
        .map_err(|e| anyhow!("delete: {e}"))?;
    expect_eq("deleted jobs", deleted.len(), cmp.jobs.len())?;
    eventually(
        "the comparison's jobs to go",
        Duration::from_secs(60),
        || async {
            let left = jobs
                .list(&ListParams::default().labels(&format!("vramfit.io/comparison={}", cmp.id)))
                .await?;
            ensure!(left.items.is_empty(), "{} left", left.items.len());
            Ok(())
        },
    )
    .await
}
