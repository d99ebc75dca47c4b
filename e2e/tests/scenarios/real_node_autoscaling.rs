//! `serve.autoscaling` on a real node: `llama-server` (the tiny model, started with
//! `--metrics` by vramfit) behind its Service, a load generator on this host sending
//! completions through the ClusterIP. The load drives the one replica over its target, the
//! operator reads `llamacpp:requests_processing` and `llamacpp:requests_deferred` from the pod
//! and scales the job to two; once the load falls, it scales back to one after the window,
//! and no request fails while a replica is removed (its `preStop` drain). Skipped, saying why,
//! where the cluster has no real node holding the llama-server image.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use serde_json::json;
use vramfit_e2e::{Suite, eventually, http_get, http_post_json};

use crate::real_node_serving::{READY_WITHIN, cluster_address, served_llama, setup, wait_ready};

/// Completions sent and failed by the load generator.
#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    failed: AtomicU64,
}

/// `clients` loops of completions through `address` until `stop`.
fn load(address: &str, clients: usize, stop: Arc<AtomicBool>, counts: Arc<Counts>) {
    for _ in 0..clients {
        let (address, stop, counts) = (address.to_string(), stop.clone(), counts.clone());
        tokio::spawn(async move {
            let request = json!({"prompt": "the cat", "n_predict": 512, "ignore_eos": true});
            while !stop.load(Ordering::Relaxed) {
                counts.sent.fetch_add(1, Ordering::Relaxed);
                let ok = matches!(
                    http_post_json(&address, "/completion", &request, Duration::from_secs(60))
                        .await,
                    Ok((200, _))
                );
                if !ok {
                    counts.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
}

pub async fn follows_its_load(s: &mut Suite) -> Result<()> {
    let (node, server, _) = setup(s).await?;
    s.stop_operators();
    s.start_operator("autoscaler", &["--autoscale-period-seconds", "2"], true)
        .await?;
    let name = "real-autoscale";
    let mut manifest = served_llama(s, name, &node, &server, 1, 512);
    manifest["spec"]["batchSize"] = json!(2);
    manifest["spec"]["serve"]["autoscaling"] = json!({
        "minReplicas": 1,
        "maxReplicas": 2,
        "targetUtilizationPercent": 50,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 15}},
    });
    s.apply_job(manifest).await?;
    wait_ready(s, name, 1).await?;
    let address = cluster_address(s, name).await?;
    let (code, metrics) = http_get(&address, "/metrics").await?;
    ensure!(
        code == 200 && metrics.contains("llamacpp:requests_processing"),
        "GET /metrics through the Service: {code} {}",
        metrics.chars().take(200).collect::<String>()
    );

    // Six clients against a replica of two slots: 300 % of its concurrency.
    let heavy = Arc::new(Counts::default());
    let stop_heavy = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    load(&address, 6, stop_heavy.clone(), heavy.clone());
    eventually("the job to scale to 2", READY_WITHIN, || async {
        let job = s.job(name).await?;
        let replicas = job.spec.serve.as_ref().map_or(0, |sv| sv.replicas);
        ensure!(
            replicas == 2,
            "replicas {replicas}, autoscaling {:?}",
            job.status.and_then(|st| st.autoscaling)
        );
        Ok(())
    })
    .await?;
    let scaled_after = started.elapsed();
    wait_ready(s, name, 2).await?;
    let ready_after = started.elapsed();
    println!(
        "     6 clients on one replica of 2 slots: scaled to 2 after {:.1} s, the new replica Ready {:.1} s after the load started",
        scaled_after.as_secs_f64(),
        ready_after.as_secs_f64()
    );

    // One client from now on: below the target on two replicas, so one goes after the window.
    let light = Arc::new(Counts::default());
    let stop_light = Arc::new(AtomicBool::new(false));
    load(&address, 1, stop_light.clone(), light.clone());
    stop_heavy.store(true, Ordering::Relaxed);
    let falling = Instant::now();
    eventually(
        "the job to scale back to 1",
        Duration::from_secs(180),
        || async {
            let job = s.job(name).await?;
            let replicas = job.spec.serve.as_ref().map_or(0, |sv| sv.replicas);
            ensure!(
                replicas == 1,
                "replicas {replicas}, autoscaling {:?}",
                job.status.and_then(|st| st.autoscaling)
            );
            Ok(())
        },
    )
    .await?;
    let down_after = falling.elapsed();
    // The removed replica's pod is gone (drained, then stopped by the real kubelet).
    eventually("one replica pod left", Duration::from_secs(120), || async {
        let job = s.job(name).await?;
        let pods = s.pods_of(&job).await?;
        ensure!(pods.len() == 1, "{} pods", pods.len());
        Ok(())
    })
    .await?;
    // A few more requests on the one replica left.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_light.store(true, Ordering::Relaxed);
    let (sent, failed) = (
        heavy.sent.load(Ordering::Relaxed) + light.sent.load(Ordering::Relaxed),
        heavy.failed.load(Ordering::Relaxed) + light.failed.load(Ordering::Relaxed),
    );
    println!(
        "     load down to 1 client: scaled back to 1 after {:.1} s (15 s window); {sent} completions sent, {failed} failed (during scale-down: {} sent, {} failed)",
        down_after.as_secs_f64(),
        light.sent.load(Ordering::Relaxed),
        light.failed.load(Ordering::Relaxed)
    );
    ensure!(
        light.failed.load(Ordering::Relaxed) == 0,
        "a request failed while a replica was removed"
    );
    ensure!(failed == 0, "{failed} of {sent} completions failed");
    s.delete_jobs(&[name.to_string()]).await
}
