//! `--group-nodes N`: the job phase with batch groups (`spec.gpus.maxNodes: N`) instead of
//! one-pod jobs. Every job is Llama-3.1-70B in 16-bit on nodes of 4×V100-16GB, which the
//! planner splits over 4 nodes (checked before anything is created: the run stops if the plan
//! spans another number). The benchmark is the kubelet: every bound pod is written Running
//! and Ready. Measured: the time until every member of each group is bound and its leader
//! Running (the pods), and until the job says `Running` (its status); the operator's writes
//! per group by resource; its memory; and a restart (resync without writes).
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use vramfit_api::pod_keys::{GROUP_LABEL, GROUP_RANK_LABEL, JOB_LABEL};
use vramfit_api::{InferenceJob, Phase};
use vramfit_e2e::{
    ChildProcess, RequestTotals, WRITE_VERBS, proc_cpu_seconds, proc_status_kib, quantile,
};

use super::goals::{Figure, Goal, Sizes};
use super::measure::{last, latencies, stamp_all};
use super::serving::{
    Kubelet, KubeletLoad, event_delta, kubelet, operator_writes, operator_writes_own_events,
    wait_quiet,
};
use super::{
    Args, NodeShape, count_events, job_name, reconciles, scrape, seconds, start_operator,
    wait_ready, wait_resynced,
};

/// The one node shape of a group run: the agent fixture and its GPUs per node.
pub const GROUP_NODE_SHAPE: (&str, u32) = ("v100-16gb-x4.yaml", 4);

/// Job `i`: Llama-3.1-70B, 16-bit only, up to 4 GPUs per node on up to `max_nodes` nodes.
pub fn group_manifest(i: usize, max_nodes: usize) -> Value {
    json!({
        "apiVersion": "vramfit.io/v1alpha1",
        "kind": "InferenceJob",
        "metadata": {"name": job_name(i)},
        "spec": {
            "model": {"preset": "llama-3.1-70b-instruct"}, "runtime": "vllm",
            "image": "vllm/vllm-openai:v0.10.1", "allowedQuantizations": ["none"],
            "gpus": {"max": 4, "maxNodes": max_nodes},
        },
    })
}

/// The plan of the group job on `shape`'s class, as the planner makes it: "N nodes × G GPUs
/// on CLASS"; an error unless it spans exactly `nodes` nodes.
pub fn check_plan(shape: &NodeShape, nodes: usize) -> Result<String> {
    let facts = vramfit_api::labels::gpu_facts(&shape.labels)
        .context("the group nodes' labels carry no GPU facts")?;
    let class = vramfit_planner::classes_from_facts(&facts, None)
        .into_iter()
        .next()
        .context("no node class from the group nodes' labels")?;
    let job: InferenceJob = serde_json::from_value(group_manifest(0, nodes))?;
    let input = vramfit_planner::resolve_job(&job.spec)?;
    let plan = vramfit_planner::plan_for_class(&input, &class, &Default::default())
        .map_err(|e| anyhow::anyhow!("the group job cannot run on {}: {e:?}", class.name))?;
    let line = format!(
        "{} nodes × {} GPUs on {}",
        plan.nodes(),
        plan.gpu_count,
        class.name
    );
    ensure!(
        plan.nodes() as usize == nodes,
        "--group-nodes {nodes}: the group job's plan is {line}; only 4 is built in"
    );
    Ok(line)
}

/// Where each job's group stands, from the pods the benchmark's watch saw, and when each
/// step was first seen: the stages between a job's create and its group ready.
#[derive(Debug, Default)]
pub struct GroupProgress {
    /// Pods per group.
    size: usize,
    /// Job → its group's members seen (created).
    members: HashMap<String, HashSet<String>>,
    /// Job → its group's members seen bound.
    bound: HashMap<String, HashSet<String>>,
    /// Jobs whose leader (rank 0) was seen Running.
    leader_running: HashSet<String>,
    /// Job → when its first member was seen (the operator's first pod create).
    pub first_member: HashMap<String, Instant>,
    /// Job → when its last member was seen (every pod of the group created).
    pub all_members: HashMap<String, Instant>,
    /// Job → when every member was seen bound.
    pub all_bound: HashMap<String, Instant>,
    /// Pod → when it was first seen, seen bound, seen Running.
    pub pod_seen: HashMap<String, Instant>,
    pub pod_bound: HashMap<String, Instant>,
    pub pod_running: HashMap<String, Instant>,
    /// Job → when every member was bound and the leader Running (first seen).
    pub done: HashMap<String, Instant>,
}

impl GroupProgress {
    /// Progress of groups of `size` pods.
    pub fn new(size: usize) -> Self {
        Self {
            size,
            ..Self::default()
        }
    }

    /// Records one pod of `job`'s group (rank `rank`), seen at `at`.
    pub fn observe(
        &mut self,
        job: &str,
        pod: &str,
        rank: Option<u32>,
        bound: bool,
        running: bool,
        at: Instant,
    ) {
        self.pod_seen.entry(pod.to_string()).or_insert(at);
        self.first_member.entry(job.to_string()).or_insert(at);
        let members = self.members.entry(job.to_string()).or_default();
        members.insert(pod.to_string());
        if members.len() >= self.size {
            self.all_members.entry(job.to_string()).or_insert(at);
        }
        if bound {
            self.pod_bound.entry(pod.to_string()).or_insert(at);
            self.bound
                .entry(job.to_string())
                .or_default()
                .insert(pod.to_string());
        }
        if running {
            self.pod_running.entry(pod.to_string()).or_insert(at);
        }
        if rank == Some(0) && running {
            self.leader_running.insert(job.to_string());
        }
        let all_bound = self.bound.get(job).map_or(0, HashSet::len) >= self.size;
        if all_bound {
            self.all_bound.entry(job.to_string()).or_insert(at);
        }
        if all_bound && self.leader_running.contains(job) {
            self.done.entry(job.to_string()).or_insert(at);
        }
    }
}

/// What the benchmark's watches saw: the groups (pods) and the jobs' `Running` status.
struct Seen {
    groups: GroupProgress,
    job_running: HashMap<String, Instant>,
}

async fn watch_pods(client: Client, ns: String, seen: Arc<Mutex<Seen>>) {
    watcher(
        Api::<Pod>::namespaced(client, &ns),
        watcher::Config::default().labels(GROUP_LABEL),
    )
    .default_backoff()
    .applied_objects()
    .for_each(move |pod| {
        if let Ok(pod) = pod {
            let labels = pod.labels();
            let job = labels.get(JOB_LABEL).cloned().unwrap_or_default();
            let rank = labels.get(GROUP_RANK_LABEL).and_then(|r| r.parse().ok());
            let bound = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some();
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            let name = pod.name_any();
            seen.groups
                .observe(&job, &name, rank, bound, running, Instant::now());
        }
        futures::future::ready(())
    })
    .await;
}

async fn watch_jobs(client: Client, ns: String, seen: Arc<Mutex<Seen>>) {
    watcher(
        Api::<InferenceJob>::namespaced(client, &ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .applied_objects()
    .for_each(move |job| {
        if let Ok(job) = job
            && job.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running)
        {
            seen.lock()
                .unwrap_or_else(|e| e.into_inner())
                .job_running
                .entry(job.name_any())
                .or_insert_with(Instant::now);
        }
        futures::future::ready(())
    })
    .await;
}

/// The figures of the group phase.
#[derive(Debug, Default)]
pub struct Figures {
    group_nodes: usize,
    plan: String,
    jobs: usize,
    created_wall: Duration,
    /// Groups whose members were all bound and leader Running, and when the last was.
    done: usize,
    done_wall: Duration,
    job_to_done: Vec<Duration>,
    /// The stages of `job_to_done`, per job: created → first member seen, first → last
    /// member seen, last member seen → all bound, all bound → done (the leader Running).
    stages: [Vec<Duration>; 4],
    /// Per pod: seen → seen bound (the scheduler), bound → Running (the benchmark's kubelet).
    pod_to_bound: Vec<Duration>,
    bound_to_running: Vec<Duration>,
    /// kube-scheduler's `FailedScheduling` events in the namespace: objects and series repeats.
    failed_scheduling: (u64, u64),
    /// Jobs seen `Running` in their status, and when the last was.
    running: usize,
    running_wall: Duration,
    job_to_running: Vec<Duration>,
    writes: RequestTotals,
    kubelet: (u64, u64),
    kubelet_load: KubeletLoad,
    operator_events: u64,
    scheduler_events: u64,
    operator_cpu: f64,
    hwm_kib: u64,
    rss_kib: u64,
    restart_ready: Duration,
    restart_resynced: Duration,
    restart_reconciles: f64,
    restart_writes: RequestTotals,
    restart_hwm_kib: u64,
}

/// Writes per resource (`resource` or `resource/subresource`) other than `named`, most first.
fn other_writes(totals: &RequestTotals, named: &[(&str, &str)]) -> Vec<(String, u64)> {
    let mut by: HashMap<String, u64> = HashMap::new();
    for (key, value) in &totals.0 {
        let is_named = named
            .iter()
            .any(|(r, sub)| key.resource == *r && key.subresource == *sub);
        if WRITE_VERBS.contains(&key.verb.as_str()) && !is_named {
            let name = if key.subresource.is_empty() {
                key.resource.clone()
            } else {
                format!("{}/{}", key.resource, key.subresource)
            };
            *by.entry(name).or_default() += value.round() as u64;
        }
    }
    let mut out: Vec<(String, u64)> = by.into_iter().filter(|(_, n)| *n > 0).collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// The resources the group table names on their own rows.
const NAMED: [(&str, &str); 7] = [
    ("pods", ""),
    ("pods", "binding"),
    ("pods", "status"),
    ("inferencejobs", ""),
    ("inferencejobs", "status"),
    ("services", ""),
    ("networkpolicies", ""),
];

impl Figures {
    /// Group members per group.
    pub fn group_nodes(&self) -> usize {
        self.group_nodes
    }

    /// The stage rows: (name, latencies), in the order they happen.
    fn stage_rows(&self) -> [(&'static str, &[Duration]); 6] {
        [
            (
                "stage 1, operator: job created → its first member pod seen",
                &self.stages[0],
            ),
            (
                "stage 2, operator: first → last member pod seen",
                &self.stages[1],
            ),
            (
                "stage 3, scheduler: last member seen → every member bound",
                &self.stages[2],
            ),
            (
                "stage 4, the benchmark's kubelet: every member bound → leader Running",
                &self.stages[3],
            ),
            ("per pod, scheduler: seen → bound", &self.pod_to_bound),
            (
                "per pod, the benchmark's kubelet: bound → Running",
                &self.bound_to_running,
            ),
        ]
    }

    /// The goals table's figures: job created → group bound with its leader Running, p99 (≤ 5
    /// s at 200 groups × 4 nodes), then for context p50 and the last, each stage, the writes
    /// and the memory.
    pub fn key_figures(&self, sizes: &Sizes) -> Vec<Figure> {
        let p = |v: &[Duration], q: f64| seconds(quantile(v, q));
        let p99 = quantile(&self.job_to_done, 0.99);
        let complete = self.done >= self.jobs;
        let mut figures = vec![
            Figure::new(
                format!(
                    "{} groups × {}: job created → group bound, leader Running, p99",
                    self.jobs, self.group_nodes
                ),
                Some(Goal::at_most(
                    5.0,
                    " s",
                    Some("200 groups × 4 nodes"),
                    sizes.jobs == 200 && sizes.group_nodes == 4,
                )),
                match p99 {
                    Some(p99) if complete => Some(p99.as_secs_f64()),
                    Some(_) => Some(f64::INFINITY),
                    None => None,
                },
                if complete {
                    p(&self.job_to_done, 0.99)
                } else {
                    format!(
                        "{} (only {} of {} groups)",
                        p(&self.job_to_done, 0.99),
                        self.done,
                        self.jobs
                    )
                },
            ),
            Figure::shown(
                "p50; the last group ready (from the first create)",
                format!(
                    "{}; {:.1} s",
                    p(&self.job_to_done, 0.5),
                    self.done_wall.as_secs_f64()
                ),
            ),
        ];
        for (name, latencies) in self.stage_rows() {
            figures.push(Figure::shown(
                format!("{name}, p50 / p99"),
                format!("{} / {}", p(latencies, 0.5), p(latencies, 0.99)),
            ));
        }
        let all = operator_writes_own_events(&self.writes, self.kubelet.1, self.operator_events);
        figures.extend([
            Figure::shown("the benchmark's kubelet", self.kubelet_load.to_string()),
            Figure::shown(
                "kube-scheduler FailedScheduling events (objects + repeats)",
                format!(
                    "{} + {}",
                    self.failed_scheduling.0, self.failed_scheduling.1
                ),
            ),
            Figure::shown(
                "operator writes per group",
                format!("{:.2}", all as f64 / self.jobs.max(1) as f64),
            ),
            Figure::shown(
                "operator peak RSS (VmHWM)",
                format!("{:.1} MiB", self.hwm_kib as f64 / 1024.0),
            ),
        ]);
        figures
    }
}

/// kube-scheduler's `FailedScheduling` events in `ns`: objects and series repeats.
async fn failed_scheduling(client: &Client, ns: &str) -> Result<(u64, u64)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let list = events
        .list(&kube::api::ListParams::default().fields("reason=FailedScheduling"))
        .await?;
    let repeats = list
        .items
        .iter()
        .filter_map(|e| e.series.as_ref())
        .map(|s| (s.count.max(1) - 1) as u64)
        .sum();
    Ok((list.items.len() as u64, repeats))
}

/// Waits until every group is done and every job `Running`, or 120 s pass without progress.
async fn wait_done(
    seen: &Arc<Mutex<Seen>>,
    operator: &mut ChildProcess,
    jobs: usize,
) -> Result<()> {
    let (started, mut last, mut last_print) = (Instant::now(), (0, Instant::now()), Instant::now());
    loop {
        operator.check_alive()?;
        let (done, running) = {
            let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            (seen.groups.done.len(), seen.job_running.len())
        };
        if done >= jobs && running >= jobs {
            return Ok(());
        }
        if done + running > last.0 {
            last = (done + running, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(120) {
            eprintln!(
                "operator-scale:     no progress for 120 s: {done} groups ready, {running} jobs Running of {jobs}; operator log tail:\n{}",
                operator.log_tail(10)
            );
            return Ok(());
        }
        if last_print.elapsed() >= Duration::from_secs(5) {
            last_print = Instant::now();
            eprintln!(
                "operator-scale:     {:.0} s: {done} groups bound with the leader Running, {running} jobs Running, of {jobs}",
                started.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The group phase and the restart.
pub async fn run(
    args: &Args,
    plan_line: String,
    client: &Client,
    clients: &[Client],
    ns: &str,
    operator_bin: &std::path::Path,
    logs: &std::path::Path,
) -> Result<Figures> {
    let size = args.group_nodes;
    let mut figures = Figures {
        group_nodes: size,
        plan: plan_line,
        jobs: args.jobs,
        ..Figures::default()
    };
    let seen = Arc::new(Mutex::new(Seen {
        groups: GroupProgress::new(size),
        job_running: HashMap::new(),
    }));
    let kubelet_seen = Arc::new(Kubelet::default());
    let watches = [
        tokio::spawn(watch_pods(client.clone(), ns.to_string(), seen.clone())),
        tokio::spawn(watch_jobs(client.clone(), ns.to_string(), seen.clone())),
        tokio::spawn(kubelet(
            clients.to_vec(),
            ns.to_string(),
            kubelet_seen.clone(),
            args.kubelet_concurrency,
            None,
        )),
    ];
    let mut operator = start_operator(operator_bin, args, logs, "operator-1")?;
    wait_ready(&mut operator, Duration::from_secs(120)).await?;
    let pid = operator.pid().unwrap_or(0);
    let cpu_before = proc_cpu_seconds(pid).unwrap_or(0.0);

    let before = scrape(client).await?;
    let events_before = count_events(client, ns).await?;
    let started = Instant::now();
    let created = stamp_all(clients, args.jobs, |i, client| async move {
        let jobs: Api<InferenceJob> = Api::namespaced(client, ns);
        let job: InferenceJob = serde_json::from_value(group_manifest(i, size))?;
        jobs.create(&PostParams::default(), &job).await?;
        Ok(())
    })
    .await
    .context("creating the group jobs")?;
    figures.created_wall = started.elapsed();
    eprintln!(
        "operator-scale:     {} group jobs created in {:.1} s",
        args.jobs,
        figures.created_wall.as_secs_f64()
    );
    wait_done(&seen, &mut operator, args.jobs).await?;
    wait_quiet(client, &mut operator, &before, &kubelet_seen).await?;
    figures.writes = scrape(client).await?.since(&before);
    figures.kubelet = kubelet_seen.counts();
    figures.kubelet_load = kubelet_seen.load(args.kubelet_concurrency);
    let events = count_events(client, ns).await?;
    (figures.operator_events, figures.scheduler_events) = event_delta(&events_before, &events);
    figures.failed_scheduling = failed_scheduling(client, ns).await?;
    figures.operator_cpu = proc_cpu_seconds(pid).unwrap_or(0.0) - cpu_before;
    figures.hwm_kib = proc_status_kib(pid, "VmHWM").unwrap_or(0);
    figures.rss_kib = proc_status_kib(pid, "VmRSS").unwrap_or(0);
    {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        figures.done = seen.groups.done.len();
        figures.done_wall = last(&seen.groups.done, started);
        figures.job_to_done = latencies(&seen.groups.done, &created);
        let g = &seen.groups;
        figures.stages = [
            latencies(&g.first_member, &created),
            latencies(&g.all_members, &g.first_member),
            latencies(&g.all_bound, &g.all_members),
            latencies(&g.done, &g.all_bound),
        ];
        figures.pod_to_bound = latencies(&g.pod_bound, &g.pod_seen);
        figures.bound_to_running = latencies(&g.pod_running, &g.pod_bound);
        figures.running = seen.job_running.len();
        figures.running_wall = last(&seen.job_running, started);
        figures.job_to_running = latencies(&seen.job_running, &created);
    }

    // Restart: every job reconciled again, nothing written.
    eprintln!("operator-scale: 4/4 restart: kill the operator, start it again");
    let before = scrape(client).await?;
    operator.kill();
    let started = Instant::now();
    let mut operator = start_operator(operator_bin, args, logs, "operator-2")?;
    wait_ready(&mut operator, Duration::from_secs(300)).await?;
    figures.restart_ready = started.elapsed();
    figures.restart_resynced = wait_resynced(&mut operator, args.jobs, started).await?;
    figures.restart_reconciles = reconciles(&operator).await.unwrap_or(0.0);
    wait_quiet(client, &mut operator, &before, &kubelet_seen).await?;
    figures.restart_writes = scrape(client).await?.since(&before);
    if let Some(pid) = operator.pid() {
        figures.restart_hwm_kib = proc_status_kib(pid, "VmHWM").unwrap_or(0);
    }
    operator.kill();
    for task in watches {
        task.abort();
    }
    if figures.done < args.jobs {
        bail!(
            "{} of {} groups were bound with their leader Running; the figures are incomplete:\n{figures}",
            figures.done,
            args.jobs
        );
    }
    Ok(figures)
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let groups = self.jobs.max(1) as f64;
        let per = |n: u64| n as f64 / groups;
        let p = |v: &[Duration], q: f64| seconds(quantile(v, q));
        let mib = |kib: u64| kib as f64 / 1024.0;
        let w = &self.writes;
        let pods = w
            .count(&WRITE_VERBS, "pods", "")
            .saturating_sub(self.kubelet.1);
        let all = operator_writes_own_events(w, self.kubelet.1, self.operator_events);
        writeln!(
            f,
            "| groups (jobs × nodes) | {} × {} ({}) |",
            self.jobs, self.group_nodes, self.plan
        )?;
        writeln!(
            f,
            "| jobs created | in {:.1} s |",
            self.created_wall.as_secs_f64()
        )?;
        writeln!(
            f,
            "| every member bound, leader Running (pods) | {} of {} groups, the last after {:.1} s |",
            self.done,
            self.jobs,
            self.done_wall.as_secs_f64()
        )?;
        writeln!(
            f,
            "| job created → its group bound, leader Running, p50 / p99 | {} / {} |",
            p(&self.job_to_done, 0.5),
            p(&self.job_to_done, 0.99)
        )?;
        for (name, latencies) in self.stage_rows() {
            writeln!(
                f,
                "| {name}, p50 / p99 | {} / {} |",
                p(latencies, 0.5),
                p(latencies, 0.99)
            )?;
        }
        writeln!(f, "| the benchmark's kubelet | {} |", self.kubelet_load)?;
        writeln!(
            f,
            "| kube-scheduler FailedScheduling events (objects + series repeats) | {} + {} |",
            self.failed_scheduling.0, self.failed_scheduling.1
        )?;
        writeln!(
            f,
            "| job `Running` (status) | {} of {} jobs, the last after {:.1} s; p50 / p99 {} / {} |",
            self.running,
            self.jobs,
            self.running_wall.as_secs_f64(),
            p(&self.job_to_running, 0.5),
            p(&self.job_to_running, 0.99)
        )?;
        writeln!(
            f,
            "| operator writes per group | {:.2}: Services {:.2}, NetworkPolicies {:.2}, pods {:.2} ({}), job status {:.2} ({}), events {:.2} |",
            per(all),
            per(w.count(&WRITE_VERBS, "services", "")),
            per(w.count(&WRITE_VERBS, "networkpolicies", "")),
            per(pods),
            super::Report::by_verb(w, "pods", ""),
            per(w.count(&WRITE_VERBS, "inferencejobs", "status")),
            super::Report::by_verb(w, "inferencejobs", "status"),
            per(self.operator_events),
        )?;
        writeln!(
            f,
            "| others' writes per group: job creates, bindings, scheduler events, the kubelet's pod status | {:.2}, {:.2}, {:.2}, {:.2} (all writes {}) |",
            per(w.count(&WRITE_VERBS, "inferencejobs", "")),
            per(w.count(&WRITE_VERBS, "pods", "binding")),
            per(self.scheduler_events),
            per(self.kubelet.0),
            w.writes()
        )?;
        let rest: Vec<String> = other_writes(w, &[&NAMED[..], &[("events", "")]].concat())
            .iter()
            .map(|(resource, n)| format!("{resource} {:.2}", per(*n)))
            .collect();
        writeln!(
            f,
            "| the rest of the writes per group (controllers') | {} |",
            rest.join(", ")
        )?;
        writeln!(f, "| operator CPU | {:.1} s |", self.operator_cpu)?;
        writeln!(
            f,
            "| operator RSS: peak (VmHWM); steady (VmRSS, writes stopped) | {:.1} MiB; {:.1} MiB |",
            mib(self.hwm_kib),
            mib(self.rss_kib)
        )?;
        let restart = operator_writes(&self.restart_writes, 0);
        writeln!(
            f,
            "| restart: /readyz 200; every job reconciled | {:.2} s; {:.2} s ({} reconciles), {restart} operator writes (VmHWM {:.1} MiB) |",
            self.restart_ready.as_secs_f64(),
            self.restart_resynced.as_secs_f64(),
            self.restart_reconciles,
            mib(self.restart_hwm_kib)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_done_once_every_member_is_bound_and_the_leader_runs() {
        let mut progress = GroupProgress::new(4);
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        // The leader runs, but only 3 of 4 members are bound.
        progress.observe("a", "a-1-0", Some(0), true, false, t0);
        progress.observe("a", "a-1-1", Some(1), true, false, t0);
        progress.observe("a", "a-1-2", Some(2), true, false, t0);
        progress.observe("a", "a-1-0", Some(0), true, true, t0);
        assert!(progress.done.is_empty());
        // A worker seen twice counts once.
        progress.observe("a", "a-1-2", Some(2), true, true, t0);
        assert!(progress.done.is_empty());
        // The last member bound: done then, and not later.
        progress.observe("a", "a-1-3", Some(3), true, false, t1);
        assert_eq!(progress.done.get("a"), Some(&t1));
        progress.observe(
            "a",
            "a-1-3",
            Some(3),
            true,
            true,
            t1 + Duration::from_secs(5),
        );
        assert_eq!(progress.done.get("a"), Some(&t1));
    }

    #[test]
    fn a_running_worker_is_not_the_leader() {
        let mut progress = GroupProgress::new(2);
        let t0 = Instant::now();
        for rank in 0..2u32 {
            progress.observe("b", &format!("b-1-{rank}"), Some(rank), true, rank == 1, t0);
        }
        assert!(progress.done.is_empty());
        progress.observe("b", "b-1-0", Some(0), true, true, t0);
        assert_eq!(progress.done.len(), 1);
        // A group of one whose only pod is not bound is not done.
        let mut one = GroupProgress::new(1);
        one.observe("c", "c-1-0", Some(0), false, true, t0);
        assert!(one.done.is_empty());
    }

    #[test]
    fn the_group_job_plans_exactly_four_nodes_of_the_group_shape() {
        let shape = super::super::node_shape(
            &vramfit_e2e::workspace_root(),
            GROUP_NODE_SHAPE.0,
            GROUP_NODE_SHAPE.1,
            1.0,
        )
        .expect("the fixture");
        let line = check_plan(&shape, 4).expect("a plan of 4 nodes");
        assert!(line.starts_with("4 nodes × 4 GPUs on "), "{line}");
        assert!(check_plan(&shape, 3).is_err());
    }

    #[test]
    fn the_rest_of_the_writes_are_other_resources_writes_most_first() {
        let line = |resource: &str, sub: &str, verb: &str, n: u32| {
            format!(
                "apiserver_request_total{{code=\"201\",group=\"\",resource=\"{resource}\",subresource=\"{sub}\",verb=\"{verb}\"}} {n}\n"
            )
        };
        let text = [
            line("pods", "", "POST", 8),
            line("endpointslices", "", "POST", 2),
            line("endpointslices", "", "PUT", 5),
            line("endpoints", "", "PUT", 3),
            line("endpoints", "", "GET", 30),
            line("leases", "", "PUT", 7),
            line("nodes", "status", "PATCH", 1),
        ]
        .concat();
        let totals = RequestTotals::parse(&text);
        assert_eq!(
            other_writes(&totals, &NAMED),
            vec![
                ("endpointslices".to_string(), 7),
                ("leases".to_string(), 7),
                ("endpoints".to_string(), 3),
                ("nodes/status".to_string(), 1),
            ]
        );
    }
}
