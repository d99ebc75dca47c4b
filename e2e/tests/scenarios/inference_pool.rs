//! `serve.inferencePool` on the real API server: a served job asks for a pool before the
//! Gateway API Inference Extension's CRD exists (a Warning event, the replicas serve on); the
//! CRD is then installed, made from the project's own Rust types of the v1 API
//! (`vramfit_api::inference_pool`), and the job's next change gets its `InferencePool`, which
//! selects exactly the job's serving pods through a scale up and down and a rolling update,
//! names the endpoint picker, and goes with the job. The CRD is removed afterwards.
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, ensure};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{CustomResourceExt as _, ResourceExt as _};
use serde_json::json;
use vramfit_api::InferenceJob;
use vramfit_api::event_reasons::EventReason;
use vramfit_api::inference_pool::{CRD_NAME, InferencePool};
use vramfit_e2e::{MANAGER, SETTLE, Suite, eventually, kubectl, node_of, served_job};

const H100: &str = "h100-80gb-hbm3-x8";
/// The image the roll moves the job to.
const ROLLED_IMAGE: &str = "vllm/vllm-openai:v0.11.0";

/// The names of the job's pods that are not being deleted.
async fn serving_pods(s: &Suite, name: &str) -> Result<BTreeSet<String>> {
    let job = s.job(name).await?;
    Ok(s.pods_of(&job)
        .await?
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect())
}

/// The names of the pods the pool's selector selects (not being deleted).
async fn selected(s: &Suite, pool: &InferencePool) -> Result<BTreeSet<String>> {
    let selector = pool
        .spec
        .selector
        .match_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    Ok(pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect())
}

/// Rolls the job's one replica to a new image (its surge pod Ready, then the old pod gone):
/// at every poll the pool selects exactly the job's pods that are not being deleted, and at
/// the end only the new one; the pool object itself is left as it was.
async fn roll_keeps_the_selection(s: &Suite, name: &str, pool: &InferencePool) -> Result<()> {
    let job = s.job(name).await?;
    let old = serving_pods(s, name).await?;
    for pod in s.pods_of(&job).await? {
        s.set_pod_serving(&pod, true).await?;
    }
    let jobs = s.jobs();
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"image": ROLLED_IMAGE}})),
    )
    .await?;
    let started = Instant::now();
    let (mut polls, mut most) = (0, 0);
    loop {
        ensure!(
            started.elapsed() < Duration::from_secs(120),
            "the roll did not finish in 120 s"
        );
        s.confirm_deletions(&job).await?;
        // One list, so that the job's pods and the pool's are of the same moment.
        let (live, chosen) = owned_and_selected(s, &job, pool).await?;
        for pod in live.iter().filter(|p| !old.contains(&p.name_any())) {
            if node_of(pod).is_some() && !is_ready(pod) {
                s.set_pod_serving(pod, true).await?;
            }
        }
        let serving: BTreeSet<String> = live.iter().map(|p| p.name_any()).collect();
        ensure!(
            serving == chosen,
            "during the roll (poll {polls}): the job's pods {serving:?}, the pool selects {chosen:?}"
        );
        polls += 1;
        most = most.max(chosen.len());
        let rolled = live.len() == 1
            && live.iter().all(|p| {
                !old.contains(&p.name_any())
                    && p.spec
                        .as_ref()
                        .and_then(|sp| sp.containers.first())
                        .and_then(|c| c.image.as_deref())
                        == Some(ROLLED_IMAGE)
            });
        if rolled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let pools: Api<InferencePool> = Api::namespaced(s.client.clone(), &s.ns);
    let after = pools.get(name).await?;
    ensure!(
        after.spec.selector == pool.spec.selector,
        "the roll changed the pool's selector: {:?} → {:?}",
        pool.spec.selector,
        after.spec.selector
    );
    println!(
        "     after a roll to {ROLLED_IMAGE} ({:.1} s, {polls} polls, at most {most} pods selected at once): the pool selects exactly the new pod",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// From one list of the namespace's pods not being deleted: the job's, and the names of those
/// the pool selects.
async fn owned_and_selected(
    s: &Suite,
    job: &InferenceJob,
    pool: &InferencePool,
) -> Result<(Vec<Pod>, BTreeSet<String>)> {
    let uid = job.uid().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    let live: Vec<Pod> = pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let owned = live
        .iter()
        .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
        .cloned()
        .collect();
    let chosen = live
        .iter()
        .filter(|p| {
            let labels = p.labels();
            pool.spec
                .selector
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k.as_str()) == Some(v))
        })
        .map(|p| p.name_any())
        .collect();
    Ok((owned, chosen))
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn scale(s: &Suite, name: &str, replicas: u32) -> Result<()> {
    let (ns, name) = (s.ns.clone(), name.to_string());
    tokio::task::spawn_blocking(move || {
        kubectl(&[
            "scale",
            "ij",
            &name,
            "-n",
            &ns,
            &format!("--replicas={replicas}"),
        ])
    })
    .await??;
    Ok(())
}

pub async fn selects_exactly_the_serving_pods(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(s.client.clone());
    ensure!(
        crds.get_opt(CRD_NAME).await?.is_none(),
        "{CRD_NAME} exists already: this scenario installs and removes it"
    );
    let name = "e2e-pool";
    let mut manifest = served_job(s, name, 2, &[H100]);
    manifest["spec"]["serve"]["inferencePool"] =
        json!({"endpointPicker": {"name": "e2e-epp", "port": 9002, "failureMode": "FailOpen"}});
    s.apply_job(manifest).await?;
    s.wait_replicas(name, 2).await?;
    s.wait_events(name, &[EventReason::InferencePoolUnavailable])
        .await?;
    println!("     without the CRD: InferencePoolUnavailable event, 2 replicas placed");

    // The CRD from vramfit's own types of inference.networking.k8s.io/v1.
    let mut crd = InferencePool::crd();
    // A `*.k8s.io` group needs its API review's approval, as the extension's own CRD carries.
    crd.metadata.annotations = Some(
        [(
            "api-approved.kubernetes.io".to_string(),
            "https://github.com/kubernetes-sigs/gateway-api-inference-extension/pull/1173"
                .to_string(),
        )]
        .into(),
    );
    crds.patch(
        CRD_NAME,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .context("the API server accepts the InferencePool CRD made from vramfit's types")?;
    let result = with_the_crd(s, name).await;
    let mut problems = Vec::new();
    vramfit_e2e::crds::remove(&s.client, &[CRD_NAME.to_string()], &mut problems).await;
    result?;
    ensure!(problems.is_empty(), "{problems:?}");
    Ok(())
}

async fn with_the_crd(s: &mut Suite, name: &str) -> Result<()> {
    let pools: Api<InferencePool> = Api::namespaced(s.client.clone(), &s.ns);
    eventually("the CRD to be served", SETTLE, || async {
        pools.list(&ListParams::default()).await?;
        Ok(())
    })
    .await?;
    // The job's next change (a scale) applies its pool.
    scale(s, name, 3).await?;
    s.wait_replicas(name, 3).await?;
    let pool = eventually("the job's InferencePool", SETTLE, || async {
        pools
            .get_opt(name)
            .await?
            .ok_or_else(|| anyhow!("no InferencePool {name}"))
    })
    .await?;
    let job = s.job(name).await?;
    let services: Api<Service> = Api::namespaced(s.client.clone(), &s.ns);
    let service = services.get(name).await?;
    ensure!(
        Some(&pool.spec.selector.match_labels)
            == service.spec.as_ref().and_then(|sp| sp.selector.as_ref()),
        "the pool selects what the Service selects: {:?}",
        pool.spec.selector
    );
    ensure!(
        pool.spec.target_ports.len() == 1 && pool.spec.target_ports[0].number == 8000,
        "targetPorts {:?}",
        pool.spec.target_ports
    );
    let picker = &pool.spec.endpoint_picker_ref;
    ensure!(
        picker.name == "e2e-epp"
            && picker.port.map(|p| p.number) == Some(9002)
            && picker.kind.as_deref() == Some("Service"),
        "endpointPickerRef {picker:?}"
    );
    ensure!(
        pool.owner_references()
            .iter()
            .any(|o| o.uid == job.uid().unwrap_or_default() && o.controller == Some(true)),
        "the pool is the job's"
    );
    for (replicas, what) in [(3, "after a scale to 3"), (1, "after a scale to 1")] {
        if replicas != 3 {
            scale(s, name, replicas).await?;
        }
        eventually(
            &format!("the pool to select the serving pods {what}"),
            SETTLE,
            || async {
                s.confirm_deletions(&s.job(name).await?).await?;
                let (serving, chosen) = (serving_pods(s, name).await?, selected(s, &pool).await?);
                ensure!(
                    serving.len() == replicas as usize && serving == chosen,
                    "serving {serving:?}, selected {chosen:?}"
                );
                Ok(())
            },
        )
        .await?;
        println!("     {what}: InferencePool {name} selects exactly the {replicas} serving pod(s)");
    }
    roll_keeps_the_selection(s, name, &pool).await?;
    // What a picker scores on, on each serving pod.
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    for pod_name in serving_pods(s, name).await? {
        let pod = pods.get(&pod_name).await?;
        let labels = pod.labels();
        for key in [
            "vramfit.io/node-class",
            "vramfit.io/gpu-product",
            "vramfit.io/concurrency",
        ] {
            ensure!(
                labels.contains_key(key),
                "{pod_name} lacks {key}: {labels:?}"
            );
        }
        println!(
            "     {pod_name}: node-class {}, gpu-product {}, concurrency {}",
            labels["vramfit.io/node-class"],
            labels["vramfit.io/gpu-product"],
            labels["vramfit.io/concurrency"]
        );
    }
    s.delete_jobs(&[name.to_string()]).await?;
    eventually(
        "the pool to go with its job",
        Duration::from_secs(60),
        || async {
            ensure!(
                pools.get_opt(name).await?.is_none(),
                "InferencePool {name} is still there"
            );
            Ok(())
        },
    )
    .await
}
