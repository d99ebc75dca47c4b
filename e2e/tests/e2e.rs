//! vramfit end-to-end suite: the real `vramfit-agent` and `vramfit-operator` binaries
//! against the cluster in `KUBECONFIG`, with simulated GPU nodes and a simulated kubelet.
//!
//! Without `KUBECONFIG` it prints that it did not run and why, and exits 0 (it reports no
//! pass). With one it prints `PASS`/`FAIL` per scenario and `N passed, M failed`, and exits
//! non-zero on any failure. Everything it creates is removed at the end, failure or not
//! (`VRAMFIT_E2E_KEEP=1` keeps it for debugging). See `e2e/README.md`.
//!
//! `cargo test -p vramfit-e2e --test e2e -- --nocapture [scenario-substring…]`
use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use futures::FutureExt as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};
use vramfit_api::{InferenceJob, Phase};
use vramfit_e2e::crds::{self, is_not_found};
use vramfit_e2e::namespaces;
use vramfit_e2e::*;

#[path = "scenarios/compare.rs"]
mod compare;
#[path = "scenarios/faults.rs"]
mod faults;
#[path = "scenarios/partitions.rs"]
mod partitions;
#[path = "scenarios/pod_security.rs"]
mod pod_security;
#[path = "scenarios/rbac.rs"]
mod rbac;
#[path = "scenarios/workload_reports.rs"]
mod workload_reports;

const CONTAINER: &str = "inference";
const JOB_LABEL: &str = "vramfit.io/job";
const ATTEMPT_LABEL: &str = "vramfit.io/attempt";
const SETTLE: Duration = Duration::from_secs(90);

fn now() -> String {
    Timestamp::now().to_string()
}

// ---------------------------------------------------------------------------------------
// Entry point and cleanup
// ---------------------------------------------------------------------------------------

fn main() -> ExitCode {
    if let Some(reason) = skip_reason() {
        eprintln!("{reason}");
        println!("e2e: skipped (KUBECONFIG not set)");
        return ExitCode::SUCCESS;
    }
    // libtest flags (`--nocapture`, `--test-threads 1`) are accepted and ignored; other
    // arguments select scenarios by substring.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-') && a.parse::<u64>().is_err())
        .collect();
    let plan = Arc::new(Mutex::new(CleanupPlan::default()));
    let guard = CleanupGuard(plan.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (passed, failed, skipped) = runtime.block_on(run(plan, filters));
    drop(runtime);
    drop(guard);
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    if failed == 0 && passed > 0 {
        ExitCode::SUCCESS
    } else {
        if passed == 0 && failed == 0 {
            eprintln!("e2e: no scenario ran (check the filter arguments)");
        }
        ExitCode::FAILURE
    }
}

/// What cleanup removes; filled in as setup creates things.
#[derive(Debug, Default)]
struct CleanupPlan {
    run: String,
    namespace: Option<String>,
    nodes: Vec<String>,
    crds: Vec<String>,
    /// Cluster-scoped objects (kind, name) a scenario created: RBAC, PersistentVolumes.
    cluster_objects: Vec<(String, String)>,
}

/// Removes everything in the plan on drop, with its own thread, runtime and client, so it
/// runs whether the suite passed, failed or panicked.
struct CleanupGuard(Arc<Mutex<CleanupPlan>>);

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        let plan = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        if std::env::var_os("VRAMFIT_E2E_KEEP").is_some() {
            eprintln!("e2e: VRAMFIT_E2E_KEEP is set, leaving {plan:?}");
            return;
        }
        let result = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(cleanup(plan))
        })
        .join();
        match result {
            Ok(Ok(())) => eprintln!("e2e: cleanup done"),
            Ok(Err(e)) => eprintln!("e2e: CLEANUP INCOMPLETE: {e:#}"),
            Err(_) => eprintln!("e2e: CLEANUP PANICKED"),
        }
    }
}

async fn cleanup(plan: CleanupPlan) -> Result<()> {
    let client = Client::try_default().await?;
    let mut problems = vec![];
    if let Some(ns) = &plan.namespace
        && let Err(e) = namespaces::remove(&client, ns, Duration::from_secs(60)).await
    {
        problems.push(format!("{e:#}"));
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    for node in &plan.nodes {
        if let Err(e) = nodes.delete(node, &DeleteParams::default()).await
            && !is_not_found(&e)
        {
            problems.push(format!("node {node}: {e}"));
        }
        let _ = leases.delete(node, &DeleteParams::default()).await;
    }
    if !plan.run.is_empty() {
        // Anything labelled with this run that the plan missed.
        let selector = format!("{RUN_LABEL}={}", plan.run);
        if let Ok(list) = nodes.list(&ListParams::default().labels(&selector)).await {
            for node in list {
                let _ = nodes
                    .delete(&node.name_any(), &DeleteParams::default())
                    .await;
            }
        }
    }
    for (kind, name) in &plan.cluster_objects {
        let params = DeleteParams::default();
        let deleted = match kind.as_str() {
            "ClusterRole" => Api::<ClusterRole>::all(client.clone())
                .delete(name, &params)
                .await
                .map(|_| ()),
            "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(client.clone())
                .delete(name, &params)
                .await
                .map(|_| ()),
            _ => Api::<PersistentVolume>::all(client.clone())
                .delete(name, &params)
                .await
                .map(|_| ()),
        };
        if let Err(e) = deleted
            && !is_not_found(&e)
        {
            problems.push(format!("{kind} {name}: {e}"));
        }
    }
    crds::remove(&client, &plan.crds, &mut problems).await;
    if problems.is_empty() {
        Ok(())
    } else {
        bail!("{}", problems.join("; "))
    }
}

// ---------------------------------------------------------------------------------------
// The suite
// ---------------------------------------------------------------------------------------

struct Suite {
    client: Client,
    run: String,
    ns: String,
    root: PathBuf,
    bins: Binaries,
    logs: PathBuf,
    operators: Vec<ChildProcess>,
    started: u32,
    heartbeat: Option<tokio::task::JoinHandle<()>>,
    example_jobs: Vec<String>,
    /// What cleanup removes, for scenarios that create cluster-scoped objects.
    cleanup: Arc<Mutex<CleanupPlan>>,
}

/// A scenario that could not run here, and why (reported as SKIP, not as a pass).
#[derive(Debug)]
struct Skipped(String);

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Skipped {}

impl Drop for Suite {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        for op in &mut self.operators {
            op.kill();
        }
    }
}

type Scenario = for<'a> fn(&'a mut Suite) -> futures::future::BoxFuture<'a, Result<()>>;

async fn run(plan: Arc<Mutex<CleanupPlan>>, filters: Vec<String>) -> (u32, u32, u32) {
    let scenarios: Vec<(&str, Scenario)> = vec![
        ("agent-labels-nodes", |s| Box::pin(agent_labels_nodes(s))),
        ("operator-serves-readyz-and-metrics", |s| {
            Box::pin(operator_serves(s))
        }),
        ("examples-are-planned", |s| {
            Box::pin(examples_are_planned(s))
        }),
        ("kubectl-printer-columns", |s| Box::pin(kubectl_columns(s))),
        ("kubelet-success", |s| Box::pin(kubelet_success(s))),
        ("oom-steps-down-then-fails", |s| Box::pin(oom_steps_down(s))),
        ("full-class-overflows-then-frees", |s| {
            Box::pin(full_class_overflows_then_frees(s))
        }),
        ("operator-restart-keeps-one-pod-per-job", |s| {
            Box::pin(restart_keeps_one_pod(s))
        }),
        ("leader-election-single-writer", |s| {
            Box::pin(leader_election(s))
        }),
        ("invalid-manifests-are-rejected", |s| {
            Box::pin(invalid_manifests(s))
        }),
        ("deleted-job-pods-are-collectable", |s| {
            Box::pin(garbage_collection(s))
        }),
        ("operator-sigkill-during-burst", |s| {
            Box::pin(faults::sigkill_during_burst(s))
        }),
        ("api-server-outage", |s| {
            Box::pin(faults::api_server_outage(s))
        }),
        ("leader-fences-itself-in-an-outage", |s| {
            Box::pin(faults::leader_fences_itself_in_an_outage(s))
        }),
        ("workload-reports-garbage-then-result", |s| {
            Box::pin(workload_reports::garbage_then_result(s))
        }),
        ("compare-classes", |s| Box::pin(compare::compare_classes(s))),
        ("mixed-and-mig-nodes", |s| {
            Box::pin(partitions::mixed_and_mig_nodes(s))
        }),
        ("restricted-namespace", |s| {
            Box::pin(pod_security::restricted_namespace(s))
        }),
        ("operator-under-chart-rbac", |s| {
            Box::pin(rbac::operator_under_chart_rbac(s))
        }),
    ];
    let setup_result = AssertUnwindSafe(setup(plan)).catch_unwind().await;
    let mut suite = match setup_result {
        Ok(Ok(suite)) => suite,
        Ok(Err(e)) => {
            println!("FAIL setup: {e:#}");
            return (0, 1, 0);
        }
        Err(_) => {
            println!("FAIL setup: panicked");
            return (0, 1, 0);
        }
    };
    println!(
        "e2e: run {} in namespace {} (operator logs under {})",
        suite.run,
        suite.ns,
        suite.logs.display()
    );
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, scenario) in scenarios {
        // The agent's labels are what every other scenario places on: it always runs.
        let prerequisite = name == "agent-labels-nodes";
        if !prerequisite
            && !filters.is_empty()
            && !filters.iter().any(|f| name.contains(f.as_str()))
        {
            continue;
        }
        println!("---- {name}");
        let outcome = AssertUnwindSafe(scenario(&mut suite)).catch_unwind().await;
        match outcome {
            Ok(Ok(())) => {
                passed += 1;
                println!("PASS {name}");
            }
            Ok(Err(e)) if e.downcast_ref::<Skipped>().is_some() => {
                skipped += 1;
                println!("SKIP {name}: {e}");
            }
            Ok(Err(e)) => {
                failed += 1;
                println!("FAIL {name}: {e:#}");
                for op in &suite.operators {
                    println!("     operator {} log: {}", op.name, op.log.display());
                }
            }
            Err(panic) => {
                failed += 1;
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                println!("FAIL {name}: panicked: {msg}");
            }
        }
    }
    drop(suite);
    (passed, failed, skipped)
}

async fn setup(plan: Arc<Mutex<CleanupPlan>>) -> Result<Suite> {
    let cleanup = plan.clone();
    let root = workspace_root();
    let bins = Binaries::locate()?;
    let client = Client::try_default()
        .await
        .context("connecting with KUBECONFIG")?;
    let version = client
        .apiserver_version()
        .await
        .context("reading the API server version")?;
    println!(
        "e2e: API server {}.{} ({})",
        version.major, version.minor, version.git_version
    );
    let run = run_id();
    let ns = format!("{PREFIX}{run}");
    plan.lock().unwrap().run = run.clone();

    // CRDs (server-side apply); remember those that were not there, to remove them later.
    let applied = crds::install(&client, &root, |name| {
        plan.lock().unwrap().crds.push(name.to_string());
    })
    .await?;
    ensure!(
        applied.all.iter().any(|n| n == "inferencejobs.vramfit.io"),
        "crds/ has no inferencejobs.vramfit.io"
    );

    // Test namespace.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {"name": ns, "labels": {RUN_LABEL: run}}
    }))?;
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .context("creating the test namespace")?;
    plan.lock().unwrap().namespace = Some(ns.clone());

    // Simulated GPU nodes.
    let nodes: Api<Node> = Api::all(client.clone());
    for sim in SIM_NODES {
        let node: Node = serde_json::from_value(node_manifest(&sim, &run))?;
        nodes
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating node {}", sim.name(&run)))?;
        plan.lock().unwrap().nodes.push(sim.name(&run));
        // Admission taints every new Node `node.kubernetes.io/not-ready:NoSchedule`; a
        // kubelet's node-lifecycle controller lifts it once the node is Ready. Nothing does
        // here, so the simulated kubelet sets the node's own taints back, as registered.
        nodes
            .patch(
                &sim.name(&run),
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"taints": node_manifest(&sim, &run)["spec"]["taints"]}}),
                ),
            )
            .await
            .with_context(|| format!("lifting the not-ready taint of node {}", sim.name(&run)))?;
        nodes
            .patch_status(
                &sim.name(&run),
                &PatchParams::default(),
                &Patch::Merge(node_status_patch(&sim, &now())),
            )
            .await
            .with_context(|| format!("writing status of node {}", sim.name(&run)))?;
    }
    let heartbeat = tokio::spawn(heartbeat(client.clone(), run.clone()));

    let logs = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("e2e-logs")
        .join(&run);
    Ok(Suite {
        client,
        run,
        ns,
        root,
        bins,
        logs,
        operators: vec![],
        started: 0,
        heartbeat: Some(heartbeat),
        example_jobs: vec![],
        cleanup,
    })
}

/// A simulated kubelet heartbeat: keeps the simulated nodes Ready (and their node Leases
/// fresh) so a node lifecycle controller, where one runs, does not mark them NotReady.
async fn heartbeat(client: Client, run: String) {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        for sim in SIM_NODES {
            let name = sim.name(&run);
            let t = now();
            let _ = nodes
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(node_status_patch(&sim, &t)),
                )
                .await;
            let lease = Lease {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some("kube-node-lease".into()),
                    labels: Some(BTreeMap::from([(RUN_LABEL.to_string(), run.clone())])),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name.clone()),
                    lease_duration_seconds: Some(40),
                    renew_time: Some(MicroTime(Timestamp::now())),
                    ..Default::default()
                }),
            };
            let _ = leases
                .patch(
                    &name,
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(&lease),
                )
                .await;
        }
    }
}

impl Suite {
    fn jobs(&self) -> Api<InferenceJob> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn sim_nodes(&self) -> Result<Vec<Node>> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        Ok(nodes
            .list(&ListParams::default().labels(&format!("{RUN_LABEL}={}", self.run)))
            .await?
            .items)
    }

    /// Starts an operator replica; waits for `/readyz` 200 unless `wait_ready` is false.
    async fn start_operator(
        &mut self,
        replica: &str,
        extra: &[&str],
        wait_ready: bool,
    ) -> Result<()> {
        self.start_operator_with_env(replica, extra, &[], wait_ready)
            .await
    }

    /// [`Self::start_operator`] with more environment (a KUBECONFIG of its own, say).
    async fn start_operator_with_env(
        &mut self,
        replica: &str,
        extra: &[&str],
        extra_env: &[(&str, String)],
        wait_ready: bool,
    ) -> Result<()> {
        self.started += 1;
        let addr = format!("127.0.0.1:{}", free_port()?);
        let mut args = vec![
            "--metrics-addr".to_string(),
            addr.clone(),
            "--log-format".into(),
            "text".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut env = extra_env.to_vec();
        env.extend([
            ("POD_NAME", replica.to_string()),
            ("POD_NAMESPACE", self.ns.clone()),
            (
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            ),
        ]);
        let log = self
            .logs
            .join(format!("operator-{}-{replica}.log", self.started));
        let mut child =
            ChildProcess::spawn(replica, &self.bins.operator, &args, &env, log, addr.clone())?;
        if wait_ready {
            eventually(
                &format!("operator {replica} /readyz to answer 200"),
                Duration::from_secs(60),
                || {
                    let alive = child.check_alive();
                    let addr = addr.clone();
                    async move {
                        alive?;
                        let code = http_status(&addr, "/readyz").await?;
                        ensure!(code == 200, "/readyz answered {code}");
                        Ok(())
                    }
                },
            )
            .await?;
        }
        self.operators.push(child);
        Ok(())
    }

    fn stop_operators(&mut self) {
        for mut op in self.operators.drain(..) {
            op.kill();
        }
    }

    async fn ensure_single_operator(&mut self) -> Result<()> {
        for op in &mut self.operators {
            op.check_alive()?;
        }
        if self.operators.is_empty() {
            self.start_operator("single", &[], true).await?;
        }
        Ok(())
    }

    async fn apply_job(&self, manifest: Value) -> Result<InferenceJob> {
        let name = manifest["metadata"]["name"]
            .as_str()
            .ok_or_else(|| anyhow!("manifest has no name"))?
            .to_string();
        let manifest = with_namespace(manifest, &self.ns)?;
        self.jobs()
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&manifest),
            )
            .await
            .with_context(|| format!("applying InferenceJob {name}"))
    }

    /// A small job of the suite's own (Mistral 7B under transformers, 1 to 4 GPUs).
    fn own_job(&self, name: &str, max_attempts: u32) -> Value {
        json!({
            "apiVersion": "vramfit.io/v1alpha1",
            "kind": "InferenceJob",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {
                "model": {"preset": "mistral-7b-instruct-v0.3"},
                "runtime": "transformers",
                "image": "ghcr.io/example/vramfit-e2e:1",
                "command": ["python", "serve.py"],
                "contextLength": 4096,
                "allowedQuantizations": ["none", "int8", "nf4"],
                "gpus": {"min": 1, "max": 4},
                "maxAttempts": max_attempts,
            }
        })
    }

    /// Creates the PersistentVolumeClaims a job's pod mounts, each bound to a PersistentVolume
    /// of its own (as a storage admin would have), so the scheduler can place the pod.
    async fn provide_claims(&self, job: &Value) -> Result<()> {
        let claims: Vec<String> = job["spec"]["pod"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
            .map(str::to_string)
            .collect();
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let claims_api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &self.ns);
        for claim in claims {
            let volume = format!("{PREFIX}{}-{claim}", self.run);
            let spec = claim_volume(&volume, &claim, &self.ns, &self.run);
            volumes
                .patch(
                    &volume,
                    &PatchParams::apply(MANAGER),
                    &Patch::Apply(&spec.0),
                )
                .await
                .with_context(|| format!("creating PersistentVolume {volume}"))?;
            self.cleanup
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .cluster_objects
                .push(("PersistentVolume".into(), volume.clone()));
            claims_api
                .patch(&claim, &PatchParams::apply(MANAGER), &Patch::Apply(&spec.1))
                .await
                .with_context(|| format!("creating PersistentVolumeClaim {claim}"))?;
            eventually(
                &format!("claim {claim} to be bound to {volume}"),
                Duration::from_secs(60),
                || async {
                    let phase = claims_api.get(&claim).await?.status.and_then(|st| st.phase);
                    ensure!(phase.as_deref() == Some("Bound"), "phase {phase:?}");
                    Ok(())
                },
            )
            .await?;
        }
        Ok(())
    }

    /// `kubectl get ij -n <test namespace> <extra…>` (KUBECTL names the binary); prints its
    /// output indented and returns it.
    async fn kubectl_get_jobs(&self, extra: &[&str]) -> Result<String> {
        let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
        let mut args: Vec<String> = ["get", "ij", "-n", &self.ns].map(String::from).to_vec();
        args.extend(extra.iter().map(|a| a.to_string()));
        let shown = args.join(" ");
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(&kubectl).args(args).output()
        })
        .await?
        .context("running kubectl (set KUBECTL to its path if it is not on PATH)")?;
        ensure!(
            output.status.success(),
            "kubectl {shown} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        print!(
            "{}",
            text.lines()
                .map(|l| format!("     {l}\n"))
                .collect::<String>()
        );
        Ok(text)
    }

    async fn job(&self, name: &str) -> Result<InferenceJob> {
        self.jobs()
            .get(name)
            .await
            .with_context(|| format!("reading InferenceJob {name}"))
    }

    /// Pods whose controller owner is the job.
    async fn pods_of(&self, job: &InferenceJob) -> Result<Vec<Pod>> {
        let uid = job.uid().unwrap_or_default();
        Ok(self
            .pods()
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
            .collect())
    }

    /// Waits for the job to have a pod of attempt `attempt` and status pointing at it.
    async fn wait_pod(&self, name: &str, attempt: u32) -> Result<(InferenceJob, Pod)> {
        eventually(
            &format!("job {name} to get the pod of attempt {attempt}"),
            SETTLE,
            || async {
                let job = self.job(name).await?;
                let status = job.status.clone().unwrap_or_default();
                let pods = self.pods_of(&job).await?;
                let pod = pods
                    .iter()
                    .find(|p| {
                        p.labels().get(ATTEMPT_LABEL).map(String::as_str)
                            == Some(attempt.to_string().as_str())
                    })
                    .cloned();
                match pod {
                    // Bound too: every cluster runs a scheduler, and where it puts the pod is
                    // part of what is checked.
                    Some(pod)
                        if status.pod_name.as_deref() == Some(pod.name_any().as_str())
                            && node_of(&pod).is_some() =>
                    {
                        Ok((job, pod))
                    }
                    _ => bail!(
                        "phase {:?}, status.podName {:?}, pods (name, attempt, node) {:?}, conditions {:?}",
                        status.phase,
                        status.pod_name,
                        pods.iter()
                            .map(|p| (
                                p.name_any(),
                                p.labels().get(ATTEMPT_LABEL).cloned(),
                                node_of(p).map(str::to_string)
                            ))
                            .collect::<Vec<_>>(),
                        status
                            .conditions
                            .iter()
                            .map(|c| format!(
                                "{}={} {}: {}",
                                c.type_, c.status, c.reason, c.message
                            ))
                            .collect::<Vec<_>>()
                    ),
                }
            },
        )
        .await
    }

    async fn wait_phase(&self, name: &str, phases: &[Phase]) -> Result<InferenceJob> {
        eventually(
            &format!("job {name} to reach phase {phases:?}"),
            SETTLE,
            || async {
                let job = self.job(name).await?;
                let phase = job.status.as_ref().and_then(|s| s.phase);
                match phase {
                    Some(p) if phases.contains(&p) => Ok(job),
                    _ => bail!("phase {phase:?}, conditions {:?}", conditions_of(&job)),
                }
            },
        )
        .await
    }

    /// Event reasons recorded on the job (events.k8s.io/v1).
    async fn event_reasons(&self, job: &str) -> Result<Vec<String>> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.name.as_deref() == Some(job) && r.kind.as_deref() == Some("InferenceJob")
                })
            })
            .filter_map(|e| e.reason)
            .collect())
    }

    async fn wait_events(&self, job: &str, reasons: &[&str]) -> Result<()> {
        eventually(
            &format!("events {reasons:?} on job {job}"),
            Duration::from_secs(30),
            || async {
                let seen = self.event_reasons(job).await?;
                let missing: Vec<_> = reasons
                    .iter()
                    .filter(|r| !seen.iter().any(|s| s == *r))
                    .collect();
                ensure!(missing.is_empty(), "missing {missing:?}; seen {seen:?}");
                Ok(())
            },
        )
        .await
    }

    /// Writes a pod status as a kubelet would.
    async fn set_pod_status(&self, pod: &Pod, status: Value) -> Result<()> {
        self.pods()
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(status),
            )
            .await
            .with_context(|| format!("patching status of pod {}", pod.name_any()))?;
        Ok(())
    }

    async fn set_pod_running(&self, pod: &Pod) -> Result<()> {
        self.set_pod_status(
            pod,
            pod_running_status(&container_name(pod), &image_of(pod), &now()),
        )
        .await
    }

    async fn set_pod_ended(
        &self,
        pod: &Pod,
        exit_code: i32,
        reason: &str,
        message: &str,
    ) -> Result<()> {
        self.set_pod_status(
            pod,
            pod_terminated_status(
                &container_name(pod),
                &image_of(pod),
                &now(),
                exit_code,
                reason,
                message,
            ),
        )
        .await
    }

    /// Deletes jobs and (forcefully, as no kubelet confirms it) their pods, to free GPUs.
    async fn delete_jobs(&self, names: &[String]) -> Result<()> {
        for name in names {
            let Some(job) = self.jobs().get_opt(name).await? else {
                continue;
            };
            let _ = self.jobs().delete(name, &DeleteParams::background()).await;
            // The job first, then its pods: a pod deleted under a live job would be replaced.
            eventually(
                &format!("job {name} to be deleted"),
                Duration::from_secs(30),
                || async {
                    match self.jobs().get_opt(name).await? {
                        None => Ok(()),
                        Some(j) => bail!("still there, finalizers {:?}", j.finalizers()),
                    }
                },
            )
            .await?;
            for pod in self.pods_of(&job).await? {
                let _ = self
                    .pods()
                    .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                    .await;
            }
        }
        Ok(())
    }
}

fn conditions_of(job: &InferenceJob) -> Vec<String> {
    job.status
        .as_ref()
        .map(|s| {
            s.conditions
                .iter()
                .map(|c| format!("{}={} ({}: {})", c.type_, c.status, c.reason, c.message))
                .collect()
        })
        .unwrap_or_default()
}

fn container_name(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| {
            s.containers
                .iter()
                .find(|c| c.name == CONTAINER)
                .or(s.containers.first())
        })
        .map(|c| c.name.clone())
        .unwrap_or_else(|| CONTAINER.into())
}

fn image_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// A PersistentVolume reserved for `claim` and the claim bound to it (the persistent-volume
/// controller completes the binding). The volume is a host path: no pod ever runs here.
fn claim_volume(volume: &str, claim: &str, namespace: &str, run: &str) -> (Value, Value) {
    let labels = json!({ RUN_LABEL: run });
    let pv = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume, "labels": labels},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "hostPath": {"path": format!("/var/tmp/{volume}")},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    });
    let pvc = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace, "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": volume,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    });
    (pv, pvc)
}

/// The node a scheduler bound the pod to.
fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn is_live(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase, Some("Succeeded") | Some("Failed"))
}

/// Everything the operator wrote for a placed job: status, conditions and its pod.
fn check_placed_job(job: &InferenceJob, pod: &Pod, nodes: &[Node]) -> Result<()> {
    let name = job.name_any();
    let status = job
        .status
        .as_ref()
        .ok_or_else(|| anyhow!("job {name} has no status"))?;
    let class = status
        .node_class
        .clone()
        .ok_or_else(|| anyhow!("job {name}: status.nodeClass is unset"))?;
    let plan = status
        .plan
        .as_ref()
        .ok_or_else(|| anyhow!("job {name}: status.plan is unset"))?;
    expect_eq(
        &format!("job {name} plan.nodeClass"),
        plan.node_class.as_str(),
        class.as_str(),
    )?;
    let bounds = &job.spec.gpus;
    ensure!(
        plan.gpu_count >= bounds.min.max(1) && plan.gpu_count <= bounds.max,
        "job {name}: plan.gpuCount {} outside spec.gpus {}..={}",
        plan.gpu_count,
        bounds.min,
        bounds.max
    );
    ensure!(
        !plan.reasons.is_empty(),
        "job {name}: plan.reasons is empty"
    );
    expect_eq(
        &format!("job {name} status.podName"),
        status.pod_name.clone(),
        Some(pod.name_any()),
    )?;
    ensure!(
        status.attempt_count >= 1,
        "job {name}: attemptCount {}",
        status.attempt_count
    );
    ensure!(
        status
            .attempts
            .last()
            .is_some_and(|a| a.pod_name == pod.name_any()),
        "job {name}: the last of status.attempts should name pod {}, saw {:?}",
        pod.name_any(),
        status.attempts
    );
    ensure!(!status.conditions.is_empty(), "job {name}: no conditions");
    for c in &status.conditions {
        ensure!(
            !c.type_.is_empty()
                && !c.reason.is_empty()
                && ["True", "False", "Unknown"].contains(&c.status.as_str()),
            "job {name}: malformed condition {c:?}"
        );
    }

    // Owner reference: what lets the garbage collector remove the pod with the job.
    let owner = pod
        .owner_references()
        .iter()
        .find(|o| o.uid == job.uid().unwrap_or_default())
        .ok_or_else(|| {
            anyhow!(
                "pod {} has no owner reference to job {name}",
                pod.name_any()
            )
        })?;
    expect_eq(
        "ownerReference.apiVersion",
        owner.api_version.as_str(),
        "vramfit.io/v1alpha1",
    )?;
    expect_eq("ownerReference.kind", owner.kind.as_str(), "InferenceJob")?;
    expect_eq("ownerReference.name", owner.name.as_str(), name.as_str())?;
    expect_eq("ownerReference.controller", owner.controller, Some(true))?;
    expect_eq(
        "ownerReference.blockOwnerDeletion",
        owner.block_owner_deletion,
        Some(true),
    )?;

    let labels = pod.labels();
    ensure!(
        labels.contains_key(JOB_LABEL),
        "pod {} has no {JOB_LABEL} label: {labels:?}",
        pod.name_any()
    );
    expect_eq(
        &format!("pod {} label {ATTEMPT_LABEL}", pod.name_any()),
        labels.get(ATTEMPT_LABEL).cloned(),
        Some(status.attempt_count.to_string()),
    )?;

    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| anyhow!("pod has no spec"))?;
    let container = spec
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)
        .ok_or_else(|| anyhow!("pod {} has no container {CONTAINER}", pod.name_any()))?;
    // Log lines reach status only where the job asked for them.
    let from_logs = job
        .spec
        .pod
        .as_ref()
        .is_some_and(|p| p.termination_message_from_logs);
    expect_eq(
        "terminationMessagePolicy",
        container.termination_message_policy.as_deref(),
        Some(if from_logs {
            "FallbackToLogsOnError"
        } else {
            "File"
        }),
    )?;
    let limit = container
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("nvidia.com/gpu"))
        .map(|q| q.0.clone());
    expect_eq(
        "container limits nvidia.com/gpu",
        limit,
        Some(plan.gpu_count.to_string()),
    )?;

    let env: BTreeMap<String, String> = container
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    // Every variable the planner's contract gives this plan reaches the pod as planned (the
    // contract itself is unit-tested in the planner).
    let input = vramfit_planner::resolve_job(&job.spec).map_err(|e| anyhow!("job {name}: {e}"))?;
    for (key, value) in vramfit_planner::workload::plan_env(&input, plan) {
        expect_eq(
            &format!("pod {} env {key}", pod.name_any()),
            env.get(&key).cloned(),
            Some(value),
        )?;
    }
    expect_eq(
        &format!("pod {} env VRAMFIT_NODE_CLASS", pod.name_any()),
        env.get("VRAMFIT_NODE_CLASS").cloned(),
        Some(class.clone()),
    )?;
    // PyTorch's settings go to PyTorch workloads only, never to a llama.cpp server.
    let torch_dtype = (job.spec.runtime != vramfit_api::Runtime::Llamacpp)
        .then(|| plan.dtype.as_str().to_string());
    expect_eq(
        &format!("pod {} env TORCH_DTYPE", pod.name_any()),
        env.get("TORCH_DTYPE").cloned(),
        torch_dtype,
    )?;

    ensure!(
        spec.tolerations
            .iter()
            .flatten()
            .any(|t| t.key.as_deref() == Some("nvidia.com/gpu")
                && t.operator.as_deref() == Some("Exists")
                && t.effect.as_deref().is_none_or(|e| e == "NoSchedule")),
        "pod {} does not tolerate the nvidia.com/gpu taint: {:?}",
        pod.name_any(),
        spec.tolerations
    );

    // Required node affinity: it selects simulated GPU nodes with enough GPUs, and never the
    // node without GPUs.
    let requirements = affinity_requirements(pod);
    ensure!(
        !requirements.is_empty(),
        "pod {} has no required node affinity",
        pod.name_any()
    );
    let matching: Vec<&Node> = nodes
        .iter()
        .filter(|n| satisfies(&requirements, n.labels()))
        .collect();
    ensure!(
        !matching.is_empty(),
        "pod {} affinity {requirements:?} matches none of the simulated nodes",
        pod.name_any()
    );
    for node in &matching {
        let gpus: u32 = node
            .labels()
            .get(vramfit_api::labels::GPU_COUNT)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        ensure!(
            gpus >= plan.gpu_count,
            "pod {} affinity matches node {} with {gpus} GPUs, the plan needs {}",
            pod.name_any(),
            node.name_any(),
            plan.gpu_count
        );
    }
    // The scheduler bound the pod to a node of the chosen class.
    let bound = spec
        .node_name
        .as_deref()
        .ok_or_else(|| anyhow!("pod {} is not bound to a node", pod.name_any()))?;
    {
        ensure!(
            matching.iter().any(|n| n.name_any() == bound),
            "pod {} was bound to {bound}, not a node matching its class {class}",
            pod.name_any()
        );
        println!(
            "     pod {} bound by a scheduler to {bound} (class {class})",
            pod.name_any()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------

/// The real agent labels each simulated node from its fixture (server-side apply, field
/// manager `vramfit-agent`).
async fn agent_labels_nodes(s: &mut Suite) -> Result<()> {
    let nodes: Api<Node> = Api::all(s.client.clone());
    for sim in SIM_NODES {
        let name = sim.name(&s.run);
        let fixture = s.root.join("agent/fixtures").join(sim.fixture);
        let bin = s.bins.agent.clone();
        let args = [
            "--once".to_string(),
            "--fixture".into(),
            fixture.display().to_string(),
            "--node-name".into(),
            name.clone(),
        ];
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(bin).args(args).output()
        })
        .await??;
        ensure!(
            output.status.success(),
            "vramfit-agent --once --fixture {} --node-name {name} failed ({}): {}",
            sim.fixture,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let node = nodes.get(&name).await?;
        sim.check_labels(node.labels())
            .with_context(|| format!("node {name} labelled from {}", sim.fixture))?;
        let managers: Vec<_> = node
            .managed_fields()
            .iter()
            .filter_map(|m| m.manager.clone())
            .collect();
        ensure!(
            managers.iter().any(|m| m == "vramfit-agent"),
            "node {name}: no managedFields entry of field manager vramfit-agent, saw {managers:?}"
        );
        println!(
            "     {name}: {} = {:?}",
            vramfit_api::labels::GPU_PRODUCT,
            node.labels().get(vramfit_api::labels::GPU_PRODUCT)
        );
    }
    Ok(())
}

async fn operator_serves(s: &mut Suite) -> Result<()> {
    s.stop_operators();
    s.start_operator("single", &[], true).await?;
    let addr = s.operators[0].addr.clone();
    let (code, body) = http_get(&addr, "/metrics").await?;
    ensure!(code == 200, "/metrics answered {code}");
    ensure!(!body.trim().is_empty(), "/metrics is empty");
    Ok(())
}

/// Every `examples/*.yaml` is planned: placed jobs get a complete pod, unplaceable ones say
/// why. At least one must be placed.
async fn examples_are_planned(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let mut names = vec![];
    let mut paths: Vec<_> = std::fs::read_dir(s.root.join("examples"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .collect();
    paths.sort();
    for path in &paths {
        for doc in read_yaml_documents(path)? {
            s.provide_claims(&doc).await?;
            let job = s
                .apply_job(doc)
                .await
                .with_context(|| format!("applying {}", path.display()))?;
            names.push(job.name_any());
        }
    }
    s.example_jobs = names.clone();
    ensure!(!names.is_empty(), "examples/ has no manifests");
    let nodes = s.sim_nodes().await?;
    let mut placed = 0;
    let mut problems = vec![];
    for name in &names {
        let job = s
            .wait_phase(
                name,
                &[
                    Phase::Scheduled,
                    Phase::Running,
                    Phase::Unschedulable,
                    Phase::Failed,
                ],
            )
            .await?;
        let status = job.status.clone().unwrap_or_default();
        match status.phase {
            Some(Phase::Scheduled) | Some(Phase::Running) => {
                let (job, pod) = s.wait_pod(name, status.attempt_count.max(1)).await?;
                if let Err(e) = check_placed_job(&job, &pod, &nodes) {
                    problems.push(format!("{e:#}"));
                    continue;
                }
                if let Err(e) = s.wait_events(name, &["PodCreated"]).await {
                    problems.push(format!("{e:#}"));
                    continue;
                }
                let plan = status.plan.as_ref();
                println!(
                    "     {name}: Scheduled on class {:?}, {} GPU(s), {:?}, quantization {:?}",
                    status.node_class,
                    plan.map(|p| p.gpu_count).unwrap_or_default(),
                    plan.map(|p| p.dtype.as_str()),
                    plan.map(|p| p.quantization.as_str())
                );
                placed += 1;
            }
            Some(Phase::Unschedulable) => {
                println!(
                    "     {name}: Unschedulable: {:?} {:?}",
                    status.rejected_classes,
                    conditions_of(&job)
                );
                ensure!(
                    status.conditions.iter().any(|c| c.status == "False"),
                    "job {name} is Unschedulable without a False condition: {:?}",
                    conditions_of(&job)
                );
                s.wait_events(name, &["Unschedulable"]).await?;
                let pods = s.pods_of(&job).await?;
                ensure!(
                    pods.is_empty(),
                    "Unschedulable job {name} has pods {:?}",
                    pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
                );
            }
            other => problems.push(format!(
                "example {name} ended {other:?}: {:?}",
                conditions_of(&job)
            )),
        }
    }
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    ensure!(
        placed > 0,
        "none of the {} examples was placed on the simulated GPU nodes",
        names.len()
    );
    Ok(())
}

/// `kubectl get ij` shows the printer columns, with the phase from status.
async fn kubectl_columns(s: &mut Suite) -> Result<()> {
    let text = s.kubectl_get_jobs(&[]).await?;
    let rows: Vec<&str> = s.example_jobs.iter().map(String::as_str).collect();
    let table = parse_table(
        &text,
        &["NAME", "PHASE", "CLASS", "GPUS", "DTYPE", "QUANT", "AGE"],
        &rows,
    )?;
    for name in &rows {
        let job = s.job(name).await?;
        let phase = job
            .status
            .and_then(|st| st.phase)
            .map(|p| p.as_str().to_string());
        if let Some(cell) = table[*name].get("PHASE") {
            expect_eq(
                &format!("PHASE column of {name}"),
                Some(cell.clone()),
                phase,
            )?;
        }
    }
    Ok(())
}

/// A simulated kubelet runs the pod then finishes it: the job follows to Succeeded.
async fn kubelet_success(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-succeeds";
    s.apply_job(s.own_job(name, 3)).await?;
    let (_, pod) = s.wait_pod(name, 1).await?;
    s.set_pod_running(&pod).await?;
    s.wait_phase(name, &[Phase::Running]).await?;
    s.wait_events(name, &["Running"]).await?;
    s.set_pod_ended(&pod, 0, "Completed", "").await?;
    let job = s.wait_phase(name, &[Phase::Succeeded]).await?;
    let status = job.status.clone().unwrap_or_default();
    ensure!(
        status.completion_time.is_some(),
        "Succeeded job has no completionTime"
    );
    ensure!(
        status.attempts.first().and_then(|a| a.outcome.as_deref()) == Some("Succeeded"),
        "attempts[0].outcome should be Succeeded: {:?}",
        status.attempts
    );
    s.wait_events(name, &["Succeeded"]).await?;
    consistently(
        "exactly one pod for the Succeeded job",
        Duration::from_secs(5),
        || async {
            exactly_one_pod(&s.pods_of(&job).await?)?;
            Ok(())
        },
    )
    .await
}

/// A CUDA out-of-memory failure leads to attempt 2, one step down; a second one, with
/// maxAttempts 2, fails the job.
async fn oom_steps_down(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-oom";
    s.apply_job(s.own_job(name, 2)).await?;
    let (_, first) = s.wait_pod(name, 1).await?;
    s.set_pod_running(&first).await?;
    s.wait_phase(name, &[Phase::Running]).await?;
    s.set_pod_ended(&first, 1, "Error", CUDA_OOM_MESSAGE)
        .await?;

    let (job, second) = s.wait_pod(name, 2).await?;
    ensure!(
        second.name_any() != first.name_any(),
        "attempt 2 reuses pod {}",
        first.name_any()
    );
    let status = job.status.clone().unwrap_or_default();
    ensure!(
        status.attempts.len() == 2,
        "status.attempts should have 2 entries: {:?}",
        status.attempts
    );
    expect_eq(
        "attempts[0].outcome",
        status.attempts[0].outcome.as_deref(),
        Some("OutOfMemory"),
    )?;
    ensure!(
        status.attempts[1]
            .step
            .as_deref()
            .is_some_and(|s| !s.is_empty()),
        "attempts[1].step should say what was stepped down: {:?}",
        status.attempts[1]
    );
    println!("     step after OOM: {:?}", status.attempts[1].step);
    let nodes = s.sim_nodes().await?;
    check_placed_job(&job, &second, &nodes)?;
    s.wait_events(name, &["OutOfMemory", "SteppedDown"]).await?;

    s.set_pod_ended(&second, 1, "Error", CUDA_OOM_MESSAGE)
        .await?;
    let job = s.wait_phase(name, &[Phase::Failed]).await?;
    s.wait_events(name, &["Failed"]).await?;
    consistently("no third attempt", Duration::from_secs(5), || async {
        let pods = s.pods_of(&job).await?;
        ensure!(
            pods.len() == 2,
            "pods {:?}",
            pods.iter()
                .map(|p| (p.name_any(), p.labels().get(ATTEMPT_LABEL).cloned()))
                .collect::<Vec<_>>()
        );
        Ok(())
    })
    .await
}

/// Exactly one live pod per non-terminal job that has one, and it is the one in status.
async fn one_live_pod_per_job(s: &Suite) -> Result<()> {
    let jobs = s.jobs().list(&ListParams::default()).await?.items;
    for job in jobs {
        let status = job.status.clone().unwrap_or_default();
        let live: Vec<String> = s
            .pods_of(&job)
            .await?
            .iter()
            .filter(|p| is_live(p))
            .map(|p| p.name_any())
            .collect();
        ensure!(
            live.len() <= 1,
            "job {} has {} live pods: {live:?}",
            job.name_any(),
            live.len()
        );
        if matches!(status.phase, Some(Phase::Scheduled) | Some(Phase::Running)) {
            ensure!(
                live.len() == 1 && status.pod_name.as_ref() == live.first(),
                "job {} ({:?}) status.podName {:?}, live pods {live:?}",
                job.name_any(),
                status.phase,
                status.pod_name
            );
        }
    }
    Ok(())
}

/// Killing the operator mid-run and starting a new one creates no duplicate pods, keeps
/// the existing ones, and picks up a job created while it was down.
async fn restart_keeps_one_pod(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let before: BTreeMap<String, Option<String>> = s
        .jobs()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|j| j.status.as_ref().and_then(|st| st.phase) == Some(Phase::Scheduled))
        .map(|j| (j.name_any(), j.status.and_then(|st| st.pod_name)))
        .collect();
    s.stop_operators();
    let name = "e2e-while-down";
    s.apply_job(s.own_job(name, 3)).await?;
    s.start_operator("restarted", &[], true).await?;
    s.wait_pod(name, 1).await?;
    consistently(
        "one live pod per job after the restart",
        Duration::from_secs(10),
        || one_live_pod_per_job(s),
    )
    .await?;
    for (job, pod) in before {
        let now = s.job(&job).await?.status.and_then(|st| st.pod_name);
        expect_eq(
            &format!("status.podName of {job} across the restart"),
            now,
            pod,
        )?;
    }
    // Free the GPUs the examples hold for the scenarios that follow.
    let mut done = s.example_jobs.clone();
    done.push(name.to_string());
    s.delete_jobs(&done).await
}

/// Two replicas with --leader-election: one holds the Lease, jobs get exactly one pod, and
/// the other takes over when the leader dies.
async fn leader_election(s: &mut Suite) -> Result<()> {
    s.stop_operators();
    let lease_name = format!("{PREFIX}{}", s.run);
    let ns = s.ns.clone();
    let flags = [
        "--leader-election",
        "--lease-name",
        lease_name.as_str(),
        "--lease-namespace",
        ns.as_str(),
    ];
    s.start_operator("replica-a", &flags, false).await?;
    s.start_operator("replica-b", &flags, false).await?;
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), &s.ns);
    let holder = |leases: Api<Lease>, name: String| async move {
        let lease = leases
            .get_opt(&name)
            .await?
            .ok_or_else(|| anyhow!("Lease {name} does not exist"))?;
        lease
            .spec
            .and_then(|sp| sp.holder_identity)
            .filter(|h| !h.is_empty())
            .ok_or_else(|| anyhow!("Lease {name} has no holderIdentity"))
    };
    let leader = eventually(
        "a replica to hold the Lease",
        Duration::from_secs(60),
        || {
            let (l, n) = (leases.clone(), lease_name.clone());
            async move {
                let h = holder(l, n).await?;
                ensure!(
                    h == "replica-a" || h == "replica-b",
                    "holderIdentity {h:?} is neither replica"
                );
                Ok(h)
            }
        },
    )
    .await?;
    // Only the Lease holder is ready (operator/src/health.rs: with leader election, /readyz
    // is 200 only while the lease is held), so only it writes.
    let addrs: Vec<(String, String)> = s
        .operators
        .iter()
        .map(|o| (o.name.clone(), o.addr.clone()))
        .collect();
    eventually(
        "only the leader's /readyz to answer 200",
        Duration::from_secs(60),
        || {
            let (addrs, leader) = (addrs.clone(), leader.clone());
            async move {
                let mut codes = vec![];
                for (name, addr) in &addrs {
                    let code = http_status(addr, "/readyz").await.ok();
                    codes.push((name.clone(), code));
                }
                let ready: Vec<_> = codes
                    .iter()
                    .filter(|(_, c)| *c == Some(200))
                    .map(|(n, _)| n.clone())
                    .collect();
                ensure!(
                    ready == vec![leader.clone()],
                    "leader {leader}, /readyz codes {codes:?}"
                );
                println!("     /readyz: {codes:?} (leader {leader})");
                Ok(())
            }
        },
    )
    .await?;
    for op in &mut s.operators {
        op.check_alive()?;
    }
    let name = "e2e-leader";
    s.apply_job(s.own_job(name, 3)).await?;
    let (job, _) = s.wait_pod(name, 1).await?;
    consistently(
        "exactly one pod for the job with two replicas",
        Duration::from_secs(8),
        || async {
            exactly_one_pod(&s.pods_of(&job).await?)?;
            expect_eq(
                "Lease holder",
                holder(leases.clone(), lease_name.clone()).await?,
                leader.clone(),
            )
        },
    )
    .await?;

    // Failover.
    let index = s
        .operators
        .iter()
        .position(|o| o.name == leader)
        .ok_or_else(|| anyhow!("leader process not found"))?;
    // A job arrives just before the leader dies: whoever places it, it gets one pod.
    let in_flight = "e2e-during-failover";
    s.apply_job(s.own_job(in_flight, 3)).await?;
    let mut dead = s.operators.remove(index);
    dead.kill();
    let other = if leader == "replica-a" {
        "replica-b"
    } else {
        "replica-a"
    };
    let survivor_addr = s
        .operators
        .iter()
        .find(|o| o.name == other)
        .map(|o| o.addr.clone())
        .ok_or_else(|| anyhow!("{other} process not found"))?;
    eventually(
        &format!("{other} to take the Lease after {leader} died"),
        Duration::from_secs(90),
        || {
            let (l, n, addr) = (leases.clone(), lease_name.clone(), survivor_addr.clone());
            async move {
                let h = holder(l, n).await?;
                ensure!(h == other, "holderIdentity {h:?}");
                let code = http_status(&addr, "/readyz").await?;
                ensure!(
                    code == 200,
                    "{other} holds the Lease but /readyz answers {code}"
                );
                Ok(())
            }
        },
    )
    .await?;
    let name = "e2e-failover";
    s.apply_job(s.own_job(name, 3)).await?;
    let (job, _) = s.wait_pod(name, 1).await?;
    let (in_flight_job, _) = s.wait_pod(in_flight, 1).await?;
    consistently(
        "exactly one pod for each job after failover",
        Duration::from_secs(5),
        || async {
            exactly_one_pod(&s.pods_of(&job).await?)?;
            exactly_one_pod(&s.pods_of(&in_flight_job).await?)?;
            one_live_pod_per_job(s).await
        },
    )
    .await?;
    // The survivor converged as it was: never restarted.
    for op in &mut s.operators {
        op.check_alive()?;
    }
    let deleted = s
        .delete_jobs(&[
            "e2e-leader".to_string(),
            in_flight.to_string(),
            name.to_string(),
        ])
        .await;
    s.stop_operators();
    deleted
}

/// The API server rejects invalid jobs with the CRD's own messages, and stores nothing.
async fn invalid_manifests(s: &mut Suite) -> Result<()> {
    let base = s.own_job("placeholder", 3);
    let case = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        v["metadata"]["name"] = json!(name);
        edit(&mut v);
        v
    };
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            case("bad-gpus", &|v| {
                v["spec"]["gpus"] = json!({"min": 4, "max": 2})
            }),
            vec!["gpus.min must not exceed gpus.max"],
        ),
        (
            case("bad-llamacpp", &|v| {
                v["spec"]["runtime"] = json!("llamacpp");
                v["spec"]["model"] = json!({"parameters": 7000000000u64, "layers": 32, "hiddenSize": 4096, "attentionHeads": 32});
            }),
            vec!["a llamacpp job needs a GGUF model: a GGUF preset or model.ggufFileBytes"],
        ),
        (
            case("bad-runtime", &|v| v["spec"]["runtime"] = json!("tensorrt")),
            vec!["Unsupported value", "tensorrt"],
        ),
        (
            case("bad-model", &|v| {
                v["spec"]["model"] = json!({"name": "something"})
            }),
            vec!["model needs a preset, or parameters, layers, hiddenSize and attentionHeads"],
        ),
        (
            case("bad-gpu-layers", &|v| {
                v["spec"]["runtime"] = json!("llamacpp");
                v["spec"]["model"] = json!({"preset": "llama-3.1-70b-instruct-q4_k_m"});
                v["spec"]["llamaCpp"] = json!({"gpuLayers": "lots"});
            }),
            vec!["gpuLayers must be `auto` or a non-negative integer"],
        ),
        // The spec's bounds (no job makes the operator's cache grow without limit).
        (
            case("too-many-env", &|v| {
                let env: Vec<Value> = (0..129)
                    .map(|i| json!({"name": format!("V{i}"), "value": "x"}))
                    .collect();
                v["spec"]["pod"] = json!({ "env": env });
            }),
            vec!["spec.pod.env", "must have at most 128 items"],
        ),
        (
            case("huge-env-value", &|v| {
                v["spec"]["pod"] = json!({"env": [{"name": "BLOB", "value": "x".repeat(40_000)}]});
            }),
            vec!["spec.pod.env[0].value", "may not be more than 32768"],
        ),
        (
            case("huge-arg", &|v| {
                v["spec"]["args"] = json!(["y".repeat(5_000)])
            }),
            vec!["spec.args[0]", "may not be more than 4096"],
        ),
    ];
    let mut problems = vec![];
    for (manifest, expected) in cases {
        let name = manifest["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match s.apply_job(manifest).await {
            Ok(_) => problems.push(format!(
                "{name}: the API server accepted it, expected a rejection with {expected:?}"
            )),
            Err(e) => {
                let api = e
                    .chain()
                    .find_map(|c| c.downcast_ref::<kube::Error>())
                    .and_then(|k| match k {
                        kube::Error::Api(status) => Some((status.code, status.message.clone())),
                        _ => None,
                    });
                match api {
                    Some((code, message))
                        if code == 422 && expected.iter().all(|m| message.contains(m)) =>
                    {
                        println!("     {name}: rejected: {message}");
                    }
                    Some((code, message)) => problems.push(format!(
                        "{name}: expected 422 with {expected:?}, saw {code}: {message}"
                    )),
                    None => problems.push(format!("{name}: expected an API rejection, saw {e:#}")),
                }
            }
        }
        if s.jobs().get_opt(&name).await?.is_some() {
            problems.push(format!("{name}: an invalid job was stored"));
        }
    }
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

/// A deleted job's pods carry the controller owner reference the garbage collector needs;
/// where a controller manager runs, they disappear.
async fn garbage_collection(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-gc";
    s.apply_job(s.own_job(name, 3)).await?;
    let (job, pod) = s.wait_pod(name, 1).await?;
    let nodes = s.sim_nodes().await?;
    check_placed_job(&job, &pod, &nodes)?;
    s.jobs().delete(name, &DeleteParams::background()).await?;
    eventually(
        &format!("job {name} to be deleted"),
        Duration::from_secs(30),
        || async {
            match s.jobs().get_opt(name).await? {
                None => Ok(()),
                Some(j) => bail!("still there, finalizers {:?}", j.finalizers()),
            }
        },
    )
    .await?;
    let gone = eventually(
        &format!("pod {} to be garbage-collected", pod.name_any()),
        Duration::from_secs(30),
        || async {
            let left: BTreeSet<String> = s
                .pods()
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                // A collected pod bound to a node stays Terminating until its kubelet
                // confirms; the garbage collector's part is the deletion request.
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.owner_references()
                            .iter()
                            .any(|o| Some(&o.uid) == job.uid().as_ref())
                })
                .map(|p| p.name_any())
                .collect();
            ensure!(left.is_empty(), "pods {left:?} remain, not being deleted");
            Ok(())
        },
    )
    .await;
    // No kubelet here to finish the deletion: end it as one would.
    let _ = s
        .pods()
        .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
        .await;
    gone.context(
        "the garbage collector (kube-controller-manager) should delete the pods of a deleted job",
    )?;
    println!("     the garbage collector deleted the job's pod");
    Ok(())
}

/// A job limited to `classes`, one GPU, with the given preference.
fn pinned_job(s: &Suite, name: &str, classes: &[&str], preference: &str) -> Value {
    let mut job = s.own_job(name, 3);
    job["spec"]["gpus"] = json!({"min": 1, "max": 1});
    job["spec"]["nodeClasses"] = json!({ "allowed": classes });
    job["spec"]["preference"] = json!(preference);
    job
}

/// Fills a class (its one GPU taken by a running job): the next job goes to another class
/// that fits, a job allowed only the full class waits Unschedulable with the reason, and it
/// starts by itself when the running pod finishes. Pods are bound by the real scheduler.
async fn full_class_overflows_then_frees(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let nodes = s.sim_nodes().await?;
    let node_named = |suffix: &str| format!("{PREFIX}{}-{suffix}", s.run);
    let (small, big) = ("a10g-x1", "a10g-x4");
    let names: Vec<String> = ["fill-first", "fill-overflow", "fill-waits"]
        .map(String::from)
        .to_vec();

    s.apply_job(pinned_job(s, &names[0], &[small], "economy"))
        .await?;
    let (job, first_pod) = s.wait_pod(&names[0], 1).await?;
    check_placed_job(&job, &first_pod, &nodes)?;
    expect_eq(
        "class of the first job",
        job.status.as_ref().and_then(|st| st.node_class.as_deref()),
        Some(small),
    )?;
    expect_eq(
        "node of the first pod",
        node_of(&first_pod),
        Some(node_named("a10gx1").as_str()),
    )?;
    s.set_pod_running(&first_pod).await?;
    s.wait_phase(&names[0], &[Phase::Running]).await?;

    // Economy prefers the one-GPU class; it is full, so the job goes to the other A10G class.
    s.apply_job(pinned_job(s, &names[1], &[small, big], "economy"))
        .await?;
    let (job, pod) = s.wait_pod(&names[1], 1).await?;
    check_placed_job(&job, &pod, &nodes)?;
    expect_eq(
        "class of the overflow job",
        job.status.as_ref().and_then(|st| st.node_class.as_deref()),
        Some(big),
    )?;
    expect_eq(
        "node of the overflow pod",
        node_of(&pod),
        Some(node_named("a10gx4").as_str()),
    )?;

    // Only the full class allowed: Unschedulable, saying why, and no pod.
    s.apply_job(pinned_job(s, &names[2], &[small], "economy"))
        .await?;
    let job = s.wait_phase(&names[2], &[Phase::Unschedulable]).await?;
    let status = job.status.clone().unwrap_or_default();
    ensure!(
        status
            .rejected_classes
            .iter()
            .any(|r| r.node_class == small && r.reason.contains("no free GPUs")),
        "rejectedClasses should say {small} has no free GPUs: {:?}",
        status.rejected_classes
    );
    ensure!(
        status
            .conditions
            .iter()
            .any(|c| c.status == "False" && c.message.contains(small)),
        "no False condition names {small}: {:?}",
        conditions_of(&job)
    );
    s.wait_events(&names[2], &["Unschedulable"]).await?;
    ensure!(
        s.pods_of(&job).await?.is_empty(),
        "an Unschedulable job has a pod"
    );

    // The running pod finishes: its GPU is free, and the waiting job starts by itself.
    s.set_pod_ended(&first_pod, 0, "Completed", "").await?;
    s.wait_phase(&names[0], &[Phase::Succeeded]).await?;
    let (job, pod) = s.wait_pod(&names[2], 1).await?;
    check_placed_job(&job, &pod, &nodes)?;
    expect_eq(
        "node of the waiting job's pod",
        node_of(&pod),
        Some(node_named("a10gx1").as_str()),
    )?;
    println!(
        "     {} waited Unschedulable, then started on {} once {} finished",
        names[2], small, names[0]
    );
    s.delete_jobs(&names).await
}

/// A job's pods are exactly one.
fn exactly_one_pod(pods: &[Pod]) -> Result<()> {
    ensure!(
        pods.len() == 1,
        "pods {:?}",
        pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    Ok(())
}
