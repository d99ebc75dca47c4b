//! Placement by where a model is cached, on the real API server with simulated nodes: the
//! scenario plays the nodes' cache agents (it writes each `ModelCache`'s status), and an
//! operator of its own runs with `--model-cache` (and no wait: a replica whose class holds no
//! copy fetches the model itself at once).
//!
//! - Equal plans: a served job allowed on `a10g-x1` and `a10g-x4` (the same GPU, the same
//!   plan; `a10g-x1` wins by name) goes to `a10g-x4`, whose node holds its model: its pod is
//!   kept to that node (required affinity), mounts the model through a claim bound to a
//!   hostPath volume of the model's folder, and its replica says `CacheHit`. The same job
//!   with a model no node holds goes to `a10g-x1` and fetches it itself.
//! - Never a worse plan: a model held only by the V100 node does not draw a job allowed on
//!   `v100-sxm2-16gb-x4` and `a10g-x4` away from its better A10G plan.
//! - A private model held for another namespace is not mounted by this one: no claim, no
//!   volume, and the replica says why.
//! - A batch job (no `serve`) allowed on both A10G classes: its attempt's pod goes to
//!   `a10g-x4`, whose node holds the model, and mounts it; the job's `status.weights` says
//!   `CacheHit`.
//! - A batch group: two nodes of a class of their own (`a10-x4`) both hold Mixtral-8x7B; the
//!   job's plan is a group of two nodes × 4 GPUs, and both of its pods mount the model
//!   through the job's one claim, each kept to the holding nodes and on a node of its own.
//! - A served group (`cache-served-group`, `serve` with `maxNodes` 4), once the batch group is
//!   gone, on the same two nodes: its one replica is a group of two pods, both mounting the
//!   model read-only through the job's one claim (bound to the model's read-only folder),
//!   each kept to the holding nodes and on a node of its own; the replica's line lists both
//!   members and says `CacheHit` with the model's key.
use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use vramfit_api::InferenceJob;
use vramfit_api::model_cache::{ModelCache, VOLUME_LABEL, WeightsSource};
use vramfit_e2e::hub::{HubRepo, LocalHub};
use vramfit_e2e::rbac::{RbacTarget, operator_rbac};
use vramfit_e2e::{
    PREFIX, SETTLE, Suite, eventually, expect_eq, group_class, job_manifest, read_yaml_documents,
    served_job,
};

const CONFIG: &str = include_str!("../../../models/testdata/configs/Qwen/Qwen3-8B/config.json");
const MIXTRAL_CONFIG: &str =
    include_str!("../../../models/testdata/configs/mistralai/Mixtral-8x7B-v0.1/config.json");
const CACHED: &str = "e2e-cache/qwen3-8b";
const UNCACHED: &str = "e2e-cache/qwen3-8b-nowhere";
const ON_V100: &str = "e2e-cache/qwen3-8b-on-v100";
const PRIVATE: &str = "e2e-cache/qwen3-8b-private";
const GROUP_MODEL: &str = "e2e-cache/mixtral-8x7b";
const ROOT: &str = "/var/lib/vramfit/cache";

/// The scenario with an operator of its own; the suite's single operator is back afterwards,
/// pass or fail.
pub async fn cached_node_preferred(s: &mut Suite) -> Result<()> {
    let public = |_| HubRepo {
        config: CONFIG.to_string(),
        token: None,
        delay: Duration::ZERO,
    };
    let mut repos = [CACHED, UNCACHED, ON_V100, PRIVATE]
        .into_iter()
        .map(|r| (r.to_string(), public(r)))
        .collect::<HashMap<_, _>>();
    repos.insert(
        GROUP_MODEL.to_string(),
        HubRepo {
            config: MIXTRAL_CONFIG.to_string(),
            token: None,
            delay: Duration::ZERO,
        },
    );
    let hub = LocalHub::start(repos).await?;
    s.stop_operators();
    let flags = [
        "--hub-endpoint",
        &hub.endpoint,
        "--model-cache",
        "--model-cache-root",
        ROOT,
        "--model-cache-wait-seconds",
        "0",
    ];
    let names: Vec<String> = [
        "cache-equal",
        "cache-nowhere",
        "cache-better",
        "cache-private",
        "cache-batch",
        "cache-group",
        "cache-served-group",
    ]
    .map(String::from)
    .to_vec();
    let outcome = match start_under_cache_rbac(s, &flags).await {
        Ok(()) => match placements(s).await {
            Ok(()) => batch_group(s).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    // Every volume, claim and ModelCache write above was made as the install's operator.
    let outcome = outcome.and_then(|()| {
        s.ensure_operator_not_forbidden(CACHE_ACCOUNT)?;
        println!(
            "     all of it as {CACHE_ACCOUNT}, under the RBAC the chart renders with modelCache.enabled"
        );
        Ok(())
    });
    let deleted = s.delete_jobs(&names).await;
    s.stop_operators();
    let restored = s.ensure_single_operator().await;
    outcome.and(deleted).and(restored)
}

/// The operator's ServiceAccount here: its own name, so that what this scenario binds to it
/// (the model cache's verbs) never adds to what the `rbac` scenario checks.
const CACHE_ACCOUNT: &str = "vramfit-operator-cache";

/// Starts the scenario's operator acting as a ServiceAccount bound to the operator RBAC that
/// the chart renders with `modelCache.enabled` (`install-tests/rendered/model-cache.yaml`):
/// the verbs `permissions::MODEL_CACHE` declares are enough for what placement writes.
async fn start_under_cache_rbac(s: &mut Suite, flags: &[&str]) -> Result<()> {
    let render = s.root.join("install-tests/rendered/model-cache.yaml");
    let manifests = read_yaml_documents(&render)?;
    let suffix = format!("{PREFIX}{}-cache", s.run);
    let here = |_: &str| Some(s.ns.clone());
    let target = RbacTarget {
        namespace: &s.ns,
        account: CACHE_ACCOUNT,
        suffix: &suffix,
        roles: &here,
    };
    for doc in operator_rbac(&manifests, &target)? {
        s.apply_rbac(&doc).await?;
    }
    let kubeconfig = s.service_account_kubeconfig(CACHE_ACCOUNT, "operator-cache.kubeconfig")?;
    let env = [("KUBECONFIG", kubeconfig.display().to_string())];
    s.start_operator_with_env("model-cache", flags, &env, true)
        .await
}

async fn placements(s: &Suite) -> Result<()> {
    let a10g4 = s.node_name("a10gx4");
    let v100 = s.node_name("v100x4");
    // What the node agents would say: a10g-x4's node holds two models (one for another
    // namespace only), the V100 node holds a third.
    play_agent(
        s,
        &a10g4,
        json!([
            held(CACHED, true, &[]),
            held(PRIVATE, false, &["some-other-team"]),
        ]),
    )
    .await?;
    play_agent(s, &v100, json!([held(ON_V100, true, &[])])).await?;

    // Equal plans: the class whose node holds the model.
    s.apply_job(cached_job(
        s,
        "cache-equal",
        CACHED,
        &["a10g-x1", "a10g-x4"],
    ))
    .await?;
    let (job, pods) = s.wait_replicas("cache-equal", 1).await?;
    let line = job_line(&job)?;
    expect_eq("cache-equal's class", line.node_class.as_str(), "a10g-x4")?;
    expect_eq(
        "cache-equal's weights",
        source(&line),
        Some(WeightsSource::CacheHit),
    )?;
    let pod = pods.first().context("no pod")?;
    expect_eq(
        "cache-equal's node",
        pod.spec.as_ref().and_then(|sp| sp.node_name.clone()),
        Some(a10g4.clone()),
    )?;
    ensure!(
        affinity_names(pod).contains(&a10g4),
        "the pod is not kept to the node that holds the model: {:?}",
        affinity_names(pod)
    );
    let path = mounted_path(s, pod).await?;
    ensure!(
        path.starts_with(&format!("{ROOT}/served/e2e-cache--qwen3-8b/")),
        "the volume's path {path} is not the model's folder"
    );
    println!(
        "     cache-equal: a10g-x4 (its node holds {CACHED}) over a10g-x1, CacheHit, pod on {a10g4}, volume {path}"
    );

    // The same job with a model no node holds: the first class by name, fetched by the pod.
    s.apply_job(cached_job(
        s,
        "cache-nowhere",
        UNCACHED,
        &["a10g-x1", "a10g-x4"],
    ))
    .await?;
    let (job, pods) = s.wait_replicas("cache-nowhere", 1).await?;
    let line = job_line(&job)?;
    expect_eq("cache-nowhere's class", line.node_class.as_str(), "a10g-x1")?;
    expect_eq(
        "cache-nowhere's weights",
        source(&line),
        Some(WeightsSource::FetchedByPod),
    )?;
    no_claim(pods.first().context("no pod")?)?;
    println!("     cache-nowhere: a10g-x1 (first by name), FetchedByPod, no volume");

    // Never a worse plan: the V100 holds the model, the A10G plan is better.
    s.apply_job(cached_job(
        s,
        "cache-better",
        ON_V100,
        &["v100-sxm2-16gb-x4", "a10g-x4"],
    ))
    .await?;
    let (job, pods) = s.wait_replicas("cache-better", 1).await?;
    let line = job_line(&job)?;
    expect_eq("cache-better's class", line.node_class.as_str(), "a10g-x4")?;
    expect_eq(
        "cache-better's weights",
        source(&line),
        Some(WeightsSource::FetchedByPod),
    )?;
    no_claim(pods.first().context("no pod")?)?;
    let rejected = job
        .status
        .as_ref()
        .map(|st| st.rejected_classes.clone())
        .unwrap_or_default();
    println!(
        "     cache-better: a10g-x4 over the V100 that holds {ON_V100} (V100: {:?})",
        rejected
            .iter()
            .find(|r| r.node_class.starts_with("v100"))
            .map(|r| &r.reason)
    );

    // A private model held for another namespace: not mounted here.
    s.apply_job(cached_job(s, "cache-private", PRIVATE, &["a10g-x4"]))
        .await?;
    let (job, pods) = s.wait_replicas("cache-private", 1).await?;
    let line = job_line(&job)?;
    expect_eq(
        "cache-private's weights",
        source(&line),
        Some(WeightsSource::FetchedByPod),
    )?;
    no_claim(pods.first().context("no pod")?)?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(s.client.clone(), &s.ns);
    let ours = claims
        .list(&ListParams::default().labels(VOLUME_LABEL))
        .await?
        .items
        .into_iter()
        .map(|c| c.name_any())
        .filter(|n| n.starts_with("cache-private"))
        .collect::<Vec<_>>();
    ensure!(
        ours.is_empty(),
        "claims for the private model in this namespace: {ours:?}"
    );
    // The note goes to this namespace: it must not tell what another namespace holds.
    let why = line.weights.and_then(|w| w.message).unwrap_or_default();
    ensure!(
        !why.contains("other namespaces"),
        "the replica's note tells of another namespace's model: {why:?}"
    );
    println!("     cache-private: FetchedByPod, no claim, no word of the other namespace");

    // A batch job: its attempt goes where the model is, and mounts it.
    s.apply_job(batch_job(s, "cache-batch", CACHED, &["a10g-x1", "a10g-x4"]))
        .await?;
    let (job, pod) = s.wait_pod("cache-batch", 1).await?;
    let status = job.status.clone().unwrap_or_default();
    expect_eq(
        "cache-batch's class",
        status.node_class.as_deref(),
        Some("a10g-x4"),
    )?;
    expect_eq(
        "cache-batch's weights",
        status.weights.as_ref().map(|w| w.source),
        Some(WeightsSource::CacheHit),
    )?;
    expect_eq(
        "cache-batch's weights model",
        status.weights.and_then(|w| w.model),
        Some(format!("{CACHED}@main")),
    )?;
    expect_eq(
        "cache-batch's node",
        pod.spec.as_ref().and_then(|sp| sp.node_name.clone()),
        Some(a10g4.clone()),
    )?;
    let mut kept = affinity_names(&pod);
    kept.sort();
    kept.dedup();
    expect_eq("cache-batch's affinity", kept, vec![a10g4.clone()])?;
    let path = mounted_path(s, &pod).await?;
    ensure!(
        path.starts_with(&format!("{ROOT}/served/e2e-cache--qwen3-8b/")),
        "cache-batch's volume path {path} is not the model's folder"
    );
    println!(
        "     cache-batch: a10g-x4, CacheHit, pod {} on {a10g4}, volume {path}",
        pod.name_any()
    );
    Ok(())
}

/// A batch group whose two nodes both hold its model: both pods mount it; then, the batch
/// group gone, a served job whose one replica is a group of two on the same nodes: both of
/// its pods mount it too. The groups' nodes are added for the scenario and removed after it,
/// pass or fail.
async fn batch_group(s: &Suite) -> Result<()> {
    let nodes = s.group_nodes("cache").await?;
    let outcome = match nodes.add(s, 4, 2).await {
        Ok(names) => match group_mounts(s, &names).await {
            Ok(()) => served_group_mounts(s, &names).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let deleted = s
        .delete_jobs(&["cache-group".to_string(), "cache-served-group".to_string()])
        .await;
    let removed = nodes.remove_all(s).await;
    outcome.and(deleted).and(removed)
}

/// The Mixtral-8x7B job of the group steps (16 bits: two nodes × 4 GPUs), on the groups'
/// class alone.
fn group_spec(class: &str) -> Value {
    json!({
        "model": {"huggingFace": {"repo": GROUP_MODEL}},
        "runtime": "vllm",
        "image": "vllm/vllm-openai:v0.10.2",
        "contextLength": 4096,
        "batchSize": 1,
        "allowedQuantizations": ["none"],
        "gpus": {"min": 1, "max": 8, "maxNodes": 4},
        "nodeClasses": {"allowed": [class]},
        "maxAttempts": 3,
    })
}

/// The served group: once `cache-group` is gone (its nodes free), `cache-served-group`'s one
/// replica lands on the two nodes holding the model, each of its two pods mounting it
/// read-only through the job's one claim.
async fn served_group_mounts(s: &Suite, names: &[String]) -> Result<()> {
    s.delete_jobs(&["cache-group".to_string()]).await?;
    // The agents' heartbeats stay fresh: the placement trusts a status under 10 minutes old.
    for node in names {
        play_agent(s, node, json!([held(GROUP_MODEL, true, &[])])).await?;
    }
    let class = group_class(4);
    let mut spec = group_spec(&class);
    spec["serve"] = json!({"port": 8000, "replicas": 1});
    if let Some(spec) = spec.as_object_mut() {
        spec.remove("maxAttempts");
    }
    s.apply_job(job_manifest(s, "cache-served-group", spec))
        .await?;
    let (line, pods) = wait_served_group(s, "cache-served-group", 2).await?;
    expect_eq(
        "cache-served-group's weights",
        source(&line),
        Some(WeightsSource::CacheHit),
    )?;
    expect_eq(
        "cache-served-group's weights model",
        line.weights.as_ref().and_then(|w| w.model.clone()),
        Some(format!("{GROUP_MODEL}@main")),
    )?;
    expect_eq(
        "cache-served-group's class",
        line.node_class.as_str(),
        &class,
    )?;
    let mut holders = names.to_vec();
    holders.sort();
    let mut claims = Vec::new();
    let mut on = Vec::new();
    for pod in &pods {
        let name = pod.name_any();
        let mut kept = affinity_names(pod);
        kept.sort();
        kept.dedup();
        expect_eq(&format!("{name}'s affinity"), kept, holders.clone())?;
        expect_eq(
            &format!("{name}'s weights source"),
            pod.annotations().get("vramfit.io/weights-source").cloned(),
            Some("CacheHit".to_string()),
        )?;
        // Read-only: the pod's claim (checked by `mounted_path`) and each container's mount.
        let path = mounted_path(s, pod).await?;
        ensure!(
            path.starts_with(&format!("{ROOT}/served/e2e-cache--mixtral-8x7b/")),
            "{name}'s volume path {path} is not the model's folder"
        );
        let mounts: Vec<Option<bool>> = pod
            .spec
            .iter()
            .flat_map(|sp| &sp.containers)
            .flat_map(|c| c.volume_mounts.iter().flatten())
            .filter(|m| m.mount_path == "/var/lib/vramfit/model")
            .map(|m| m.read_only)
            .collect();
        ensure!(
            !mounts.is_empty() && mounts.iter().all(|r| *r == Some(true)),
            "{name}'s model mounts are not all read-only: {mounts:?}"
        );
        claims.push(claim_of(pod)?);
        on.push(
            pod.spec
                .as_ref()
                .and_then(|sp| sp.node_name.clone())
                .context("an unbound member")?,
        );
    }
    claims.dedup();
    expect_eq("cache-served-group's claims", claims.len(), 1)?;
    on.sort();
    on.dedup();
    expect_eq("cache-served-group's distinct nodes", on.clone(), holders)?;
    println!(
        "     cache-served-group: replica {} of 2 pods of {class} on {on:?}, each CacheHit through one read-only claim",
        line.pod_name
    );
    Ok(())
}

/// Waits until served job `name` has one replica whose group lists `size` members, each a
/// pod of the job bound to a node; returns the replica's line and its members' pods, rank 0
/// first.
async fn wait_served_group(
    s: &Suite,
    name: &str,
    size: usize,
) -> Result<(vramfit_api::ReplicaStatus, Vec<Pod>)> {
    eventually(
        &format!("job {name}'s replica to be a group of {size} bound pods"),
        SETTLE,
        || async {
            let job = s.job(name).await?;
            let line = job_line(&job)?;
            ensure!(
                line.members.len() == size,
                "replica {} lists {} members: {:?} ({:?})",
                line.pod_name,
                line.members.len(),
                line.members,
                line.message
            );
            let pods = s.pods_of(&job).await?;
            let mut members = Vec::new();
            for member in &line.members {
                let pod = pods
                    .iter()
                    .find(|p| p.name_any() == member.pod_name)
                    .with_context(|| format!("no pod {}", member.pod_name))?;
                ensure!(
                    pod.metadata.deletion_timestamp.is_none()
                        && pod
                            .spec
                            .as_ref()
                            .and_then(|sp| sp.node_name.as_ref())
                            .is_some(),
                    "pod {} is not bound",
                    member.pod_name
                );
                members.push(pod.clone());
            }
            Ok((line, members))
        },
    )
    .await
}

async fn group_mounts(s: &Suite, names: &[String]) -> Result<()> {
    for node in names {
        play_agent(s, node, json!([held(GROUP_MODEL, true, &[])])).await?;
    }
    let class = group_class(4);
    s.apply_job(job_manifest(s, "cache-group", group_spec(&class)))
        .await?;
    let (job, pods) = s.wait_group("cache-group", 1).await?;
    let status = job.status.clone().unwrap_or_default();
    expect_eq(
        "cache-group's plan nodes",
        status.plan.as_ref().map(vramfit_api::Plan::nodes),
        Some(2),
    )?;
    expect_eq(
        "cache-group's weights",
        status.weights.as_ref().map(|w| w.source),
        Some(WeightsSource::CacheHit),
    )?;
    expect_eq("cache-group's pods", pods.len(), 2)?;
    let mut claims = Vec::new();
    let mut on = Vec::new();
    for pod in &pods {
        let mut kept = affinity_names(pod);
        kept.sort();
        kept.dedup();
        let mut holders = names.to_vec();
        holders.sort();
        expect_eq(&format!("{}'s affinity", pod.name_any()), kept, holders)?;
        expect_eq(
            &format!("{}'s weights source", pod.name_any()),
            pod.annotations().get("vramfit.io/weights-source").cloned(),
            Some("CacheHit".to_string()),
        )?;
        let path = mounted_path(s, pod).await?;
        ensure!(
            path.starts_with(&format!("{ROOT}/served/e2e-cache--mixtral-8x7b/")),
            "{}'s volume path {path} is not the model's folder",
            pod.name_any()
        );
        claims.push(claim_of(pod)?);
        on.push(
            pod.spec
                .as_ref()
                .and_then(|sp| sp.node_name.clone())
                .context("an unbound group pod")?,
        );
    }
    claims.dedup();
    expect_eq("cache-group's claims", claims.len(), 1)?;
    on.sort();
    on.dedup();
    expect_eq("cache-group's distinct nodes", on.len(), 2)?;
    println!("     cache-group: 2 pods of {class} on {on:?}, both CacheHit through one claim");
    Ok(())
}

/// A batch job (no `serve`) of `repo`, one GPU, allowed on `classes`.
fn batch_job(s: &Suite, name: &str, repo: &str, classes: &[&str]) -> Value {
    let mut job = cached_job(s, name, repo, classes);
    if let Some(spec) = job["spec"].as_object_mut() {
        spec.remove("serve");
    }
    job
}

/// The claim the pod mounts.
fn claim_of(pod: &Pod) -> Result<String> {
    pod.spec
        .as_ref()
        .and_then(|sp| sp.volumes.as_ref())
        .into_iter()
        .flatten()
        .find_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.clone())
        })
        .context("the pod mounts no claim")
}

fn cached_job(s: &Suite, name: &str, repo: &str, classes: &[&str]) -> Value {
    let mut job = served_job(s, name, 1, classes);
    job["spec"]["model"] = json!({"huggingFace": {"repo": repo}, "contextLimit": 8192});
    job["spec"]["args"] = json!([]);
    // One GPU, one sequence: both A10G classes plan the same (8-bit on one A10G).
    job["spec"]["batchSize"] = json!(1);
    job["spec"]["gpus"] = json!({"min": 1, "max": 1});
    job
}

fn held(repo: &str, public: bool, namespaces: &[&str]) -> Value {
    json!({
        "repo": repo, "revision": "main", "phase": "Ready",
        "bytes": 16_000_000_000_u64, "totalBytes": 16_000_000_000_u64,
        "public": public, "namespaces": namespaces,
    })
}

/// Writes `models` as the node's cache agent would (its status, with a fresh heartbeat),
/// creating the node's ModelCache when the operator has not yet.
async fn play_agent(s: &Suite, node: &str, models: Value) -> Result<()> {
    let caches: Api<ModelCache> = Api::all(s.client.clone());
    if caches.get_opt(node).await?.is_none() {
        let object: ModelCache = serde_json::from_value(json!({
            "apiVersion": "vramfit.io/v1alpha1", "kind": "ModelCache",
            "metadata": {"name": node}, "spec": {},
        }))?;
        match caches.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let status = json!({"status": {
        "budgetBytes": 100_000_000_000_u64, "usedBytes": 48_000_000_000_u64,
        "models": models, "heartbeatTime": Timestamp::now().to_string(),
    }});
    caches
        .patch_status(node, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("writing ModelCache {node}'s status"))?;
    Ok(())
}

fn job_line(job: &InferenceJob) -> Result<vramfit_api::ReplicaStatus> {
    job.status
        .as_ref()
        .and_then(|st| st.replica_statuses.first().cloned())
        .context("no replica line")
}

fn source(line: &vramfit_api::ReplicaStatus) -> Option<WeightsSource> {
    line.weights.as_ref().map(|w| w.source)
}

/// The node names of the pod's required `kubernetes.io/hostname In` terms.
fn affinity_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|sp| sp.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|req| {
            req.node_selector_terms
                .iter()
                .flat_map(|t| t.match_expressions.iter().flatten())
                .filter(|e| e.key == "kubernetes.io/hostname" && e.operator == "In")
                .flat_map(|e| e.values.clone().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// The hostPath of the volume bound to the pod's read-only claim, once bound.
async fn mounted_path(s: &Suite, pod: &Pod) -> Result<String> {
    let claim = pod
        .spec
        .as_ref()
        .and_then(|sp| sp.volumes.as_ref())
        .into_iter()
        .flatten()
        .find_map(|v| v.persistent_volume_claim.clone())
        .context("the pod mounts no claim")?;
    ensure!(
        claim.read_only == Some(true),
        "the claim is not read-only: {claim:?}"
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(s.client.clone(), &s.ns);
    let volumes: Api<PersistentVolume> = Api::all(s.client.clone());
    eventually("the model's claim to be bound", SETTLE, || async {
        let bound = claims.get(&claim.claim_name).await?;
        let phase = bound.status.as_ref().and_then(|st| st.phase.clone());
        ensure!(
            phase.as_deref() == Some("Bound"),
            "claim {} is {phase:?}",
            claim.claim_name
        );
        let name = bound
            .spec
            .and_then(|sp| sp.volume_name)
            .context("the claim names no volume")?;
        let volume = volumes.get(&name).await?;
        let modes = volume
            .spec
            .as_ref()
            .and_then(|sp| sp.access_modes.clone())
            .unwrap_or_default();
        ensure!(
            modes == ["ReadOnlyMany"],
            "volume {name}'s access modes {modes:?}"
        );
        volume
            .spec
            .and_then(|sp| sp.host_path)
            .map(|h| h.path)
            .context("the volume is not a hostPath")
    })
    .await
}

fn no_claim(pod: &Pod) -> Result<()> {
    let claims: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|sp| sp.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.clone())
        })
        .collect();
    ensure!(
        claims.is_empty(),
        "pod {} mounts {claims:?}",
        pod.name_any()
    );
    Ok(())
}
