//! A served llama.cpp job whose replica is a group on a real node: the leader's real
//! `llama-server --rpc` over a worker's real `rpc-server` (the llama-server image, built with
//! `GGML_RPC=ON`), both on the one real node, so the scenario's operator runs with
//! `--group-spread none` (ranks may share a node). The worker is made Ready by the kubelet's
//! TCP probe on its `rpc-server` port; the leader is created after the worker is Ready, with
//! a host alias that resolves the worker's name (`<pod>.<group>.<namespace>`) to its pod IP
//! (no cluster DNS here). A completion through the job's Service comes from the model the
//! leader loaded onto the worker. A worker whose `rpc-server` is SIGKILLed ends its group: the
//! replica gets a new group whole, which serves again, and whose worker stays Ready while the
//! leader holds its connection (`rpc-server` serves one client at a time and accepts nothing
//! else meanwhile: a readiness probe repeated then would time out).
use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt as _;
use kube::api::LogParams;
use serde_json::{Value, json};
use vramfit_api::InferenceJob;
use vramfit_api::group::GroupEngine;
use vramfit_api::pod_keys::{GROUP_LABEL, GROUP_RANK_LABEL};
use vramfit_api::serve::ReplicaStatus;
use vramfit_e2e::{
    LLAMA_SERVER_MODEL, RealNode, Suite, conditions_of, consistently, eventually, expect_eq,
    http_post_json,
};

use crate::real_node_serving::{
    KILL_CONTAINER, PORT, cluster_address, container_id, replicas_of, run_python, served_llama,
    setup, wait_ready,
};

/// The job's name: a group's job needs a DNS-1035 label (its group's Service is named after
/// it).
const NAME: &str = "real-serve-group";

/// The port of the worker's `rpc-server` (the plan's `group.port`, llama.cpp's default).
const RPC_PORT: i32 = 50052;

/// The operator flag that lets a group's ranks share a node: the real node is one node.
const GROUP_SPREAD_NONE: [&str; 2] = ["--group-spread", "none"];

/// How long the worker must stay Ready once the leader is connected: longer than a readiness
/// probe's default failure threshold (3 × 10 s) would take to fail.
const WORKER_STAYS_READY: Duration = Duration::from_secs(40);

/// The scenario with an operator of its own (`--group-spread none`) in place of the suite's;
/// the suite's single operator is back afterwards, pass or fail.
pub async fn served_llama_group(s: &mut Suite) -> Result<()> {
    let (node, server, client) = setup(s).await?;
    s.stop_operators();
    let outcome = match s
        .start_operator("group-spread-none", &GROUP_SPREAD_NONE, true)
        .await
    {
        Ok(()) => group_serves_and_is_replaced(s, &node, &server, &client).await,
        Err(e) => Err(e),
    };
    // Deleted by the operator that placed it (its finalizer), then the suite's operator back.
    let deleted = s.delete_jobs(&[NAME.to_string()]).await;
    s.stop_operators();
    let restored = s.ensure_single_operator().await;
    outcome.and(deleted).and(restored)
}

/// The tiny model declared as a 56 GB GGUF file of 8 blocks: more than one L40S's share of
/// VRAM holds (36 GiB usable), and the fullest of two devices (5 of the 9 layers, the output
/// layer included, each an eighth of the file) does fit, so with one GPU per node
/// (`gpus.max` 1) the plan on the real node's class is a group of 2 nodes × 1 GPU, engine
/// `llamaCppRpc`.
/// (llama.cpp clamps `--n-gpu-layers 9` to the file's 3.) Log verbosity 4 makes llama.cpp log
/// where it put each buffer.
fn group_manifest(s: &Suite, node: &RealNode, image: &str) -> Value {
    let mut manifest = served_llama(s, NAME, node, image, 1, 4096);
    manifest["spec"]["args"] = json!(["--model", LLAMA_SERVER_MODEL, "--log-verbosity", "4"]);
    manifest["spec"]["model"]["parameters"] = json!(56_000_000_000_u64);
    manifest["spec"]["model"]["layers"] = json!(8);
    manifest["spec"]["model"]["ggufFileBytes"] = json!(56_000_000_000_u64);
    manifest["spec"]["gpus"] = json!({"min": 1, "max": 1, "maxNodes": 2});
    manifest
}

/// A replica's group as it runs: its name and its two pods.
struct RunningGroup {
    name: String,
    leader: Pod,
    worker: Pod,
}

async fn group_serves_and_is_replaced(
    s: &Suite,
    node: &RealNode,
    server: &str,
    client: &str,
) -> Result<()> {
    s.apply_job(group_manifest(s, node, server)).await?;
    let (_, first_ready) = worker_ready_before_its_leader(s, None).await?;
    let job = wait_ready(s, NAME, 1).await?;
    let plan = job
        .status
        .as_ref()
        .and_then(|st| st.plan.clone())
        .context("the job has no plan")?;
    let group_plan = plan.group.clone().context("the plan is not a group")?;
    expect_eq("group engine", group_plan.engine, GroupEngine::LlamaCppRpc)?;
    expect_eq("group nodes", group_plan.nodes, 2)?;
    let line = replicas_of(&job)
        .first()
        .cloned()
        .context("no replica line")?;
    let first = check_running_group(s, &job, node, &line, &first_ready).await?;
    leader_offloaded_to_the_worker(s, &first).await?;

    let address = cluster_address(s, NAME).await?;
    let text = completion(&address).await?;
    println!("     POST http://{address}/completion → {text:?}");

    // The node's CNI bridge enforces no NetworkPolicy: what is checked is what it selects.
    let group_pods = [first.leader.clone(), first.worker.clone()];
    s.check_named_group_objects(&job, &first.name, &group_pods, Some(PORT))
        .await?;
    println!(
        "     NetworkPolicy {0} applies to exactly {0}-0 and {0}-1 and admits only them; \
         {0}-leader applies to {0}-0 alone and admits any client on port {PORT}",
        first.name
    );

    // SIGKILL the worker's rpc-server: its group ends whole and the replica gets a new one.
    let id = container_id(&first.worker).context("the worker's container has no id")?;
    let killed = run_python(
        s,
        node,
        client,
        "real-group-killer",
        json!({"hostPID": true, "securityContext": {"runAsUser": 0}}),
        KILL_CONTAINER,
        &[&id, "rpc-server"],
    )
    .await?;
    println!("     {}: {killed}", first.worker.name_any());
    let (_, second_ready) = worker_ready_before_its_leader(s, Some(&first.name)).await?;
    let replaced = eventually(
        &format!("replica 0 to get a group in place of {}", first.name),
        Duration::from_secs(240),
        || async {
            let job = s.job(NAME).await?;
            let line = replicas_of(&job)
                .first()
                .cloned()
                .context("no replica line")?;
            ensure!(
                line.pod_name != first.name && line.ready,
                "replica {line:?}, conditions {:?}",
                conditions_of(&job)
            );
            Ok(line)
        },
    )
    .await?;
    eventually(
        &format!("both pods of the ended group {} to be gone", first.name),
        Duration::from_secs(120),
        || async {
            for old in [&first.leader, &first.worker] {
                let left = s.pods().get_opt(&old.name_any()).await?;
                ensure!(left.is_none(), "pod {} is still there", old.name_any());
            }
            Ok(())
        },
    )
    .await?;
    ensure!(
        replaced.restarts == line.restarts + 1,
        "restarts of replica 0: {} before the kill, {} after",
        line.restarts,
        replaced.restarts
    );
    let job = wait_ready(s, NAME, 1).await?;
    let restart = job
        .status
        .as_ref()
        .and_then(|st| {
            st.recent_restarts
                .iter()
                .rfind(|r| r.pod_name == first.name)
        })
        .cloned()
        .with_context(|| format!("no restart recorded for group {}", first.name))?;
    expect_eq("restart reason", restart.reason.as_str(), "Failed")?;
    let second = check_running_group(s, &job, node, &replaced, &second_ready).await?;
    let text = completion(&address).await?;
    println!(
        "     group {} replaced whole by {} (restart {} \"{}\"); POST /completion → {text:?}",
        first.name, second.name, restart.reason, restart.message
    );
    // Last, so that a failure here leaves every check above done.
    worker_stays_ready(s, &second).await
}

/// Watches replica 0's group (another than `not`) until its worker is Ready, and checks that
/// its leader did not exist before that: the group's name and when the worker became Ready.
/// Watched from the start, as the worker's Ready condition might not stay (a readiness probe
/// of a busy `rpc-server` would fail).
async fn worker_ready_before_its_leader(s: &Suite, not: Option<&str>) -> Result<(String, Time)> {
    eventually(
        "replica 0's group to have a Ready worker",
        Duration::from_secs(180),
        || async {
            let job = s.job(NAME).await?;
            let line = replicas_of(&job)
                .first()
                .cloned()
                .context("no replica line")?;
            let group = line.pod_name.clone();
            ensure!(Some(group.as_str()) != not, "replica {line:?}");
            let worker = s
                .pods()
                .get_opt(&format!("{group}-1"))
                .await?
                .with_context(|| format!("no worker {group}-1 yet"))?;
            let ready = worker
                .status
                .as_ref()
                .and_then(|st| st.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
                .and_then(|c| c.last_transition_time.clone())
                .with_context(|| format!("worker {group}-1 is not Ready"))?;
            if let Some(leader) = s.pods().get_opt(&format!("{group}-0")).await? {
                let created = leader.metadata.creation_timestamp.clone();
                ensure!(
                    created.as_ref().is_some_and(|c| c.0 >= ready.0),
                    "leader {group}-0 created at {created:?}, before worker {group}-1 was \
                     Ready at {}",
                    ready.0
                );
            }
            Ok((group, ready))
        },
    )
    .await
}

/// Checks the replica's group as it runs: two pods named after it with the group's labels,
/// both on the real node; the worker runs `rpc-server` on the group's port, probed by the
/// kubelet's TCP probe of that port; the leader was created once the worker was Ready (at
/// `worker_ready`), resolves the worker's name through a host alias to the worker's pod IP,
/// and passes that name to `--rpc`.
async fn check_running_group(
    s: &Suite,
    job: &InferenceJob,
    node: &RealNode,
    line: &ReplicaStatus,
    worker_ready: &Time,
) -> Result<RunningGroup> {
    let group = line.pod_name.clone();
    let ranks: Vec<(u32, String)> = line
        .members
        .iter()
        .map(|m| (m.rank, m.pod_name.clone()))
        .collect();
    expect_eq(
        &format!("members of group {group}"),
        ranks,
        vec![(0, format!("{group}-0")), (1, format!("{group}-1"))],
    )?;
    let leader = s.pods().get(&format!("{group}-0")).await?;
    let worker = s.pods().get(&format!("{group}-1")).await?;
    for (rank, pod) in [(0, &leader), (1, &worker)] {
        let pod_name = pod.name_any();
        expect_eq(
            &format!("pod {pod_name} label {GROUP_LABEL}"),
            pod.labels().get(GROUP_LABEL),
            Some(&group),
        )?;
        expect_eq(
            &format!("pod {pod_name} label {GROUP_RANK_LABEL}"),
            pod.labels().get(GROUP_RANK_LABEL).cloned(),
            Some(rank.to_string()),
        )?;
        expect_eq(
            &format!("node of pod {pod_name}"),
            vramfit_e2e::node_of(pod),
            Some(node.name.as_str()),
        )?;
    }

    let ns = job.namespace().unwrap_or_else(|| s.ns.clone());
    let worker_name = worker.name_any();
    let worker_spec = worker.spec.clone().unwrap_or_default();
    let container = worker_spec
        .containers
        .first()
        .context("the worker has no container")?;
    expect_eq(
        "the worker's command",
        container.command.clone().unwrap_or_default(),
        ["rpc-server", "--host", "0.0.0.0", "--port", "50052"]
            .map(String::from)
            .to_vec(),
    )?;
    // A startup or a readiness probe: what makes the pod Ready once rpc-server listens.
    let tcp_ports: Vec<IntOrString> = [&container.startup_probe, &container.readiness_probe]
        .into_iter()
        .flatten()
        .filter_map(|p| p.tcp_socket.as_ref().map(|t| t.port.clone()))
        .collect();
    expect_eq(
        "the worker's TCP probes (of the rpc-server's port)",
        tcp_ports,
        vec![IntOrString::Int(RPC_PORT)],
    )?;
    let worker_status = worker.status.clone().unwrap_or_default();
    let worker_ip = worker_status
        .pod_ip
        .clone()
        .with_context(|| format!("worker {worker_name} has no pod IP"))?;

    let leader_name = leader.name_any();
    let leader_created = leader
        .metadata
        .creation_timestamp
        .clone()
        .context("the leader has no creation time")?;
    ensure!(
        leader_created.0 >= worker_ready.0,
        "leader {leader_name} created at {} before worker {worker_name} was Ready at {}",
        leader_created.0,
        worker_ready.0
    );
    let worker_address = format!("{worker_name}.{group}.{ns}");
    let aliases: BTreeSet<(String, Vec<String>)> = leader
        .spec
        .as_ref()
        .and_then(|sp| sp.host_aliases.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.ip, a.hostnames.unwrap_or_default()))
        .collect();
    expect_eq(
        &format!("host aliases of leader {leader_name}"),
        aliases,
        [(worker_ip.clone(), vec![worker_address.clone()])].into(),
    )?;
    let args = vramfit_e2e::args_of(&leader);
    let rpc = args
        .iter()
        .position(|a| a == "--rpc")
        .and_then(|i| args.get(i + 1))
        .cloned();
    expect_eq(
        &format!("--rpc of leader {leader_name}"),
        rpc,
        Some(format!("{worker_address}:{RPC_PORT}")),
    )?;
    println!(
        "     group {group}: worker {worker_name} Ready (TCP :{RPC_PORT}) at {}, leader \
         {leader_name} created at {}, {worker_address} → {worker_ip}",
        worker_ready.0, leader_created.0
    );
    Ok(RunningGroup {
        name: group,
        leader,
        worker,
    })
}

/// The worker stays Ready while the leader holds its connection to `rpc-server` (checked
/// after a completion, so the leader is connected): a readiness probe that keeps connecting
/// would time out then (`rpc-server` accepts one client at a time, with a backlog of 1).
async fn worker_stays_ready(s: &Suite, group: &RunningGroup) -> Result<()> {
    let worker = group.worker.name_any();
    consistently(
        &format!("worker {worker} to stay Ready while the leader is connected"),
        WORKER_STAYS_READY,
        || async {
            let pod = s.pods().get(&worker).await?;
            let ready = pod
                .status
                .as_ref()
                .and_then(|st| st.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.status.clone());
            ensure!(ready.as_deref() == Some("True"), "Ready {ready:?}");
            Ok(())
        },
    )
    .await?;
    println!(
        "     worker {worker} stayed Ready for {} s with the leader connected",
        WORKER_STAYS_READY.as_secs()
    );
    Ok(())
}

/// The leader's log says that llama.cpp put the model's layers on the worker's RPC device
/// (the node has no GPU: without the worker every layer would stay on the leader's CPU).
async fn leader_offloaded_to_the_worker(s: &Suite, group: &RunningGroup) -> Result<()> {
    let leader = group.leader.name_any();
    let log = s
        .pods()
        .logs(&leader, &LogParams::default())
        .await
        .with_context(|| format!("the log of leader {leader}"))?;
    let on_rpc: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("RPC0") && l.contains("model buffer size"))
        .collect();
    ensure!(
        !on_rpc.is_empty() && log.contains("offloaded 3/3 layers to GPU"),
        "leader {leader}'s log names no model buffer on the RPC device; its lines about \
         buffers and layers: {:?}",
        log.lines()
            .filter(|l| l.contains("buffer size") || l.contains("layers"))
            .collect::<Vec<_>>()
    );
    println!("     leader {leader}: {}", on_rpc.join("; "));
    Ok(())
}

/// `POST /completion` through the ClusterIP: the generated text, which must not be empty.
async fn completion(address: &str) -> Result<String> {
    let request = json!({"prompt": "the cat", "n_predict": 8});
    let (code, body) =
        http_post_json(address, "/completion", &request, Duration::from_secs(60)).await?;
    ensure!(
        code == 200,
        "POST http://{address}/completion: {code} {body}"
    );
    let answer: Value = serde_json::from_str(&body)
        .with_context(|| format!("POST /completion answered no JSON: {body}"))?;
    let text = answer["content"].as_str().unwrap_or_default().to_string();
    let predicted = answer["tokens_predicted"].as_u64().unwrap_or(0);
    ensure!(
        !text.is_empty() && predicted > 0,
        "POST /completion generated nothing: {body}"
    );
    Ok(text)
}
