//! Helpers of vramfit's end-to-end suite (`tests/e2e.rs`): polling with timeouts, child
//! processes killed on drop, the simulated GPU nodes, simulated kubelet pod statuses, and
//! the pure checks the scenarios share. Everything that talks to a cluster lives in the
//! test binary; what is here is either pure (and unit-tested) or process plumbing.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub mod crds;
pub mod namespaces;
pub mod rbac;

/// Runs `kubectl` (or `$KUBECTL`) with `args` and the suite's KUBECONFIG; its stdout, or an
/// error with its stderr.
pub fn kubectl(args: &[&str]) -> Result<String> {
    let program = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let output = Command::new(&program)
        .args(args)
        .output()
        .with_context(|| {
            format!("running {program} (set KUBECTL to its path if it is not on PATH)")
        })?;
    if !output.status.success() {
        bail!(
            "kubectl {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// What every skipped run prints on stderr.
pub const SKIP_MESSAGE: &str = "SKIPPED: KUBECONFIG is not set — the e2e suite needs a real cluster \
(kind, k3d, or any cluster with a scheduler and a controller manager); see e2e/README.md";

/// Field manager of everything the suite writes.
pub const MANAGER: &str = "vramfit-e2e";

/// Prefix of every node and namespace the suite creates.
pub const PREFIX: &str = "vramfit-e2e-";

/// Label on every object the suite creates, valued with the run id (for cleanup).
pub const RUN_LABEL: &str = "vramfit.io/e2e-run";

/// Why the suite cannot run here, if it cannot.
pub fn skip_reason() -> Option<&'static str> {
    match std::env::var_os("KUBECONFIG") {
        Some(v) if !v.is_empty() => None,
        _ => Some(SKIP_MESSAGE),
    }
}

/// The workspace root (the parent of `e2e/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

/// A short id unique enough to keep two runs on one cluster apart.
pub fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{:x}",
        (nanos as u64 ^ ((std::process::id() as u64) << 32)) & 0xff_ffff
    )
}

/// Polls `probe` until it succeeds or `timeout` passes. `probe` returns `Err` describing
/// what it saw; the timeout error names `what` was awaited and the last thing seen.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let start = Instant::now();
    let mut interval = Duration::from_millis(200);
    loop {
        match probe().await {
            Ok(value) => return Ok(value),
            Err(seen) => {
                if start.elapsed() >= timeout {
                    return Err(anyhow!(
                        "timed out after {:?} waiting for {what}; last seen: {seen:#}",
                        timeout
                    ));
                }
            }
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(Duration::from_secs(2));
    }
}

/// Polls `probe` for `duration` and fails as soon as it fails once: for "nothing more
/// happens" checks (no duplicate pod shows up).
pub async fn consistently<F, Fut>(what: &str, duration: Duration, mut probe: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let start = Instant::now();
    while start.elapsed() < duration {
        probe().await.with_context(|| {
            format!(
                "expected {what} to hold for {duration:?}, it stopped after {:?}",
                start.elapsed()
            )
        })?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// A simulated GPU node: a name suffix, the agent fixture that labels it, and the
/// `nvidia.com/gpu` it advertises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimNode {
    /// Appended to `vramfit-e2e-<run>-`.
    pub suffix: &'static str,
    /// File under `agent/fixtures/`.
    pub fixture: &'static str,
    /// GPUs in capacity and allocatable.
    pub gpus: u32,
    /// Expected `vramfit.io/gpu.product` substring (None: no GPU).
    pub product: Option<&'static str>,
}

/// The nodes the suite creates: V100×4 16 GB, A10G×1, A10G×4, H100×8, and one without GPUs.
pub const SIM_NODES: [SimNode; 5] = [
    SimNode {
        suffix: "v100x4",
        fixture: "v100-16gb-x4.yaml",
        gpus: 4,
        product: Some("V100"),
    },
    SimNode {
        suffix: "a10gx1",
        fixture: "a10g-x1.yaml",
        gpus: 1,
        product: Some("A10G"),
    },
    SimNode {
        suffix: "a10gx4",
        fixture: "a10g-x4.yaml",
        gpus: 4,
        product: Some("A10G"),
    },
    SimNode {
        suffix: "h100x8",
        fixture: "h100-x8.yaml",
        gpus: 8,
        product: Some("H100"),
    },
    SimNode {
        suffix: "nogpu",
        fixture: "no-gpu.yaml",
        gpus: 0,
        product: None,
    },
];

impl SimNode {
    /// The node's name in run `run`.
    pub fn name(&self, run: &str) -> String {
        format!("{PREFIX}{run}-{}", self.suffix)
    }

    /// Checks the labels the agent should have written.
    pub fn check_labels(&self, labels: &BTreeMap<String, String>) -> Result<()> {
        use vramfit_api::labels::*;
        let get = |k: &str| labels.get(k).map(String::as_str);
        match self.product {
            Some(product) => {
                expect_eq(GPU_PRESENT, get(GPU_PRESENT), Some("true"))?;
                let count = self.gpus.to_string();
                expect_eq(GPU_COUNT, get(GPU_COUNT), Some(count.as_str()))?;
                match get(GPU_PRODUCT) {
                    Some(p) if p.contains(product) => {}
                    seen => {
                        bail!("expected label {GPU_PRODUCT} to contain {product:?}, saw {seen:?}")
                    }
                }
                if get(GPU_MEMORY_MIB)
                    .and_then(|m| m.parse::<u64>().ok())
                    .unwrap_or(0)
                    == 0
                {
                    bail!(
                        "expected a positive {GPU_MEMORY_MIB}, saw {:?}",
                        get(GPU_MEMORY_MIB)
                    );
                }
                if gpu_facts(labels).is_none() {
                    bail!(
                        "vramfit_api::labels::gpu_facts cannot read the node's labels: {labels:?}"
                    );
                }
            }
            None => {
                expect_eq(GPU_PRESENT, get(GPU_PRESENT), Some("false"))?;
                expect_eq(GPU_ABSENT_REASON, get(GPU_ABSENT_REASON), Some("no-gpus"))?;
            }
        }
        Ok(())
    }
}

/// `Ok` when `seen == expected`, otherwise an error naming both.
pub fn expect_eq<T: PartialEq + std::fmt::Debug>(what: &str, seen: T, expected: T) -> Result<()> {
    if seen == expected {
        Ok(())
    } else {
        bail!("expected {what} = {expected:?}, saw {seen:?}")
    }
}

/// The Node object of a simulated GPU node (status is written separately, through the
/// nodes/status subresource).
pub fn node_manifest(node: &SimNode, run: &str) -> Value {
    let mut taints = vec![];
    if node.gpus > 0 {
        taints.push(json!({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name(run),
            "labels": {
                RUN_LABEL: run,
                "kubernetes.io/hostname": node.name(run),
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "spec": { "taints": taints },
    })
}

/// The status of a simulated node: GPUs in capacity and allocatable, and Ready (the
/// operator only places on Ready nodes; the suite re-sends it as a heartbeat).
pub fn node_status_patch(node: &SimNode, now: &str) -> Value {
    let resources = json!({
        "cpu": "64",
        "memory": "512Gi",
        "pods": "110",
        "nvidia.com/gpu": node.gpus.to_string(),
    });
    json!({
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "simulated by vramfit-e2e",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }],
        }
    })
}

/// Sets `metadata.namespace` of a manifest (examples are written for `default`).
pub fn with_namespace(mut manifest: Value, namespace: &str) -> Result<Value> {
    let metadata = manifest
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| anyhow!("manifest has no metadata"))?;
    metadata.insert("namespace".into(), Value::String(namespace.into()));
    Ok(manifest)
}

/// Reads every YAML document of a file (skipping empty ones).
pub fn read_yaml_documents(path: &Path) -> Result<Vec<Value>> {
    use serde::Deserialize as _;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs = vec![];
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value =
            Value::deserialize(doc).with_context(|| format!("parsing {}", path.display()))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// One requirement of a pod's required node affinity: `key In [values]` or `key NotIn [values]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The label.
    pub key: String,
    /// `true` for `In`, `false` for `NotIn`.
    pub within: bool,
    /// The values.
    pub values: Vec<String>,
}

/// The `In` and `NotIn` requirements of a pod's required node affinity (first term); any
/// other operator fails the check that uses them, as vramfit writes none.
pub fn affinity_requirements(pod: &Pod) -> Vec<Requirement> {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .and_then(|r| r.node_selector_terms.first())
        .and_then(|t| t.match_expressions.as_ref())
        .map(|exprs| {
            exprs
                .iter()
                .map(|e| Requirement {
                    key: e.key.clone(),
                    within: e.operator == "In",
                    values: e.values.clone().unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a node with `labels` satisfies every requirement, as the scheduler reads them
/// (`NotIn` holds for a node without the label).
pub fn satisfies(requirements: &[Requirement], labels: &BTreeMap<String, String>) -> bool {
    requirements.iter().all(|r| {
        let value = labels.get(&r.key);
        if r.within {
            value.is_some_and(|v| r.values.contains(v))
        } else {
            value.is_none_or(|v| !r.values.contains(v))
        }
    })
}

/// Checks that `kubectl get` output has a header with every column in `columns` and a row
/// starting with each of `rows`; returns the rows keyed by their first column.
pub fn parse_table(
    output: &str,
    columns: &[&str],
    rows: &[&str],
) -> Result<BTreeMap<String, BTreeMap<String, String>>> {
    let mut lines = output.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .ok_or_else(|| anyhow!("kubectl printed nothing"))?
        .split_whitespace()
        .collect();
    for column in columns {
        if !header.contains(column) {
            bail!("expected column {column} in the header, saw {header:?}");
        }
    }
    let mut table = BTreeMap::new();
    for line in lines {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let Some(first) = cells.first() else { continue };
        // Empty cells make rows shorter than the header: keep what lines up from the left
        // only when the row is complete.
        let row: BTreeMap<String, String> = if cells.len() == header.len() {
            header
                .iter()
                .zip(&cells)
                .map(|(h, c)| (h.to_string(), c.to_string()))
                .collect()
        } else {
            BTreeMap::from([("NAME".to_string(), first.to_string())])
        };
        table.insert(first.to_string(), row);
    }
    for row in rows {
        if !table.contains_key(*row) {
            bail!(
                "expected a row for {row}, saw rows {:?}",
                table.keys().collect::<Vec<_>>()
            );
        }
    }
    Ok(table)
}

/// A pod status a kubelet would write: the workload container runs.
pub fn pod_running_status(container: &str, image: &str, now: &str) -> Value {
    json!({
        "status": {
            "phase": "Running",
            "startTime": now,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [{
                "name": container,
                "image": image,
                "imageID": "",
                "ready": true,
                "started": true,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }],
        }
    })
}

/// A pod status a kubelet would write: the workload container ended with `exit_code`.
pub fn pod_terminated_status(
    container: &str,
    image: &str,
    now: &str,
    exit_code: i32,
    reason: &str,
    message: &str,
) -> Value {
    let phase = if exit_code == 0 {
        "Succeeded"
    } else {
        "Failed"
    };
    json!({
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
            "containerStatuses": [{
                "name": container,
                "image": image,
                "imageID": "",
                "ready": false,
                "started": false,
                "restartCount": 0,
                "state": {"terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "message": message,
                    "startedAt": now,
                    "finishedAt": now,
                }},
            }],
        }
    })
}

/// The termination message of a simulated CUDA out-of-memory failure.
pub const CUDA_OOM_MESSAGE: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB \
(GPU 0; 15.77 GiB total capacity; 14.90 GiB already allocated)";

/// A free TCP port on 127.0.0.1 (free when asked; good enough for a test).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The status code of `GET http://<addr><path>` (plain HTTP/1.1, no client dependency).
pub async fn http_status(addr: &str, path: &str) -> Result<u16> {
    let (code, _) = http_get(addr, path).await?;
    Ok(code)
}

/// `GET http://<addr><path>`: status code and body.
pub async fn http_get(addr: &str, path: &str) -> Result<(u16, String)> {
    let fut = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await?;
        anyhow::Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    let text = tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .map_err(|_| anyhow!("GET http://{addr}{path} timed out"))??;
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            anyhow!(
                "GET http://{addr}{path}: not an HTTP response: {:?}",
                text.lines().next()
            )
        })?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// Paths of the binaries under test.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// `vramfit-agent`.
    pub agent: PathBuf,
    /// `vramfit-operator`.
    pub operator: PathBuf,
}

impl Binaries {
    /// `VRAMFIT_AGENT_BIN` / `VRAMFIT_OPERATOR_BIN` when set, otherwise builds both with
    /// `cargo build -p vramfit-agent -p vramfit-operator` and uses `target/debug/`.
    pub fn locate() -> Result<Self> {
        let agent = std::env::var_os("VRAMFIT_AGENT_BIN").map(PathBuf::from);
        let operator = std::env::var_os("VRAMFIT_OPERATOR_BIN").map(PathBuf::from);
        let root = workspace_root();
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        if agent.is_none() || operator.is_none() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            eprintln!("e2e: building vramfit-agent and vramfit-operator (cargo build)");
            let status = Command::new(cargo)
                .args(["build", "-p", "vramfit-agent", "-p", "vramfit-operator"])
                .current_dir(&root)
                .status()
                .context("running cargo build")?;
            if !status.success() {
                bail!("cargo build -p vramfit-agent -p vramfit-operator failed ({status})");
            }
        }
        let bins = Binaries {
            agent: agent.unwrap_or_else(|| target.join("debug").join("vramfit-agent")),
            operator: operator.unwrap_or_else(|| target.join("debug").join("vramfit-operator")),
        };
        for bin in [&bins.agent, &bins.operator] {
            if !bin.is_file() {
                bail!("binary {} does not exist", bin.display());
            }
        }
        Ok(bins)
    }
}

/// A child process (an operator replica) killed and reaped on drop; its stdout and stderr
/// go to a log file that failures point at.
#[derive(Debug)]
pub struct ChildProcess {
    /// What it is, for messages.
    pub name: String,
    /// Where its output goes.
    pub log: PathBuf,
    /// Its `--metrics-addr`.
    pub addr: String,
    child: Option<Child>,
}

impl ChildProcess {
    /// Starts `program args…` with `env`, output appended to `log`.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
        log: PathBuf,
        addr: String,
    ) -> Result<Self> {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let out = File::options().create(true).append(true).open(&log)?;
        let err = out.try_clone()?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        Ok(Self {
            name: name.to_string(),
            log,
            addr,
            child: Some(child),
        })
    }

    /// `Err` with the log's tail when the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child.try_wait()?
        {
            bail!(
                "{} exited ({status}); log tail:\n{}",
                self.name,
                self.log_tail(30)
            );
        }
        Ok(())
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Its process id, while it has not been killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `apiserver_request_total` summed by (verb, group, resource, subresource), over every
/// response code, scope and version: what an API server's `/metrics` says it was asked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestTotals(pub BTreeMap<RequestKey, f64>);

/// A request kind of `apiserver_request_total`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// `POST`, `PUT`, `PATCH`, `APPLY` (a server-side apply), `DELETE`, `DELETECOLLECTION`,
    /// `GET`, `LIST`, `WATCH`…
    pub verb: String,
    /// API group (`""` for the core group).
    pub group: String,
    /// `pods`, `inferencejobs`, `events`…
    pub resource: String,
    /// `status`, `binding`… (`""` for the object itself).
    pub subresource: String,
}

/// The verbs that write.
pub const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

impl RequestTotals {
    /// Reads the `apiserver_request_total` samples of a Prometheus text exposition.
    pub fn parse(text: &str) -> Self {
        Self::parse_metric(text, "apiserver_request_total")
    }

    /// Reads the samples of `metric` (a counter with the labels of `apiserver_request_total`,
    /// e.g. `apiserver_request_duration_seconds_sum`).
    pub fn parse_metric(text: &str, metric: &str) -> Self {
        let prefix = format!("{metric}{{");
        let mut totals = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(prefix.as_str()) else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once('}') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let labels = prometheus_labels(labels);
            let get = |name: &str| labels.get(name).cloned().unwrap_or_default();
            let key = RequestKey {
                verb: get("verb"),
                group: get("group"),
                resource: get("resource"),
                subresource: get("subresource"),
            };
            *totals.entry(key).or_insert(0.0) += value;
        }
        Self(totals)
    }

    /// What was asked between `before` and `self` (counters only grow; a key missing before
    /// counts from zero).
    pub fn since(&self, before: &Self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(key, after)| {
                    let was = before.0.get(key).copied().unwrap_or(0.0);
                    (key.clone(), (after - was).max(0.0))
                })
                .filter(|(_, delta)| *delta > 0.0)
                .collect(),
        )
    }

    /// Requests with one of `verbs` on `resource` (any group) and `subresource`.
    pub fn count(&self, verbs: &[&str], resource: &str, subresource: &str) -> u64 {
        self.sum(verbs, resource, subresource).round() as u64
    }

    /// The sum over requests with one of `verbs` on `resource` and `subresource`, unrounded
    /// (seconds, for a duration sum).
    pub fn sum(&self, verbs: &[&str], resource: &str, subresource: &str) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| {
                verbs.contains(&k.verb.as_str())
                    && k.resource == resource
                    && k.subresource == subresource
            })
            .map(|(_, v)| *v)
            .sum()
    }

    /// Every write (any resource).
    pub fn writes(&self) -> u64 {
        self.0
            .iter()
            .filter(|(k, _)| WRITE_VERBS.contains(&k.verb.as_str()))
            .map(|(_, v)| *v)
            .sum::<f64>()
            .round() as u64
    }
}

/// `a="x",b="y"` → {a: x, b: y} (values unescaped).
fn prometheus_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(match escaped {
                            'n' => '\n',
                            other => other,
                        });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                other => value.push(other),
            }
        }
        labels.insert(name.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    labels
}

/// The value of a counter or gauge `name` (no labels) in a Prometheus text exposition.
pub fn prometheus_value(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (metric, value) = line.split_once(' ')?;
        (metric == name).then(|| value.trim().parse().ok())?
    })
}

/// A field of `/proc/<pid>/status` in KiB (`VmHWM`, `VmRSS`), on Linux.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// CPU seconds (user + system) a process has used, from `/proc/<pid>/stat` (Linux, 100 ticks
/// per second).
pub fn proc_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    // utime and stime are fields 14 and 15 of the line: 11 and 12 (from 0) after the name.
    Some((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

/// The `p` quantile (0..=1) of sorted `values` (nearest rank); `None` when empty.
pub fn quantile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
    };

    #[tokio::test]
    async fn eventually_retries_then_names_what_it_saw() {
        let mut n = 0;
        let v = eventually("n to reach 3", Duration::from_secs(5), || {
            n += 1;
            let seen = n;
            async move {
                if seen >= 3 {
                    Ok(seen)
                } else {
                    Err(anyhow!("n = {seen}"))
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(v, 3);
        let err = eventually("never", Duration::from_millis(300), || async {
            Err::<(), _>(anyhow!("still no"))
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("waiting for never") && err.contains("still no"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn consistently_fails_on_the_first_failure() {
        assert!(
            consistently("ok", Duration::from_millis(100), || async { Ok(()) })
                .await
                .is_ok()
        );
        let err = consistently("one pod", Duration::from_secs(5), || async {
            Err(anyhow!("two pods"))
        })
        .await
        .unwrap_err();
        assert!(format!("{err:#}").contains("two pods"));
    }

    #[test]
    fn skip_message_says_why() {
        assert!(SKIP_MESSAGE.starts_with("SKIPPED: KUBECONFIG is not set"));
        assert!(SKIP_MESSAGE.contains("e2e/README.md"));
    }

    #[test]
    fn fixtures_of_the_simulated_nodes_exist() {
        for node in SIM_NODES {
            let path = workspace_root().join("agent/fixtures").join(node.fixture);
            assert!(path.is_file(), "{} is missing", path.display());
            assert!(node.name("abc").starts_with(PREFIX));
        }
    }

    #[test]
    fn examples_parse_and_move_to_the_test_namespace() {
        let dir = workspace_root().join("examples");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            for doc in read_yaml_documents(&path).unwrap() {
                assert_eq!(doc["kind"], "InferenceJob", "{}", path.display());
                let moved = with_namespace(doc, "vramfit-e2e-x").unwrap();
                assert_eq!(moved["metadata"]["namespace"], "vramfit-e2e-x");
                seen += 1;
            }
        }
        assert!(seen > 0);
    }

    #[test]
    fn node_labels_are_checked_against_the_fixture() {
        use vramfit_api::labels::*;
        let node = SIM_NODES[0];
        let mut labels: BTreeMap<String, String> = [
            (GPU_PRESENT, "true"),
            (GPU_PRODUCT, "Tesla-V100-SXM2-16GB"),
            (GPU_COUNT, "4"),
            (GPU_MEMORY_MIB, "16160"),
            (GPU_COMPUTE_CAPABILITY, "7.0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        node.check_labels(&labels).unwrap();
        labels.insert(GPU_COUNT.into(), "2".into());
        let err = node.check_labels(&labels).unwrap_err().to_string();
        assert!(
            err.contains("gpu.count") && err.contains("\"4\"") && err.contains("\"2\""),
            "{err}"
        );
        let none = SIM_NODES[4];
        assert!(none.check_labels(&labels).is_err());
        let absent = [(GPU_PRESENT, "false"), (GPU_ABSENT_REASON, "no-gpus")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        none.check_labels(&absent).unwrap();
    }

    #[test]
    fn affinity_is_matched_against_node_labels() {
        let pod = Pod {
            spec: Some(PodSpec {
                affinity: Some(Affinity {
                    node_affinity: Some(NodeAffinity {
                        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                            node_selector_terms: vec![NodeSelectorTerm {
                                match_expressions: Some(vec![
                                    NodeSelectorRequirement {
                                        key: "vramfit.io/gpu.product".into(),
                                        operator: "In".into(),
                                        values: Some(vec!["NVIDIA-A10G".into()]),
                                    },
                                    NodeSelectorRequirement {
                                        key: "vramfit.io/gpu.mixed".into(),
                                        operator: "NotIn".into(),
                                        values: Some(vec!["true".into()]),
                                    },
                                ]),
                                match_fields: None,
                            }],
                        }),
                        preferred_during_scheduling_ignored_during_execution: None,
                    }),
                    ..Affinity::default()
                }),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        let reqs = affinity_requirements(&pod);
        assert_eq!(reqs.len(), 2);
        let a10g = BTreeMap::from([(
            "vramfit.io/gpu.product".to_string(),
            "NVIDIA-A10G".to_string(),
        )]);
        let h100 = BTreeMap::from([(
            "vramfit.io/gpu.product".to_string(),
            "NVIDIA-H100".to_string(),
        )]);
        assert!(satisfies(&reqs, &a10g), "NotIn holds without the label");
        assert!(!satisfies(&reqs, &h100));
        let mut mixed = a10g.clone();
        mixed.insert("vramfit.io/gpu.mixed".into(), "true".into());
        assert!(!satisfies(&reqs, &mixed));
        assert!(affinity_requirements(&Pod::default()).is_empty());
    }

    #[test]
    fn kubectl_tables_are_read_by_header() {
        let out = "NAME      PHASE       CLASS        GPUS   DTYPE      QUANT   AGE\n\
                   chat      Scheduled   a10g-x1      1      bfloat16   none    5s\n\
                   pending   Pending\n";
        let table = parse_table(
            out,
            &["PHASE", "CLASS", "GPUS", "DTYPE", "QUANT"],
            &["chat", "pending"],
        )
        .unwrap();
        assert_eq!(table["chat"]["PHASE"], "Scheduled");
        assert_eq!(table["chat"]["GPUS"], "1");
        assert!(
            parse_table(out, &["NODE"], &[])
                .unwrap_err()
                .to_string()
                .contains("NODE")
        );
        assert!(parse_table(out, &["PHASE"], &["gone"]).is_err());
    }

    #[test]
    fn simulated_statuses_carry_what_the_operator_reads() {
        let oom = pod_terminated_status(
            "inference",
            "img",
            "2026-01-01T00:00:00Z",
            1,
            "Error",
            CUDA_OOM_MESSAGE,
        );
        assert_eq!(oom["status"]["phase"], "Failed");
        let msg = oom["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
            .as_str()
            .unwrap();
        assert!(msg.contains("CUDA out of memory"));
        let ok = pod_terminated_status(
            "inference",
            "img",
            "2026-01-01T00:00:00Z",
            0,
            "Completed",
            "",
        );
        assert_eq!(ok["status"]["phase"], "Succeeded");
        assert_eq!(
            pod_running_status("inference", "img", "t")["status"]["phase"],
            "Running"
        );
        let status = node_status_patch(&SIM_NODES[3], "t");
        assert_eq!(status["status"]["allocatable"]["nvidia.com/gpu"], "8");
        let manifest = node_manifest(&SIM_NODES[4], "r");
        assert_eq!(manifest["spec"]["taints"].as_array().unwrap().len(), 0);
        assert_eq!(
            node_manifest(&SIM_NODES[0], "r")["spec"]["taints"][0]["key"],
            "nvidia.com/gpu"
        );
    }

    #[test]
    fn request_totals_are_summed_by_kind_and_diffed() {
        let before = RequestTotals::parse(
            "# HELP apiserver_request_total x\n\
             apiserver_request_total{code=\"201\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} 10\n\
             apiserver_request_total{code=\"409\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} 2\n\
             apiserver_request_total{code=\"200\",group=\"vramfit.io\",resource=\"inferencejobs\",subresource=\"status\",verb=\"APPLY\",version=\"v1alpha1\"} 3\n\
             apiserver_request_duration_seconds_count{verb=\"POST\"} 99\n",
        );
        assert_eq!(before.count(&["POST"], "pods", ""), 12);
        assert_eq!(before.count(&WRITE_VERBS, "inferencejobs", "status"), 3);
        assert_eq!(before.count(&WRITE_VERBS, "inferencejobs", ""), 0);
        let after = RequestTotals::parse(
            "apiserver_request_total{code=\"201\",group=\"\",resource=\"pods\",subresource=\"\",verb=\"POST\",version=\"v1\"} 15\n\
             apiserver_request_total{code=\"409\",group=\"\",resource=\"pods\",subresource=\"\",verb=\"POST\",version=\"v1\"} 2\n\
             apiserver_request_total{code=\"200\",group=\"vramfit.io\",resource=\"inferencejobs\",subresource=\"status\",verb=\"APPLY\",version=\"v1alpha1\"} 3\n\
             apiserver_request_total{code=\"201\",group=\"\",resource=\"pods\",subresource=\"binding\",verb=\"POST\",version=\"v1\"} 4\n\
             apiserver_request_total{code=\"200\",group=\"\",resource=\"pods\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 7\n",
        );
        let delta = after.since(&before);
        assert_eq!(delta.count(&["POST"], "pods", ""), 5);
        assert_eq!(delta.count(&["POST"], "pods", "binding"), 4);
        assert_eq!(delta.count(&WRITE_VERBS, "inferencejobs", "status"), 0);
        assert_eq!(delta.writes(), 9, "LIST is not a write");
    }

    #[test]
    fn prometheus_labels_unescape_values() {
        let labels = prometheus_labels(r#"a="x",b="say \"hi\"",c="""#);
        assert_eq!(labels["a"], "x");
        assert_eq!(labels["b"], "say \"hi\"");
        assert_eq!(labels["c"], "");
        let text = "vramfit_reconcile_duration_seconds_count 42\nvramfit_x{a=\"b\"} 1\n";
        assert_eq!(
            prometheus_value(text, "vramfit_reconcile_duration_seconds_count"),
            Some(42.0)
        );
        assert_eq!(prometheus_value(text, "vramfit_x"), None);
    }

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let values: Vec<u32> = (1..=100).collect();
        assert_eq!(quantile(&values, 0.5), Some(50));
        assert_eq!(quantile(&values, 0.99), Some(99));
        assert_eq!(quantile(&values, 1.0), Some(100));
        assert_eq!(quantile(&[7], 0.99), Some(7));
        assert_eq!(quantile::<u32>(&[], 0.5), None);
    }

    #[test]
    fn proc_status_fields_are_read_in_kib() {
        let pid = std::process::id();
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(proc_status_kib(pid, "VmHWM").unwrap_or(0) > 0);
            assert!(proc_status_kib(pid, "VmRSS").unwrap_or(0) > 0);
        }
        assert_eq!(proc_status_kib(pid, "NoSuchField"), None);
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(proc_cpu_seconds(pid).is_some());
        }
    }

    #[tokio::test]
    async fn http_status_reads_the_status_line() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await;
            s.write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 2\r\n\r\nno")
                .await
                .unwrap();
        });
        let (code, body) = http_get(&addr, "/readyz").await.unwrap();
        assert_eq!((code, body.as_str()), (503, "no"));
    }
}
