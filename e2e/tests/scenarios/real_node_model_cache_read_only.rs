//! No pod but the node's cache agent can change a cached file, on the real kubelet. The model
//! volumes point into `<cache root>/served`, the read-only bind mount of `models/` that the
//! cache agent's `--serve-read-only` makes (the chart's privileged init container; here the
//! suite runs the binary as root before the agent, and unmounts it afterwards).
//!
//! A served llama.cpp job's replica mounts a 25 MiB model from the node's cache. A tenant pod
//! in the same namespace then mounts the job's model claim read-write (`readOnly: false` on
//! the claim and on the mount), as root, and tries to write into the GGUF, truncate it, rename
//! it, create a file next to it and chmod it: every attempt fails with `EROFS`, which the pod
//! prints. The files' SHA-256 on the node's disk are unchanged. The job is deleted; a job of
//! the same public model in another namespace gets a replica that mounts the model from the
//! cache (`CacheHit`, no download) and is Ready: llama-server loaded the verified GGUF.
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use kube::api::{Api, DeleteParams, LogParams, PostParams};
use serde_json::json;
use vramfit_api::model_cache::{MOUNT_PATH, WeightsSource};
use vramfit_e2e::model_hub::ModelHub;
use vramfit_e2e::{SETTLE, Suite, eventually, expect_eq, namespaces, workload_image};

use crate::real_node_model_cache::{agent_reports, model_folder};
use crate::real_node_model_cache_eviction::{
    CacheRun, GGUF, add_llama, cached_llama, end_run, key, ready_from_cache, start_run,
};

const REPO: &str = "e2e-ro/llama";
const JOB: &str = "ro-llama";
/// The job of the same model in the other namespace.
const READER: &str = "ro-reader";
/// The tenant's pod that tries to change the model.
const TENANT: &str = "ro-tenant";
/// How long a replica may take to be Ready from the cache (a load, no download).
const READY_WITHIN: Duration = Duration::from_secs(300);

/// What the tenant's pod tries, each line `<attempt>: <errno name> <message>` or
/// `<attempt>: SUCCEEDED`.
const ATTEMPTS: &str = r#"
import errno, os
d = "/model"
f = d + "/model.gguf"
def attempt(name, fn):
    try:
        fn()
        print(name + ": SUCCEEDED", flush=True)
    except OSError as e:
        print(name + ": " + errno.errorcode.get(e.errno, str(e.errno)) + " " + str(e.strerror), flush=True)
def write():
    with open(f, "r+b") as out:
        out.write(b"EVIL")
attempt("write", write)
attempt("truncate", lambda: os.truncate(f, 0))
attempt("rename", lambda: os.rename(f, d + "/moved.gguf"))
attempt("create", lambda: open(d + "/config.py", "w").write("import os"))
attempt("chmod", lambda: os.chmod(f, 0o777))
print("uid " + str(os.getuid()), flush=True)
"#;

/// The attempts [`ATTEMPTS`] makes.
const ATTEMPT_NAMES: [&str; 5] = ["write", "truncate", "rename", "create", "chmod"];

pub async fn tenant_cannot_change_a_cached_model(s: &mut Suite) -> Result<()> {
    let folder = "model-cache-read-only";
    let hub = ModelHub::start("127.0.0.1:0").await?;
    let size = add_llama(&hub, &s.logs.join(folder).join("hub"), REPO, 41, None)?;
    println!("     local Hub {}: {REPO} ({size} bytes)", hub.endpoint);
    let mut run = start_run(s, folder, hub, 1 << 30, &[], &[]).await?;
    let outcome = match s.other_namespace("reader").await {
        Ok(other) => {
            let outcome = tenant_then_reader(s, &run, &other).await;
            let removed = namespaces::remove(&s.client, &other, SETTLE).await;
            outcome.and(removed)
        }
        Err(e) => Err(e),
    };
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    let _ = pods
        .delete(TENANT, &DeleteParams::default().grace_period(0))
        .await;
    end_run(s, &mut run, &[JOB], outcome).await
}

async fn tenant_then_reader(s: &Suite, run: &CacheRun, other: &str) -> Result<()> {
    agent_reports(s, &run.node.name).await?;
    let ns = s.ns.clone();
    s.apply_job(cached_llama(s, run, JOB, REPO, &ns)).await?;
    let (source, volume) = ready_from_cache(s, JOB, REPO).await?;
    let volumes: Api<PersistentVolume> = Api::all(s.client.clone());
    let claim = volumes
        .get(&volume)
        .await?
        .spec
        .and_then(|sp| sp.claim_ref)
        .and_then(|r| r.name)
        .context("the model's volume names no claim")?;
    let on_disk = run.dir.join("cache").join(
        model_folder(&key(REPO))
            .trim_start_matches('/')
            .replacen("served/", "models/", 1),
    );
    let before = sums(&on_disk)?;
    ensure!(
        before.contains_key(GGUF),
        "no {GGUF} in {}",
        on_disk.display()
    );
    println!(
        "     {JOB}: Ready ({source:?}) mounting volume {volume} (claim {claim}); {} files on \
         the node's disk",
        before.len()
    );

    let lines = tenant_tries(s, run, &claim).await?;
    for name in ATTEMPT_NAMES {
        let line = lines
            .iter()
            .find(|l| l.starts_with(&format!("{name}: ")))
            .with_context(|| format!("the tenant's pod printed no {name} line: {lines:?}"))?;
        ensure!(
            line.starts_with(&format!("{name}: EROFS")),
            "the tenant's {name} was not refused by a read-only mount: {line}"
        );
    }
    ensure!(
        lines.iter().any(|l| l == "uid 0"),
        "the tenant's pod did not run as root: {lines:?}"
    );
    expect_eq(
        "the model's files (SHA-256) after the tenant's attempts",
        sums(&on_disk)?,
        before.clone(),
    )?;
    println!(
        "     {TENANT} (root, claim {claim} read-write): {}",
        lines.join("; ")
    );

    // Another namespace, the same public model: mounted from the cache, served.
    s.delete_jobs(&[JOB.to_string()]).await?;
    let downloads = run.hub.downloads(REPO, GGUF).len();
    s.apply_job_in(other, cached_llama(s, run, READER, REPO, other))
        .await?;
    let jobs = s.jobs_in(other);
    let line = eventually(
        &format!("job {other}/{READER} to have 1 Ready replica"),
        READY_WITHIN,
        || async {
            let job = jobs.get(READER).await?;
            let status = job.status.clone().unwrap_or_default();
            let line = status.replica_statuses.first().cloned();
            ensure!(
                status.ready.as_deref() == Some("1/1") && line.as_ref().is_some_and(|l| l.ready),
                "ready {:?}, replicas {:?}",
                status.ready,
                status.replica_statuses
            );
            line.context("no replica line")
        },
    )
    .await?;
    let weights = line.weights.clone().context("the reader has no weights")?;
    expect_eq(
        "the reader's weights",
        weights.source,
        WeightsSource::CacheHit,
    )?;
    expect_eq(
        "the GGUF's downloads after the reader",
        run.hub.downloads(REPO, GGUF).len(),
        downloads,
    )?;
    let reader_volume = mounted_volume(s, other, &line.pod_name).await?;
    let path = volumes
        .get(&reader_volume)
        .await?
        .spec
        .and_then(|sp| sp.host_path)
        .map(|h| h.path)
        .context("the reader's volume is not a hostPath")?;
    ensure!(
        path.ends_with(&model_folder(&key(REPO))),
        "the reader's volume path {path} is not the model's served folder"
    );
    expect_eq(
        "the model's files (SHA-256) when the reader is Ready",
        sums(&on_disk)?,
        before,
    )?;
    println!(
        "     {other}/{READER}: Ready, CacheHit, no download, mounting {path} read-only at \
         {MOUNT_PATH}"
    );
    Ok(())
}

/// Runs the tenant's pod on the real node, root, the model claim `claim` mounted read-write;
/// returns what it printed.
async fn tenant_tries(s: &Suite, run: &CacheRun, claim: &str) -> Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": TENANT, "namespace": s.ns},
        "spec": {
            // Bound by name: straight to the real kubelet.
            "nodeName": run.node.name,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "securityContext": {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": false},
            "containers": [{
                "name": "c", "image": workload_image(), "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", ATTEMPTS],
                "volumeMounts": [{"name": "model", "mountPath": "/model", "readOnly": false}],
            }],
            "volumes": [{"name": "model",
                         "persistentVolumeClaim": {"claimName": claim, "readOnly": false}}],
        },
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    eventually(
        &format!("pod {TENANT} to finish"),
        Duration::from_secs(180),
        || async {
            let pod = pods.get(TENANT).await?;
            let phase = pod.status.and_then(|st| st.phase);
            ensure!(
                matches!(phase.as_deref(), Some("Succeeded" | "Failed")),
                "the pod is {phase:?}"
            );
            Ok(())
        },
    )
    .await?;
    let log = pods.logs(TENANT, &LogParams::default()).await?;
    Ok(log.lines().map(str::to_string).collect())
}

/// The volume bound to the model claim pod `name` of `namespace` mounts, checked read-only.
async fn mounted_volume(s: &Suite, namespace: &str, name: &str) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), namespace);
    let spec = pods.get(name).await?.spec.context("pod without spec")?;
    let claim = super::real_node_model_cache::read_only_model_claim(&spec)?;
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(s.client.clone(), namespace);
    claims
        .get(&claim.claim_name)
        .await?
        .spec
        .and_then(|sp| sp.volume_name)
        .context("the claim names no volume")
}

/// The SHA-256 (hex) of each file in `dir` (not below), by name.
fn sums(dir: &Path) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let bytes = std::fs::read(entry.path())?;
        let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        out.insert(entry.file_name().to_string_lossy().into_owned(), hex);
    }
    Ok(out)
}
