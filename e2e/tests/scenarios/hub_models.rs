//! `model.huggingFace` on a real API server: the operator reads the repository from a local
//! Hub (`--hub-endpoint`) in the background, records what it read in `status.resolvedModel`
//! and plans with it (the manifest's own numbers win); a second job of the same repository,
//! and a served one, are answered from the cache; a private repository is read with the token
//! of a Secret in the operator's namespace, for the namespace the token is mapped to only (a
//! job in another namespace reads it anonymously and gets `HubNotFound`); a slow repository holds up no other job; a missing
//! one is a `ModelResolved=False` condition that names it, retried with backoff, and no pod;
//! a restarted operator whose Hub is away follows a job it read from `status.resolvedModel`.
use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use kube::ResourceExt as _;
use kube::api::Api;
use serde_json::{Value, json};
use vramfit_api::checkpoint::ResolvedModel;
use vramfit_api::conditions::{self, ConditionType};
use vramfit_api::pod_keys::PLAN_ANNOTATION;
use vramfit_api::{InferenceJob, Phase, Plan};
use vramfit_e2e::hub::{HubRepo, LocalHub};
use vramfit_e2e::namespaces;
use vramfit_e2e::{
    SETTLE, Suite, check_placed_job, check_served_job, conditions_of, consistently, eventually,
    expect_eq, free_port, pinned_job,
};
use vramfit_planner::checkpoint::fill_unset;

const CONFIG: &str = include_str!("../../../models/testdata/configs/Qwen/Qwen3-8B/config.json");
/// A commit, as a manifest should pin it.
const REVISION: &str = "9c925d64d72725edaf899c6cb9c377fd0709d9c5";
const PUBLIC: &str = "e2e-hub/qwen3-8b";
const PRIVATE: &str = "e2e-hub/qwen3-8b-private";
const SLOW: &str = "e2e-hub/qwen3-8b-slow";
const MISSING: &str = "e2e-hub/no-such-model";
const TOKEN: &str = "hf_e2e_token";
const TOKEN_SECRET: &str = "vramfit-hub-token";
/// The classes the one-GPU jobs may take (the suite's other jobs may hold some GPUs).
const CLASSES: &[&str] = &["h100-80gb-hbm3-x8", "a10g-x4", "a10g-x1"];
/// The slow repository answers after this; the operator gives up on a file after
/// `--hub-timeout-seconds` 3.
const SLOW_ANSWER: Duration = Duration::from_secs(20);

fn repo(config: &str, token: Option<&str>, delay: Duration) -> HubRepo {
    HubRepo {
        config: config.to_string(),
        token: token.map(String::from),
        delay,
    }
}

/// A one-GPU job on [`CLASSES`] whose model is `repo` on the Hub, with an explicit context
/// limit under the repository's 40960 (the manifest's number must win).
fn hub_job(s: &Suite, name: &str, repo: &str) -> Value {
    let mut job = pinned_job(s, name, CLASSES, "quality");
    job["spec"]["model"] = json!({
        "huggingFace": {"repo": repo, "revision": REVISION},
        "contextLimit": 8192,
    });
    job["spec"]["contextLength"] = json!(32768);
    job
}

pub async fn hub_model_is_resolved(s: &mut Suite) -> Result<()> {
    let hub = LocalHub::start(HashMap::from([
        (PUBLIC.to_string(), repo(CONFIG, None, Duration::ZERO)),
        (
            PRIVATE.to_string(),
            repo(CONFIG, Some(TOKEN), Duration::ZERO),
        ),
        (SLOW.to_string(), repo(CONFIG, None, SLOW_ANSWER)),
    ]))
    .await?;
    ensure!(
        s.create_hub_token_secret(TOKEN_SECRET, TOKEN).await?,
        "Secret {}/{TOKEN_SECRET} was there already",
        s.ns
    );
    s.stop_operators();
    let token_namespace = s.ns.clone();
    let flags = [
        "--hub-endpoint",
        &hub.endpoint,
        "--hub-token-secret",
        TOKEN_SECRET,
        "--hub-token-namespaces",
        &token_namespace,
        "--hub-token-repos",
        "e2e-hub/*",
        "--hub-timeout-seconds",
        "3",
    ];
    s.start_operator("hub", &flags, true).await?;

    // A slow repository first: the jobs after it are planned before it ever answers (in
    // the same namespace, after its read gives up: one read per namespace at a time).
    s.apply_job(hub_job(s, "hub-slow", SLOW)).await?;
    wait_model_condition(s, "hub-slow", "ModelResolving", SLOW).await?;

    s.apply_job(hub_job(s, "hub-public", PUBLIC)).await?;
    let resolved = placed_with_model(s, "hub-public", PUBLIC).await?;
    expect_eq(
        "config.json reads of the public repository",
        hub.config_reads(PUBLIC),
        1,
    )?;
    // Planned while the slow repository has not answered once.
    let slow = s.job("hub-slow").await?;
    let slow_reason = condition_reason(&slow, ConditionType::ModelResolved);
    ensure!(
        matches!(
            slow_reason.as_deref(),
            Some("ModelResolving" | "HubTimeout")
        ) && slow
            .status
            .as_ref()
            .and_then(|st| st.plan.clone())
            .is_none(),
        "job hub-slow should be unresolved and unplanned while hub-public was planned; conditions {:?}",
        conditions_of(&slow)
    );

    // The same repository@revision again: answered from the cache, no new read.
    s.apply_job(hub_job(s, "hub-public-again", PUBLIC)).await?;
    let again = placed_with_model(s, "hub-public-again", PUBLIC).await?;
    expect_eq("the cached numbers", &again, &resolved)?;
    expect_eq(
        "config.json reads of the public repository after a second job",
        hub.config_reads(PUBLIC),
        1,
    )?;

    served_from_the_hub(s, &resolved).await?;
    expect_eq(
        "config.json reads of the public repository after a served job",
        hub.config_reads(PUBLIC),
        1,
    )?;
    tuned_from_the_hub(s, &resolved).await?;
    expect_eq(
        "config.json reads of the public repository after a fine-tuning job",
        hub.config_reads(PUBLIC),
        1,
    )?;

    // A private repository: read with the token from the operator's own Secret.
    s.apply_job(hub_job(s, "hub-private", PRIVATE)).await?;
    placed_with_model(s, "hub-private", PRIVATE).await?;
    let bearer = format!("Bearer {TOKEN}");
    let private = hub.requests_for(PRIVATE);
    ensure!(
        !private.is_empty()
            && private
                .iter()
                .all(|r| r.authorization.as_deref() == Some(bearer.as_str())),
        "every request for {PRIVATE} should carry the Secret's token: {private:?}"
    );
    private_from_an_unmapped_namespace(s, &hub).await?;

    missing_repository(s, &hub).await?;

    // The slow repository timed out: a condition, retried, still no pod.
    wait_model_condition(s, "hub-slow", "HubTimeout", SLOW).await?;
    no_pod(s, "hub-slow").await?;

    hub_away_after_restart(s).await?;
    s.stop_operators();
    s.delete_jobs(
        &[
            "hub-slow",
            "hub-public",
            "hub-public-again",
            "hub-private",
            "hub-missing",
            "hub-served",
            "hub-tuned",
        ]
        .map(String::from),
    )
    .await
}

/// A served job (`spec.serve`, vLLM, one replica) of the public repository: its replica is
/// planned from the same numbers as a batch job (the manifest's context limit winning), and
/// its status records what was read.
async fn served_from_the_hub(s: &Suite, read_before: &ResolvedModel) -> Result<()> {
    let name = "hub-served";
    s.apply_job(json!({
        "apiVersion": "vramfit.io/v1alpha1",
        "kind": "InferenceJob",
        "metadata": {"name": name, "namespace": s.ns},
        "spec": {
            "model": {
                "huggingFace": {"repo": PUBLIC, "revision": REVISION},
                "contextLimit": 8192,
            },
            "runtime": "vllm",
            "image": "vllm/vllm-openai:v0.10.2",
            "args": ["--model", PUBLIC],
            "contextLength": 32768,
            "gpus": {"min": 1, "max": 1},
            "nodeClasses": {"allowed": CLASSES},
            "serve": {"port": 8000, "replicas": 1},
        }
    }))
    .await?;
    let (job, pods) = s.wait_replicas(name, 1).await?;
    expect_eq(
        &format!("job {name} ModelResolved reason"),
        condition_reason(&job, ConditionType::ModelResolved).as_deref(),
        Some("ModelRead"),
    )?;
    let resolved = job
        .status
        .as_ref()
        .and_then(|st| st.resolved_model.clone())
        .with_context(|| format!("job {name} has no status.resolvedModel"))?;
    expect_eq(&format!("job {name} resolvedModel"), &resolved, read_before)?;
    for pod in &pods {
        let plan: Plan = pod
            .annotations()
            .get(PLAN_ANNOTATION)
            .and_then(|json| serde_json::from_str(json).ok())
            .with_context(|| format!("pod {} carries no plan", pod.name_any()))?;
        expect_eq(
            &format!("pod {} plan's contextLength", pod.name_any()),
            plan.context_length,
            8192,
        )?;
    }
    check_served_job(&filled(&job, &resolved), &pods, &s.sim_nodes().await?)
}

/// A fine-tuning job (`spec.tuning`) of the public repository: planned from the numbers the
/// operator read (its vocabulary sizes the logits), with the training env on its pod.
async fn tuned_from_the_hub(s: &Suite, read_before: &ResolvedModel) -> Result<()> {
    let name = "hub-tuned";
    s.apply_job(json!({
        "apiVersion": "vramfit.io/v1alpha1",
        "kind": "InferenceJob",
        "metadata": {"name": name, "namespace": s.ns},
        "spec": {
            "model": {"huggingFace": {"repo": PUBLIC, "revision": REVISION}},
            "runtime": "transformers",
            "image": "ghcr.io/example/vramfit-trainer:0.1",
            "command": ["python", "-m", "trainer"],
            "gpus": {"min": 1, "max": 1},
            "nodeClasses": {"allowed": CLASSES},
            "tuning": {"method": "auto", "sequenceLength": 1024, "effectiveBatch": 16},
        }
    }))
    .await?;
    let (job, pod) = s.wait_pod(name, 1).await?;
    expect_eq(
        &format!("job {name} ModelResolved reason"),
        condition_reason(&job, ConditionType::ModelResolved).as_deref(),
        Some("ModelRead"),
    )?;
    let status = job.status.clone().unwrap_or_default();
    let resolved = status
        .resolved_model
        .clone()
        .with_context(|| format!("job {name} has no status.resolvedModel"))?;
    expect_eq(&format!("job {name} resolvedModel"), &resolved, read_before)?;
    let tuning = status
        .plan
        .and_then(|p| p.tuning)
        .with_context(|| format!("job {name}'s plan has no tuning part"))?;
    let env = |key: &str| {
        pod.spec
            .as_ref()
            .and_then(|spec| spec.containers.first())
            .and_then(|c| c.env.as_ref())
            .and_then(|env| env.iter().find(|e| e.name == key))
            .and_then(|e| e.value.clone())
    };
    expect_eq(
        &format!("pod of {name} VRAMFIT_TUNING_METHOD"),
        env("VRAMFIT_TUNING_METHOD"),
        Some(tuning.method.as_str().to_string()),
    )?;
    expect_eq(
        &format!("pod of {name} VRAMFIT_MICRO_BATCH"),
        env("VRAMFIT_MICRO_BATCH"),
        Some(tuning.micro_batch.to_string()),
    )?;
    ensure!(
        tuning.memory.logits_mib > 0,
        "job {name}: the logits of the config's vocabulary are counted: {:?}",
        tuning.memory
    );
    println!(
        "     {name}: {} micro-batch {} on {:?}, from {}",
        tuning.method.as_str(),
        tuning.batch,
        status.node_class,
        resolved.source
    );
    check_placed_job(&filled(&job, &resolved), &pod, &s.sim_nodes().await?)
}

/// A restarted operator (an empty cache) whose Hub cannot be reached still follows a job it
/// read before: it plans from `status.resolvedModel`, and the pod's end reaches the job.
async fn hub_away_after_restart(s: &mut Suite) -> Result<()> {
    s.stop_operators();
    let nobody = format!("http://127.0.0.1:{}", free_port()?);
    s.start_operator("hub-away", &["--hub-endpoint", &nobody], true)
        .await?;
    let (_, pod) = s.wait_pod("hub-public", 1).await?;
    s.set_pod_running(&pod).await?;
    s.wait_phase("hub-public", &[Phase::Running]).await?;
    s.set_pod_ended(&pod, 0, "Completed", "").await?;
    let job = s.wait_phase("hub-public", &[Phase::Succeeded]).await?;
    expect_eq(
        "hub-public ModelResolved reason with the Hub away",
        condition_reason(&job, ConditionType::ModelResolved).as_deref(),
        Some("ModelRead"),
    )
}

/// A repository the Hub does not have: Pending, `ModelResolved=False` reason `HubNotFound`
/// naming the repository, no pod, and the read retried after the first backoff (5 s).
async fn missing_repository(s: &Suite, hub: &LocalHub) -> Result<()> {
    s.apply_job(hub_job(s, "hub-missing", MISSING)).await?;
    let job = wait_model_condition(s, "hub-missing", "HubNotFound", MISSING).await?;
    let status = job.status.clone().unwrap_or_default();
    expect_eq("hub-missing phase", status.phase, Some(Phase::Pending))?;
    ensure!(
        status.plan.is_none() && status.resolved_model.is_none(),
        "a job whose repository is missing has no plan and no resolvedModel: {status:?}"
    );
    let message = condition_message(&job, ConditionType::ModelResolved).unwrap_or_default();
    ensure!(
        message.contains("no such repository"),
        "the condition should say the repository does not exist: {message:?}"
    );
    eventually(
        &format!("the operator to read {MISSING} again after its backoff"),
        Duration::from_secs(30),
        || async {
            let reads = hub.config_reads(MISSING);
            ensure!(reads >= 2, "{reads} read(s)");
            Ok(())
        },
    )
    .await?;
    no_pod(s, "hub-missing").await
}

/// The token is mapped to the suite's namespace only: a job in another namespace naming the
/// private repository reads it anonymously, gets `HubNotFound` (a private repository looks
/// missing), and never the numbers the token read.
async fn private_from_an_unmapped_namespace(s: &Suite, hub: &LocalHub) -> Result<()> {
    let other = s.other_namespace("hub-other").await?;
    let with_token = hub.requests_for(PRIVATE).len();
    let name = "hub-private-elsewhere";
    s.apply_job_in(&other, hub_job(s, name, PRIVATE)).await?;
    let jobs: Api<InferenceJob> = Api::namespaced(s.client.clone(), &other);
    eventually(
        &format!("job {other}/{name} to have ModelResolved reason HubNotFound"),
        SETTLE,
        || async {
            let job = jobs.get(name).await?;
            let reason = condition_reason(&job, ConditionType::ModelResolved);
            let status = job.status.clone().unwrap_or_default();
            ensure!(
                reason.as_deref() == Some("HubNotFound")
                    && status.resolved_model.is_none()
                    && status.plan.is_none(),
                "conditions {:?}, resolvedModel {:?}",
                conditions_of(&job),
                status.resolved_model
            );
            Ok(())
        },
    )
    .await?;
    let anonymous: Vec<_> = hub
        .requests_for(PRIVATE)
        .into_iter()
        .skip(with_token)
        .collect();
    ensure!(
        !anonymous.is_empty() && anonymous.iter().all(|r| r.authorization.is_none()),
        "the read for {other} should be anonymous: {anonymous:?}"
    );
    namespaces::remove(&s.client, &other, SETTLE).await
}

/// Waits for the job's pod, then checks what was read and planned: `ModelResolved=True`,
/// `resolvedModel` with Qwen3-8B's numbers from `repo`, the manifest's context limit in the
/// plan, and the full pod checks against the job as filled from `resolvedModel`.
async fn placed_with_model(s: &Suite, name: &str, repo: &str) -> Result<ResolvedModel> {
    let (job, pod) = s.wait_pod(name, 1).await?;
    let status = job.status.clone().unwrap_or_default();
    expect_eq(
        &format!("job {name} ModelResolved reason"),
        condition_reason(&job, ConditionType::ModelResolved).as_deref(),
        Some("ModelRead"),
    )?;
    let resolved = status
        .resolved_model
        .clone()
        .with_context(|| format!("job {name} has no status.resolvedModel"))?;
    let read = (
        resolved.source.as_str(),
        resolved.architecture.as_deref(),
        resolved.layers,
        resolved.hidden_size,
        resolved.attention_heads,
        resolved.kv_heads,
        resolved.head_dim,
        resolved.context_limit,
        resolved.vocab_size,
    );
    let source = format!("{repo}@{REVISION}");
    let expected = (
        source.as_str(),
        Some("Qwen3ForCausalLM"),
        36,
        4096,
        32,
        8,
        128,
        Some(40960),
        Some(151936),
    );
    expect_eq(&format!("job {name} resolvedModel"), read, expected)?;
    let parameters = resolved.parameters.unwrap_or_default();
    ensure!(
        (8_000_000_000..8_400_000_000).contains(&parameters),
        "job {name}: resolvedModel.parameters {parameters}, Qwen3-8B has 8.19B"
    );
    let plan = status.plan.clone().context("no plan")?;
    expect_eq(
        &format!("job {name} plan.contextLength (the manifest's contextLimit wins)"),
        plan.context_length,
        8192,
    )?;
    let nodes = s.sim_nodes().await?;
    check_placed_job(&filled(&job, &resolved), &pod, &nodes)?;
    Ok(resolved)
}

/// The job with what the operator read filled into the numbers its manifest leaves unset, as
/// the operator planned it.
fn filled(job: &InferenceJob, resolved: &ResolvedModel) -> InferenceJob {
    let mut filled = job.clone();
    filled.spec.model = fill_unset(&job.spec.model, &resolved.model_spec());
    filled
}

/// Waits until the job's `ModelResolved` condition has `reason` and its message names `repo`.
async fn wait_model_condition(
    s: &Suite,
    name: &str,
    reason: &str,
    repo: &str,
) -> Result<InferenceJob> {
    eventually(
        &format!("job {name} to have ModelResolved reason {reason} naming {repo}"),
        SETTLE,
        || async {
            let job = s.job(name).await?;
            let seen = condition_reason(&job, ConditionType::ModelResolved);
            let message = condition_message(&job, ConditionType::ModelResolved);
            match (seen, message) {
                (Some(r), Some(m)) if r == reason && m.contains(repo) => Ok(job),
                _ => bail!("conditions {:?}", conditions_of(&job)),
            }
        },
    )
    .await
}

/// No pod for the job, for 5 s.
async fn no_pod(s: &Suite, name: &str) -> Result<()> {
    consistently(
        &format!("job {name} to have no pod"),
        Duration::from_secs(5),
        || async {
            let job = s.job(name).await?;
            let pods = s.pods_of(&job).await?;
            ensure!(pods.is_empty(), "{} pod(s)", pods.len());
            Ok(())
        },
    )
    .await
}

fn condition_reason(job: &InferenceJob, kind: ConditionType) -> Option<String> {
    let status = job.status.as_ref()?;
    conditions::get(&status.conditions, kind).map(|c| c.reason.clone())
}

fn condition_message(job: &InferenceJob, kind: ConditionType) -> Option<String> {
    let status = job.status.as_ref()?;
    conditions::get(&status.conditions, kind).map(|c| c.message.clone())
}
