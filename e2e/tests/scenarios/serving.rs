//! Served jobs (`spec.serve`) on the real API server: the Service and its EndpointSlice (the
//! control plane's own EndpointSlice controller), `kubectl scale` over two classes, an
//! out-of-memory step-down behind the same endpoint, a rolling update that keeps a ready
//! endpoint, a crash loop's backoff in the operator's writes, and an HPA on the scale
//! subresource. The suite is the kubelet: it writes the replica pods' status (`podIP`, the
//! `Ready` condition) and confirms their deletion.
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};
use vramfit_api::InferenceJob;
use vramfit_api::event_reasons::EventReason;
use vramfit_e2e::{
    CUDA_OOM_MESSAGE, SETTLE, Suite, cell, check_served_job, conditions_of, consistently,
    eventually, expect_eq, kubectl, node_of, parse_table, pod_ip, served_job,
};

const H100: &str = "h100-80gb-hbm3-x8";

/// Waits until condition `type_` of job `name` has `status` (and `reason`, when given).
async fn wait_condition(
    s: &Suite,
    name: &str,
    type_: &str,
    status: &str,
    reason: Option<&str>,
) -> Result<InferenceJob> {
    eventually(
        &format!("job {name} condition {type_}={status} {reason:?}"),
        SETTLE,
        || async {
            let job = s.job(name).await?;
            let hit = job.status.as_ref().is_some_and(|st| {
                st.conditions.iter().any(|c| {
                    c.type_ == type_ && c.status == status && reason.is_none_or(|r| c.reason == r)
                })
            });
            ensure!(hit, "conditions {:?}", conditions_of(&job));
            Ok(job)
        },
    )
    .await
}

/// The value of `--flag` in a pod's container args.
fn flag(pod: &Pod, name: &str) -> Option<String> {
    let args = pod.spec.as_ref()?.containers.first()?.args.clone()?;
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

/// The Service named after the job exists, is owned by it, selects its replicas by its uid;
/// its EndpointSlice lists exactly the ready replicas' addresses; a replica that turns not
/// ready leaves it; a deleted Service comes back; the Service and the PDB are
/// garbage-collected with the job.
pub async fn service_and_endpoints(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-serve";
    s.apply_job(served_job(s, name, 2, &[H100])).await?;
    let (job, pods) = s.wait_replicas(name, 2).await?;
    check_served_job(&job, &pods, &s.sim_nodes().await?)?;
    let uid = job.uid().unwrap_or_default();

    let services: Api<Service> = Api::namespaced(s.client.clone(), &s.ns);
    let service = services.get(name).await.context("the job's Service")?;
    let owner = service
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .cloned()
        .ok_or_else(|| anyhow!("Service {name} has no controller"))?;
    expect_eq(
        "Service owner",
        (owner.kind.as_str(), owner.uid.as_str()),
        ("InferenceJob", uid.as_str()),
    )?;
    let spec = service.spec.clone().unwrap_or_default();
    expect_eq("Service type", spec.type_.as_deref(), Some("ClusterIP"))?;
    expect_eq(
        "Service selector",
        spec.selector.clone().unwrap_or_default(),
        [
            ("vramfit.io/job".to_string(), name.to_string()),
            ("vramfit.io/job-uid".to_string(), uid.clone()),
        ]
        .into(),
    )?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.ns);
    let pdb = pdbs
        .get(name)
        .await
        .context("the job's PodDisruptionBudget")?;
    expect_eq(
        "PDB minAvailable (two replicas with a pod: one may go)",
        pdb.spec.and_then(|p| p.min_available),
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)),
    )?;

    // The kubelet: both replicas serve.
    for pod in &pods {
        s.set_pod_serving(pod, true).await?;
    }
    let all: BTreeSet<String> = pods.iter().map(|p| pod_ip(&p.name_any())).collect();
    s.wait_endpoints(name, &all).await?;
    wait_condition(s, name, "Available", "True", Some("Serving")).await?;
    eventually("readyReplicas 2", SETTLE, || async {
        let status = s.job(name).await?.status.unwrap_or_default();
        ensure!(
            status.ready_replicas == Some(2),
            "readyReplicas {:?}",
            status.ready_replicas
        );
        Ok(())
    })
    .await?;
    s.wait_events(name, &[EventReason::Available]).await?;
    let text = s.kubectl_get_jobs(&["-o", "wide"]).await?;
    expect_eq(
        "READY column",
        cell(&text, "READY", name)?,
        "2/2".to_string(),
    )?;
    expect_eq(
        "ENDPOINT column",
        cell(&text, "ENDPOINT", name)?,
        format!("http://{name}.{}.svc:8000", s.ns),
    )?;
    println!("     EndpointSlice ready addresses {all:?}; READY 2/2");

    // One replica's readiness probe fails: it leaves the ready endpoints, the job says 1/2.
    s.set_pod_serving(&pods[1], false).await?;
    let one: BTreeSet<String> = [pod_ip(&pods[0].name_any())].into();
    s.wait_endpoints(name, &one).await?;
    eventually("job ready 1/2", SETTLE, || async {
        let ready = s.job(name).await?.status.and_then(|st| st.ready);
        ensure!(ready.as_deref() == Some("1/2"), "ready {ready:?}");
        Ok(())
    })
    .await?;
    println!(
        "     replica {} not ready: ready addresses {one:?}",
        pods[1].name_any()
    );

    // A deleted Service is put back by the operator.
    let before = service.uid();
    services.delete(name, &DeleteParams::default()).await?;
    eventually(
        "the Service to be created again",
        Duration::from_secs(30),
        || async {
            let again = services.get_opt(name).await?;
            ensure!(
                again.as_ref().is_some_and(|svc| svc.uid() != before),
                "Service {:?}",
                again.map(|svc| svc.uid())
            );
            Ok(())
        },
    )
    .await?;

    // Deleting the job collects its Service and PDB (garbage collector).
    s.jobs().delete(name, &DeleteParams::background()).await?;
    eventually(
        "the Service and PDB to be garbage-collected with the job",
        Duration::from_secs(60),
        || async {
            let svc = services.get_opt(name).await?.is_some();
            let pdb = pdbs.get_opt(name).await?.is_some();
            ensure!(!svc && !pdb, "Service left {svc}, PDB left {pdb}");
            Ok(())
        },
    )
    .await?;
    s.delete_jobs(&[name.to_string()]).await?;
    for pod in &pods {
        let _ = s
            .pods()
            .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
            .await;
    }
    Ok(())
}

/// `kubectl scale ij --replicas=3`: three pods, two on the first class (the best, now full) and
/// one on the next, each with its class's flags; READY follows; `kubectl scale` on a batch job
/// is refused.
pub async fn kubectl_scale_over_two_classes(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-scale";
    let v100 = "v100-sxm2-16gb-x4";
    s.apply_job(served_job(s, name, 1, &[v100, "a10g-x1"]))
        .await?;
    s.wait_replicas(name, 1).await?;
    let ns = s.ns.clone();
    tokio::task::spawn_blocking(move || kubectl(&["scale", "ij", name, "-n", &ns, "--replicas=3"]))
        .await??;
    let (job, pods) = s.wait_replicas(name, 3).await?;
    check_served_job(&job, &pods, &s.sim_nodes().await?)?;
    let mut classes: Vec<String> = job
        .status
        .as_ref()
        .map(|st| {
            st.replica_statuses
                .iter()
                .map(|l| l.node_class.clone())
                .collect()
        })
        .unwrap_or_default();
    classes.sort();
    expect_eq(
        "replica classes",
        classes,
        vec!["a10g-x1".to_string(), v100.to_string(), v100.to_string()],
    )?;
    for pod in &pods {
        let class = pod.labels()["vramfit.io/node-class"].clone();
        let (dtype, tp, quantization) = if class == v100 {
            ("float16", "2", None)
        } else {
            ("bfloat16", "1", Some("fp8".to_string()))
        };
        expect_eq(
            &format!("{} --dtype", pod.name_any()),
            flag(pod, "--dtype"),
            Some(dtype.into()),
        )?;
        expect_eq(
            &format!("{} --tensor-parallel-size", pod.name_any()),
            flag(pod, "--tensor-parallel-size"),
            Some(tp.into()),
        )?;
        expect_eq(
            &format!("{} --quantization", pod.name_any()),
            flag(pod, "--quantization"),
            quantization,
        )?;
        expect_eq(
            &format!("{} --host", pod.name_any()),
            flag(pod, "--host"),
            Some("0.0.0.0".into()),
        )?;
        expect_eq(
            &format!("{} --port", pod.name_any()),
            flag(pod, "--port"),
            Some("8000".into()),
        )?;
        println!(
            "     {} on {class}: --dtype {dtype} --tensor-parallel-size {tp} --quantization {:?}",
            pod.name_any(),
            flag(pod, "--quantization")
        );
    }
    for pod in &pods {
        s.set_pod_serving(pod, true).await?;
    }
    eventually("READY 3/3", SETTLE, || async {
        let status = s.job(name).await?.status.unwrap_or_default();
        ensure!(
            status.ready_replicas == Some(3) && status.ready.as_deref() == Some("3/3"),
            "readyReplicas {:?}, ready {:?}",
            status.ready_replicas,
            status.ready
        );
        Ok(())
    })
    .await?;
    let text = s.kubectl_get_jobs(&[]).await?;
    let table = parse_table(&text, &["READY"], &[name])?;
    expect_eq(
        "READY column",
        table[name].get("READY").cloned(),
        Some("3/3".to_string()),
    )?;

    // A batch job has no replicas: the scale subresource cannot make it a server.
    let batch = "e2e-batch-scale";
    s.apply_job(s.own_job(batch, 1)).await?;
    let ns = s.ns.clone();
    let refused = tokio::task::spawn_blocking(move || {
        kubectl(&["scale", "ij", batch, "-n", &ns, "--replicas=2"])
    })
    .await?;
    let message = match refused {
        Ok(out) => bail!("kubectl scale on a batch job was accepted: {out}"),
        Err(e) => format!("{e:#}"),
    };
    ensure!(
        message.contains("a batch job cannot become a served job"),
        "refused with {message}"
    );
    ensure!(
        s.job(batch).await?.spec.serve.is_none(),
        "the batch job became a server"
    );
    println!(
        "     kubectl scale on a batch job: refused ({})",
        message.lines().last().unwrap_or_default()
    );
    s.delete_jobs(&[name.to_string(), batch.to_string()]).await
}

/// A replica that runs out of memory before it is Ready is replaced one step down on its
/// class (one more GPU), the other replica keeps its pod and plan, and the new pod is behind
/// the same Service once Ready.
pub async fn oom_steps_down_behind_the_endpoint(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-serve-oom";
    s.apply_job(served_job(s, name, 2, &[H100])).await?;
    let (job, pods) = s.wait_replicas(name, 2).await?;
    let services: Api<Service> = Api::namespaced(s.client.clone(), &s.ns);
    let service = services.get(name).await?.uid();
    let lines = job.status.clone().unwrap_or_default().replica_statuses;
    let (keep, fail) = (&lines[0], &lines[1]);
    let kept = pods
        .iter()
        .find(|p| p.name_any() == keep.pod_name)
        .cloned()
        .unwrap_or_default();
    let failing = pods
        .iter()
        .find(|p| p.name_any() == fail.pod_name)
        .cloned()
        .unwrap_or_default();
    expect_eq(
        "GPUs before",
        flag(&failing, "--tensor-parallel-size"),
        Some("1".into()),
    )?;
    s.set_pod_serving(&kept, true).await?;
    s.set_pod_ended(&failing, 1, "Error", CUDA_OOM_MESSAGE)
        .await?;

    let (job, pods) = eventually("the replica's next pod, one step down", SETTLE, || async {
        let (job, pods) = s.wait_replicas(name, 2).await?;
        let line = job
            .status
            .as_ref()
            .and_then(|st| {
                st.replica_statuses
                    .iter()
                    .find(|l| l.slot == fail.slot)
                    .cloned()
            })
            .ok_or_else(|| anyhow!("no replica {}", fail.slot))?;
        ensure!(
            line.pod_name != fail.pod_name,
            "still pod {}",
            line.pod_name
        );
        Ok((job, pods))
    })
    .await?;
    let status = job.status.clone().unwrap_or_default();
    let line = status
        .replica_statuses
        .iter()
        .find(|l| l.slot == fail.slot)
        .cloned()
        .unwrap_or_else(|| fail.clone());
    let next = pods
        .iter()
        .find(|p| p.name_any() == line.pod_name)
        .cloned()
        .unwrap_or_default();
    expect_eq(
        "its class",
        line.node_class.as_str(),
        fail.node_class.as_str(),
    )?;
    expect_eq(
        "GPUs after the step",
        flag(&next, "--tensor-parallel-size"),
        Some("2".into()),
    )?;
    ensure!(
        line.fallback.is_some() && line.restarts == 1,
        "replica line {line:?}"
    );
    let other = status
        .replica_statuses
        .iter()
        .find(|l| l.slot == keep.slot)
        .cloned()
        .unwrap_or_else(|| keep.clone());
    expect_eq(
        "the other replica's pod",
        other.pod_name.as_str(),
        keep.pod_name.as_str(),
    )?;
    expect_eq(
        "the other replica's plan",
        other.plan_summary.as_str(),
        keep.plan_summary.as_str(),
    )?;
    let restart = status
        .recent_restarts
        .last()
        .cloned()
        .ok_or_else(|| anyhow!("no restart recorded"))?;
    expect_eq("restart reason", restart.reason.as_str(), "OutOfMemory")?;
    s.wait_events(name, &[EventReason::OutOfMemory, EventReason::SteppedDown])
        .await?;
    check_served_job(&job, &pods, &s.sim_nodes().await?)?;
    println!(
        "     {}: {} → {} ({})",
        fail.pod_name,
        fail.plan_summary,
        line.plan_summary,
        restart.step.unwrap_or_default()
    );

    // Behind the same endpoint: the same Service selects the new pod once it is Ready.
    s.set_pod_serving(&next, true).await?;
    let both: BTreeSet<String> = [pod_ip(&kept.name_any()), pod_ip(&next.name_any())].into();
    s.wait_endpoints(name, &both).await?;
    expect_eq("the same Service", services.get(name).await?.uid(), service)?;
    s.delete_jobs(&[name.to_string()]).await
}

/// Editing a served job rolls its replicas one at a time: a surge pod, Ready before the old
/// pod goes. The EndpointSlice, polled all along, always lists a ready address.
pub async fn rolling_update_keeps_an_endpoint(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-roll";
    let manifest = served_job(s, name, 2, &[H100]);
    s.apply_job(manifest.clone()).await?;
    let (job, pods) = s.wait_replicas(name, 2).await?;
    for pod in &pods {
        s.set_pod_serving(pod, true).await?;
    }
    let first: BTreeSet<String> = pods.iter().map(|p| pod_ip(&p.name_any())).collect();
    s.wait_endpoints(name, &first).await?;
    wait_condition(s, name, "Progressing", "False", Some("UpToDate")).await?;

    let mut edited = manifest.clone();
    edited["spec"]["image"] = json!("vllm/vllm-openai:v0.11.0");
    s.apply_job(edited).await?;
    let started = Instant::now();
    let (mut polls, mut least, mut most_live) = (0, usize::MAX, 0);
    let mut served: BTreeSet<String> = BTreeSet::new();
    loop {
        ensure!(
            started.elapsed() < Duration::from_secs(150),
            "the rolling update did not finish in 150 s: {:?}",
            conditions_of(&s.job(name).await?)
        );
        // The kubelet: new pods serve, deleted pods go.
        s.confirm_deletions(&job).await?;
        let live: Vec<Pod> = s
            .pods_of(&job)
            .await?
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        most_live = most_live.max(live.len());
        for pod in &live {
            if node_of(pod).is_some()
                && !served.contains(&pod.name_any())
                && !first.contains(&pod_ip(&pod.name_any()))
            {
                s.set_pod_serving(pod, true).await?;
                served.insert(pod.name_any());
            }
        }
        let ready = s.ready_addresses(name).await?;
        polls += 1;
        least = least.min(ready.len());
        ensure!(
            !ready.is_empty(),
            "no ready endpoint during the rolling update (poll {polls})"
        );
        let job_now = s.job(name).await?;
        let status = job_now.status.clone().unwrap_or_default();
        let done = status.observed_generation == job_now.metadata.generation
            && status.replica_statuses.len() == 2
            && status
                .replica_statuses
                .iter()
                .all(|l| l.updated && l.ready && l.surge.is_none())
            && live.len() == 2
            && live.iter().all(|p| {
                p.spec
                    .as_ref()
                    .and_then(|sp| sp.containers.first())
                    .and_then(|c| c.image.as_deref())
                    == Some("vllm/vllm-openai:v0.11.0")
            });
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let now: BTreeSet<String> = s
        .pods_of(&job)
        .await?
        .iter()
        .map(|p| pod_ip(&p.name_any()))
        .collect();
    s.wait_endpoints(name, &now).await?;
    ensure!(
        first.is_disjoint(&now),
        "old pods remain: {first:?} / {now:?}"
    );
    ensure!(
        most_live <= 3,
        "at most one surge pod: {most_live} live pods at once"
    );
    s.wait_events(name, &[EventReason::RollingUpdate]).await?;
    println!(
        "     rolled 2 replicas in {:.1} s; {polls} EndpointSlice polls, fewest ready addresses {least}, most live pods {most_live}",
        started.elapsed().as_secs_f64()
    );
    s.delete_jobs(&[name.to_string()]).await
}

/// A replica that crashes after it was Ready comes back with the same plan after a backoff
/// that doubles; the third failure in a row makes the job Degraded (`CrashLoop`), and while
/// it backs off the operator writes nothing.
pub async fn crash_loop_backs_off(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-crash";
    s.apply_job(served_job(s, name, 1, &[H100])).await?;
    let (job, pods) = s.wait_replicas(name, 1).await?;
    let plan = job.status.clone().unwrap_or_default().replica_statuses[0]
        .plan_summary
        .clone();
    let mut pod = pods[0].clone();
    let mut gaps = Vec::new();
    for round in 1..=3u32 {
        s.set_pod_serving(&pod, true).await?;
        wait_condition(s, name, "Available", "True", None).await?;
        let crashed_at = Instant::now();
        s.set_pod_ended(&pod, 139, "Error", "Segmentation fault (core dumped)")
            .await?;
        if round == 3 {
            break;
        }
        let old = pod.name_any();
        let (job, pods) = eventually(
            &format!("the pod after crash {round}"),
            Duration::from_secs(60),
            || async {
                let (job, pods) = s.wait_replicas(name, 1).await?;
                ensure!(pods[0].name_any() != old, "still {old}");
                Ok((job, pods))
            },
        )
        .await?;
        gaps.push(crashed_at.elapsed().as_secs_f64());
        let line = job.status.clone().unwrap_or_default().replica_statuses[0].clone();
        expect_eq("the same plan", line.plan_summary.as_str(), plan.as_str())?;
        expect_eq("failures in a row", line.failures, round)?;
        pod = pods[0].clone();
    }
    ensure!(
        gaps[0] >= 9.0 && gaps[1] >= 19.0 && gaps[1] > gaps[0] * 1.5,
        "the backoff did not grow: {gaps:?} s between a crash and the next pod"
    );
    let job = wait_condition(s, name, "Degraded", "True", Some("CrashLoop")).await?;
    s.wait_events(name, &[EventReason::ReplicaFailed, EventReason::Degraded])
        .await?;
    let line = job.status.clone().unwrap_or_default().replica_statuses[0].clone();
    expect_eq("restarts", line.restarts, 3)?;
    // The third backoff is 40 s: for 30 s the operator writes nothing for this job (no status,
    // no pod, no event) — no hot loop.
    let version = job.resource_version();
    let events = s.event_reasons(name).await?.len();
    let pods_before = s.pods_of(&job).await?.len();
    consistently(
        "no write while the replica backs off",
        Duration::from_secs(30),
        || async {
            let now = s.job(name).await?;
            ensure!(
                now.resource_version() == version,
                "the job was written: {:?}",
                conditions_of(&now)
            );
            ensure!(
                s.event_reasons(name).await?.len() == events,
                "an event was published"
            );
            ensure!(
                s.pods_of(&now).await?.len() == pods_before,
                "a pod was created"
            );
            Ok(())
        },
    )
    .await?;
    println!(
        "     crash → next pod after {:.1} s, then {:.1} s; Degraded CrashLoop after 3 in a row; 0 writes in 30 s of the 40 s backoff",
        gaps[0], gaps[1]
    );
    s.delete_jobs(&[name.to_string()]).await
}

/// A replica whose pod the kubelet refuses at admission (a device plugin whose `Allocate`
/// fails: `UnexpectedAdmissionError`) is a failure of the replica: its next pod comes after the
/// crash backoff (10 s, then 20 s), the third refusal in a row makes the job Degraded
/// (`CrashLoop`); an evicted pod is still replaced at once.
pub async fn admission_refusal_backs_off(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-refused";
    s.apply_job(served_job(s, name, 1, &[H100])).await?;
    let (job, pods) = s.wait_replicas(name, 1).await?;
    let plan = job.status.clone().unwrap_or_default().replica_statuses[0]
        .plan_summary
        .clone();
    let allocate_failed = "Allocate failed due to rpc error: code = Unknown desc = \
        nvidia-container-cli: device error: unknown device, which is unexpected";
    let mut pod = pods[0].clone();
    let mut gaps = Vec::new();
    for round in 1..=3u32 {
        let old = pod.name_any();
        let refused_at = Instant::now();
        s.set_pod_failed_by_kubelet(&pod, "UnexpectedAdmissionError", allocate_failed)
            .await?;
        if round == 3 {
            wait_condition(s, name, "Degraded", "True", Some("CrashLoop")).await?;
        }
        let (job, pods) = eventually(
            &format!("the pod after refusal {round}"),
            Duration::from_secs(90),
            || async {
                let (job, pods) = s.wait_replicas(name, 1).await?;
                ensure!(pods[0].name_any() != old, "still {old}");
                Ok((job, pods))
            },
        )
        .await?;
        gaps.push(refused_at.elapsed().as_secs_f64());
        let status = job.status.clone().unwrap_or_default();
        let line = status.replica_statuses[0].clone();
        expect_eq("the same plan", line.plan_summary.as_str(), plan.as_str())?;
        expect_eq("failures in a row", line.failures, round)?;
        let restart = status
            .recent_restarts
            .last()
            .context("a restart in recentRestarts")?;
        expect_eq(
            "restart reason",
            restart.reason.as_str(),
            "AdmissionRefused",
        )?;
        ensure!(
            restart
                .message
                .starts_with("UnexpectedAdmissionError: Allocate failed"),
            "the restart names the kubelet's refusal: {}",
            restart.message
        );
        pod = pods[0].clone();
    }
    ensure!(
        gaps[0] >= 9.0 && gaps[1] >= 19.0 && gaps[2] >= 39.0,
        "a refused pod was replaced before its backoff: {gaps:?} s between a refusal and the next pod"
    );
    s.wait_events(
        name,
        &[EventReason::AdmissionRefused, EventReason::Degraded],
    )
    .await?;
    // An eviction is not the replica's failure: its next pod comes at once.
    let old = pod.name_any();
    let evicted_at = Instant::now();
    s.set_pod_failed_by_kubelet(&pod, "Evicted", "The node was low on resource: memory.")
        .await?;
    let (job, _) = eventually(
        "the pod after the eviction",
        Duration::from_secs(30),
        || async {
            let (job, pods) = s.wait_replicas(name, 1).await?;
            ensure!(pods[0].name_any() != old, "still {old}");
            Ok((job, pods))
        },
    )
    .await?;
    let evicted_gap = evicted_at.elapsed().as_secs_f64();
    ensure!(
        evicted_gap < 8.0,
        "an evicted pod waited {evicted_gap:.1} s for its replacement (no backoff expected)"
    );
    let status = job.status.clone().unwrap_or_default();
    let restart = status.recent_restarts.last().context("a restart")?;
    expect_eq("eviction reason", restart.reason.as_str(), "Disrupted")?;
    println!(
        "     refused at admission → next pod after {:.1} s, {:.1} s, {:.1} s; Degraded CrashLoop at the third; evicted → next pod after {evicted_gap:.1} s",
        gaps[0], gaps[1], gaps[2]
    );
    s.delete_jobs(&[name.to_string()]).await
}

/// An HPA (autoscaling/v2) targeting a served job is accepted and resolves its target through
/// the scale subresource (`GET …/scale`, `status.selector`).
pub async fn hpa_targets_the_scale_subresource(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-hpa";
    s.apply_job(served_job(s, name, 2, &[H100])).await?;
    let (job, _) = s.wait_replicas(name, 2).await?;
    let path = format!(
        "/apis/vramfit.io/v1alpha1/namespaces/{}/inferencejobs/{name}/scale",
        s.ns
    );
    let scale = eventually("GET …/scale", SETTLE, || async {
        let raw = tokio::task::spawn_blocking({
            let path = path.clone();
            move || kubectl(&["get", "--raw", &path])
        })
        .await??;
        let scale: Value = serde_json::from_str(&raw)?;
        ensure!(scale["status"]["replicas"] == 2, "scale {scale}");
        Ok(scale)
    })
    .await?;
    expect_eq("Scale kind", scale["kind"].as_str(), Some("Scale"))?;
    expect_eq("spec.replicas", scale["spec"]["replicas"].as_u64(), Some(2))?;
    let selector = scale["status"]["selector"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure!(
        selector.contains(&format!(
            "vramfit.io/job-uid={}",
            job.uid().unwrap_or_default()
        )),
        "status.selector {selector}"
    );

    let hpas = s.hpas();
    s.apply_hpa(name, name, 2, 4).await?;
    // kube-controller-manager's HPA controller reads the scale subresource: AbleToScale.
    let able = eventually(
        "the HPA to resolve its scaleTargetRef",
        Duration::from_secs(90),
        || async {
            let hpa = hpas.get(name).await?;
            let conditions = hpa.data["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let able = conditions
                .iter()
                .find(|c| c["type"] == "AbleToScale" && c["status"] == "True")
                .cloned();
            able.ok_or_else(|| anyhow!("HPA conditions {conditions:?}"))
        },
    )
    .await?;
    println!(
        "     HPA AbleToScale: {} ({}); Scale spec.replicas 2, selector {selector}",
        able["reason"], able["message"]
    );
    let _ = hpas.delete(name, &DeleteParams::default()).await;
    s.delete_jobs(&[name.to_string()]).await
}

/// A replica the scheduler can never place (a memory request no node has) is deleted at its
/// schedule deadline, so that it stops holding its class's GPUs, and is replaced after the
/// backoff; the status and an event say why.
pub async fn unschedulable_replica_frees_its_class(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-never-placed";
    let mut job = served_job(s, name, 1, &[H100]);
    job["spec"]["scheduleDeadlineSeconds"] = json!(30);
    job["spec"]["pod"] = json!({ "resources": { "requests": { "memory": "4Ti" } } });
    s.apply_job(job).await?;
    let stuck = eventually(
        "the replica's pod, unbound",
        Duration::from_secs(60),
        || async {
            let pods = s.pods_of(&s.job(name).await?).await?;
            let pod = pods.first().ok_or_else(|| anyhow!("no pod yet"))?;
            ensure!(node_of(pod).is_none(), "bound: {:?}", node_of(pod));
            Ok(pod.name_any())
        },
    )
    .await?;
    // The pod is deleted before the status that records why is patched: wait for both.
    let restart = eventually(
        "the unplaced replica to be deleted at its schedule deadline, and recorded",
        Duration::from_secs(90),
        || async {
            let job = s.job(name).await?;
            let names: Vec<String> = s
                .pods_of(&job)
                .await?
                .iter()
                .map(|p| p.name_any())
                .collect();
            ensure!(!names.contains(&stuck), "{stuck} is still there");
            let status = job.status.unwrap_or_default();
            status
                .recent_restarts
                .first()
                .cloned()
                .ok_or_else(|| anyhow!("no restart recorded"))
        },
    )
    .await?;
    expect_eq("why it ended", restart.reason.as_str(), "ScheduleTimeout")?;
    ensure!(
        restart.message.starts_with(&format!(
            "pod {stuck} was not scheduled to a node within 30 s"
        )),
        "{}",
        restart.message
    );
    s.wait_events(name, &[EventReason::ScheduleDeadlineExceeded])
        .await?;
    s.delete_jobs(&[name.to_string()]).await
}
