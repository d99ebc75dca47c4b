//! The autoscaler's load reader, the leader's task beside the controller: every
//! `--autoscale-period-seconds` it reads the metrics of every Ready replica that an autoscaled
//! job's reconcile registered (plain HTTP to the pod's IP and serving port, 2 s and 256 KiB at
//! most each, 32 at once), records each reading, lists the HorizontalPodAutoscalers of those
//! jobs' namespaces (an HPA, or the one a KEDA ScaledObject makes, keeps vramfit's autoscaler
//! out of its job), and then sends each job to the controller to decide on its fresh readings.
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use http::{Request, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::context::Context;
use crate::scaling_state::{PodReading, ReadTargets};
use crate::stores::JobRef;

/// The most of one metrics answer read (vLLM's is ~20 KiB with its histograms).
pub const MAX_METRICS_BYTES: usize = 256 * 1024;
/// How long one read may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Reads in flight at once.
pub const CONCURRENT_READS: usize = 32;

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// Runs passes until `stop`; each job read is sent to `reconcile`.
pub async fn run(
    ctx: Arc<Context>,
    reconcile: UnboundedSender<JobRef>,
    mut stop: watch::Receiver<bool>,
) {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(READ_TIMEOUT));
    let http: HttpClient = Client::builder(TokioExecutor::new()).build(connector);
    let mut ticks = tokio::time::interval(ctx.settings.autoscale_period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        let started = Instant::now();
        let targets = ctx.scaling.targets();
        if targets.is_empty() {
            continue;
        }
        read_all(&ctx, &http, &targets).await;
        list_autoscalers(&ctx, &targets).await;
        ctx.scaling.drop_unlisted();
        ctx.metrics
            .autoscaler()
            .observe_pass(targets.len(), started.elapsed().as_secs_f64());
        for (key, _) in &targets {
            if let Some((namespace, name)) = key.split_once('/') {
                let _ = reconcile.unbounded_send(ObjectRef::new(name).within(namespace));
            }
        }
    }
}

/// Reads every registered pod, recording each reading.
async fn read_all(ctx: &Context, http: &HttpClient, targets: &[(String, ReadTargets)]) {
    // Owned, so that the reads' futures borrow nothing of the pass.
    let reads: Vec<(ReadTargets, String, String)> = targets
        .iter()
        .flat_map(|(_, target)| {
            target
                .pods
                .iter()
                .map(|(uid, ip)| (target.clone(), uid.clone(), ip.clone()))
        })
        .collect();
    let results: Vec<(String, PodReading)> = futures::stream::iter(reads)
        .map(|(target, uid, ip)| {
            let http = http.clone();
            async move {
                let result = read_one(&http, &target, &ip).await;
                let at = Instant::now();
                (uid, PodReading { at, result })
            }
        })
        .buffer_unordered(CONCURRENT_READS)
        .collect()
        .await;
    let failed = results.iter().filter(|(_, r)| r.result.is_err()).count();
    let metrics = ctx.metrics.autoscaler();
    metrics.count_reads("read", (results.len() - failed) as u64);
    metrics.count_reads("failed", failed as u64);
    for (uid, reading) in results {
        if let Err(why) = &reading.result {
            debug!(pod = %uid, %why, "a replica's metrics could not be read");
        }
        ctx.scaling.record(uid, reading);
    }
}

/// One pod's reading.
async fn read_one(
    http: &HttpClient,
    target: &ReadTargets,
    ip: &str,
) -> Result<crate::autoscaling::Reading, String> {
    let path = crate::autoscaling::runtime_metrics::path(target.runtime, target.metric.as_ref());
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    let uri: Uri = format!("http://{host}:{}{path}", target.port)
        .parse()
        .map_err(|e| format!("bad address {host}: {e}"))?;
    let request = Request::get(uri)
        .header(
            http::header::USER_AGENT,
            concat!("vramfit-autoscaler/", env!("CARGO_PKG_VERSION")),
        )
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    let text = tokio::time::timeout(READ_TIMEOUT, async {
        let response = http.request(request).await.map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status().as_u16()));
        }
        let body = Limited::new(response.into_body(), MAX_METRICS_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        Ok(String::from_utf8_lossy(&body).into_owned())
    })
    .await
    .map_err(|_| format!("no answer within {} s", READ_TIMEOUT.as_secs()))??;
    crate::autoscaling::runtime_metrics::reading(target.runtime, target.metric.as_ref(), &text)
        .map_err(|e| e.to_string())
}

/// Lists the HPAs of the namespaces of `targets` and records which jobs they target. A list
/// that fails keeps what was known (logged): the autoscaler would rather stay out late than
/// fight an HPA.
async fn list_autoscalers(ctx: &Context, targets: &[(String, ReadTargets)]) {
    let namespaces: BTreeSet<&str> = targets
        .iter()
        .filter_map(|(key, _)| key.split_once('/').map(|(ns, _)| ns))
        .collect();
    for namespace in namespaces {
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), namespace);
        match api.list(&ListParams::default()).await {
            Ok(list) => ctx
                .scaling
                .set_external(namespace, jobs_targeted(&list.items)),
            Err(error) => {
                warn!(%namespace, %error, "listing HorizontalPodAutoscalers failed; the last list stands")
            }
        }
    }
}

/// Job name → HPA name, for the HPAs whose scale target is an InferenceJob.
pub fn jobs_targeted(hpas: &[HorizontalPodAutoscaler]) -> HashMap<String, String> {
    hpas.iter()
        .filter_map(|hpa| {
            let target = &hpa.spec.as_ref()?.scale_target_ref;
            let group = target
                .api_version
                .as_deref()
                .and_then(|v| v.split_once('/'))
                .map(|(group, _)| group);
            (target.kind == "InferenceJob" && group == Some(vramfit_api::GROUP)).then(|| {
                (
                    target.name.clone(),
                    hpa.metadata.name.clone().unwrap_or_default(),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hpa(name: &str, api_version: &str, kind: &str, target: &str) -> HorizontalPodAutoscaler {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"maxReplicas": 3, "scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": target}}
        }))
        .unwrap()
    }

    #[test]
    fn only_hpas_that_target_an_inference_job_keep_the_autoscaler_out() {
        let found = jobs_targeted(&[
            hpa(
                "keda-hpa-chat",
                "vramfit.io/v1alpha1",
                "InferenceJob",
                "chat",
            ),
            hpa("web", "apps/v1", "Deployment", "chat"),
            hpa("other", "example.com/v1", "InferenceJob", "other"),
        ]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found["chat"], "keda-hpa-chat");
    }
}
