//! Following the comparison's jobs: what a job's status says of its run (pure), and the poll
//! loop with one progress line per job on stderr.
use std::collections::BTreeMap;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};
use vramfit_api::conditions::{self, ConditionType};

use kube::Api;
use kube::api::ListParams;
use vramfit_api::{InferenceJob, Phase, Plan};

use super::jobs::{COMPARISON_LABEL, RunKey};
use super::report::{Finished, RunOutcome, RunState};
use crate::error::CliError;

/// What one look at a job says.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// The run is over: figures or a problem.
    Final(RunState),
    /// Still going: the progress line.
    Waiting(String),
}

fn condition(job: &InferenceJob, type_: ConditionType) -> Option<&vramfit_api::Condition> {
    conditions::get(&job.status.as_ref()?.conditions, type_)
}

/// What `job` (pinned to `class`; `None`: not found) says of its run; `known`: whether the
/// CLI knows the class (built in or --node-classes), which tells a class without nodes from
/// a misspelt one.
pub fn observe(job: Option<&InferenceJob>, class: &str, known: bool) -> Observation {
    let Some(job) = job else {
        return Observation::Final(RunState::Problem(
            "the job is gone (deleted while the comparison followed it)".into(),
        ));
    };
    let status = job.status.clone().unwrap_or_default();
    let problem = |text: String| Observation::Final(RunState::Problem(text));
    match status.phase.unwrap_or(Phase::Pending) {
        Phase::Pending => match condition(job, ConditionType::InvalidSpec).filter(|c| c.status == "True") {
            Some(c) => problem(format!("invalid spec: {}", c.message)),
            None => Observation::Waiting("Pending".into()),
        },
        Phase::Unschedulable => {
            let scheduled = condition(job, ConditionType::Scheduled)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            if status.rejected_classes.is_empty() {
                return problem(format!("Unschedulable: {scheduled}"));
            }
            // The operator lists every class it knows with why it passed it over; a class
            // missing from the list is one no node forms and no GpuNodeClass defines.
            match status.rejected_classes.iter().find(|r| r.node_class == class) {
                None if known => problem(format!(
                    "class {class} has no nodes: no node of the cluster forms it and no GpuNodeClass defines it"
                )),
                None => problem(format!(
                    "unknown class {class}: not built in, not in --node-classes, and no node or GpuNodeClass of the cluster forms it"
                )),
                Some(r) if r.reason == "no nodes" => {
                    problem(format!("class {class} has no nodes"))
                }
                Some(r)
                    if r.reason.starts_with("no free GPUs")
                        || r.reason.starts_with("no usable node") =>
                {
                    Observation::Waiting(format!("Unschedulable: {}", r.reason))
                }
                Some(r) => problem(format!("class {class} cannot run it: {}", r.reason)),
            }
        }
        Phase::Scheduled => Observation::Waiting(format!(
            "Scheduled: pod {}",
            status.pod_name.as_deref().unwrap_or("-")
        )),
        Phase::Running => Observation::Waiting(format!(
            "Running on {} (attempt {})",
            status.node_name.as_deref().unwrap_or("-"),
            status.attempt_count
        )),
        Phase::Succeeded => match (&status.result, &status.plan) {
            (Some(result), plan) => Observation::Final(RunState::Finished(Finished {
                items: result.items,
                seconds: result.seconds,
                peak_gpu_memory_mib: result.peak_gpu_memory_mib.clone(),
                gpu_count: plan.as_ref().map_or(0, Plan::total_gpus),
                hourly_price_cents: plan.as_ref().map_or(0, |p| p.hourly_price_cents),
                stepped_down: stepped_down(&status),
            })),
            (None, _) => problem(
                "succeeded without a result: the workload wrote no vramfit.io/v1 Result termination message"
                    .into(),
            ),
        },
        Phase::Failed => {
            let why = condition(job, ConditionType::Ready)
                .map(|c| c.message.clone())
                .filter(|m| !m.is_empty())
                .or_else(|| status.attempts.last().and_then(|a| a.message.clone()))
                .unwrap_or_else(|| "no message".into());
            problem(format!("failed: {why}"))
        }
    }
}

/// The steps taken down before the last attempt, if any.
fn stepped_down(status: &vramfit_api::InferenceJobStatus) -> Option<String> {
    if status.fallback.as_ref().is_none_or(|f| f.is_empty()) {
        return None;
    }
    let steps: Vec<String> = status
        .attempts
        .iter()
        .filter_map(|a| {
            a.step
                .as_ref()
                .map(|s| format!("attempt {}: {s}", a.number))
        })
        .collect();
    Some(if steps.is_empty() {
        "a step down after a failed attempt".into()
    } else {
        steps.join("; ")
    })
}

/// How following ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowEnd {
    /// Every run is over.
    Done,
    /// `--timeout` passed first.
    TimedOut,
    /// Stopped (Ctrl-C): the jobs keep running.
    Interrupted,
}

/// How to follow.
#[derive(Clone, Copy, Debug)]
pub struct FollowOptions {
    /// Give up after this long.
    pub timeout: Duration,
    /// Look this often.
    pub poll: Duration,
    /// Print progress lines on stderr.
    pub progress: bool,
}

/// One line per job on stderr: redrawn in place on a terminal, else printed when it changes.
struct Progress {
    enabled: bool,
    tty: bool,
    drawn: usize,
    last: BTreeMap<String, String>,
}

impl Progress {
    fn show(&mut self, lines: &[(String, String)]) {
        if !self.enabled {
            return;
        }
        let mut err = std::io::stderr().lock();
        let width = lines.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        if self.tty {
            if self.drawn > 0 {
                // Up over the block drawn last time, and clear it.
                let _ = write!(err, "\x1b[{}A\x1b[J", self.drawn);
            }
            // A wrapped line would throw off the count of lines to go back up over.
            let room = terminal_columns().saturating_sub(width + 3).max(10);
            for (name, state) in lines {
                let state: String = state.chars().take(room).collect();
                let _ = writeln!(err, "{name:<width$}  {state}");
            }
            self.drawn = lines.len();
        } else {
            for (name, state) in lines {
                if self.last.get(name) != Some(state) {
                    let _ = writeln!(err, "{name:<width$}  {state}");
                    self.last.insert(name.clone(), state.clone());
                }
            }
        }
        let _ = err.flush();
    }
}

/// The terminal's width as the shell exports it, else 120.
fn terminal_columns() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(120)
}

fn describe(state: &RunState) -> String {
    match state {
        RunState::Finished(f) => format!("Succeeded: {} items in {:.0} s", f.items, f.seconds),
        RunState::Problem(why) => why.clone(),
        RunState::Unfinished(last) => last.clone(),
    }
}

/// Polls the jobs of comparison `id` named in `runs` until every run is over, `timeout`
/// passes, or `stop` completes (Ctrl-C). Runs not over are `Unfinished` in the outcomes.
/// `known`: the classes the CLI knows (see [`observe`]).
pub async fn follow(
    api: &Api<InferenceJob>,
    id: &str,
    runs: &[(RunKey, String)],
    known: &[String],
    options: FollowOptions,
    stop: impl Future<Output = ()>,
) -> Result<(Vec<RunOutcome>, FollowEnd), CliError> {
    let started = Instant::now();
    let mut progress = Progress {
        enabled: options.progress,
        tty: std::io::stderr().is_terminal(),
        drawn: 0,
        last: BTreeMap::new(),
    };
    let mut done: BTreeMap<String, RunState> = BTreeMap::new();
    let mut waiting: BTreeMap<String, String> = BTreeMap::new();
    let mut failures = 0u32;
    let params = ListParams::default().labels(&format!("{COMPARISON_LABEL}={id}"));
    tokio::pin!(stop);
    let end = loop {
        match api.list(&params).await {
            Ok(list) => {
                failures = 0;
                let by_name: BTreeMap<String, &InferenceJob> = list
                    .items
                    .iter()
                    .filter_map(|j| Some((j.metadata.name.clone()?, j)))
                    .collect();
                for (key, name) in runs {
                    if done.contains_key(name) {
                        continue;
                    }
                    let is_known = known.contains(&key.class);
                    match observe(by_name.get(name).copied(), &key.class, is_known) {
                        Observation::Final(state) => {
                            waiting.remove(name);
                            done.insert(name.clone(), state);
                        }
                        Observation::Waiting(line) => {
                            waiting.insert(name.clone(), line);
                        }
                    }
                }
            }
            // A flaky API server is no reason to abandon a two-hour comparison.
            Err(e) => {
                failures += 1;
                if failures >= 12 {
                    return Err(CliError::Kube(format!(
                        "listing the comparison's jobs: {e}"
                    )));
                }
            }
        }
        let lines: Vec<(String, String)> = runs
            .iter()
            .map(|(_, name)| {
                let state = done
                    .get(name)
                    .map(describe)
                    .or_else(|| waiting.get(name).cloned())
                    .unwrap_or_else(|| "not seen yet".into());
                (name.clone(), state)
            })
            .collect();
        progress.show(&lines);
        if done.len() == runs.len() {
            break FollowEnd::Done;
        }
        let Some(left) = options.timeout.checked_sub(started.elapsed()) else {
            break FollowEnd::TimedOut;
        };
        tokio::select! {
            _ = &mut stop => break FollowEnd::Interrupted,
            _ = tokio::time::sleep(options.poll.min(left)) => {}
        }
    };
    let outcomes = runs
        .iter()
        .map(|(key, name)| RunOutcome {
            key: key.clone(),
            job_name: name.clone(),
            state: done.get(name).cloned().unwrap_or_else(|| {
                RunState::Unfinished(
                    waiting
                        .get(name)
                        .cloned()
                        .unwrap_or_else(|| "not seen".into()),
                )
            }),
        })
        .collect();
    Ok((outcomes, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_api::workload_report::JobResult;
    use vramfit_api::{ClassRejection, InferenceJobStatus};

    fn job(status: InferenceJobStatus) -> InferenceJob {
        let mut job = InferenceJob::new(
            "j",
            serde_yaml::from_str(
                "model: {preset: internvl3-8b}\nruntime: transformers\nimage: img\n",
            )
            .unwrap(),
        );
        job.status = Some(status);
        job
    }

    fn unschedulable(rejections: &[(&str, &str)]) -> InferenceJob {
        job(InferenceJobStatus {
            phase: Some(Phase::Unschedulable),
            rejected_classes: rejections
                .iter()
                .map(|(c, r)| ClassRejection {
                    node_class: c.to_string(),
                    reason: r.to_string(),
                })
                .collect(),
            ..Default::default()
        })
    }

    fn problem(o: Observation) -> String {
        match o {
            Observation::Final(RunState::Problem(p)) => p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unschedulable_tells_no_nodes_unknown_class_and_a_wait_apart() {
        let no_nodes = unschedulable(&[
            ("a10g-x1", "no nodes"),
            ("t4-x1", "not in the job's nodeClasses.allowed"),
        ]);
        assert_eq!(
            problem(observe(Some(&no_nodes), "a10g-x1", true)),
            "class a10g-x1 has no nodes"
        );
        let unknown = unschedulable(&[("t4-x1", "not in the job's nodeClasses.allowed")]);
        assert!(
            problem(observe(Some(&unknown), "b200-x8", false)).starts_with("unknown class b200-x8")
        );
        // A built-in class no node forms: the operator does not list it either.
        assert!(
            problem(observe(Some(&unknown), "a10g-x1", true))
                .starts_with("class a10g-x1 has no nodes")
        );
        let busy = unschedulable(&[(
            "a10g-x1",
            "no free GPUs: no usable node has 1 GPU free (2 usable node(s))",
        )]);
        assert!(matches!(
            observe(Some(&busy), "a10g-x1", true),
            Observation::Waiting(_)
        ));
        let too_small = unschedulable(&[("t4-x1", "needs 20 GiB per GPU, 12 usable")]);
        assert!(
            problem(observe(Some(&too_small), "t4-x1", true))
                .starts_with("class t4-x1 cannot run it")
        );
    }

    #[test]
    fn succeeded_with_and_without_a_result() {
        let mut status = InferenceJobStatus {
            phase: Some(Phase::Succeeded),
            result: Some(JobResult {
                items: 120,
                seconds: 300.0,
                items_per_hour: 1440.0,
                peak_gpu_memory_mib: vec![15000],
                cost_per_item_cents: None,
                steps: None,
                tokens_per_second: None,
                final_loss: None,
                cost_per_million_tokens_cents: None,
                adapter: None,
            }),
            ..Default::default()
        };
        let Observation::Final(RunState::Finished(f)) =
            observe(Some(&job(status.clone())), "a", true)
        else {
            panic!("finished");
        };
        assert_eq!((f.items, f.seconds, f.stepped_down), (120, 300.0, None));
        status.result = None;
        assert!(
            problem(observe(Some(&job(status)), "a", true))
                .starts_with("succeeded without a result")
        );
    }

    #[test]
    fn a_group_run_counts_the_gpus_of_every_node() {
        let spec: vramfit_api::InferenceJobSpec = serde_yaml::from_str(
            "{model: {preset: llama-3.1-70b-instruct}, runtime: vllm, image: x, allowedQuantizations: [none], gpus: {max: 4, maxNodes: 4}}",
        )
        .unwrap();
        let input = vramfit_planner::resolve_job(&spec).unwrap();
        let class = vramfit_planner::builtin_classes()
            .into_iter()
            .find(|c| c.name == "a10g-x4")
            .unwrap();
        let plan = vramfit_planner::plan_for_class(&input, &class, &Default::default()).unwrap();
        assert!(plan.nodes() > 1, "{:?}", plan.group);
        let status = InferenceJobStatus {
            phase: Some(Phase::Succeeded),
            result: Some(JobResult {
                items: 1,
                seconds: 1.0,
                items_per_hour: 3600.0,
                peak_gpu_memory_mib: vec![1],
                cost_per_item_cents: None,
                steps: None,
                tokens_per_second: None,
                final_loss: None,
                cost_per_million_tokens_cents: None,
                adapter: None,
            }),
            plan: Some(plan.clone()),
            ..Default::default()
        };
        let Observation::Final(RunState::Finished(f)) = observe(Some(&job(status)), "a", true)
        else {
            panic!("finished");
        };
        assert_eq!(f.gpu_count, plan.gpu_count * plan.nodes());
        assert_eq!(
            f.hourly_price_cents,
            class.hourly_price_cents_per_gpu.unwrap() * f.gpu_count
        );
    }

    #[test]
    fn failed_gone_and_invalid_are_problems() {
        let failed = job(InferenceJobStatus {
            phase: Some(Phase::Failed),
            ..Default::default()
        });
        assert_eq!(
            problem(observe(Some(&failed), "a", true)),
            "failed: no message"
        );
        assert!(problem(observe(None, "a", true)).contains("gone"));
        let running = job(InferenceJobStatus {
            phase: Some(Phase::Running),
            node_name: Some("n1".into()),
            attempt_count: 1,
            ..Default::default()
        });
        assert_eq!(
            observe(Some(&running), "a", true),
            Observation::Waiting("Running on n1 (attempt 1)".into())
        );
    }
}
