//! The node cache on the real node, at its limits: the real cache agent with a budget that
//! holds two of three small models evicts the least recently used one no pod mounts; and a
//! private model, read with a Hub token scoped to the suite's namespace, is mounted there and
//! nowhere else.
//!
//! - `evicts_the_least_recently_used`: llama.cpp jobs for models A then B become Ready
//!   mounting them from the node's cache; both jobs are deleted (A's first, so that B is used
//!   last); a job for C makes the agent evict A (not B) to fit C, and C's replica is Ready
//!   mounting C. The ModelCache status, the folders on the node's disk and the agent's
//!   `vramfit_model_cache_evictions_total` say so.
//! - `private_model_stays_in_its_namespace`: the local Hub serves a repository only with a
//!   token; the operator (its Secret) and the agent (a token file) use it for the suite's
//!   namespace only. A job there mounts the model, listed `public: false` for that
//!   namespace. In a second namespace, a job naming the repository gets `HubUnauthorized`
//!   and no pod, claim or volume; a claim the tenant writes naming the model's volume never
//!   binds (the volume is pre-bound to the first namespace's claim), and a pod mounting it
//!   never runs on the real kubelet.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use vramfit_api::conditions::{self, ConditionType};
use vramfit_api::model_cache::{CachedModel, CachedModelPhase, ModelCache, WeightsSource};
use vramfit_e2e::gguf::{LlamaShape, config_json, write_llama};
use vramfit_e2e::model_hub::{ModelHub, ServedFile, ServedRepo};
use vramfit_e2e::{
    CacheAgentRun, ChildProcess, JOB_LABEL, RealNode, SETTLE, Suite, conditions_of, consistently,
    eventually, expect_eq, http10_get, namespaces, start_cache_agent, workload_image,
};

use crate::real_node_model_cache::{agent_reports, check_pod_mounts, model_folder};
use crate::real_node_serving::{replicas_of, served_llama, setup, wait_ready};

pub(crate) const GGUF: &str = "model.gguf";
/// Each model's GGUF: tens of MiB (one 1024-wide block of random float16 weights).
const MODEL_MIB: u64 = 25;
const LRU_REPOS: [&str; 3] = ["e2e-lru/model-a", "e2e-lru/model-b", "e2e-lru/model-c"];
const LRU_JOBS: [&str; 3] = ["lru-a", "lru-b", "lru-c"];
const PRIVATE_REPO: &str = "e2e-private/llama";
const PRIVATE_JOB: &str = "private-llama";
const TOKEN: &str = "hf_e2e_cache_token";
const TOKEN_SECRET: &str = "vramfit-cache-hub-token";
/// The tenant's claim and pod in the second namespace.
const STOLEN: &str = "stolen-model";

/// What both scenarios run: the real node, a local Hub, the node's cache agent and an
/// operator of their own with `--model-cache`. The suite's single operator is back
/// afterwards, pass or fail.
pub(crate) struct CacheRun {
    pub(crate) node: RealNode,
    pub(crate) image: String,
    pub(crate) dir: PathBuf,
    pub(crate) hub: ModelHub,
    pub(crate) agent: ChildProcess,
}

pub(crate) async fn start_run(
    s: &mut Suite,
    folder: &str,
    hub: ModelHub,
    budget_bytes: u64,
    agent_flags: &[String],
    operator_flags: &[String],
) -> Result<CacheRun> {
    let (node, image, _) = setup(s).await?;
    let dir = s.logs.join(folder);
    let root = dir.join("cache");
    std::fs::create_dir_all(&root)?;
    let agent = start_cache_agent(
        s,
        &CacheAgentRun {
            node: &node.name,
            root: &root,
            hub_endpoint: &hub.endpoint,
            budget_bytes,
            extra: agent_flags,
            log_name: &format!("{folder}-agent.log"),
            serve_read_only: true,
        },
    )?;
    s.stop_operators();
    let mut flags: Vec<String> = [
        "--model-cache",
        "--model-cache-root",
        &root.display().to_string(),
        "--hub-endpoint",
        &hub.endpoint,
    ]
    .map(String::from)
    .to_vec();
    flags.extend(operator_flags.iter().cloned());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut run = CacheRun {
        node,
        image,
        dir,
        hub,
        agent,
    };
    if let Err(e) = s.start_operator(folder, &flags, true).await {
        // Cleaned up as after a run; the start's error is what the scenario reports.
        let _ = end_run(s, &mut run, &[], Ok(())).await;
        return Err(e);
    }
    Ok(run)
}

/// Deletes the jobs, restores the suite's operator, stops the agent and removes the cache.
pub(crate) async fn end_run(
    s: &mut Suite,
    run: &mut CacheRun,
    jobs: &[&str],
    outcome: Result<()>,
) -> Result<()> {
    let names: Vec<String> = jobs.iter().map(|j| j.to_string()).collect();
    let deleted = s.delete_jobs(&names).await;
    s.stop_operators();
    let restored = s.ensure_single_operator().await;
    let agent_alive = run.agent.check_alive();
    run.agent.kill();
    if outcome.is_err() {
        eprintln!("     cache agent log: {}", run.agent.log.display());
    }
    let _ = std::fs::remove_dir_all(&run.dir);
    outcome.and(agent_alive).and(deleted).and(restored)
}

/// A repository of `config.json` and a GGUF of `MODEL_MIB` MiB (random weights from `seed`);
/// returns the repository's bytes.
pub(crate) fn add_llama(
    hub: &ModelHub,
    dir: &Path,
    repo: &str,
    seed: u64,
    token: Option<&str>,
) -> Result<u64> {
    std::fs::create_dir_all(dir)?;
    let shape = LlamaShape::of_mib(MODEL_MIB);
    let path = dir.join(format!("{seed}.gguf"));
    write_llama(&path, &shape, seed)?;
    let bytes = Arc::new(std::fs::read(&path)?);
    std::fs::remove_file(&path)?;
    let config = Arc::new(config_json(&shape).into_bytes());
    let total = (bytes.len() + config.len()) as u64;
    hub.add(
        repo,
        ServedRepo {
            files: vec![
                ServedFile {
                    path: "config.json".into(),
                    bytes: config,
                },
                ServedFile {
                    path: GGUF.into(),
                    bytes,
                },
            ],
            token: token.map(String::from),
        },
    );
    Ok(total)
}

/// A served llama.cpp job of `repo`'s GGUF through the node's cache, in `namespace`.
pub(crate) fn cached_llama(
    s: &Suite,
    run: &CacheRun,
    name: &str,
    repo: &str,
    namespace: &str,
) -> Value {
    let mut manifest = served_llama(s, name, &run.node, &run.image, 1, 4096);
    manifest["metadata"]["namespace"] = json!(namespace);
    manifest["spec"]["args"] = json!([]);
    manifest["spec"]["model"]["huggingFace"] = json!({"repo": repo, "file": GGUF});
    manifest
}

pub(crate) fn key(repo: &str) -> String {
    format!("{repo}@main")
}

async fn cache_of(s: &Suite, node: &str) -> Result<ModelCache> {
    Ok(Api::<ModelCache>::all(s.client.clone()).get(node).await?)
}

fn held<'c>(cache: &'c ModelCache, repo: &str) -> Option<&'c CachedModel> {
    let key = key(repo);
    cache
        .status
        .as_ref()?
        .models
        .iter()
        .find(|m| m.key() == key)
}

/// Waits until job `name`'s single replica is Ready mounting `repo` from the cache; returns
/// where its weights came from and the model's volume.
pub(crate) async fn ready_from_cache(
    s: &Suite,
    name: &str,
    repo: &str,
) -> Result<(WeightsSource, String)> {
    let job = wait_ready(s, name, 1).await?;
    let line = replicas_of(&job)
        .first()
        .cloned()
        .context("no replica line")?;
    let weights = line
        .weights
        .clone()
        .with_context(|| format!("{name}'s replica has no weights line"))?;
    ensure!(
        matches!(
            weights.source,
            WeightsSource::FetchedByNode | WeightsSource::CacheHit
        ),
        "{name}'s weights: {:?} ({:?}), want the node's cache",
        weights.source,
        weights.message
    );
    expect_eq(
        &format!("{name}'s cached model"),
        weights.model.clone(),
        Some(key(repo)),
    )?;
    let volume = check_pod_mounts(s, &line.pod_name, &key(repo)).await?;
    Ok((weights.source, volume))
}

/// Waits until no pod on the node mounts `repo` any more (its `inUse` is gone from the spec).
async fn not_in_use(s: &Suite, node: &str, repo: &str) -> Result<()> {
    let key = key(repo);
    eventually(
        &format!("{key} to be no longer in use on {node}"),
        SETTLE,
        || async {
            let cache = cache_of(s, node).await?;
            let wanted = cache.spec.models.iter().find(|m| m.key() == key);
            ensure!(
                !wanted.is_some_and(|m| m.in_use),
                "still wanted in use: {wanted:?}"
            );
            Ok(())
        },
    )
    .await
}

fn last_used_second(model: Option<&CachedModel>) -> Option<i64> {
    model?.last_used.as_ref().map(|t| t.0.as_second())
}

pub async fn evicts_the_least_recently_used(s: &mut Suite) -> Result<()> {
    let folder = "model-cache-lru";
    let hub = ModelHub::start("127.0.0.1:0").await?;
    let scratch = s.logs.join(folder).join("hub");
    let mut sizes = Vec::new();
    for (seed, repo) in (21..).zip(LRU_REPOS) {
        sizes.push(add_llama(&hub, &scratch, repo, seed, None)?);
    }
    let largest = sizes.iter().copied().max().unwrap_or_default();
    // Room for two models, not three.
    let budget = 2 * largest + largest / 2;
    println!(
        "     local Hub {}: 3 models of {largest} bytes, cache budget {budget} bytes",
        hub.endpoint
    );
    let mut run = start_run(s, folder, hub, budget, &[], &[]).await?;
    let outcome = lru(s, &run, budget).await;
    end_run(s, &mut run, &LRU_JOBS, outcome).await
}

async fn lru(s: &Suite, run: &CacheRun, budget: u64) -> Result<()> {
    let node = run.node.name.clone();
    ensure!(
        run.node.gpus >= 2,
        "the real node advertises {} GPU(s): two replicas run at once here",
        run.node.gpus
    );
    agent_reports(s, &node).await?;
    let [a, b, c] = LRU_REPOS;
    let [job_a, job_b, job_c] = LRU_JOBS;
    let ns = s.ns.clone();
    for (job, repo) in [(job_a, a), (job_b, b)] {
        s.apply_job(cached_llama(s, run, job, repo, &ns)).await?;
        let (source, _) = ready_from_cache(s, job, repo).await?;
        println!("     {job}: Ready, mounting {repo} from the node's cache ({source:?})");
    }
    let cache = cache_of(s, &node).await?;
    for repo in [a, b] {
        let model = held(&cache, repo).with_context(|| format!("the cache lists no {repo}"))?;
        expect_eq(
            &format!("{repo}'s phase"),
            model.phase,
            CachedModelPhase::Ready,
        )?;
    }

    // A's job goes first: B, still mounted, is then marked used after A was last.
    s.delete_jobs(&[job_a.to_string()]).await?;
    not_in_use(s, &node, a).await?;
    eventually(
        &format!("{b} to be used more recently than {a}"),
        Duration::from_secs(60),
        || async {
            let cache = cache_of(s, &node).await?;
            let (used_a, used_b) = (
                last_used_second(held(&cache, a)),
                last_used_second(held(&cache, b)),
            );
            ensure!(
                used_a.is_some() && used_b > used_a,
                "lastUsed: {a} {used_a:?}, {b} {used_b:?}"
            );
            Ok(())
        },
    )
    .await?;
    s.delete_jobs(&[job_b.to_string()]).await?;
    not_in_use(s, &node, b).await?;
    println!("     {job_a} then {job_b} deleted: neither model is in use, {b} used last");

    // C does not fit beside both: A, the least recently used, goes.
    let started = Instant::now();
    s.apply_job(cached_llama(s, run, job_c, c, &ns)).await?;
    let (source, _) = ready_from_cache(s, job_c, c).await?;
    let took = started.elapsed();
    let cache = cache_of(s, &node).await?;
    let status = cache.status.clone().unwrap_or_default();
    ensure!(
        held(&cache, a).is_none(),
        "{a} should have been evicted: {:?}",
        held(&cache, a)
    );
    for repo in [b, c] {
        let model = held(&cache, repo).with_context(|| format!("the cache lists no {repo}"))?;
        expect_eq(
            &format!("{repo}'s phase"),
            model.phase,
            CachedModelPhase::Ready,
        )?;
    }
    ensure!(
        status.used_bytes <= budget,
        "the cache holds {} bytes, over its budget {budget}",
        status.used_bytes
    );
    // On the node's disk.
    let root = run.dir.join("cache");
    let on_disk = |repo: &str| {
        let folder = model_folder(&key(repo));
        root.join(folder.trim_start_matches('/'))
    };
    ensure!(
        !on_disk(a).exists(),
        "{} is still on disk",
        on_disk(a).display()
    );
    for repo in [b, c] {
        let gguf = on_disk(repo).join(GGUF);
        ensure!(gguf.is_file(), "{} is not on disk", gguf.display());
    }
    // The agent counted it.
    let evictions = metric(&run.agent.addr, "vramfit_model_cache_evictions_total").await?;
    expect_eq("vramfit_model_cache_evictions_total", evictions, 1.0)?;
    println!(
        "     {job_c}: Ready {:.1} s after it was created ({source:?}); the node evicted {a} \
         (least recently used), kept {b}: ModelCache {} bytes of {budget}, {} models, \
         vramfit_model_cache_evictions_total {evictions}",
        took.as_secs_f64(),
        status.used_bytes,
        status.models.len()
    );
    Ok(())
}

/// The value of an unlabelled metric on an agent's `/metrics`.
async fn metric(addr: &str, name: &str) -> Result<f64> {
    let (code, body) = http10_get(addr, "/metrics", Duration::from_secs(10)).await?;
    ensure!(code == 200, "GET {addr}/metrics: {code}");
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no {name} on {addr}/metrics"))
}

pub async fn private_model_stays_in_its_namespace(s: &mut Suite) -> Result<()> {
    let folder = "model-cache-private";
    let hub = ModelHub::start("127.0.0.1:0").await?;
    let scratch = s.logs.join(folder);
    let size = add_llama(&hub, &scratch.join("hub"), PRIVATE_REPO, 31, Some(TOKEN))?;
    let token_file = scratch.join("token");
    std::fs::write(&token_file, TOKEN)?;
    // Left from an earlier run of this scenario: kept.
    s.create_hub_token_secret(TOKEN_SECRET, TOKEN).await?;
    let ns = s.ns.clone();
    let agent_flags: Vec<String> = [
        "--hub-token-file",
        &token_file.display().to_string(),
        "--hub-token-namespaces",
        &ns,
        "--hub-token-repos",
        PRIVATE_REPO,
    ]
    .map(String::from)
    .to_vec();
    let operator_flags: Vec<String> = [
        "--hub-token-secret",
        TOKEN_SECRET,
        "--hub-token-namespaces",
        &ns,
        "--hub-token-repos",
        PRIVATE_REPO,
    ]
    .map(String::from)
    .to_vec();
    println!(
        "     local Hub {}: {PRIVATE_REPO} ({size} bytes) only with a token, scoped to {ns}",
        hub.endpoint
    );
    let mut run = start_run(s, folder, hub, 1 << 30, &agent_flags, &operator_flags).await?;
    let outcome = private(s, &run).await;
    end_run(s, &mut run, &[PRIVATE_JOB], outcome).await
}

async fn private(s: &Suite, run: &CacheRun) -> Result<()> {
    let node = run.node.name.clone();
    agent_reports(s, &node).await?;
    let ns = s.ns.clone();
    s.apply_job(cached_llama(s, run, PRIVATE_JOB, PRIVATE_REPO, &ns))
        .await?;
    let (source, volume) = ready_from_cache(s, PRIVATE_JOB, PRIVATE_REPO).await?;
    let cache = cache_of(s, &node).await?;
    let model = held(&cache, PRIVATE_REPO)
        .cloned()
        .context("the cache does not list the private model")?;
    expect_eq(
        "the private model's phase",
        model.phase,
        CachedModelPhase::Ready,
    )?;
    ensure!(!model.public, "read with the token, yet public: {model:?}");
    expect_eq(
        "the namespaces that may mount it",
        model.namespaces.clone(),
        vec![ns.clone()],
    )?;
    let downloads = run.hub.downloads(PRIVATE_REPO, GGUF);
    ensure!(
        !downloads.is_empty() && downloads.iter().all(|d| d.bearer.as_deref() == Some(TOKEN)),
        "the GGUF's downloads should all carry the token: {downloads:?}"
    );
    println!(
        "     {PRIVATE_JOB}: Ready in {ns} ({source:?}), volume {volume}; ModelCache: public \
         false, namespaces {:?}",
        model.namespaces
    );

    let other = s.other_namespace("tenant").await?;
    let outcome = other_namespace_cannot_mount(s, run, &other, &volume).await;
    let removed = namespaces::remove(&s.client, &other, SETTLE).await;
    outcome.and(removed)
}

async fn other_namespace_cannot_mount(
    s: &Suite,
    run: &CacheRun,
    other: &str,
    volume: &str,
) -> Result<()> {
    // (a) A job naming the repository: the operator reads it anonymously, the Hub refuses.
    let jobs = s.jobs_in(other);
    let reads_before = run.hub.requests_for(PRIVATE_REPO).len();
    s.apply_job_in(
        other,
        cached_llama(s, run, PRIVATE_JOB, PRIVATE_REPO, other),
    )
    .await?;
    eventually(
        &format!("job {other}/{PRIVATE_JOB} to say the Hub refused"),
        SETTLE,
        || async {
            let job = jobs.get(PRIVATE_JOB).await?;
            let reason = job
                .status
                .as_ref()
                .and_then(|st| conditions::get(&st.conditions, ConditionType::ModelResolved))
                .map(|c| c.reason.clone());
            ensure!(
                reason.as_deref() == Some("HubUnauthorized"),
                "conditions {:?}",
                conditions_of(&job)
            );
            Ok(())
        },
    )
    .await?;
    let anonymous: Vec<_> = run
        .hub
        .requests_for(PRIVATE_REPO)
        .into_iter()
        .skip(reads_before)
        .collect();
    ensure!(
        !anonymous.is_empty() && anonymous.iter().all(|r| r.bearer.is_none()),
        "{other}'s read of {PRIVATE_REPO} should be anonymous: {anonymous:?}"
    );
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), other);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(s.client.clone(), other);
    let volumes: Api<PersistentVolume> = Api::all(s.client.clone());
    let job_pods = ListParams::default().labels(&format!("{JOB_LABEL}={PRIVATE_JOB}"));
    consistently(
        &format!("no pod, claim or volume for {other}'s job"),
        Duration::from_secs(15),
        || async {
            let pods = pods.list(&job_pods).await?.items;
            ensure!(pods.is_empty(), "pods: {:?}", names(&pods));
            let claims = claims.list(&ListParams::default()).await?.items;
            ensure!(claims.is_empty(), "claims: {:?}", names(&claims));
            let theirs: Vec<String> = volumes
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|v| claim_namespace(v).as_deref() == Some(other))
                .map(|v| v.name_any())
                .collect();
            ensure!(theirs.is_empty(), "volumes for {other}: {theirs:?}");
            Ok(())
        },
    )
    .await?;
    let cache = cache_of(s, &run.node.name).await?;
    let namespaces_now = held(&cache, PRIVATE_REPO).map(|m| m.namespaces.clone());
    expect_eq(
        "the namespaces that may mount the private model",
        namespaces_now,
        Some(vec![s.ns.clone()]),
    )?;
    println!(
        "     {other}/{PRIVATE_JOB}: ModelResolved=False HubUnauthorized ({} anonymous reads \
         refused), no pod, no claim, no volume",
        anonymous.len()
    );

    // (b) A claim the tenant writes for the model's volume, and a pod on the real node.
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": STOLEN, "namespace": other},
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": "",
            "volumeName": volume,
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }))?;
    claims.create(&PostParams::default(), &claim).await?;
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": STOLEN, "namespace": other},
        "spec": {
            // Bound by name: straight to the real kubelet, past the scheduler's volume check.
            "nodeName": run.node.name,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "c", "image": workload_image(), "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", "print(open('/model/model.gguf', 'rb').read(4))"],
                "volumeMounts": [{"name": "model", "mountPath": "/model", "readOnly": true}],
            }],
            "volumes": [{"name": "model", "persistentVolumeClaim": {"claimName": STOLEN, "readOnly": true}}],
        },
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let first_claim = format!("{}/", s.ns);
    consistently(
        &format!("{other}'s claim of {volume} to stay unbound and its pod not to run"),
        Duration::from_secs(30),
        || async {
            let claim = claims.get(STOLEN).await?;
            let phase = claim.status.as_ref().and_then(|st| st.phase.clone());
            ensure!(phase.as_deref() != Some("Bound"), "the claim is {phase:?}");
            let pv = volumes.get(volume).await?;
            let bound_to = claim_ref(&pv);
            ensure!(
                bound_to.starts_with(&first_claim),
                "the volume's claimRef is {bound_to}"
            );
            let pod = pods.get(STOLEN).await?;
            let status = pod.status.clone().unwrap_or_default();
            let started = status
                .container_statuses
                .iter()
                .flatten()
                .any(|c| c.state.as_ref().is_some_and(|st| st.waiting.is_none()));
            ensure!(
                status.phase.as_deref() == Some("Pending") && !started,
                "the pod is {:?}, containers {:?}",
                status.phase,
                status.container_statuses
            );
            Ok(())
        },
    )
    .await?;
    let claim = claims.get(STOLEN).await?;
    let pod = pods.get(STOLEN).await?;
    let waiting = pod
        .status
        .as_ref()
        .and_then(|st| st.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
        .unwrap_or_else(|| "no container created".into());
    println!(
        "     {other}/{STOLEN}: claim naming {volume} stays {:?} (the volume is bound to {}); \
         its pod on {} stays Pending ({waiting}) for 30 s",
        claim.status.as_ref().and_then(|st| st.phase.clone()),
        claim_ref(&volumes.get(volume).await?),
        run.node.name
    );
    let _ = pods
        .delete(STOLEN, &DeleteParams::default().grace_period(0))
        .await;
    let _ = claims.delete(STOLEN, &DeleteParams::default()).await;
    if jobs.get_opt(PRIVATE_JOB).await?.is_some() {
        jobs.delete(PRIVATE_JOB, &DeleteParams::background())
            .await?;
    }
    Ok(())
}

fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    items.iter().map(|i| i.name_any()).collect()
}

fn claim_namespace(volume: &PersistentVolume) -> Option<String> {
    volume.spec.as_ref()?.claim_ref.as_ref()?.namespace.clone()
}

/// `namespace/name` of a volume's claimRef (empty when none).
fn claim_ref(volume: &PersistentVolume) -> String {
    volume
        .spec
        .as_ref()
        .and_then(|sp| sp.claim_ref.as_ref())
        .map(|r| {
            format!(
                "{}/{}",
                r.namespace.clone().unwrap_or_default(),
                r.name.clone().unwrap_or_default()
            )
        })
        .unwrap_or_default()
}
