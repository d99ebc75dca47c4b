//! `serve.autoscaling` on the real API server with simulated nodes: three replicas, two planned
//! on a V100 class (float16 on two GPUs) and one on an A10G class (8-bit on one) for different
//! concurrency, each "serving" vLLM's metrics on a
//! loopback address the suite gives its pod. The operator reads them, counts the saturated
//! V100 replica for what it can hold (so the job is lightly loaded), scales down by removing
//! the replica of least capacity, scales up through the scale subresource when the A10G
//! replica is flooded, and stands aside while an HPA targets the job.
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams};
use serde_json::json;
use vramfit_api::InferenceJob;
use vramfit_api::event_reasons::EventReason;
use vramfit_e2e::replica_metrics::ReplicaMetrics;
use vramfit_e2e::{Suite, eventually, free_port, http_get, served_job};

const V100: &str = "v100-sxm2-16gb-x4";
/// One node of one GPU: room for one replica, so the second goes to the V100 class.
const A10G: &str = "a10g-x1";

fn concurrency(pod: &Pod) -> Result<u32> {
    pod.labels()
        .get("vramfit.io/concurrency")
        .ok_or_else(|| anyhow!("{} has no vramfit.io/concurrency label", pod.name_any()))?
        .parse()
        .context("vramfit.io/concurrency")
}

fn condition(job: &InferenceJob) -> Option<(String, String, String)> {
    job.status.as_ref()?.conditions.iter().find_map(|c| {
        (c.type_ == "Autoscaling").then(|| (c.status.clone(), c.reason.clone(), c.message.clone()))
    })
}

pub async fn weighs_each_replica_by_its_class(s: &mut Suite) -> Result<()> {
    // An operator that reads every second (the default is every 15 s).
    s.stop_operators();
    s.start_operator("autoscaler", &["--autoscale-period-seconds", "1"], true)
        .await?;
    let name = "e2e-autoscale";
    let port = free_port()?;
    let mut manifest = served_job(s, name, 3, &[V100, A10G]);
    manifest["spec"]["serve"]["port"] = json!(port);
    manifest["spec"]["serve"]["autoscaling"] = json!({
        "minReplicas": 1,
        "maxReplicas": 3,
        "targetUtilizationPercent": 70,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 3}},
    });
    s.apply_job(manifest).await?;
    // The V100 node takes two replicas of two GPUs, the one-GPU A10G node the third.
    let (_, pods) = s.wait_replicas(name, 3).await?;
    let class_of = |pod: &Pod| pod.labels()["vramfit.io/node-class"].clone();
    let small: Vec<Pod> = pods
        .iter()
        .filter(|p| class_of(p) == V100)
        .cloned()
        .collect();
    let large = pods
        .iter()
        .find(|p| class_of(p) == A10G)
        .ok_or_else(|| anyhow!("no A10G replica"))?
        .clone();
    ensure!(small.len() == 2, "two V100 replicas: {}", small.len());
    let (small_seqs, large_seqs) = (concurrency(&small[0])?, concurrency(&large)?);
    ensure!(
        large_seqs > small_seqs,
        "the A10G replica holds more sequences: {large_seqs} vs {small_seqs}"
    );
    // One V100 replica saturated, the other and the A10G one idle.
    let busy_metrics = ReplicaMetrics::start("127.0.0.2", port, small_seqs, 0).await?;
    let idle_metrics = ReplicaMetrics::start("127.0.0.3", port, 0, 0).await?;
    let large_metrics = ReplicaMetrics::start("127.0.0.4", port, 0, 0).await?;
    s.set_pod_serving_at(&small[0], true, "127.0.0.2").await?;
    s.set_pod_serving_at(&small[1], true, "127.0.0.3").await?;
    s.set_pod_serving_at(&large, true, "127.0.0.4").await?;
    let capacity = 2 * small_seqs + large_seqs;
    let expected = (100.0 * f64::from(small_seqs) / f64::from(capacity)).round();
    let seen = eventually(
        "status.autoscaling with the three replicas read",
        Duration::from_secs(30),
        || async {
            let job = s.job(name).await?;
            let scaling = job
                .status
                .as_ref()
                .and_then(|st| st.autoscaling.clone())
                .ok_or_else(|| anyhow!("no status.autoscaling yet"))?;
            ensure!(scaling.read_replicas == 3, "{scaling:?}");
            Ok(scaling)
        },
    )
    .await?;
    ensure!(
        seen.capacity == capacity && seen.utilization_percent == Some(expected as u32),
        "one saturated {small_seqs}-sequence replica of {capacity} sequences is {expected} % of the job: {seen:?}"
    );
    println!(
        "     V100 replicas {small_seqs}/{small_seqs} and 0/{small_seqs} busy, A10G replica 0/{large_seqs}: job load {expected} % of {capacity} sequences (one replica of three saturated, not 33 %)"
    );
    // Below the target: after the 3 s window, the replicas of least capacity go, the
    // saturated one included.
    let started = Instant::now();
    eventually(
        "the job to scale down to 1",
        Duration::from_secs(60),
        || async {
            let job = s.job(name).await?;
            let replicas = job.spec.serve.as_ref().map_or(0, |sv| sv.replicas);
            ensure!(
                replicas == 1,
                "spec.serve.replicas {replicas}; {:?}",
                condition(&job)
            );
            Ok(())
        },
    )
    .await?;
    s.wait_events(name, &[EventReason::Autoscaled]).await?;
    let pods_api: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    eventually(
        "the V100 replicas to be deleted",
        Duration::from_secs(30),
        || async {
            for pod in &small {
                let gone = match pods_api.get_opt(&pod.name_any()).await? {
                    None => true,
                    Some(pod) => pod.metadata.deletion_timestamp.is_some(),
                };
                ensure!(gone, "{} is still there", pod.name_any());
            }
            ensure!(
                pods_api.get_opt(&large.name_any()).await?.is_some(),
                "the A10G replica went instead"
            );
            Ok(())
        },
    )
    .await?;
    // What a kubelet confirms (none runs here).
    s.confirm_deletions(&s.job(name).await?).await?;
    println!(
        "     scaled 3 → 1 in {:.1} s (3 s window): the V100 replicas (least capacity, one saturated) went, the idle A10G one stayed",
        started.elapsed().as_secs_f64()
    );
    // The A10G replica flooded: twice its concurrency in flight, as much again queued.
    large_metrics.set(large_seqs, large_seqs);
    let started = Instant::now();
    let up = eventually("the job to scale up", Duration::from_secs(60), || async {
        let job = s.job(name).await?;
        let replicas = job.spec.serve.as_ref().map_or(0, |sv| sv.replicas);
        ensure!(
            replicas > 1,
            "spec.serve.replicas {replicas}; {:?}",
            condition(&job)
        );
        Ok((replicas, job))
    })
    .await?;
    ensure!(up.0 <= 3, "maxReplicas 3 held: {}", up.0);
    let managers: Vec<String> =
        up.1.metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|f| f.manager.clone())
            .collect();
    ensure!(
        managers.iter().any(|m| m == "vramfit-autoscaler"),
        "the replicas were written by vramfit-autoscaler: {managers:?}"
    );
    println!(
        "     A10G replica at 200 %: scaled 1 → {} in {:.1} s through the scale subresource (field manager vramfit-autoscaler)",
        up.0,
        started.elapsed().as_secs_f64()
    );

    // An HPA on the job: the autoscaler stands aside, and says so.
    let hpas = s.hpas();
    let hpa_name = format!("keda-hpa-{name}");
    s.apply_hpa(&hpa_name, name, up.0, up.0).await?;
    let aside = eventually(
        "the autoscaler to stand aside",
        Duration::from_secs(30),
        || async {
            let job = s.job(name).await?;
            match condition(&job) {
                Some((status, reason, message)) if reason == "ExternalAutoscaler" => {
                    Ok((status, message))
                }
                other => Err(anyhow!("Autoscaling condition {other:?}")),
            }
        },
    )
    .await?;
    ensure!(
        aside.0 == "False" && aside.1.contains(&hpa_name),
        "{aside:?}"
    );
    s.wait_events(name, &[EventReason::AutoscalerStandsAside])
        .await?;
    println!(
        "     with HPA {hpa_name}: Autoscaling=False ExternalAutoscaler ({})",
        aside.1
    );
    let _ = hpas.delete(&hpa_name, &DeleteParams::default()).await;
    eventually(
        "the autoscaler to take the job back",
        Duration::from_secs(30),
        || async {
            let job = s.job(name).await?;
            match condition(&job) {
                Some((_, reason, _)) if reason != "ExternalAutoscaler" => Ok(()),
                other => Err(anyhow!("Autoscaling condition {other:?}")),
            }
        },
    )
    .await?;

    // Every read went to the replicas' own endpoints, and the operator counts them.
    ensure!(
        busy_metrics.reads() > 0 && idle_metrics.reads() > 0 && large_metrics.reads() > 0,
        "reads: V100 {} and {}, A10G {}",
        busy_metrics.reads(),
        idle_metrics.reads(),
        large_metrics.reads()
    );
    let addr = s.operators[0].addr.clone();
    let (_, text) = http_get(&addr, "/metrics").await?;
    let read = text
        .lines()
        .find(|l| l.starts_with("vramfit_autoscaler_metric_reads_total{result=\"read\"}"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    ensure!(
        read > 0.0,
        "vramfit_autoscaler_metric_reads_total{{result=\"read\"}} {read}"
    );
    println!(
        "     replica metrics reads: V100 {} and {}, A10G {}; vramfit_autoscaler_metric_reads_total{{result=\"read\"}} {read}",
        busy_metrics.reads(),
        idle_metrics.reads(),
        large_metrics.reads()
    );
    s.delete_jobs(&[name.to_string()]).await
}
