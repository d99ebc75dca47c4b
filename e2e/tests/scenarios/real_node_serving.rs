//! Served jobs on a real node: the replicas are llama.cpp's real `llama-server` with a tiny
//! random-weight GGUF (`workload/examples/llama-server`, target `with-tiny-model`), made Ready
//! by the kubelet's real readiness probe on `/health`, reached through kube-proxy's ClusterIP
//! from the host and from a pod. No pod status is written by the suite. Each scenario is
//! skipped, saying why, where the cluster has no schedulable real node holding both the
//! llama-server image and the workload image (the in-cluster client).
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt as _;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use vramfit_api::InferenceJob;
use vramfit_api::serve::ReplicaStatus;
use vramfit_e2e::{
    LLAMA_SERVER_MODEL, RealNode, Suite, conditions_of, container_state, eventually, expect_eq,
    http_get, llama_server_image, workload_image,
};

/// The port the replicas listen on (llama-server's own default).
pub(crate) const PORT: u16 = 8080;

/// How long a replica may take to become Ready: pod start, model load (0.1 s), and the
/// readiness probe's period (10 s) with room for a busy machine.
pub(crate) const READY_WITHIN: Duration = Duration::from_secs(180);

/// The real node, the llama-server image and the workload image (the in-cluster client).
pub(crate) async fn setup(s: &mut Suite) -> Result<(RealNode, String, String)> {
    let (server, client) = (llama_server_image(), workload_image());
    let node = s
        .real_node_holding(&[server.clone(), client.clone()])
        .await?;
    s.ensure_single_operator().await?;
    Ok((node, server, client))
}

/// A served llama.cpp job of the tiny model on the real node's class: `replicas` replicas of
/// one GPU each, `context` tokens, the model given by its numbers (tiny_gguf.py writes them).
pub(crate) fn served_llama(
    s: &Suite,
    name: &str,
    node: &RealNode,
    image: &str,
    replicas: u32,
    context: u32,
) -> Value {
    json!({
        "apiVersion": "vramfit.io/v1alpha1",
        "kind": "InferenceJob",
        "metadata": {"name": name, "namespace": s.ns},
        "spec": {
            "model": {
                "name": LLAMA_SERVER_MODEL, "parameters": 1_200_000, "layers": 2,
                "hiddenSize": 256, "attentionHeads": 8, "kvHeads": 8, "headDim": 32,
                "contextLimit": 1_048_576, "ggufFileBytes": 2_900_000,
            },
            "runtime": "llamacpp",
            "image": image,
            "args": ["--model", LLAMA_SERVER_MODEL],
            "contextLength": context,
            "gpus": {"min": 1, "max": 1},
            "nodeClasses": {"allowed": [node.class()]},
            "serve": {"port": PORT, "replicas": replicas, "modelLoadTimeoutSeconds": 120},
            // llama.cpp writes no termination message: its log tail is the message.
            "pod": {"terminationMessageFromLogs": true},
        }
    })
}

/// The job's replica lines.
pub(crate) fn replicas_of(job: &InferenceJob) -> Vec<ReplicaStatus> {
    job.status.clone().unwrap_or_default().replica_statuses
}

/// Waits until `n` replicas of job `name` are Ready (the kubelet's probes, nothing written by
/// the suite) and the job says `n/n`.
pub(crate) async fn wait_ready(s: &Suite, name: &str, n: u32) -> Result<InferenceJob> {
    eventually(
        &format!("job {name} to have {n} Ready replicas"),
        READY_WITHIN,
        || async {
            let job = s.job(name).await?;
            let status = job.status.clone().unwrap_or_default();
            let want = format!("{n}/{n}");
            ensure!(
                status.ready.as_deref() == Some(want.as_str())
                    && status.replica_statuses.iter().all(|l| l.ready),
                "ready {:?}, replicas {:?}, conditions {:?}",
                status.ready,
                status
                    .replica_statuses
                    .iter()
                    .map(|l| (&l.pod_name, l.ready, &l.reason))
                    .collect::<Vec<_>>(),
                conditions_of(&job)
            );
            Ok(job)
        },
    )
    .await
}

/// `<ClusterIP>:<port>` of the job's Service.
pub(crate) async fn cluster_address(s: &Suite, name: &str) -> Result<String> {
    let services: Api<Service> = Api::namespaced(s.client.clone(), &s.ns);
    let ip = services
        .get(name)
        .await?
        .spec
        .and_then(|sp| sp.cluster_ip)
        .filter(|ip| !ip.is_empty() && ip != "None")
        .with_context(|| format!("Service {name} has no ClusterIP"))?;
    Ok(format!("{ip}:{PORT}"))
}

/// `GET <path>` through the ClusterIP from this host: the body of a 200, else an error.
async fn get_ok(address: &str, path: &str) -> Result<String> {
    let (code, body) = http_get(address, path).await?;
    ensure!(code == 200, "GET http://{address}{path}: {code} {body}");
    Ok(body)
}

/// A one-shot pod on `node` running `python3 -c <script> <args…>` in the workload image;
/// returns what it wrote to its termination log once it Succeeded.
pub(crate) async fn run_python(
    s: &Suite,
    node: &RealNode,
    image: &str,
    name: &str,
    spec_extra: Value,
    script: &str,
    args: &[&str],
) -> Result<String> {
    let mut command = vec!["python3", "-c", script];
    command.extend_from_slice(args);
    let mut spec = json!({
        // Bound by name: the scheduler could pick a simulated node, where nothing runs.
        "nodeName": node.name,
        "restartPolicy": "Never",
        "tolerations": [{"operator": "Exists"}],
        "containers": [{
            "name": "c", "image": image, "imagePullPolicy": "IfNotPresent",
            "command": command,
            // A script that fails says why (its traceback) in the message.
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        spec.extend(extra.clone());
    }
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": s.ns},
        "spec": spec,
    }))?;
    s.pods().create(&PostParams::default(), &pod).await?;
    let ended = eventually(
        &format!("pod {name} to end"),
        Duration::from_secs(120),
        || async {
            let pod = s.pods().get(name).await?;
            let status = pod.status.clone().unwrap_or_default();
            let terminated = status
                .container_statuses
                .iter()
                .flatten()
                .find_map(|c| c.state.clone()?.terminated);
            match terminated {
                Some(t) => Ok(t),
                None => bail!("phase {:?}", status.phase),
            }
        },
    )
    .await?;
    let message = ended.message.unwrap_or_default();
    ensure!(
        ended.exit_code == 0,
        "pod {name} exited with {}: {message}",
        ended.exit_code
    );
    Ok(message)
}

/// GETs a URL from inside a pod and writes status and body to the termination log.
const HTTP_GET: &str = "import sys, urllib.request\n\
r = urllib.request.urlopen(sys.argv[1], timeout=10)\n\
open('/dev/termination-log', 'w').write(f'{r.status} {r.read().decode()}')\n";

/// Sends SIGKILL to the process of container `sys.argv[1]` (its id is in the process's cgroup
/// path, whatever the cgroup driver) whose command line holds `sys.argv[2]` (`llama-server`,
/// `rpc-server`), from the host's PID namespace.
// A raw string: a `\` line continuation would strip the indentation Python needs.
pub(crate) const KILL_CONTAINER: &str = r#"import os, signal, sys
hit = []
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        cgroup = open(f'/proc/{pid}/cgroup').read()
        cmd = open(f'/proc/{pid}/cmdline', 'rb').read()
    except OSError:
        continue
    if sys.argv[1] in cgroup and sys.argv[2].encode() in cmd:
        os.kill(int(pid), signal.SIGKILL)
        hit.append(pid)
open('/dev/termination-log', 'w').write('killed ' + ' '.join(hit))
sys.exit(0 if hit else 1)
"#;

/// The container id of a pod's first container, without its runtime prefix.
pub(crate) fn container_id(pod: &Pod) -> Option<String> {
    let id = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .container_id
        .clone()?;
    Some(id.rsplit("://").next().unwrap_or(&id).to_string())
}

/// Two llama-server replicas become Ready through the kubelet's readiness probe on `/health`;
/// the Service's ClusterIP answers from the host and from a pod; a spec change rolls them
/// while the ClusterIP, probed all along, answers every request; a replica whose container is
/// killed is replaced by a new pod with the same plan after the backoff.
pub async fn served_llama_server(s: &mut Suite) -> Result<()> {
    let (node, server, client) = setup(s).await?;
    let name = "real-serve";
    let manifest = served_llama(s, name, &node, &server, 2, 4096);
    s.apply_job(manifest.clone()).await?;
    let job = wait_ready(s, name, 2).await?;
    let pods = s.pods_of(&job).await?;
    for pod in &pods {
        let args = vramfit_e2e::args_of(pod);
        println!(
            "     {} runs llama-server {}",
            pod.name_any(),
            args.join(" ")
        );
    }
    let status = job.status.clone().unwrap_or_default();
    println!(
        "     READY {} through the kubelet's probes; endpoint {:?}",
        status.ready.unwrap_or_default(),
        status.endpoint
    );

    let address = cluster_address(s, name).await?;
    let health = get_ok(&address, "/health").await?;
    ensure!(
        health.contains(r#""status":"ok""#),
        "/health answered {health}"
    );
    println!("     from the host: GET http://{address}/health → 200 {health}");
    let inside = run_python(
        s,
        &node,
        &client,
        "real-serve-client",
        json!({}),
        HTTP_GET,
        &[&format!("http://{address}/health")],
    )
    .await?;
    ensure!(
        inside.starts_with("200 ") && inside.contains(r#""status":"ok""#),
        "from a pod: {inside}"
    );
    println!("     from a pod: {inside}");

    rolling_update(s, name, manifest, &address).await?;
    killed_replica_is_replaced(s, name, &node, &client, &address).await?;
    s.delete_jobs(&[name.to_string()]).await
}

/// Changes the job (an alias for the model) and probes the ClusterIP every 100 ms until every
/// replica runs the new spec and is Ready: no request may fail.
async fn rolling_update(s: &Suite, name: &str, manifest: Value, address: &str) -> Result<()> {
    let before: Vec<String> = replicas_of(&s.job(name).await?)
        .into_iter()
        .map(|l| l.pod_name)
        .collect();
    let mut edited = manifest;
    edited["spec"]["args"] = json!(["--model", LLAMA_SERVER_MODEL, "--alias", "tiny-v2"]);
    s.apply_job(edited).await?;
    let started = Instant::now();
    let (mut requests, mut failures) = (0u32, Vec::new());
    loop {
        ensure!(
            started.elapsed() < Duration::from_secs(300),
            "the rolling update did not finish in 300 s: {:?}",
            conditions_of(&s.job(name).await?)
        );
        requests += 1;
        if let Err(e) = get_ok(address, "/health").await {
            failures.push(format!("{:.1} s: {e:#}", started.elapsed().as_secs_f64()));
        }
        let job = s.job(name).await?;
        let status = job.status.clone().unwrap_or_default();
        let done = status.observed_generation == job.metadata.generation
            && status.replica_statuses.len() == 2
            && status.replica_statuses.iter().all(|l| {
                l.updated && l.ready && l.surge.is_none() && !before.contains(&l.pod_name)
            });
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(
        failures.is_empty(),
        "{} of {requests} requests to the ClusterIP failed during the rolling update: {failures:?}",
        failures.len()
    );
    // The last old pod leaves the Service's endpoints a moment after the job says the roll is
    // done (kube-proxy follows the EndpointSlice, and the old server answers through its preStop
    // sleep): ask until five answers in a row come from the new replicas. Every answer must
    // still be a success.
    let (mut in_a_row, mut models) = (0, String::new());
    let settle = Instant::now() + Duration::from_secs(30);
    while in_a_row < 5 {
        ensure!(
            Instant::now() < settle,
            "/v1/models 30 s after the update: {models}"
        );
        models = get_ok(address, "/v1/models").await?;
        in_a_row = if models.contains("tiny-v2") {
            in_a_row + 1
        } else {
            0
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "     rolling update: {requests} GETs of /health through the ClusterIP in {:.0} s, \
         none failed; /v1/models names tiny-v2",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// SIGKILLs one replica's llama-server (from a pod in the host's PID namespace): the kubelet
/// reports exit code 137, the operator records the failure and replaces the replica with a
/// new pod of the same plan after the backoff, which becomes Ready again.
async fn killed_replica_is_replaced(
    s: &Suite,
    name: &str,
    node: &RealNode,
    client: &str,
    address: &str,
) -> Result<()> {
    let job = s.job(name).await?;
    let victim = replicas_of(&job)
        .first()
        .cloned()
        .context("no replica line")?;
    let pod = s.pods().get(&victim.pod_name).await?;
    let id = container_id(&pod).context("the replica's container has no id")?;
    let killed = run_python(
        s,
        node,
        client,
        "real-serve-killer",
        json!({"hostPID": true, "securityContext": {"runAsUser": 0}}),
        KILL_CONTAINER,
        &[&id, "llama-server"],
    )
    .await?;
    println!("     {}: {killed}", victim.pod_name);
    let ended = eventually(
        &format!("pod {} to end", victim.pod_name),
        Duration::from_secs(60),
        || async {
            let pod = s.pods().get(&victim.pod_name).await?;
            container_state(&pod)
                .and_then(|st| st.terminated)
                .context("not terminated yet")
        },
    )
    .await?;
    expect_eq("exit code of the killed server", ended.exit_code, 137)?;

    let job = wait_ready(s, name, 2).await?;
    let status = job.status.clone().unwrap_or_default();
    let line = status
        .replica_statuses
        .iter()
        .find(|l| l.slot == victim.slot)
        .cloned()
        .context("the replica's line is gone")?;
    ensure!(
        line.pod_name != victim.pod_name && line.restarts == victim.restarts + 1,
        "replica line after the kill: {line:?}"
    );
    expect_eq(
        "plan of the new pod",
        line.plan_summary.as_str(),
        victim.plan_summary.as_str(),
    )?;
    let restart = status
        .recent_restarts
        .iter()
        .rfind(|r| r.pod_name == victim.pod_name)
        .cloned()
        .context("no restart recorded for the killed pod")?;
    expect_eq("restart reason", restart.reason.as_str(), "Failed")?;
    get_ok(address, "/health").await?;
    println!(
        "     replaced by {} ({}, same plan): restart {} \"{}\"",
        line.pod_name, line.plan_summary, restart.reason, restart.message
    );
    Ok(())
}

/// A context whose KV cache is larger than the container's memory limit: on a kubelet the CPU
/// allocation succeeds (the kubelet sets `vm.overcommit_memory=1`) and the kernel's
/// out-of-memory killer ends the server while it clears the cache, exit code 137 with no
/// message from llama.cpp. The job records `HostOutOfMemory` (no GPU step down cures it) and
/// says to raise the memory limit.
pub async fn served_host_out_of_memory(s: &mut Suite) -> Result<()> {
    let (node, server, _) = setup(s).await?;
    let name = "real-serve-oom";
    // 2^20 tokens × 2 KiB of f16 KV cache per token: 2 GiB, in a 256 MiB container.
    let mut job = served_llama(s, name, &node, &server, 1, 1_048_576);
    job["spec"]["pod"]["resources"] = json!({"limits": {"memory": "256Mi"}});
    s.apply_job(job).await?;
    let job = eventually(
        &format!("job {name} to record its replica's failure"),
        READY_WITHIN,
        || async {
            let job = s.job(name).await?;
            ensure!(
                !job.status
                    .clone()
                    .unwrap_or_default()
                    .recent_restarts
                    .is_empty(),
                "replicas {:?}, conditions {:?}",
                replicas_of(&job)
                    .iter()
                    .map(|l| (&l.pod_name, &l.reason))
                    .collect::<Vec<_>>(),
                conditions_of(&job)
            );
            Ok(job)
        },
    )
    .await?;
    let status = job.status.clone().unwrap_or_default();
    let restart = status.recent_restarts[0].clone();
    let pod = s.pods().get(&restart.pod_name).await?;
    let terminated = container_state(&pod)
        .and_then(|st| st.terminated)
        .context("the failed pod has no terminated state")?;
    println!(
        "     the kubelet: exit code {}, reason {:?}",
        terminated.exit_code, terminated.reason
    );
    expect_eq("exit code", terminated.exit_code, 137)?;
    expect_eq(
        "reason of the container's end",
        terminated.reason.as_deref(),
        Some("OOMKilled"),
    )?;
    expect_eq("restart reason", restart.reason.as_str(), "HostOutOfMemory")?;
    ensure!(
        restart.step.is_none(),
        "a host OOM stepped the plan down: {restart:?}"
    );
    println!("     the job: {} \"{}\"", restart.reason, restart.message);
    for condition in conditions_of(&job) {
        println!("     condition {condition}");
    }
    s.delete_jobs(&[name.to_string()]).await
}
