//! A real Prometheus for the dashboard check: started from its own binary on a free loopback
//! port, scraping the targets the suite hands it (file-based discovery, so a process started
//! later is scraped too), queried through its HTTP API.
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use serde_json::{Value, json};

use crate::processes::{ChildProcess, free_port};
use crate::{eventually, http10_get};

/// Seconds between scrapes: short, so that a scenario of a few minutes has many samples.
pub const SCRAPE_INTERVAL_SECONDS: u64 = 1;

/// The Prometheus binary to run: `$PROMETHEUS`, else `prometheus` on `PATH`; `None` when
/// neither is there.
pub fn prometheus_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PROMETHEUS").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("prometheus"))
        .find(|candidate| candidate.is_file())
}

/// The scrape configuration the check runs with: one scrape job per component, its targets
/// read from `<job>.json` in `dir` (rewritten as processes start).
pub fn scrape_config(dir: &Path, jobs: &[&str]) -> String {
    let mut config = format!(
        "global:\n  scrape_interval: {SCRAPE_INTERVAL_SECONDS}s\n  scrape_timeout: {SCRAPE_INTERVAL_SECONDS}s\nscrape_configs:\n"
    );
    for job in jobs {
        config.push_str(&format!(
            "  - job_name: {job}\n    file_sd_configs:\n      - files: ['{}']\n        refresh_interval: 1s\n",
            dir.join(format!("{job}.json")).display()
        ));
    }
    config
}

/// A running Prometheus, killed on drop.
pub struct Prometheus {
    /// `127.0.0.1:<port>` of its HTTP API.
    pub addr: String,
    dir: PathBuf,
    process: ChildProcess,
    targets: Vec<(String, Vec<String>)>,
}

impl Prometheus {
    /// Starts `binary` with its data and configuration in `dir`, scraping the jobs named
    /// (no target yet); waits until it answers `/-/ready`.
    pub async fn start(binary: &Path, dir: &Path, jobs: &[&str]) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, scrape_config(dir, jobs))?;
        let mut targets = Vec::new();
        for job in jobs {
            targets.push((job.to_string(), Vec::new()));
            write_targets(dir, job, &[])?;
        }
        let addr = format!("127.0.0.1:{}", free_port()?);
        let args = [
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.join("data").display()),
            format!("--web.listen-address={addr}"),
            "--log.level=warn".to_string(),
        ];
        let mut process = ChildProcess::spawn(
            "prometheus",
            binary,
            &args,
            &[],
            dir.join("prometheus.log"),
            addr.clone(),
        )?;
        process.wait_until_ok("/-/ready").await?;
        Ok(Self {
            addr,
            dir: dir.to_path_buf(),
            process,
            targets,
        })
    }

    /// Adds `target` (`host:port`) to scrape job `job`, and waits until its first scrape
    /// succeeded (`up == 1`).
    pub async fn scrape(&mut self, job: &str, target: &str) -> Result<()> {
        let Some((_, list)) = self.targets.iter_mut().find(|(j, _)| j == job) else {
            bail!("Prometheus was started without scrape job {job}");
        };
        if !list.iter().any(|t| t == target) {
            list.push(target.to_string());
        }
        write_targets(&self.dir, job, list)?;
        let up = format!("up{{job=\"{job}\",instance=\"{target}\"}} == 1");
        let this = &*self;
        eventually(
            &format!("Prometheus to scrape {target} ({job})"),
            Duration::from_secs(60),
            || {
                let up = up.clone();
                async move {
                    let series = this.query(&up, None).await?;
                    ensure!(!series.is_empty(), "{up}: no sample yet");
                    Ok(())
                }
            },
        )
        .await
    }

    /// `GET /api/v1/query`: the instant vector of `expr` at `time` (Unix seconds; now when
    /// `None`), as Prometheus returns its `result`.
    pub async fn query(&self, expr: &str, time: Option<f64>) -> Result<Vec<Value>> {
        let mut path = format!("/api/v1/query?query={}", url_encode(expr));
        if let Some(t) = time {
            path.push_str(&format!("&time={t:.3}"));
        }
        self.api(&path).await
    }

    /// `GET /api/v1/query_range`: the matrix of `expr` from `start` to `end` every `step`
    /// seconds.
    pub async fn query_range(
        &self,
        expr: &str,
        start: f64,
        end: f64,
        step: u64,
    ) -> Result<Vec<Value>> {
        let path = format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={step}",
            url_encode(expr)
        );
        self.api(&path).await
    }

    async fn api(&self, path: &str) -> Result<Vec<Value>> {
        let (code, body) = http10_get(&self.addr, path, Duration::from_secs(30)).await?;
        let reply: Value = serde_json::from_str(&body)
            .with_context(|| format!("Prometheus answered {code} with no JSON: {body:.300}"))?;
        if reply["status"] != "success" {
            bail!(
                "Prometheus refused the query ({code}, {}): {}",
                reply["errorType"].as_str().unwrap_or("?"),
                reply["error"].as_str().unwrap_or("?")
            );
        }
        reply["data"]["result"]
            .as_array()
            .cloned()
            .ok_or_else(|| anyhow!("Prometheus gave no result list: {body:.300}"))
    }

    /// Its log so far, for a failure's message.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }
}

/// `file_sd` targets of one job: `[{"targets": [...], "labels": {}}]`, written whole and
/// renamed into place so that Prometheus never reads half a file.
fn write_targets(dir: &Path, job: &str, targets: &[String]) -> Result<()> {
    let path = dir.join(format!("{job}.json"));
    let partial = dir.join(format!(".{job}.json.partial"));
    std::fs::write(
        &partial,
        serde_json::to_vec(&json!([{ "targets": targets, "labels": {} }]))?,
    )?;
    std::fs::rename(&partial, &path)?;
    Ok(())
}

/// Percent-encodes a query parameter (RFC 3986 unreserved characters stay).
pub fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(
            url_encode("sum by (le) (rate(x[4s]))"),
            "sum%20by%20%28le%29%20%28rate%28x%5B4s%5D%29%29"
        );
        assert_eq!(url_encode("a{b=\"c\"}"), "a%7Bb%3D%22c%22%7D");
    }

    #[test]
    fn each_job_reads_its_own_targets_file() {
        let config = scrape_config(Path::new("/tmp/p"), &["vramfit-operator", "vramfit-agent"]);
        assert!(config.contains("scrape_interval: 1s"), "{config}");
        assert!(
            config.contains(
                "  - job_name: vramfit-agent\n    file_sd_configs:\n      - files: ['/tmp/p/vramfit-agent.json']"
            ),
            "{config}"
        );
    }
}
