//! Replicas that start warm, on the real node: the suite's local Hub serves a repository with a
//! llama GGUF of a few hundred MiB (random weights, written by the suite) and its
//! `config.json`; the node's cache agent (the real binary, run for the real node) downloads it
//! into a cache folder on the node's disk when the operator (run with `--model-cache`) asks
//! for it. The first replica waits for the node's download (`FetchedByNode`), the second is
//! placed where the model already is (`CacheHit`); both mount the folder read-only through a
//! PersistentVolumeClaim, and the kubelet's `llama-server` loads it from there
//! (`LLAMA_ARG_MODEL`). The Hub cuts the GGUF's first download off (the agent resumes it with a
//! `Range` request) and flips a byte of another file in transit (the agent fetches it again):
//! what the pods load was verified. Both times to Ready are printed.
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::ResourceExt as _;
use kube::api::Api;
use serde_json::json;
use vramfit_api::model_cache::{CachedModelPhase, MOUNT_PATH, ModelCache, WeightsSource};
use vramfit_e2e::gguf::{LlamaShape, config_json, write_llama};
use vramfit_e2e::model_hub::{Fault, ModelHub, ServedFile, ServedRepo};
use vramfit_e2e::{
    CacheAgentRun, RealNode, Suite, eventually, expect_eq, kubectl, start_cache_agent,
};

use crate::real_node_serving::{replicas_of, served_llama, setup, wait_ready};

const NAME: &str = "real-cached";
const REPO: &str = "e2e-org/cached-llama";
const GGUF: &str = "model.gguf";
/// A file of the repository that only the node's download reads.
const TOKENIZER: &str = "tokenizer.json";
/// The GGUF's size: several hundred MiB, as a small model's weights.
const MODEL_MIB: u64 = 300;
/// Where the Hub cuts the GGUF's first download off.
const CUT_AFTER: usize = 64 << 20;

/// The scenario with an operator of its own (`--model-cache`) and the node's cache agent; the
/// suite's single operator is back afterwards, pass or fail.
pub async fn cold_then_warm(s: &mut Suite) -> Result<()> {
    let (node, server, _) = setup(s).await?;
    let dir = s.logs.join("model-cache");
    let root = dir.join("cache");
    std::fs::create_dir_all(&root)?;
    let hub = serve_model(&dir).await?;
    let mut agent = start_cache_agent(
        s,
        &CacheAgentRun {
            node: &node.name,
            root: &root,
            hub_endpoint: &hub.endpoint,
            budget_bytes: 2 << 30,
            extra: &[],
            log_name: "cache-agent.log",
            serve_read_only: true,
        },
    )?;
    s.stop_operators();
    let root_text = root.display().to_string();
    let flags = [
        "--model-cache",
        "--model-cache-root",
        &root_text,
        "--hub-endpoint",
        &hub.endpoint,
    ];
    let outcome = match s.start_operator("model-cache", &flags, true).await {
        Ok(()) => replicas_start_warm(s, &node, &server, &hub).await,
        Err(e) => Err(e),
    };
    let deleted = s.delete_jobs(&[NAME.to_string()]).await;
    s.stop_operators();
    let restored = s.ensure_single_operator().await;
    let agent_alive = agent.check_alive();
    agent.kill();
    if outcome.is_err() {
        eprintln!("     cache agent log: {}", agent.log.display());
    }
    // The cache holds 300 MiB: not kept between runs.
    let _ = std::fs::remove_dir_all(&dir);
    outcome.and(agent_alive).and(deleted).and(restored)
}

/// The repository on a local Hub: its `config.json`, the GGUF (cut off once) and a file
/// corrupted once.
async fn serve_model(dir: &Path) -> Result<ModelHub> {
    let shape = LlamaShape::of_mib(MODEL_MIB);
    let path = dir.join("served.gguf");
    let size = write_llama(&path, &shape, 11)?;
    let bytes = Arc::new(std::fs::read(&path)?);
    std::fs::remove_file(&path)?;
    let hub = ModelHub::start("127.0.0.1:0").await?;
    hub.add(
        REPO,
        ServedRepo {
            files: vec![
                ServedFile {
                    path: "config.json".into(),
                    bytes: Arc::new(config_json(&shape).into_bytes()),
                },
                ServedFile {
                    path: GGUF.into(),
                    bytes,
                },
                // Only the node downloads it (the operator reads config.json and the GGUF's
                // header, never this): the corrupt body is the agent's to catch.
                ServedFile {
                    path: TOKENIZER.into(),
                    bytes: Arc::new(vec![b'{'; 1 << 20]),
                },
            ],
            token: None,
        },
    );
    hub.arm(REPO, GGUF, Fault::CutAfter(CUT_AFTER));
    hub.arm(REPO, TOKENIZER, Fault::Corrupt);
    println!(
        "     local Hub {}: {REPO} ({} blocks, {size} bytes of GGUF)",
        hub.endpoint, shape.blocks
    );
    Ok(hub)
}

async fn replicas_start_warm(
    s: &Suite,
    node: &RealNode,
    image: &str,
    hub: &ModelHub,
) -> Result<()> {
    let mut manifest = served_llama(s, NAME, node, image, 1, 4096);
    // The model from the Hub through the node's cache: no --model, the file named instead.
    manifest["spec"]["args"] = json!([]);
    manifest["spec"]["model"]["huggingFace"] = json!({"repo": REPO, "file": GGUF});
    agent_reports(s, &node.name).await?;
    let caches: Api<ModelCache> = Api::all(s.client.clone());
    let started = Instant::now();
    s.apply_job(manifest).await?;

    // The replica waits while the node downloads: no pod, the job says so.
    eventually(
        "the first replica to wait for the node's download",
        Duration::from_secs(60),
        || async {
            let job = s.job(NAME).await?;
            let status = job.status.clone().unwrap_or_default();
            ensure!(
                status.replicas_waiting_for_model == Some(1),
                "replicasWaitingForModel {:?}, replicas {:?}, conditions {:?}",
                status.replicas_waiting_for_model,
                status.replica_statuses,
                status.conditions
            );
            Ok(())
        },
    )
    .await?;
    println!("     replica 0 waits for the node's download (status.replicasWaitingForModel 1)");

    let job = wait_ready(s, NAME, 1).await?;
    let cold = started.elapsed();
    let first = replicas_of(&job)
        .first()
        .cloned()
        .context("no replica line")?;
    let weights = first
        .weights
        .clone()
        .context("replica 0 has no weights line")?;
    expect_eq(
        "replica 0's weights",
        weights.source,
        WeightsSource::FetchedByNode,
    )?;
    let key = format!("{REPO}@main");
    expect_eq(
        "replica 0's cached model",
        weights.model.clone(),
        Some(key.clone()),
    )?;
    check_pod_mounts(s, &first.pod_name, &key).await?;

    // What the node holds, and how it got there: one cut download resumed, one corrupt
    // file fetched again.
    let cache = caches.get(&node.name).await?;
    let status = cache.status.clone().unwrap_or_default();
    let held = status
        .models
        .iter()
        .find(|m| m.key() == key)
        .context("the node's ModelCache does not list the model")?;
    expect_eq("the model's phase", held.phase, CachedModelPhase::Ready)?;
    ensure!(
        held.public,
        "a model read without a token is public: {held:?}"
    );
    let gguf = hub.downloads(REPO, GGUF);
    ensure!(
        gguf.len() == 2
            && gguf[0].range.is_none()
            && gguf[1]
                .range
                .as_deref()
                .is_some_and(|r| r.starts_with("bytes=") && r != "bytes=0-"),
        "the GGUF's downloads: {gguf:?} (want one cut off and one resumed with a Range)"
    );
    let tokenizer = hub.downloads(REPO, TOKENIZER);
    expect_eq("downloads of the file corrupted once", tokenizer.len(), 2)?;
    println!(
        "     the node resumed the GGUF after the cut ({}), fetched {TOKENIZER} again after a \
         corrupt body, ModelCache {}: Ready, {} bytes",
        gguf[1].range.as_deref().unwrap_or_default(),
        node.name,
        held.bytes
    );

    // A second replica: placed on the node that holds the model, no download at all.
    let scaled = Instant::now();
    let ns = s.ns.clone();
    tokio::task::spawn_blocking(move || kubectl(&["scale", "ij", NAME, "-n", &ns, "--replicas=2"]))
        .await??;
    let job = wait_ready(s, NAME, 2).await?;
    let warm = scaled.elapsed();
    let second = replicas_of(&job)
        .into_iter()
        .find(|l| l.slot == 1)
        .context("no replica 1")?;
    let weights = second
        .weights
        .clone()
        .context("replica 1 has no weights line")?;
    expect_eq(
        "replica 1's weights",
        weights.source,
        WeightsSource::CacheHit,
    )?;
    check_pod_mounts(s, &second.pod_name, &key).await?;
    expect_eq(
        "the GGUF's downloads after the warm replica",
        hub.downloads(REPO, GGUF).len(),
        2,
    )?;
    println!(
        "     cold replica Ready {:.1} s after the job was created (download + load, {}), warm \
         replica Ready {:.1} s after the scale (load {}), no download",
        cold.as_secs_f64(),
        load_text(first.weights.as_ref().and_then(|w| w.load_seconds)),
        warm.as_secs_f64(),
        load_text(weights.load_seconds),
    );
    Ok(())
}

/// Waits until the node's cache agent reports (a heartbeat) in the ModelCache the operator
/// gives every GPU node.
pub(crate) async fn agent_reports(s: &Suite, node: &str) -> Result<()> {
    let caches: Api<ModelCache> = Api::all(s.client.clone());
    eventually(
        "the node's cache agent to report in its ModelCache",
        Duration::from_secs(60),
        || async {
            let cache = caches.get_opt(node).await?;
            ensure!(
                cache
                    .as_ref()
                    .and_then(|c| c.status.as_ref())
                    .is_some_and(|st| st.heartbeat_time.is_some()),
                "ModelCache {node}: {cache:?}"
            );
            Ok(())
        },
    )
    .await
}

fn load_text(seconds: Option<u32>) -> String {
    seconds.map_or("load time not recorded".into(), |s| format!("{s} s"))
}

/// The PersistentVolumeClaim volume of a pod's `spec`, checked to be mounted read-only.
pub(crate) fn read_only_model_claim(
    spec: &k8s_openapi::api::core::v1::PodSpec,
) -> Result<k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource> {
    let claim = spec
        .volumes
        .iter()
        .flatten()
        .find_map(|v| v.persistent_volume_claim.clone())
        .context("the pod mounts no PersistentVolumeClaim")?;
    ensure!(
        claim.read_only == Some(true),
        "the claim is not mounted read-only: {claim:?}"
    );
    Ok(claim)
}

/// The pod (in the suite's namespace) mounts the model `key` (`owner/name@revision`)
/// read-only through its PersistentVolumeClaim, whose volume is the model's folder in the
/// cache, and llama.cpp is pointed at the GGUF in it. Returns the volume's name.
pub(crate) async fn check_pod_mounts(s: &Suite, pod: &str, key: &str) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    let pod = pods.get(pod).await?;
    let spec = pod.spec.clone().context("pod without spec")?;
    let claim = read_only_model_claim(&spec)?;
    let container = spec.containers.first().context("pod without container")?;
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == MOUNT_PATH)
        .context("no mount at the cache's mount path")?;
    ensure!(
        mount.read_only == Some(true),
        "the mount is not read-only: {mount:?}"
    );
    let env = container.env.clone().unwrap_or_default();
    let model = env
        .iter()
        .find(|e| e.name == "LLAMA_ARG_MODEL")
        .and_then(|e| e.value.clone());
    expect_eq(
        "LLAMA_ARG_MODEL",
        model,
        Some(format!("{MOUNT_PATH}/{GGUF}")),
    )?;
    let annotation = pod
        .annotations()
        .get(vramfit_api::model_cache::POD_MODEL_ANNOTATION)
        .cloned();
    expect_eq(
        "the pod's cached-model annotation",
        annotation,
        Some(key.to_string()),
    )?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(s.client.clone(), &s.ns);
    let bound = claims.get(&claim.claim_name).await?;
    let volume_name = bound
        .spec
        .clone()
        .and_then(|sp| sp.volume_name)
        .context("the claim names no volume")?;
    let volumes: Api<PersistentVolume> = Api::all(s.client.clone());
    let volume = volumes.get(&volume_name).await?;
    let path = volume
        .spec
        .clone()
        .and_then(|sp| sp.host_path)
        .map(|h| h.path)
        .context("the volume is not a hostPath")?;
    let folder = model_folder(key);
    ensure!(
        path.ends_with(&folder),
        "the volume's path {path} is not the model's cache folder (…{folder})"
    );
    ensure!(
        volume
            .labels()
            .contains_key(vramfit_api::model_cache::VOLUME_LABEL),
        "the volume lacks the {} label",
        vramfit_api::model_cache::VOLUME_LABEL
    );
    println!(
        "     pod {} mounts {} read-only (claim {}, volume {} at {path})",
        pod.name_any(),
        MOUNT_PATH,
        claim.claim_name,
        volume_name
    );
    Ok(volume_name)
}

/// The end of the folder pods mount model `key` (`owner/name@revision`, a revision with no
/// character to encode) from: `/served/owner--name/revision`, in the cache's read-only mount.
pub(crate) fn model_folder(key: &str) -> String {
    let (repo, revision) = key.split_once('@').unwrap_or((key, "main"));
    format!("/served/{}/{revision}", repo.replace('/', "--"))
}
