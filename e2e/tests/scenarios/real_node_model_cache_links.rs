//! The cache agent never follows a symbolic link planted in a model's folder, on the real
//! node. A served llama.cpp job's replica is Ready mounting a 25 MiB model from the node's
//! cache. Then, on the node's disk, the model's `config.json` is replaced by a link to another
//! model's `config.json`, and a link to that other model's folder is put beside it (what a
//! process that could write the folder would plant). Within a few passes the agent's
//! re-verification finds both: it removes the links without following them, says so in its
//! log, fetches `config.json` again from the Hub, and the model is `Ready` again with its own
//! bytes, while the other model's file and folder are untouched.
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use kube::api::Api;
use vramfit_api::model_cache::{CachedModelPhase, ModelCache};
use vramfit_e2e::model_hub::ModelHub;
use vramfit_e2e::{Suite, eventually, expect_eq};

use crate::real_node_model_cache::{agent_reports, model_folder};
use crate::real_node_model_cache_eviction::{
    CacheRun, add_llama, cached_llama, end_run, key, ready_from_cache, start_run,
};

const REPO: &str = "e2e-links/llama";
const JOB: &str = "links-llama";
/// The other model's bytes the links point at.
const OTHER_CONFIG: &[u8] = b"{\"other\": \"model\"}";
/// How long the agent may take to find the links and bring the model back (a cheap
/// re-verification every pass of 5 s, then a one-file fetch).
const REPAIRED_WITHIN: Duration = Duration::from_secs(120);

pub async fn planted_link_is_not_followed(s: &mut Suite) -> Result<()> {
    let folder = "model-cache-links";
    let hub = ModelHub::start("127.0.0.1:0").await?;
    let size = add_llama(&hub, &s.logs.join(folder).join("hub"), REPO, 43, None)?;
    println!("     local Hub {}: {REPO} ({size} bytes)", hub.endpoint);
    let mut run = start_run(s, folder, hub, 1 << 30, &[], &[]).await?;
    let outcome = plant_then_check(s, &run).await;
    end_run(s, &mut run, &[JOB], outcome).await
}

async fn plant_then_check(s: &Suite, run: &CacheRun) -> Result<()> {
    agent_reports(s, &run.node.name).await?;
    let ns = s.ns.clone();
    s.apply_job(cached_llama(s, run, JOB, REPO, &ns)).await?;
    let (source, volume) = ready_from_cache(s, JOB, REPO).await?;
    let on_disk = run.dir.join("cache").join(
        model_folder(&key(REPO))
            .trim_start_matches('/')
            .replacen("served/", "models/", 1),
    );
    let config = on_disk.join("config.json");
    let own_config = std::fs::read(&config)
        .with_context(|| format!("reading {} on the node's disk", config.display()))?;
    println!("     {JOB}: Ready ({source:?}) mounting volume {volume}");

    // Another model's file and folder, outside this model's folder.
    let other = run.dir.join("other-model");
    std::fs::create_dir_all(&other)?;
    std::fs::write(other.join("config.json"), OTHER_CONFIG)?;
    let config_downloads = run.hub.downloads(REPO, "config.json").len();
    std::fs::remove_file(&config)?;
    std::os::unix::fs::symlink(other.join("config.json"), &config)?;
    std::os::unix::fs::symlink(&other, on_disk.join("tokenizer"))?;
    let planted = Instant::now();
    println!(
        "     planted in {}: config.json -> {}, tokenizer -> {}",
        on_disk.display(),
        other.join("config.json").display(),
        other.display()
    );

    eventually(
        "the agent to remove the links and fetch config.json again",
        REPAIRED_WITHIN,
        || async {
            ensure!(
                std::fs::symlink_metadata(on_disk.join("tokenizer")).is_err(),
                "the link `tokenizer` is still there"
            );
            let kind = std::fs::symlink_metadata(&config)
                .context("config.json is not there yet")?
                .file_type();
            ensure!(kind.is_file(), "config.json is not a regular file yet");
            expect_eq(
                "config.json's bytes",
                std::fs::read(&config)?,
                own_config.clone(),
            )?;
            ensure!(
                run.hub.downloads(REPO, "config.json").len() > config_downloads,
                "config.json was not downloaded again"
            );
            Ok(())
        },
    )
    .await?;
    let repaired = planted.elapsed();

    eventually(
        "the ModelCache to list the model Ready again",
        REPAIRED_WITHIN,
        || async {
            let cache = Api::<ModelCache>::all(s.client.clone())
                .get(&run.node.name)
                .await?;
            let model = cache
                .status
                .as_ref()
                .and_then(|st| st.models.iter().find(|m| m.key() == key(REPO)))
                .context("the ModelCache does not list the model")?;
            expect_eq("the model's phase", model.phase, CachedModelPhase::Ready)
        },
    )
    .await?;

    let log = run.agent.log_text();
    ensure!(
        log.contains("re-verification failed"),
        "the agent's log does not say the re-verification failed"
    );
    expect_eq(
        "the other model's config.json",
        std::fs::read(other.join("config.json"))?,
        OTHER_CONFIG.to_vec(),
    )?;
    expect_eq(
        "the other model's folder",
        entries(&other)?,
        vec!["config.json".to_string()],
    )?;
    println!(
        "     links removed, config.json fetched again and the model Ready within {:.1} s; \
         the other model's file untouched",
        repaired.as_secs_f64()
    );
    Ok(())
}

fn entries(dir: &Path) -> Result<Vec<String>> {
    let mut out: Vec<String> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()?;
    out.sort();
    Ok(out)
}
