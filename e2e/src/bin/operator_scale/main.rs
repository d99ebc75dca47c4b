//! `operator-scale`: the operator at scale against the API server in `KUBECONFIG`, side by side
//! with the server's own limit, in one run.
//!
//! 1. **Nodes**: K fake GPU nodes (default 1,000) of mixed classes, labelled with the labels
//!    `vramfit-agent` renders from its fixtures, with `nvidia.com/gpu` capacity and
//!    allocatable and `Ready=True` written through `nodes/status`, and the
//!    `node.kubernetes.io/not-ready` taint that admission puts on a new node removed, as a
//!    kubelet's node would lose it.
//! 2. **Raw pod creates**: N clients (default 8) create bare pods (one container, a
//!    `nvidia.com/gpu: 1` limit, the GPU toleration) as fast as the server takes them: the
//!    physical limit of this server for pods. kube-scheduler binds them meanwhile (the time
//!    until all are bound is shown); then they are deleted. The same for bare InferenceJobs,
//!    with no operator running, for context.
//! 3. **Jobs**: the operator (`target/release/vramfit-operator`) runs as a child process; the
//!    same N clients create J InferenceJobs (default 5,000, one GPU each, a mix of runtimes,
//!    models and preferences). kube-scheduler binds the pods. Until every job is placed and
//!    the operator is quiet: jobs placed per second (job created → its pod created and the
//!    job `Scheduled`), as a ratio of phase 2's rate; job → pod latency; API writes counted
//!    by the server's own `apiserver_request_total`; the operator's peak RSS.
//! 4. **Restart**: the operator is killed and started again; the time until `/readyz` is 200
//!    and every job was reconciled, and the writes it made meanwhile (expected: none).
//!
//! With `--previous-operator PATH` phases 3 and 4 run twice on the same nodes and cluster: first
//! with that binary (the operator before a change) in a namespace of its own, removed after it,
//! then with the current one. The report ends with the mode's figures beside their goals:
//! figure | goal | previous | now | met/missed (the previous column "—" without the option).
//!
//! Everything it creates (namespaces, pods, jobs, nodes, the CRDs if it installed them) is
//! removed at the end, on failure and on Ctrl-C too. It exits non-zero only on errors, never
//! because a target or goal is missed.
#![forbid(unsafe_code)]

mod autoscale;
mod goals;
mod groups;
mod measure;
mod serving;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use vramfit_api::{InferenceJob, Phase};
use vramfit_e2e::crds;
use vramfit_e2e::namespaces;
use vramfit_e2e::{
    ChildProcess, RequestTotals, WRITE_VERBS, eventually, free_port, http_get, http_status,
    proc_cpu_seconds, proc_status_kib, quantile, run_id, target_dir, workspace_root,
};

/// Field manager of everything the benchmark writes.
const MANAGER: &str = "vramfit-scale";
/// Prefix of the namespace and nodes it creates.
const PREFIX: &str = "vramfit-scale-";
/// Label on every node it creates (and on its namespace), valued with the run id.
const RUN_LABEL: &str = "vramfit.io/scale-run";

#[derive(Parser, Debug, Clone)]
#[command(
    name = "operator-scale",
    about = "The operator at scale against the API server in KUBECONFIG, next to the server's raw pod-create rate"
)]
struct Args {
    /// InferenceJobs to create.
    #[arg(long, default_value_t = 5000)]
    jobs: usize,
    /// Fake GPU nodes.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Concurrent clients (requests in flight) of the benchmark's creates.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Bare pods of the raw-rate phase (default: as many as jobs, at most 2,000).
    #[arg(long)]
    raw_pods: Option<usize>,
    /// The operator binary (default: target/release/vramfit-operator).
    #[arg(long, env = "VRAMFIT_OPERATOR_BIN")]
    operator: Option<PathBuf>,
    /// A release binary of the operator before a change: phases 3 and 4 run first with it (in
    /// a namespace of their own, removed after), then with `--operator`, and the goals table
    /// shows both.
    #[arg(long)]
    previous_operator: Option<PathBuf>,
    /// `--concurrency` of the operator (default: the operator's own).
    #[arg(long)]
    operator_concurrency: Option<u16>,
    /// Write the raw pods by server-side apply (as the operator writes its pods) instead of
    /// creating them.
    #[arg(long)]
    raw_apply: bool,
    /// Renew a node Lease per fake node every 15 s (only where a node lifecycle controller
    /// would otherwise mark them NotReady; it adds K/15 writes per second).
    #[arg(long)]
    heartbeat: bool,
    /// KiB of incompressible env values added to every job of phase 3 (in 32 KiB variables,
    /// the largest value the CRD allows): the operator's memory with large jobs.
    #[arg(long, default_value_t = 0)]
    job_padding_kib: usize,
    /// Served jobs with this many replicas each instead of batch jobs (0: batch jobs): the
    /// benchmark acts as the kubelet (replica pods Ready, deletions confirmed) and measures
    /// the time until every replica is Ready, then a rolling update of every job.
    #[arg(long, default_value_t = 0)]
    serve_replicas: usize,
    /// With `--serve-replicas`: the jobs autoscale (`serve.autoscaling`, R to R + 1
    /// replicas), every replica's metrics served by the benchmark on its own address of
    /// 198.18.0.0/15, which must reach this machine (`ip route add local 198.18.0.0/15 dev
    /// lo`); after the roll, 60 s of steady load and a step up are measured (metrics
    /// reads per second, the operator's CPU and memory, the decision latency).
    #[arg(long)]
    autoscale: bool,
    /// Batch groups of this many nodes instead of one-pod jobs (0: one-pod jobs): every node
    /// is 4×V100-16GB and every job Llama-3.1-70B in 16-bit (`gpus.maxNodes`), which the
    /// planner splits over 4 nodes (only 4 is accepted); the benchmark acts as the kubelet
    /// and measures the time until every group is bound with its leader Running.
    #[arg(long, default_value_t = 0)]
    group_nodes: usize,
    /// Writes in flight at once of the benchmark's kubelet (`--serve-replicas`,
    /// `--group-nodes`): pod status and confirmed deletions. A cluster has one kubelet per
    /// node; the stand-in makes at most this many writes at once.
    #[arg(long, default_value_t = 16)]
    kubelet_concurrency: usize,
    /// Longest the whole run may take before it gives up (cleanup comes on top).
    #[arg(long, default_value_t = 1800)]
    timeout_secs: u64,
}

/// The skip line: the benchmark never runs without a cluster (CI has none).
const NEEDS_KUBECONFIG: &str = "operator-scale needs KUBECONFIG: it measures the operator against a real \
API server (kind, k3d, a cloud cluster, or a bare kube-apiserver + etcd + scheduler); nothing was run";

fn main() -> ExitCode {
    let args = Args::parse();
    if vramfit_e2e::skip_reason().is_some() {
        eprintln!("{NEEDS_KUBECONFIG}");
        return ExitCode::from(2);
    }
    if args.jobs == 0 || args.nodes == 0 || args.clients == 0 {
        eprintln!("operator-scale: --jobs, --nodes and --clients must be at least 1");
        return ExitCode::from(2);
    }
    if args.autoscale && args.serve_replicas == 0 {
        eprintln!("operator-scale: --autoscale needs --serve-replicas");
        return ExitCode::from(2);
    }
    if args.group_nodes > 0 && args.serve_replicas > 0 {
        eprintln!("operator-scale: --group-nodes and --serve-replicas are two different runs");
        return ExitCode::from(2);
    }
    let plan = Arc::new(Mutex::new(CleanupPlan::default()));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("operator-scale: no tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let limit = Duration::from_secs(args.timeout_secs);
    let result = runtime.block_on(async {
        tokio::select! {
            result = tokio::time::timeout(limit, run(&args, plan.clone())) => match result {
                Ok(result) => result,
                Err(_) => Err(anyhow!("gave up after --timeout-secs {}", args.timeout_secs)),
            },
            _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        }
    });
    // The operator child is killed when `run` is dropped; then everything else goes.
    let cleaned = runtime.block_on(async {
        let plan = std::mem::take(&mut *plan.lock().unwrap_or_else(|e| e.into_inner()));
        tokio::time::timeout(Duration::from_secs(600), cleanup(plan)).await
    });
    drop(runtime);
    let cleanup_ok = match cleaned {
        Ok(Ok(())) => {
            eprintln!("operator-scale: cleanup done");
            true
        }
        Ok(Err(error)) => {
            eprintln!("operator-scale: CLEANUP INCOMPLETE: {error:#}");
            false
        }
        Err(_) => {
            eprintln!("operator-scale: CLEANUP INCOMPLETE: timed out after 600 s");
            false
        }
    };
    match result {
        Ok(report) => {
            println!("{report}");
            if cleanup_ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("operator-scale: FAILED: {error:#}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------
// Cleanup
// ---------------------------------------------------------------------------------------

/// What cleanup removes; filled in as the run creates things.
#[derive(Debug, Default)]
struct CleanupPlan {
    run: String,
    namespaces: Vec<String>,
    nodes: bool,
    leases: Vec<String>,
    crds: Vec<String>,
}

async fn cleanup(plan: CleanupPlan) -> Result<()> {
    if plan.run.is_empty() {
        return Ok(());
    }
    eprintln!("operator-scale: cleaning up run {}", plan.run);
    let client = Client::try_default().await?;
    let mut problems = vec![];
    for ns in &plan.namespaces {
        if let Err(error) = remove_namespace(&client, ns).await {
            problems.push(format!("{error:#}"));
        }
    }
    if plan.nodes {
        let nodes: Api<Node> = Api::all(client.clone());
        let selector = format!("{RUN_LABEL}={}", plan.run);
        if let Err(error) = nodes
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(&selector),
            )
            .await
        {
            problems.push(format!("nodes {selector}: {error}"));
        }
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        if !plan.leases.is_empty() {
            let _ = leases
                .delete_collection(
                    &DeleteParams::default(),
                    &ListParams::default().labels(&selector),
                )
                .await;
        }
        let left = nodes
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if left > 0 {
            problems.push(format!("{left} nodes {selector} are left"));
        }
    }
    crds::remove(&client, &plan.crds, &mut problems).await;
    if problems.is_empty() {
        Ok(())
    } else {
        bail!("{}", problems.join("; "))
    }
}

/// Removes a namespace of the run: the jobs first (the operator is gone: nothing re-creates
/// their pods), then the pods, forced (pods bound to fake nodes have no kubelet to confirm
/// their deletion), then the namespace, waited for.
async fn remove_namespace(client: &Client, ns: &str) -> Result<()> {
    let jobs: Api<InferenceJob> = Api::namespaced(client.clone(), ns);
    let _ = jobs
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await;
    namespaces::remove(client, ns, Duration::from_secs(300)).await
}

// ---------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------

/// The run's figures.
#[derive(Debug, Default)]
struct Report {
    args_line: String,
    server: String,
    clients: usize,
    raw_apply: bool,
    raw_pods: usize,
    raw_wall: Duration,
    raw_bound_wall: Option<Duration>,
    raw_jobs_wall: Duration,
    server_seconds: RequestTotals,
    operator_cpu: f64,
    benchmark_cpu: f64,
    reconcile_mean: Duration,
    raw_writes_per_pod: f64,
    nodes: usize,
    gpus: u32,
    jobs: usize,
    jobs_created_wall: Duration,
    placed: usize,
    unschedulable: usize,
    placed_wall: Duration,
    pods_bound: usize,
    /// Job created → the job seen `Scheduled` by the benchmark's watch.
    job_to_placed: Vec<Duration>,
    /// Pod `creationTimestamp` − job `creationTimestamp` (whole seconds).
    job_to_pod_server: Vec<i64>,
    writes: RequestTotals,
    operator_events: EventCounts,
    other_events: BTreeMap<String, EventCounts>,
    operator_reconciles: f64,
    hwm_kib: u64,
    rss_kib: u64,
    restart_ready: Duration,
    restart_resynced: Duration,
    restart_reconciles: f64,
    restart_writes: RequestTotals,
    restart_hwm_kib: u64,
    nodes_not_ready: usize,
    /// `--serve-replicas`: the served-job phase's figures (instead of the batch job phase's).
    serving: Option<serving::Figures>,
    /// `--group-nodes`: the group phase's figures.
    groups: Option<groups::Figures>,
    /// The operator binary phases 3 and 4 ran.
    operator: String,
    /// `--previous-operator`: phases 3 and 4 with that binary, run first.
    previous: Option<Box<Report>>,
    /// The sizes the goals are stated at.
    sizes: goals::Sizes,
}

impl Report {
    /// A report with this one's shared figures (the server, the nodes, the raw rates) and
    /// none of phases 3 and 4: the previous operator's.
    fn shared(&self, operator: &std::path::Path) -> Report {
        Report {
            args_line: self.args_line.clone(),
            server: self.server.clone(),
            clients: self.clients,
            raw_apply: self.raw_apply,
            raw_pods: self.raw_pods,
            raw_wall: self.raw_wall,
            raw_bound_wall: self.raw_bound_wall,
            raw_jobs_wall: self.raw_jobs_wall,
            raw_writes_per_pod: self.raw_writes_per_pod,
            nodes: self.nodes,
            gpus: self.gpus,
            jobs: self.jobs,
            operator: operator.display().to_string(),
            sizes: self.sizes,
            ..Report::default()
        }
    }
}

async fn run(args: &Args, plan: Arc<Mutex<CleanupPlan>>) -> Result<Report> {
    let root = workspace_root();
    let operator_bin = args
        .operator
        .clone()
        .unwrap_or_else(|| target_dir().join("release").join("vramfit-operator"));
    ensure!(
        operator_bin.is_file(),
        "no operator binary at {}: build it with `cargo build --release -p vramfit-operator` \
         (or pass --operator)",
        operator_bin.display()
    );
    let client = Client::try_default()
        .await
        .context("connecting with KUBECONFIG")?;
    let version = client
        .apiserver_version()
        .await
        .context("reading the API server version")?;
    let raw_pods = args.raw_pods.unwrap_or(args.jobs.min(2000));
    let mut report = Report {
        args_line: format!(
            "--jobs {} --nodes {} --clients {} --raw-pods {raw_pods} --job-padding-kib {}{}",
            args.jobs,
            args.nodes,
            args.clients,
            args.job_padding_kib,
            if args.serve_replicas > 0 || args.group_nodes > 0 {
                format!(" --kubelet-concurrency {}", args.kubelet_concurrency)
            } else {
                String::new()
            }
        ),
        server: format!(
            "{}.{} ({})",
            version.major, version.minor, version.git_version
        ),
        jobs: args.jobs,
        nodes: args.nodes,
        clients: args.clients,
        raw_apply: args.raw_apply,
        raw_pods,
        operator: operator_bin.display().to_string(),
        sizes: goals::Sizes::of(args),
        ..Report::default()
    };
    if let Some(previous) = &args.previous_operator {
        ensure!(
            previous.is_file(),
            "no operator binary at {} (--previous-operator)",
            previous.display()
        );
    }
    let run = run_id();
    let ns = format!("{PREFIX}{run}");
    plan.lock().unwrap_or_else(|e| e.into_inner()).run = run.clone();
    let logs = target_dir().join("operator-scale").join(&run);
    std::fs::create_dir_all(&logs)?;
    eprintln!(
        "operator-scale: run {run}, namespace {ns}, API server {}, operator {}, logs {}",
        report.server,
        operator_bin.display(),
        logs.display()
    );

    crds::install(&client, &root, |name| {
        plan.lock()
            .unwrap_or_else(|e| e.into_inner())
            .crds
            .push(name.to_string());
    })
    .await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {"name": ns, "labels": {RUN_LABEL: run}}
    }))?;
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .context("creating the namespace")?;
    plan.lock()
        .unwrap_or_else(|e| e.into_inner())
        .namespaces
        .push(ns.clone());
    let clients = clients(args.clients).await?;

    // 1. Nodes.
    eprintln!("operator-scale: 1/4 {} fake GPU nodes", args.nodes);
    let (shapes, group_plan) = if args.group_nodes > 0 {
        let (fixture, gpus) = groups::GROUP_NODE_SHAPE;
        let shape = node_shape(&root, fixture, gpus, 1.0)?;
        let plan = groups::check_plan(&shape, args.group_nodes)?;
        (vec![shape], plan)
    } else {
        (node_shapes(&root)?, String::new())
    };
    plan.lock().unwrap_or_else(|e| e.into_inner()).nodes = true;
    let node_names: Vec<String> = (0..args.nodes)
        .map(|i| format!("{PREFIX}{run}-{i:05}"))
        .collect();
    let node_shape: Vec<&NodeShape> = (0..args.nodes)
        .map(|i| shape_of(&shapes, i, args.nodes))
        .collect();
    report.gpus = node_shape.iter().map(|s| s.gpus).sum();
    {
        let names = &node_names;
        let node_shape = &node_shape;
        let run = &run;
        create_all(&clients, args.nodes, |i, client| async move {
            create_node(&client, &names[i], node_shape[i], run).await
        })
        .await
        .context("creating the nodes")?;
    }
    let heartbeat = if args.heartbeat {
        plan.lock().unwrap_or_else(|e| e.into_inner()).leases = node_names.clone();
        Some(tokio::spawn(heartbeat(
            clients.clone(),
            node_names.clone(),
            run.clone(),
        )))
    } else {
        None
    };

    // 2. The server's own limit: bare pod creates (kube-scheduler binds them meanwhile, as it
    // binds the jobs' pods later).
    eprintln!(
        "operator-scale: 2/4 raw pod creates: {raw_pods} pods, {} clients",
        args.clients
    );
    let before = scrape(&client).await?;
    let started = Instant::now();
    let apply = args.raw_apply;
    create_all(&clients, raw_pods, |i, client| {
        let ns = ns.clone();
        let run = run.clone();
        async move {
            let pods: Api<Pod> = Api::namespaced(client, &ns);
            let pod: Pod = serde_json::from_value(raw_pod(i, &run))?;
            if apply {
                let params = PatchParams::apply(MANAGER).force();
                pods.patch(&pod.name_any(), &params, &Patch::Apply(&pod))
                    .await?;
            } else {
                pods.create(&PostParams::default(), &pod).await?;
            }
            Ok(())
        }
    })
    .await
    .context("creating the raw pods")?;
    report.raw_wall = started.elapsed();
    let raw_writes = scrape(&client).await?.since(&before);
    report.raw_writes_per_pod =
        raw_writes.count(&WRITE_VERBS, "pods", "") as f64 / raw_pods.max(1) as f64;
    report.raw_bound_wall = wait_raw_bound(&client, &ns, &run, raw_pods, started).await?;
    delete_raw(&client, &ns, &run).await?;

    // The same for InferenceJobs (no operator runs yet): the server's cost of a custom
    // resource, for context.
    eprintln!(
        "operator-scale:     raw InferenceJob creates: {raw_pods} jobs, {} clients",
        args.clients
    );
    let started = Instant::now();
    create_all(&clients, raw_pods, |i, client| {
        let ns = ns.clone();
        let run = run.clone();
        async move {
            let jobs: Api<InferenceJob> = Api::namespaced(client, &ns);
            let mut manifest = job_manifest(i);
            manifest["metadata"] =
                json!({"name": format!("raw-job-{i:05}"), "labels": {RUN_LABEL: run}});
            let job: InferenceJob = serde_json::from_value(manifest)?;
            jobs.create(&PostParams::default(), &job).await?;
            Ok(())
        }
    })
    .await
    .context("creating the raw jobs")?;
    report.raw_jobs_wall = started.elapsed();
    delete_raw(&client, &ns, &run).await?;

    // 3. The operator and the jobs (served jobs with `--serve-replicas`, groups with
    // `--group-nodes`), 4. its restart: with `--previous-operator` first with that binary, in a
    // namespace of its own (removed after it, so the nodes are free again), then with the
    // current one in the run's namespace.
    if let Some(previous_bin) = &args.previous_operator {
        let previous_ns = format!("{ns}-previous");
        let namespace: Namespace = serde_json::from_value(json!({
            "metadata": {"name": previous_ns, "labels": {RUN_LABEL: run}}
        }))?;
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .context("creating the previous operator's namespace")?;
        plan.lock()
            .unwrap_or_else(|e| e.into_inner())
            .namespaces
            .push(previous_ns.clone());
        eprintln!(
            "operator-scale: the previous operator {} in namespace {previous_ns}",
            previous_bin.display()
        );
        let logs = logs.join("previous");
        std::fs::create_dir_all(&logs)?;
        let mut previous = report.shared(previous_bin);
        measure(
            args,
            &client,
            &clients,
            &previous_ns,
            previous_bin,
            &logs,
            &group_plan,
            &mut previous,
        )
        .await?;
        previous.nodes_not_ready = nodes_not_ready(&client, &run).await?;
        eprintln!("operator-scale:     removing namespace {previous_ns}");
        remove_namespace(&client, &previous_ns).await?;
        plan.lock()
            .unwrap_or_else(|e| e.into_inner())
            .namespaces
            .retain(|n| *n != previous_ns);
        report.previous = Some(Box::new(previous));
        eprintln!(
            "operator-scale: the current operator {} in namespace {ns}",
            operator_bin.display()
        );
    }
    measure(
        args,
        &client,
        &clients,
        &ns,
        &operator_bin,
        &logs,
        &group_plan,
        &mut report,
    )
    .await?;
    if let Some(heartbeat) = heartbeat {
        heartbeat.abort();
    }
    report.nodes_not_ready = nodes_not_ready(&client, &run).await?;
    Ok(report)
}

/// Phases 3 and 4 with `operator_bin` in `ns`, by mode: groups, served jobs or batch jobs.
#[allow(clippy::too_many_arguments)]
async fn measure(
    args: &Args,
    client: &Client,
    clients: &[Client],
    ns: &str,
    operator_bin: &std::path::Path,
    logs: &std::path::Path,
    group_plan: &str,
    report: &mut Report,
) -> Result<()> {
    if args.group_nodes > 0 {
        eprintln!(
            "operator-scale: 3/4 {} group InferenceJobs ({group_plan}), operator as a child process",
            args.jobs
        );
        report.groups = Some(
            groups::run(
                args,
                group_plan.to_string(),
                client,
                clients,
                ns,
                operator_bin,
                logs,
            )
            .await?,
        );
        return Ok(());
    }
    if args.serve_replicas > 0 {
        eprintln!(
            "operator-scale: 3/4 {} served InferenceJobs × {} replicas, operator as a child process",
            args.jobs, args.serve_replicas
        );
        report.serving = Some(serving::run(args, client, clients, ns, operator_bin, logs).await?);
        return Ok(());
    }
    batch(args, client, clients, ns, operator_bin, logs, report).await
}

/// Phases 3 and 4 with batch jobs.
async fn batch(
    args: &Args,
    client: &Client,
    clients: &[Client],
    ns: &str,
    operator_bin: &std::path::Path,
    logs: &std::path::Path,
    report: &mut Report,
) -> Result<()> {
    eprintln!(
        "operator-scale: 3/4 {} InferenceJobs, operator as a child process",
        args.jobs
    );
    let observed = Arc::new(Mutex::new(Observed::default()));
    let watches = tokio::spawn(watch_namespace(
        client.clone(),
        ns.to_string(),
        observed.clone(),
    ));
    let mut operator = start_operator(operator_bin, args, logs, "operator-1")?;
    wait_ready(&mut operator, Duration::from_secs(120)).await?;
    let pid = operator
        .pid()
        .ok_or_else(|| anyhow!("the operator has no pid"))?;
    let cpu_before = (
        proc_cpu_seconds(pid).unwrap_or(0.0),
        proc_cpu_seconds(std::process::id()).unwrap_or(0.0),
    );
    let (before, durations_before) = scrape_all(client).await?;
    let created: Arc<Mutex<HashMap<String, Created>>> = Arc::default();
    let started = Instant::now();
    {
        let created = created.clone();
        let padding_kib = args.job_padding_kib;
        create_all(clients, args.jobs, move |i, client| {
            let created = created.clone();
            async move {
                let jobs: Api<InferenceJob> = Api::namespaced(client, ns);
                let mut manifest = job_manifest(i);
                pad_job(&mut manifest, padding_kib, i);
                let job: InferenceJob = serde_json::from_value(manifest)?;
                let answer = jobs.create(&PostParams::default(), &job).await?;
                let at = Instant::now();
                created.lock().unwrap_or_else(|e| e.into_inner()).insert(
                    job_name(i),
                    Created {
                        at,
                        timestamp: answer.metadata.creation_timestamp.map(|t| t.0),
                    },
                );
                Ok(())
            }
        })
        .await
        .context("creating the jobs")?;
    }
    report.jobs_created_wall = started.elapsed();
    eprintln!(
        "operator-scale:     {} jobs created in {:.1} s; waiting for placement",
        args.jobs,
        report.jobs_created_wall.as_secs_f64()
    );
    wait_settled(&observed, &mut operator, args.jobs, started).await?;
    wait_quiet(client, &mut operator, &before).await?;
    let (after, durations_after) = scrape_all(client).await?;
    report.writes = after.since(&before);
    report.server_seconds = durations_after.since(&durations_before);
    report.operator_cpu = proc_cpu_seconds(pid).unwrap_or(0.0) - cpu_before.0;
    report.benchmark_cpu = proc_cpu_seconds(std::process::id()).unwrap_or(0.0) - cpu_before.1;
    report.reconcile_mean = mean_reconcile(&operator).await.unwrap_or_default();
    report.hwm_kib = proc_status_kib(pid, "VmHWM").unwrap_or(0);
    report.rss_kib = proc_status_kib(pid, "VmRSS").unwrap_or(0);
    report.operator_reconciles = reconciles(&operator).await.unwrap_or(0.0);
    let pods = list_pods(client, ns).await?;
    {
        let observed = observed.lock().unwrap_or_else(|e| e.into_inner());
        let created = created.lock().unwrap_or_else(|e| e.into_inner());
        fill_latencies(report, &observed, &created, &pods, started);
    }
    drop(pods);
    let (operator_events, other_events) = count_events(client, ns).await?;
    report.operator_events = operator_events;
    report.other_events = other_events;

    // 4. Restart: resync without writing.
    eprintln!("operator-scale: 4/4 restart: kill the operator, start it again");
    let before = scrape(client).await?;
    operator.kill();
    let started = Instant::now();
    let mut operator = start_operator(operator_bin, args, logs, "operator-2")?;
    wait_ready(&mut operator, Duration::from_secs(300)).await?;
    report.restart_ready = started.elapsed();
    report.restart_resynced = wait_resynced(&mut operator, args.jobs, started).await?;
    report.restart_reconciles = reconciles(&operator).await.unwrap_or(0.0);
    wait_quiet(client, &mut operator, &before).await?;
    report.restart_writes = scrape(client).await?.since(&before);
    if let Some(pid) = operator.pid() {
        report.restart_hwm_kib = proc_status_kib(pid, "VmHWM").unwrap_or(0);
    }
    operator.kill();
    watches.abort();
    Ok(())
}

/// `n` clients, one connection pool each.
async fn clients(n: usize) -> Result<Vec<Client>> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(Client::try_default().await?);
    }
    Ok(clients)
}

/// Runs `create(i, client)` for `0..count`, `clients.len()` at a time, each on the next
/// client in turn; the first error stops it.
async fn create_all<F, Fut>(clients: &[Client], count: usize, create: F) -> Result<()>
where
    F: Fn(usize, Client) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let next = AtomicUsize::new(0);
    let create = &create;
    let next = &next;
    let workers = clients.iter().map(|client| async move {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= count {
                return Ok::<(), anyhow::Error>(());
            }
            create(i, client.clone())
                .await
                .with_context(|| format!("item {i}"))?;
        }
    });
    futures::future::try_join_all(workers).await?;
    Ok(())
}

/// The API server's request counters.
async fn scrape(client: &Client) -> Result<RequestTotals> {
    Ok(scrape_all(client).await?.0)
}

/// The API server's request counters and the sums of their durations.
async fn scrape_all(client: &Client) -> Result<(RequestTotals, RequestTotals)> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .context("building GET /metrics")?;
    let text = client
        .request_text(request)
        .await
        .context("GET /metrics of the API server (needs the metrics reader permission)")?;
    let totals = RequestTotals::parse(&text);
    ensure!(
        !totals.0.is_empty(),
        "the API server's /metrics has no apiserver_request_total"
    );
    let durations = RequestTotals::parse_metric(&text, "apiserver_request_duration_seconds_sum");
    Ok((totals, durations))
}

/// A bare pod: one container, one GPU, the GPU toleration (kube-scheduler binds it to a fake
/// node, as it binds the jobs' pods).
fn raw_pod(i: usize, run: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("raw-{i:05}"), "labels": {RUN_LABEL: run}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "inference",
                "image": "registry.example/inference:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        }
    })
}

/// Waits until kube-scheduler bound every raw pod (at most 5 minutes); returns when, from
/// `started`, or `None` if some were left unbound (the table says so, it is no error).
async fn wait_raw_bound(
    client: &Client,
    ns: &str,
    run: &str,
    count: usize,
    started: Instant,
) -> Result<Option<Duration>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = ListParams::default().labels(&format!("{RUN_LABEL}={run}"));
    let bound = eventually(
        "kube-scheduler to bind the raw pods",
        Duration::from_secs(300),
        || async {
            let list = pods.list(&selector).await?;
            let bound = list
                .items
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .count();
            ensure!(bound >= count, "{bound} of {count} bound");
            Ok(started.elapsed())
        },
    )
    .await;
    match bound {
        Ok(at) => Ok(Some(at)),
        Err(error) => {
            eprintln!("operator-scale:     {error:#}");
            Ok(None)
        }
    }
}

/// Deletes the raw pods and jobs of the run and waits until they are gone.
async fn delete_raw(client: &Client, ns: &str, run: &str) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let jobs: Api<InferenceJob> = Api::namespaced(client.clone(), ns);
    let selector = ListParams::default().labels(&format!("{RUN_LABEL}={run}"));
    pods.delete_collection(&DeleteParams::default().grace_period(0), &selector)
        .await
        .context("deleting the raw pods")?;
    jobs.delete_collection(&DeleteParams::default(), &selector)
        .await
        .context("deleting the raw jobs")?;
    eventually(
        "the raw pods and jobs to be gone",
        Duration::from_secs(300),
        || async {
            let pods = pods.list_metadata(&selector).await?.items.len();
            let jobs = jobs.list_metadata(&selector).await?.items.len();
            ensure!(pods + jobs == 0, "{pods} pods and {jobs} jobs left");
            Ok(())
        },
    )
    .await
}

/// A node shape: the agent fixture it is labelled from, its GPUs, its share of the nodes.
#[derive(Debug)]
struct NodeShape {
    labels: BTreeMap<String, String>,
    gpus: u32,
    share: f64,
}

/// The mix of the operator's reconcile harness (7 classes, 5.3 GPUs per node on average),
/// labelled as `vramfit-agent` labels a node from its fixtures.
fn node_shapes(root: &std::path::Path) -> Result<Vec<NodeShape>> {
    const MIX: [(&str, u32, f64); 7] = [
        ("a10g-x4.yaml", 4, 0.25),
        ("a10g-x1.yaml", 1, 0.10),
        ("l40s-x1.yaml", 4, 0.15),
        ("t4-x1.yaml", 4, 0.10),
        ("v100-16gb-x4.yaml", 8, 0.15),
        ("a100-80gb-x1.yaml", 8, 0.15),
        ("h100-x8.yaml", 8, 0.10),
    ];
    MIX.iter()
        .map(|&(fixture, gpus, share)| node_shape(root, fixture, gpus, share))
        .collect()
}

/// The shape of the agent fixture `fixture` with `gpus` GPUs (the fixtures describe one node
/// size each), labelled as `vramfit-agent` labels such a node.
fn node_shape(root: &std::path::Path, fixture: &str, gpus: u32, share: f64) -> Result<NodeShape> {
    let path = root.join("agent/fixtures").join(fixture);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut yaml: serde_yaml::Value = serde_yaml::from_str(&text)?;
    if let Some(first) = yaml
        .get_mut("gpus")
        .and_then(|g| g.as_sequence_mut())
        .and_then(|g| g.first_mut())
        .and_then(|g| g.as_mapping_mut())
    {
        first.insert("count".into(), gpus.into());
    }
    let file =
        vramfit_agent::gpu::fixture::FixtureFile::parse(&serde_yaml::to_string(&yaml)?, &path)?;
    let labels = vramfit_agent::labels::render(&file.to_probe());
    ensure!(
        vramfit_api::labels::gpu_facts(&labels).is_some(),
        "the labels rendered from {fixture} carry no GPU facts: {labels:?}"
    );
    Ok(NodeShape {
        labels,
        gpus,
        share,
    })
}

/// The shape of node `i` of `n`: contiguous blocks by share.
fn shape_of(shapes: &[NodeShape], i: usize, n: usize) -> &NodeShape {
    let mut end = 0.0;
    for shape in shapes {
        end += shape.share * n as f64;
        if (i as f64) < end.round() {
            return shape;
        }
    }
    &shapes[shapes.len() - 1]
}

/// Creates a node, lifts admission's not-ready taint, writes its status (GPUs, Ready).
async fn create_node(client: &Client, name: &str, shape: &NodeShape, run: &str) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut labels = shape.labels.clone();
    labels.insert(RUN_LABEL.to_string(), run.to_string());
    labels.insert("kubernetes.io/hostname".to_string(), name.to_string());
    labels.insert("kubernetes.io/os".to_string(), "linux".to_string());
    labels.insert("kubernetes.io/arch".to_string(), "amd64".to_string());
    let taints = json!([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]);
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
    }))?;
    nodes.create(&PostParams::default(), &node).await?;
    // Admission taints every new node `node.kubernetes.io/not-ready:NoSchedule`; a kubelet's
    // node loses it once Ready. Nothing does here: set the node's own taints back.
    nodes
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": taints}})),
        )
        .await?;
    let now = Timestamp::now().to_string();
    let resources = json!({
        "cpu": "64", "memory": "512Gi", "pods": "110",
        "nvidia.com/gpu": shape.gpus.to_string(),
    });
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "simulated by operator-scale",
                    "lastHeartbeatTime": now, "lastTransitionTime": now,
                }],
            }})),
        )
        .await?;
    Ok(())
}

/// Renews a node Lease per node every 15 s (`--heartbeat`).
async fn heartbeat(clients: Vec<Client>, nodes: Vec<String>, run: String) {
    loop {
        let started = Instant::now();
        let _ = create_all(&clients, nodes.len(), |i, client| {
            let name = nodes[i].clone();
            let run = run.clone();
            async move {
                let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
                let lease = Lease {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.clone()),
                        labels: Some(BTreeMap::from([(RUN_LABEL.to_string(), run)])),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(name.clone()),
                        lease_duration_seconds: Some(40),
                        renew_time: Some(MicroTime(Timestamp::now())),
                        ..Default::default()
                    }),
                };
                leases
                    .patch(
                        &name,
                        &PatchParams::apply(MANAGER).force(),
                        &Patch::Apply(&lease),
                    )
                    .await?;
                Ok(())
            }
        })
        .await;
        tokio::time::sleep(Duration::from_secs(15).saturating_sub(started.elapsed())).await;
    }
}

async fn nodes_not_ready(client: &Client, run: &str) -> Result<usize> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default().labels(&format!("{RUN_LABEL}={run}")))
        .await?;
    Ok(list
        .items
        .iter()
        .filter(|node| {
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let tainted = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key.starts_with("node.kubernetes.io/")));
            !ready || tainted
        })
        .count())
}

fn job_name(i: usize) -> String {
    format!("job-{i:05}")
}

/// Job `i` of the mix: one GPU each; Mistral-7B on vLLM (quality 40 %, economy 20 %),
/// InternVL3-8B on transformers (20 %), a GGUF model on llama.cpp (10 %), bf16-pinned
/// Llama-3.2-11B-Vision on transformers (10 %).
fn job_manifest(i: usize) -> Value {
    let spec = match i % 10 {
        0..=3 => json!({
            "model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "vllm",
            "image": "vllm/vllm-openai:v0.10.1",
            "args": ["--model", "mistralai/Mistral-7B-Instruct-v0.3"],
        }),
        4 | 5 => json!({
            "model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "vllm",
            "image": "vllm/vllm-openai:v0.10.1", "preference": "economy",
            "args": ["--model", "mistralai/Mistral-7B-Instruct-v0.3"],
        }),
        6 | 7 => json!({
            "model": {"preset": "internvl3-8b"}, "runtime": "transformers",
            "image": "ghcr.io/example/internvl-batch:1.4",
        }),
        8 => json!({
            "model": {"preset": "mistral-7b-instruct-v0.3-q4_k_m"}, "runtime": "llamacpp",
            "image": "ghcr.io/ggml-org/llama.cpp:server-cuda",
            "args": ["--model", "/models/mistral.gguf"],
        }),
        _ => json!({
            "model": {"preset": "llama-3.2-11b-vision-instruct"}, "runtime": "transformers",
            "image": "ghcr.io/example/llama-vision-eval:2.0", "dtype": "bfloat16",
        }),
    };
    let mut spec = spec;
    spec["gpus"] = json!({"min": 1, "max": 1});
    json!({
        "apiVersion": "vramfit.io/v1alpha1",
        "kind": "InferenceJob",
        "metadata": {"name": job_name(i)},
        "spec": spec,
    })
}

/// The largest value an env variable of a job may have (the CRD's bound).
const MAX_ENV_VALUE: usize = 32 * 1024;

/// Adds `kib` KiB of env values to job `i`'s pod, as the fewest variables the CRD allows.
/// Pseudo-random letters and digits, different per job and variable, so that nothing along
/// the way (the operator's cache included) could share or compress them.
fn pad_job(manifest: &mut Value, kib: usize, i: usize) {
    let mut left = kib * 1024;
    let mut env = Vec::new();
    let mut state = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    while left > 0 {
        let len = left.min(MAX_ENV_VALUE);
        let value: String = (0..len)
            .map(|_| {
                // xorshift64*
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                let n = state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 58;
                char::from(
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[n as usize],
                )
            })
            .collect();
        env.push(json!({"name": format!("PAD_{}", env.len()), "value": value}));
        left -= len;
    }
    if !env.is_empty() {
        manifest["spec"]["pod"] = json!({"env": env});
    }
}

/// When the benchmark's create of a job returned.
#[derive(Clone, Debug)]
struct Created {
    at: Instant,
    timestamp: Option<Timestamp>,
}

/// What the benchmark's job watch saw.
#[derive(Debug, Default)]
struct Observed {
    /// Job name → first seen placed (`Scheduled` or later with a pod name).
    placed: HashMap<String, Instant>,
    /// Jobs seen Unschedulable (and not placed since).
    unschedulable: HashMap<String, Instant>,
}

async fn watch_namespace(client: Client, ns: String, observed: Arc<Mutex<Observed>>) {
    let jobs = watcher(
        Api::<InferenceJob>::namespaced(client, &ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .applied_objects()
    .for_each(move |job| {
        if let Ok(job) = job {
            let status = job.status.as_ref();
            let phase = status.and_then(|s| s.phase);
            let has_pod = status.and_then(|s| s.pod_name.as_ref()).is_some();
            let mut seen = observed.lock().unwrap_or_else(|e| e.into_inner());
            let name = job.name_any();
            match phase {
                Some(Phase::Scheduled | Phase::Running | Phase::Succeeded) if has_pod => {
                    seen.unschedulable.remove(&name);
                    seen.placed.entry(name).or_insert_with(Instant::now);
                }
                Some(Phase::Unschedulable) => {
                    seen.unschedulable.entry(name).or_insert_with(Instant::now);
                }
                _ => {}
            }
        }
        futures::future::ready(())
    });
    jobs.await;
}

fn start_operator(
    bin: &std::path::Path,
    args: &Args,
    logs: &std::path::Path,
    name: &str,
) -> Result<ChildProcess> {
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut flags = vec!["--metrics-addr".to_string(), addr.clone()];
    if let Some(concurrency) = args.operator_concurrency {
        flags.extend(["--concurrency".to_string(), concurrency.to_string()]);
    }
    let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_string());
    ChildProcess::spawn(
        name,
        bin,
        &flags,
        &[("RUST_LOG", log_level), ("POD_NAME", name.to_string())],
        logs.join(format!("{name}.log")),
        addr,
    )
}

async fn wait_ready(operator: &mut ChildProcess, timeout: Duration) -> Result<()> {
    let started = Instant::now();
    loop {
        operator.check_alive()?;
        if http_status(&operator.addr, "/readyz").await.ok() == Some(200) {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!(
                "{} not ready after {timeout:?}; log tail:\n{}",
                operator.name,
                operator.log_tail(20)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The mean duration of the operator's reconciles so far.
async fn mean_reconcile(operator: &ChildProcess) -> Result<Duration> {
    let (code, body) = http_get(&operator.addr, "/metrics").await?;
    ensure!(code == 200, "/metrics answered {code}");
    let get = |name: &str| vramfit_e2e::prometheus_value(&body, name).unwrap_or(0.0);
    let count = get("vramfit_reconcile_duration_seconds_count");
    let sum = get("vramfit_reconcile_duration_seconds_sum");
    Ok(Duration::from_secs_f64(if count > 0.0 {
        sum / count
    } else {
        0.0
    }))
}

/// Reconciles the operator counted (`vramfit_reconcile_duration_seconds_count`).
async fn reconciles(operator: &ChildProcess) -> Result<f64> {
    let (code, body) = http_get(&operator.addr, "/metrics").await?;
    ensure!(code == 200, "/metrics answered {code}");
    vramfit_e2e::prometheus_value(&body, "vramfit_reconcile_duration_seconds_count")
        .ok_or_else(|| anyhow!("/metrics has no vramfit_reconcile_duration_seconds_count"))
}

/// Waits until every job is placed or Unschedulable; fails after 120 s without progress.
async fn wait_settled(
    observed: &Arc<Mutex<Observed>>,
    operator: &mut ChildProcess,
    jobs: usize,
    started: Instant,
) -> Result<()> {
    let mut last = (0, Instant::now());
    let mut last_print = Instant::now();
    loop {
        operator.check_alive()?;
        let (placed, unschedulable) = {
            let seen = observed.lock().unwrap_or_else(|e| e.into_inner());
            (seen.placed.len(), seen.unschedulable.len())
        };
        let settled = placed + unschedulable;
        if settled >= jobs {
            return Ok(());
        }
        if settled > last.0 {
            last = (settled, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(120) {
            bail!(
                "no progress for 120 s: {placed} placed, {unschedulable} Unschedulable of {jobs}; \
                 operator log tail:\n{}",
                operator.log_tail(20)
            );
        }
        if last_print.elapsed() >= Duration::from_secs(5) {
            last_print = Instant::now();
            eprintln!(
                "operator-scale:     {:.0} s: {placed} placed, {unschedulable} Unschedulable",
                started.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The writes of the operator's resources since `before`: pods (the object, not the
/// scheduler's bindings), job status, events.
fn operator_side_writes(totals: &RequestTotals) -> u64 {
    totals.count(&WRITE_VERBS, "pods", "")
        + totals.count(&WRITE_VERBS, "inferencejobs", "status")
        + totals.count(&WRITE_VERBS, "events", "")
        + totals.count(&WRITE_VERBS, "pods", "binding")
}

/// Waits until the writes of pods, bindings, job status and events stop for 3 s in a row
/// (checked every 1.5 s; at most 5 minutes).
async fn wait_quiet(
    client: &Client,
    operator: &mut ChildProcess,
    before: &RequestTotals,
) -> Result<()> {
    let started = Instant::now();
    let mut last = u64::MAX;
    let mut quiet_since = Instant::now();
    loop {
        operator.check_alive()?;
        let writes = operator_side_writes(&scrape(client).await?.since(before));
        if writes != last {
            last = writes;
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= Duration::from_secs(3) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("writes did not stop within 5 minutes");
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
}

/// Waits until the restarted operator reconciled every job and then nothing for 2 s; returns
/// the time (from `started`) when its count stopped.
async fn wait_resynced(
    operator: &mut ChildProcess,
    jobs: usize,
    started: Instant,
) -> Result<Duration> {
    let mut last = (-1.0, started.elapsed());
    loop {
        operator.check_alive()?;
        let count = reconciles(operator).await?;
        let now = started.elapsed();
        if count != last.0 {
            last = (count, now);
        } else if count >= jobs as f64 && now - last.1 >= Duration::from_secs(2) {
            return Ok(last.1);
        }
        if now > Duration::from_secs(600) {
            bail!("the restarted operator reconciled {count} times in 10 minutes, not {jobs}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn fill_latencies(
    report: &mut Report,
    observed: &Observed,
    created: &HashMap<String, Created>,
    pods: &[Pod],
    started: Instant,
) {
    report.placed = observed.placed.len();
    report.unschedulable = observed.unschedulable.len();
    report.pods_bound = pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count();
    report.placed_wall = observed
        .placed
        .values()
        .map(|at| at.saturating_duration_since(started))
        .max()
        .unwrap_or_default();
    for (job, created) in created {
        if let Some(placed) = observed.placed.get(job) {
            report
                .job_to_placed
                .push(placed.saturating_duration_since(created.at));
        }
    }
    for pod in pods {
        let job = pod.labels().get(vramfit_api::pod_keys::JOB_LABEL);
        let job_created = job.and_then(|job| created.get(job)?.timestamp);
        if let (Some(pod), Some(job)) = (&pod.metadata.creation_timestamp, job_created) {
            report
                .job_to_pod_server
                .push(pod.0.as_second() - job.as_second());
        }
    }
    report.job_to_placed.sort();
    report.job_to_pod_server.sort();
}

/// Every pod in the namespace (in pages).
async fn list_pods(client: &Client, ns: &str) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut pods = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await?;
        pods.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(pods),
        }
    }
}

/// Events in the namespace by reporting controller: objects and series repeats.
#[derive(Clone, Debug, Default)]
struct EventCounts {
    objects: u64,
    repeats: u64,
}

async fn count_events(
    client: &Client,
    ns: &str,
) -> Result<(EventCounts, BTreeMap<String, EventCounts>)> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut by_controller: BTreeMap<String, EventCounts> = BTreeMap::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = events.list(&params).await?;
        for event in &page.items {
            // Events about the raw pods and jobs of phase 2 are not the job phase's.
            let about_raw = event
                .regarding
                .as_ref()
                .and_then(|r| r.name.as_deref())
                .is_some_and(|name| name.starts_with("raw-"));
            if about_raw {
                continue;
            }
            let controller = event
                .reporting_controller
                .clone()
                .unwrap_or_else(|| "(none)".to_string());
            let counts = by_controller.entry(controller).or_default();
            counts.objects += 1;
            counts.repeats += event
                .series
                .as_ref()
                .map(|s| (s.count.max(1) - 1) as u64)
                .unwrap_or(0);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let operator = by_controller.remove("vramfit-operator").unwrap_or_default();
    Ok((operator, by_controller))
}

// ---------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------

fn served_replicas(figures: &serving::Figures) -> usize {
    figures.replicas()
}

fn per_second(count: usize, wall: Duration) -> f64 {
    count as f64 / wall.as_secs_f64().max(1e-9)
}

fn seconds(d: Option<Duration>) -> String {
    d.map_or("—".to_string(), |d| format!("{:.2} s", d.as_secs_f64()))
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

impl Report {
    /// The operator's event writes: every event write in the window, less those of other
    /// reporting controllers (kube-scheduler's) found in the namespace.
    fn operator_event_writes(&self) -> u64 {
        let all = self.writes.count(&WRITE_VERBS, "events", "");
        let others: u64 = self
            .other_events
            .values()
            .map(|c| c.objects + c.repeats)
            .sum();
        all.saturating_sub(others)
    }

    fn operator_writes(&self) -> (u64, u64, u64) {
        (
            self.writes.count(&WRITE_VERBS, "pods", ""),
            self.writes.count(&WRITE_VERBS, "inferencejobs", "status"),
            self.operator_event_writes(),
        )
    }

    fn by_verb(totals: &RequestTotals, resource: &str, subresource: &str) -> String {
        let mut verbs: BTreeMap<&str, u64> = BTreeMap::new();
        for (key, value) in &totals.0 {
            if WRITE_VERBS.contains(&key.verb.as_str())
                && key.resource == resource
                && key.subresource == subresource
            {
                *verbs.entry(key.verb.as_str()).or_default() += value.round() as u64;
            }
        }
        if verbs.is_empty() {
            return "none".to_string();
        }
        verbs
            .iter()
            .map(|(verb, n)| format!("{n} {verb}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl std::fmt::Display for Report {
    /// With a previous operator: its table, then the current one's; then the goals table.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(previous) = &self.previous {
            writeln!(
                f,
                "previous operator ({}):
",
                previous.operator
            )?;
            previous.detail(f)?;
            writeln!(
                f,
                "
current operator ({}):
",
                self.operator
            )?;
        }
        self.detail(f)?;
        let previous = self.previous.as_ref().map(|p| p.key_figures());
        writeln!(
            f,
            "
goals: previous = {}, now = {} (same machine, same nodes, one run)
",
            self.previous
                .as_ref()
                .map_or("— (no --previous-operator)", |p| p.operator.as_str()),
            self.operator
        )?;
        write!(
            f,
            "{}",
            goals::table(&self.key_figures(), previous.as_deref())
        )
    }
}

impl Report {
    /// The figures of the goals table: the mode's goals and, for context, its main figures.
    fn key_figures(&self) -> Vec<goals::Figure> {
        use goals::{Figure, Goal};
        if let Some(served) = &self.serving {
            return served.key_figures(&self.sizes);
        }
        if let Some(groups) = &self.groups {
            return groups.key_figures(&self.sizes);
        }
        let raw_rate = per_second(self.raw_pods, self.raw_wall);
        let placed_rate = per_second(self.placed, self.placed_wall);
        let (pods, status, events) = self.operator_writes();
        let jobs = self.jobs.max(1) as f64;
        let mib = self.hwm_kib as f64 / 1024.0;
        let restart = self.restart_writes.count(&WRITE_VERBS, "pods", "")
            + self
                .restart_writes
                .count(&WRITE_VERBS, "inferencejobs", "status")
            + self.restart_writes.count(&WRITE_VERBS, "events", "");
        let sizes = self.sizes;
        vec![
            Figure::new(
                format!(
                    "operator peak RSS (VmHWM), {} jobs × {} nodes",
                    sizes.jobs, sizes.nodes
                ),
                Some(Goal::at_most(
                    64.0,
                    " MiB",
                    Some("5,000 jobs × 1,000 nodes"),
                    sizes.jobs == 5000 && sizes.nodes == 1000,
                )),
                (self.hwm_kib > 0).then_some(mib),
                format!("{mib:.1} MiB"),
            ),
            Figure::shown(
                "jobs placed per second, ratio to the raw pod creates",
                format!(
                    "{placed_rate:.1}/s = {:.2}× raw ({raw_rate:.1}/s)",
                    placed_rate / raw_rate.max(1e-9)
                ),
            ),
            Figure::shown(
                "job created → Scheduled, p50 / p99",
                format!(
                    "{} / {}",
                    seconds(quantile(&self.job_to_placed, 0.5)),
                    seconds(quantile(&self.job_to_placed, 0.99))
                ),
            ),
            Figure::shown(
                "operator writes per job (pods, status, events)",
                format!(
                    "{:.2} ({:.2}, {:.2}, {:.2})",
                    (pods + status + events) as f64 / jobs,
                    pods as f64 / jobs,
                    status as f64 / jobs,
                    events as f64 / jobs
                ),
            ),
            Figure::shown(
                "restart: every job reconciled; operator writes",
                format!("{:.2} s; {restart}", self.restart_resynced.as_secs_f64()),
            ),
        ]
    }

    /// The run's own table (of one operator).
    fn detail(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A served or group run: the raw pod figure, then that phase's own table.
        let phase: Option<(String, &dyn std::fmt::Display)> = match (&self.serving, &self.groups) {
            (Some(served), _) => Some((
                format!("--serve-replicas {}", served_replicas(served)),
                served,
            )),
            (None, Some(groups)) => {
                Some((format!("--group-nodes {}", groups.group_nodes()), groups))
            }
            (None, None) => None,
        };
        if let Some((flag, figures)) = phase {
            writeln!(
                f,
                "operator-scale {} {flag}: API server {}, {} nodes, {} GPUs\n",
                self.args_line, self.server, self.nodes, self.gpus
            )?;
            writeln!(f, "| figure | value |\n|---|---|")?;
            writeln!(
                f,
                "| raw pod creates ({} clients, {} bare pods) | {:.1} pods/s; all bound after {} |",
                self.clients,
                self.raw_pods,
                per_second(self.raw_pods, self.raw_wall),
                seconds(self.raw_bound_wall)
            )?;
            write!(f, "{figures}")?;
            return writeln!(
                f,
                "| fake nodes not Ready at the end | {} |",
                self.nodes_not_ready
            );
        }
        let jobs = self.jobs.max(1) as f64;
        let raw_rate = per_second(self.raw_pods, self.raw_wall);
        let placed_rate = per_second(self.placed, self.placed_wall);
        let ratio = placed_rate / raw_rate.max(1e-9);
        let (pods, status, events) = self.operator_writes();
        let operator_per_job = (pods + status + events) as f64 / jobs;
        let p = |v: &[Duration], q: f64| seconds(quantile(v, q));
        let server_p = |q: f64| {
            quantile(&self.job_to_pod_server, q).map_or("—".to_string(), |s| format!("{s} s"))
        };
        let mib = |kib: u64| kib as f64 / 1024.0;
        let scheduler_events: u64 = self
            .other_events
            .values()
            .map(|c| c.objects + c.repeats)
            .sum();
        let restart_operator_writes = self.restart_writes.count(&WRITE_VERBS, "pods", "")
            + self
                .restart_writes
                .count(&WRITE_VERBS, "inferencejobs", "status")
            + self.restart_writes.count(&WRITE_VERBS, "events", "");
        let rows: Vec<(String, String, String)> =
            vec![
            (
                format!(
                    "raw pod {} ({} clients, {} bare pods)",
                    if self.raw_apply { "server-side applies" } else { "creates" },
                    self.clients,
                    self.raw_pods
                ),
                format!(
                    "{raw_rate:.1} pods/s ({:.1} s; {:.2} writes per pod); all bound after {}",
                    self.raw_wall.as_secs_f64(),
                    self.raw_writes_per_pod,
                    seconds(self.raw_bound_wall)
                ),
                String::new(),
            ),
            (
                format!(
                    "raw InferenceJob creates (no operator, {} jobs)",
                    self.raw_pods
                ),
                format!(
                    "{:.1} jobs/s ({:.1} s)",
                    per_second(self.raw_pods, self.raw_jobs_wall),
                    self.raw_jobs_wall.as_secs_f64()
                ),
                String::new(),
            ),
            (
                "jobs created by the benchmark".to_string(),
                format!(
                    "{} in {:.1} s ({:.1}/s)",
                    self.jobs,
                    self.jobs_created_wall.as_secs_f64(),
                    per_second(self.jobs, self.jobs_created_wall)
                ),
                String::new(),
            ),
            (
                "jobs placed (created → pod created, job Scheduled)".to_string(),
                format!(
                    "{} in {:.1} s: {placed_rate:.1}/s = {ratio:.2}× raw; {} Unschedulable",
                    self.placed,
                    self.placed_wall.as_secs_f64(),
                    self.unschedulable
                ),
                String::new(),
            ),
            (
                "job created → Scheduled (pod created, status written), p50 / p99".to_string(),
                format!(
                    "{} / {}",
                    p(&self.job_to_placed, 0.5),
                    p(&self.job_to_placed, 0.99)
                ),
                format!(
                    "p99 < 2 s: {}",
                    verdict(
                        quantile(&self.job_to_placed, 0.99)
                            .is_some_and(|d| d < Duration::from_secs(2))
                    )
                ),
            ),
            (
                "job → pod, creationTimestamps (1 s resolution), p50 / p99".to_string(),
                format!("{} / {}", server_p(0.5), server_p(0.99)),
                String::new(),
            ),
            (
                "operator writes per job (pods + job status + events)".to_string(),
                format!(
                    "{operator_per_job:.2}: pods {:.2} ({}), status {:.2} ({}), events {:.2}",
                    pods as f64 / jobs,
                    Self::by_verb(&self.writes, "pods", ""),
                    status as f64 / jobs,
                    Self::by_verb(&self.writes, "inferencejobs", "status"),
                    events as f64 / jobs,
                ),
                format!("≤ 3: {}", verdict(operator_per_job <= 3.0 + 1e-9)),
            ),
            (
                "  events by vramfit-operator (listed: objects + series repeats)".to_string(),
                format!(
                    "{} + {}",
                    self.operator_events.objects, self.operator_events.repeats
                ),
                String::new(),
            ),
            (
                "  others' writes: job creates, scheduler bindings, scheduler events".to_string(),
                format!(
                    "{} ({:.2}/job), {} ({:.2}/job), {scheduler_events} ({:.2}/job); all writes {}",
                    self.writes.count(&WRITE_VERBS, "inferencejobs", ""),
                    self.writes.count(&WRITE_VERBS, "inferencejobs", "") as f64 / jobs,
                    self.writes.count(&WRITE_VERBS, "pods", "binding"),
                    self.writes.count(&WRITE_VERBS, "pods", "binding") as f64 / jobs,
                    scheduler_events as f64 / jobs,
                    self.writes.writes(),
                ),
                String::new(),
            ),
            (
                "  API server time by request (s): pods, job creates, job status, events, bindings"
                    .to_string(),
                format!(
                    "{:.0}, {:.0}, {:.0}, {:.0}, {:.0}",
                    self.server_seconds.sum(&WRITE_VERBS, "pods", ""),
                    self.server_seconds.sum(&WRITE_VERBS, "inferencejobs", ""),
                    self.server_seconds
                        .sum(&WRITE_VERBS, "inferencejobs", "status"),
                    self.server_seconds.sum(&WRITE_VERBS, "events", ""),
                    self.server_seconds.sum(&WRITE_VERBS, "pods", "binding"),
                ),
                String::new(),
            ),
            (
                "operator CPU, mean reconcile; benchmark CPU".to_string(),
                format!(
                    "{:.1} s ({:.1} ms per job), {:.1} ms; {:.1} s",
                    self.operator_cpu,
                    self.operator_cpu * 1000.0 / jobs,
                    self.reconcile_mean.as_secs_f64() * 1000.0,
                    self.benchmark_cpu
                ),
                String::new(),
            ),
            (
                "pods bound by the scheduler".to_string(),
                format!("{} of {}", self.pods_bound, self.placed),
                String::new(),
            ),
            (
                format!("operator peak RSS (VmHWM) at {} jobs", self.jobs),
                format!(
                    "{:.1} MiB (VmRSS {:.1} MiB, {} reconciles)",
                    mib(self.hwm_kib),
                    mib(self.rss_kib),
                    self.operator_reconciles
                ),
                format!("≤ 64 MiB: {}", verdict(self.hwm_kib <= 64 * 1024)),
            ),
            (
                "restart: /readyz 200, every job reconciled".to_string(),
                format!(
                    "{:.2} s, {:.2} s ({} reconciles; VmHWM {:.1} MiB)",
                    self.restart_ready.as_secs_f64(),
                    self.restart_resynced.as_secs_f64(),
                    self.restart_reconciles,
                    mib(self.restart_hwm_kib)
                ),
                String::new(),
            ),
            (
                "restart: operator writes (pods, job status, events)".to_string(),
                format!(
                    "{restart_operator_writes} (all writes meanwhile: {})",
                    self.restart_writes.writes()
                ),
                format!("0: {}", verdict(restart_operator_writes == 0)),
            ),
        ];
        writeln!(
            f,
            "operator-scale {} — API server {}, {} nodes ({} GPUs)",
            self.args_line, self.server, self.nodes, self.gpus
        )?;
        let widths = rows.iter().fold((6, 5, 6), |w, r| {
            (
                w.0.max(r.0.chars().count()),
                w.1.max(r.1.chars().count()),
                w.2.max(r.2.chars().count()),
            )
        });
        let line = |f: &mut std::fmt::Formatter<'_>, a: &str, b: &str, c: &str| {
            writeln!(
                f,
                "| {a}{} | {b}{} | {c}{} |",
                " ".repeat(widths.0 - a.chars().count()),
                " ".repeat(widths.1 - b.chars().count()),
                " ".repeat(widths.2 - c.chars().count()),
            )
        };
        line(f, "figure", "value", "target")?;
        line(
            f,
            &"-".repeat(widths.0),
            &"-".repeat(widths.1),
            &"-".repeat(widths.2),
        )?;
        for (a, b, c) in &rows {
            line(f, a, b, c)?;
        }
        if self.nodes_not_ready > 0 {
            writeln!(
                f,
                "warning: {} fake nodes lost Ready or gained a node.kubernetes.io taint during the run \
                 (a node lifecycle controller runs: use --heartbeat)",
                self.nodes_not_ready
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A served or group run's report: its flag in the title, the raw pod figure, the phase's
    /// table, the fake nodes last.
    #[test]
    fn a_phase_report_frames_the_phase_figures() {
        let frame = |report: &Report, flag: &str| {
            let text = report.to_string();
            assert!(
                text.starts_with(&format!(
                    "operator-scale --jobs 1 {flag}: API server v1.32, 3 nodes, 12 GPUs\n\n\
                     | figure | value |\n|---|---|\n| raw pod creates (2 clients, 5 bare pods) |"
                )),
                "{text}"
            );
            assert!(
                text.contains("| fake nodes not Ready at the end | 1 |\n\ngoals: previous = — "),
                "{text}"
            );
            assert!(
                text.contains("| figure | goal | previous | now | met/missed |"),
                "{text}"
            );
        };
        let base = || Report {
            args_line: "--jobs 1".to_string(),
            server: "v1.32".to_string(),
            nodes: 3,
            gpus: 12,
            clients: 2,
            raw_pods: 5,
            nodes_not_ready: 1,
            ..Report::default()
        };
        frame(
            &Report {
                groups: Some(groups::Figures::default()),
                ..base()
            },
            "--group-nodes 0",
        );
        frame(
            &Report {
                serving: Some(serving::Figures::default()),
                ..base()
            },
            "--serve-replicas 0",
        );
    }

    /// With a previous operator: its table first, then the current one's, then the goals
    /// table with both figures; the retired ratio target is gone, the ratio stays a figure.
    #[test]
    fn a_report_with_a_previous_operator_shows_both_and_the_goals() {
        let sizes = goals::Sizes {
            jobs: 5000,
            nodes: 1000,
            ..goals::Sizes::default()
        };
        let run = |operator: &str, hwm_mib: u64| Report {
            args_line: "--jobs 5000".to_string(),
            server: "v1.35".to_string(),
            raw_pods: 100,
            raw_wall: Duration::from_secs(1),
            placed: 50,
            placed_wall: Duration::from_secs(1),
            hwm_kib: hwm_mib * 1024,
            operator: operator.to_string(),
            sizes,
            ..Report::default()
        };
        let report = Report {
            previous: Some(Box::new(run("old-operator", 75))),
            ..run("new-operator", 60)
        };
        let text = report.to_string();
        let previous = text.find("previous operator (old-operator):").expect(&text);
        let current = text.find("current operator (new-operator):").expect(&text);
        let goals = text
            .find("goals: previous = old-operator, now = new-operator")
            .expect(&text);
        assert!(previous < current && current < goals, "{text}");
        assert!(
            text.contains(
                "| operator peak RSS (VmHWM), 5000 jobs × 1000 nodes | ≤ 64 MiB at 5,000 jobs × 1,000 nodes | 75.0 MiB | 60.0 MiB | met |"
            ),
            "{text}"
        );
        assert!(text.contains("50.0/s = 0.50× raw (100.0/s)"), "{text}");
        assert!(!text.contains("0.45"), "{text}");
        // Without one, the previous column says so.
        let alone = run("new-operator", 70).to_string();
        assert!(
            alone.contains("| ≤ 64 MiB at 5,000 jobs × 1,000 nodes | — | 70.0 MiB | MISSED |"),
            "{alone}"
        );
    }
}
