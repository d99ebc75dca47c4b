//! From tuning to serving on a real node: a LoRA fine-tune on the scripted workload writes a
//! GGUF adapter for the tiny llama to its claim and reports it; a served llama-server job
//! names that tuning job, and its replica loads the adapter (`--lora`) from the claim, mounted
//! read-only. A completion through the Service with the adapter (`"lora": [{"id": 0,
//! "scale": 1.0}]`) differs from the base model's (scale 0); a second tuning job's adapter, added to the list, reaches the
//! running replica through a rolling update, and answers differently again. No pod status is
//! written by the suite.
use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;
use serde_json::{Value, json};
use vramfit_api::Phase;
use vramfit_e2e::{
    LLAMA_SERVER_MODEL, RealNode, Suite, conditions_of, eventually, expect_eq, http_post_json,
};

use crate::real_node_serving::{cluster_address, replicas_of, served_llama, setup, wait_ready};

/// A LoRA fine-tune of the tiny llama on the real node, by the scripted workload: rank 8 on
/// the attention's q and v, its adapter's weights drawn from `seed`, written to claim `claim`.
fn tuning_job(
    s: &Suite,
    name: &str,
    node: &RealNode,
    image: &str,
    claim: &str,
    seed: u32,
) -> Value {
    let served = served_llama(s, name, node, image, 1, 4096);
    // The served model's numbers, less its GGUF file: the fine-tune trains the checkpoint the
    // GGUF quantizes, by the same name.
    let mut model = served["spec"]["model"].clone();
    if let Some(fields) = model.as_object_mut() {
        fields.remove("ggufFileBytes");
    }
    json!({
        "apiVersion": "vramfit.io/v1alpha1",
        "kind": "InferenceJob",
        "metadata": {"name": name, "namespace": s.ns},
        "spec": {
            "model": model,
            "runtime": "transformers",
            "image": image,
            "command": ["python", "-m", "scripted"],
            "gpus": {"min": 1, "max": 1},
            "nodeClasses": {"allowed": [node.class()]},
            "tuning": {
                "method": "lora",
                "sequenceLength": 256,
                "effectiveBatch": 4,
                "lora": {"rank": 8, "alpha": 16, "targetModules": ["q_proj", "v_proj"]},
                "outputVolume": "out",
            },
            "pod": {
                "env": [
                    {"name": "SCRIPTED_LORA_SHAPE", "value": "2,256"},
                    {"name": "SCRIPTED_LORA_SEED", "value": seed.to_string()},
                ],
                "volumes": [{"name": "out", "persistentVolumeClaim": {"claimName": claim}}],
            },
        }
    })
}

/// Creates claim `claim` bound to a host-path volume, its folder writable by the workload's
/// user (the kubelet would create it root-owned); returns the folder.
async fn writable_claim(s: &Suite, job: &Value, claim: &str) -> Result<String> {
    s.provide_claims(job).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(s.client.clone(), &s.ns);
    let volume = claims
        .get(claim)
        .await?
        .spec
        .and_then(|sp| sp.volume_name)
        .context("the claim is not bound")?;
    let pvs: Api<PersistentVolume> = Api::all(s.client.clone());
    let path = pvs
        .get(&volume)
        .await?
        .spec
        .and_then(|sp| sp.host_path)
        .map(|h| h.path)
        .context("the volume is not a host path")?;
    std::fs::create_dir_all(&path).with_context(|| format!("creating {path}"))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))?;
    Ok(path)
}

/// Runs a tuning job to its end on the real node; returns the host folder of its output.
async fn tune(s: &Suite, node: &RealNode, image: &str, name: &str, seed: u32) -> Result<String> {
    let claim = format!("{name}-out");
    let job = tuning_job(s, name, node, image, &claim, seed);
    let folder = writable_claim(s, &job, &claim).await?;
    s.apply_job(job).await?;
    let done = eventually(
        &format!("tuning job {name} to succeed"),
        Duration::from_secs(180),
        || async {
            let job = s.job(name).await?;
            let phase = job.status.as_ref().and_then(|st| st.phase);
            ensure!(
                phase == Some(Phase::Succeeded),
                "phase {phase:?}, {:?}",
                conditions_of(&job)
            );
            Ok(job)
        },
    )
    .await?;
    let adapter = done
        .status
        .as_ref()
        .and_then(|st| st.result.as_ref())
        .and_then(|r| r.adapter.clone())
        .context("the run reported no adapter")?;
    ensure!(
        adapter.rank == 8 && adapter.files.iter().any(|f| f.ends_with(".gguf")),
        "reported {adapter:?}"
    );
    println!(
        "     {name}: wrote {:?}, rank {}, {} bytes",
        adapter.files,
        adapter.rank,
        adapter.bytes.unwrap_or_default()
    );
    Ok(folder)
}

/// A greedy completion of 24 tokens through `address`: with `lora` (adapter id, scale) pairs
/// as the request's `"lora"` field (llama-server runs the ids it does not list at 0), or
/// without the field (every loaded adapter at scale 1.0, llama-server's default).
async fn complete(address: &str, lora: Option<&[(u32, f32)]>) -> Result<String> {
    let mut request = json!({
        "prompt": "the cat", "n_predict": 24, "temperature": 0.0, "ignore_eos": true,
        "cache_prompt": false,
    });
    if let Some(pairs) = lora {
        request["lora"] = pairs
            .iter()
            .map(|(id, scale)| json!({"id": id, "scale": scale}))
            .collect();
    }
    let (code, body) =
        http_post_json(address, "/completion", &request, Duration::from_secs(60)).await?;
    ensure!(code == 200, "POST /completion: {code} {body}");
    let answer: Value = serde_json::from_str(&body).with_context(|| format!("not JSON: {body}"))?;
    answer["content"]
        .as_str()
        .map(str::to_string)
        .with_context(|| format!("no content in {body}"))
}

fn served_with(s: &Suite, name: &str, node: &RealNode, server: &str, adapters: &[&str]) -> Value {
    let mut job = served_llama(s, name, node, server, 1, 4096);
    job["spec"]["serve"]["adapters"] = adapters
        .iter()
        .map(|a| json!({"name": a, "tuningJob": {"name": a}}))
        .collect();
    job
}

pub async fn tuned_then_served(s: &mut Suite) -> Result<()> {
    let (node, server, client) = setup(s).await?;
    let (first, second) = ("tuned-first", "tuned-second");
    let mut folders = vec![tune(s, &node, &client, first, 1).await?];

    let name = "real-adapters";
    s.apply_job(served_with(s, name, &node, &server, &[first]))
        .await?;
    let job = wait_ready(s, name, 1).await?;
    let lines = replicas_of(&job);
    expect_eq(
        "the replica's adapters",
        lines[0].adapters.clone(),
        vec![first.to_string()],
    )?;
    let pods = s.pods_of(&job).await?;
    let args = vramfit_e2e::args_of(&pods[0]);
    println!(
        "     {} runs llama-server {}",
        lines[0].pod_name,
        args.join(" ")
    );
    ensure!(
        args.windows(2)
            .any(|w| w[0] == "--lora" && w[1].starts_with(&format!("/vramfit/adapters/{first}/"))),
        "args {args:?}"
    );
    ensure!(
        args.iter().any(|a| a == "--model") && args.iter().any(|a| a == LLAMA_SERVER_MODEL),
        "args {args:?}"
    );

    let address = cluster_address(s, name).await?;
    let base = complete(&address, Some(&[(0, 0.0)])).await?;
    expect_eq(
        "the base model, asked twice",
        complete(&address, Some(&[(0, 0.0)])).await?,
        base.clone(),
    )?;
    let tuned = complete(&address, Some(&[(0, 1.0)])).await?;
    ensure!(
        tuned != base,
        "with the adapter the answer is the base's: {tuned:?}"
    );
    expect_eq(
        "a request naming no adapter (llama-server applies the loaded one)",
        complete(&address, None).await?,
        tuned.clone(),
    )?;
    println!("     base (scale 0): {base:?}\n     with {first}: {tuned:?}");

    // A second adapter reaches the running job: a rolling update onto the new list.
    folders.push(tune(s, &node, &client, second, 2).await?);
    let before = lines[0].pod_name.clone();
    s.apply_job(served_with(s, name, &node, &server, &[first, second]))
        .await?;
    let rolled = eventually(
        "the replica to serve both adapters",
        Duration::from_secs(240),
        || async {
            let job = s.job(name).await?;
            let lines = replicas_of(&job);
            ensure!(
                lines.len() == 1
                    && lines[0].ready
                    && lines[0].updated
                    && lines[0].surge.is_none()
                    && lines[0].pod_name != before
                    && lines[0].adapters == vec![first.to_string(), second.to_string()],
                "lines {:?}, {:?}",
                lines
                    .iter()
                    .map(|l| (&l.pod_name, l.ready, l.updated, &l.adapters))
                    .collect::<Vec<_>>(),
                conditions_of(&job)
            );
            Ok(job)
        },
    )
    .await?;
    let again = complete(&address, Some(&[(0, 1.0)])).await?;
    let other = complete(&address, Some(&[(1, 1.0)])).await?;
    expect_eq(
        "the base after the roll",
        complete(&address, Some(&[(0, 0.0), (1, 0.0)])).await?,
        base.clone(),
    )?;
    expect_eq("the first adapter after the roll", again, tuned.clone())?;
    ensure!(
        other != base && other != tuned,
        "the second adapter answers as another: {other:?}"
    );
    println!(
        "     rolled onto {:?}; with {second}: {other:?}",
        replicas_of(&rolled)[0].adapters
    );
    s.delete_jobs(&[name.to_string(), first.to_string(), second.to_string()])
        .await?;
    for folder in folders {
        // The adapters the pods wrote (the claims' volumes go with the suite's cleanup).
        std::fs::remove_dir_all(&folder).with_context(|| format!("removing {folder}"))?;
    }
    Ok(())
}
