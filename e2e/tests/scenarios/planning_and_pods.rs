//! Every example is planned: a placed job gets a pod that carries its plan (env, GPU limits,
//! tolerations, node affinity, owner reference), bound by the scheduler; an unplaceable job
//! says why and gets no pod.
use anyhow::{Context as _, Result, ensure};
use kube::ResourceExt as _;
use vramfit_api::Phase;
use vramfit_api::event_reasons::EventReason;
use vramfit_e2e::{Suite, check_placed_job, check_served_job, conditions_of, read_yaml_documents};

/// Every `examples/*.yaml` is planned: placed jobs get a complete pod, unplaceable ones say
/// why. At least one must be placed. The fine-tuning examples come after the others have
/// settled and are deleted once checked: a training run ends, and the GPUs they held would
/// otherwise change where the served examples land and what later scenarios find free.
pub async fn examples_are_planned(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let mut paths: Vec<_> = std::fs::read_dir(s.root.join("examples"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .collect();
    paths.sort();
    let (mut inference, mut tuning) = (vec![], vec![]);
    for path in &paths {
        for doc in read_yaml_documents(path)? {
            let group = if doc["spec"]["tuning"].is_null() {
                &mut inference
            } else {
                &mut tuning
            };
            group.push((path.clone(), doc));
        }
    }
    ensure!(!inference.is_empty(), "examples/ has no manifests");
    let names = apply_examples(s, inference).await?;
    s.example_jobs = names.clone();
    let (mut placed, mut problems) = check_examples(s, &names).await?;
    let tuning_names = apply_examples(s, tuning).await?;
    let (tuning_placed, tuning_problems) = check_examples(s, &tuning_names).await?;
    s.delete_jobs(&tuning_names).await?;
    placed += tuning_placed;
    problems.extend(tuning_problems);
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    ensure!(
        placed > 0,
        "none of the {} examples was placed on the simulated GPU nodes",
        names.len() + tuning_names.len()
    );
    Ok(())
}

/// Applies the examples' manifests (with the claims their volumes name); returns the names.
async fn apply_examples(
    s: &Suite,
    docs: Vec<(std::path::PathBuf, serde_json::Value)>,
) -> Result<Vec<String>> {
    let mut names = vec![];
    for (path, doc) in docs {
        s.provide_claims(&doc).await?;
        let job = s
            .apply_job(doc)
            .await
            .with_context(|| format!("applying {}", path.display()))?;
        names.push(job.name_any());
    }
    Ok(names)
}

/// Waits for each job to be placed or refused and checks it: (how many were placed, what is
/// wrong with the others).
async fn check_examples(s: &Suite, names: &[String]) -> Result<(u32, Vec<String>)> {
    let nodes = s.sim_nodes().await?;
    let mut placed = 0;
    let mut problems = vec![];
    for name in names {
        if s.job(name)
            .await?
            .spec
            .serve
            .is_some_and(|sv| !sv.adapters.is_empty())
        {
            // A served example naming a fine-tune of its file: held until that run succeeds,
            // which no simulated node does; it says why and has no pod.
            let job = s.wait_condition(name, "AdaptersReady", "False").await?;
            s.wait_events(name, &[EventReason::AdapterRefused]).await?;
            ensure!(
                s.pods_of(&job).await?.is_empty(),
                "held job {name} has pods"
            );
            println!(
                "     {name}: held for its adapters: {:?}",
                conditions_of(&job)
            );
            continue;
        }
        let job = s
            .wait_phase(
                name,
                &[
                    Phase::Scheduled,
                    Phase::Running,
                    Phase::Unschedulable,
                    Phase::Failed,
                ],
            )
            .await?;
        let status = job.status.clone().unwrap_or_default();
        match status.phase {
            Some(Phase::Scheduled) | Some(Phase::Running) if job.spec.serve.is_some() => {
                // A served example: every replica's pod, each planned for its class.
                let replicas = job.spec.serve.as_ref().map_or(1, |sv| sv.replicas) as usize;
                let (job, pods) = s.wait_replicas(name, replicas).await?;
                if let Err(e) = check_served_job(&job, &pods, &nodes) {
                    problems.push(format!("{e:#}"));
                    continue;
                }
                if let Err(e) = s.wait_events(name, &[EventReason::PodCreated]).await {
                    problems.push(format!("{e:#}"));
                    continue;
                }
                let status = job.status.clone().unwrap_or_default();
                println!(
                    "     {name}: served, {} replica(s) on {:?}: {:?}",
                    replicas,
                    status.node_class,
                    status
                        .replica_statuses
                        .iter()
                        .map(|l| l.plan_summary.as_str())
                        .collect::<Vec<_>>()
                );
                placed += 1;
            }
            Some(Phase::Scheduled) | Some(Phase::Running) => {
                let (job, pod) = s.wait_pod(name, status.attempt_count.max(1)).await?;
                if let Err(e) = check_placed_job(&job, &pod, &nodes) {
                    problems.push(format!("{e:#}"));
                    continue;
                }
                if let Err(e) = s.wait_events(name, &[EventReason::PodCreated]).await {
                    problems.push(format!("{e:#}"));
                    continue;
                }
                let plan = status.plan.as_ref();
                println!(
                    "     {name}: Scheduled on class {:?}, {} GPU(s), {:?}, quantization {:?}",
                    status.node_class,
                    plan.map(|p| p.gpu_count).unwrap_or_default(),
                    plan.map(|p| p.dtype.as_str()),
                    plan.map(|p| p.quantization.as_str())
                );
                placed += 1;
            }
            Some(Phase::Unschedulable) => {
                println!(
                    "     {name}: Unschedulable: {:?} {:?}",
                    status.rejected_classes,
                    conditions_of(&job)
                );
                ensure!(
                    status.conditions.iter().any(|c| c.status == "False"),
                    "job {name} is Unschedulable without a False condition: {:?}",
                    conditions_of(&job)
                );
                s.wait_events(name, &[EventReason::Unschedulable]).await?;
                let pods = s.pods_of(&job).await?;
                ensure!(
                    pods.is_empty(),
                    "Unschedulable job {name} has pods {:?}",
                    pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
                );
            }
            other => problems.push(format!(
                "example {name} ended {other:?}: {:?}",
                conditions_of(&job)
            )),
        }
    }
    Ok((placed, problems))
}
