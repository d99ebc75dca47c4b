//! The pods of a group (pure): the one pod of an attempt that `reconcile::build` makes, once
//! per rank, with the group's labels, a stable DNS name (`hostname` = pod name, `subdomain` =
//! the group's headless Service), one pod per node (required pod anti-affinity on
//! `kubernetes.io/hostname` against the group's own pods), and what the rank runs
//! (`vramfit_planner::group::launch::for_rank`: env, a worker's command, the leader's flags,
//! a vLLM leader's command where the job sets none), applied by the planner's own
//! `RankLaunch::command_line` and `with_env`, which `vramfit plan` shows too.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, HostAlias, Pod, PodAffinityTerm, PodAntiAffinity, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use vramfit_api::Plan;
use vramfit_api::pod_keys::{GROUP_LABEL, GROUP_RANK_LABEL, WORKER_ADDRESSES_ANNOTATION};
use vramfit_planner::JobInput;
use vramfit_planner::group::launch::{CommandLine, RankAddress, for_rank};

use super::names::GroupOf;
use crate::settings::GroupSpread;

use crate::pod::build::BuildError;

/// The node label that makes "one pod per node".
pub use crate::capacity::HOSTNAME_TOPOLOGY;

/// The group's pods, rank 0 (the leader) first, built from `base`: the attempt's one pod as
/// `reconcile::build::desired_pod` makes it for `plan`. Each keeps `base`'s annotations, so
/// the spec-hash annotation is the one-pod build's: a spec change replaces the group exactly
/// when it would replace a single pod (the rank's additions follow from the plan and the rank).
pub fn group_pods(
    base: &Pod,
    input: &JobInput,
    plan: &Plan,
    job_name: &str,
    attempt: u32,
    spread: GroupSpread,
) -> Result<Vec<Pod>, BuildError> {
    let group = GroupOf::Attempt {
        job: job_name,
        attempt,
    };
    group_pods_of(base, input, plan, &group, spread)
}

/// The pods of `group` (any kind: an attempt's, a served replica's), rank 0 first, built
/// from `base` as [`group_pods`] says.
pub fn group_pods_of(
    base: &Pod,
    input: &JobInput,
    plan: &Plan,
    group: &GroupOf<'_>,
    spread: GroupSpread,
) -> Result<Vec<Pod>, BuildError> {
    let namespace = base
        .metadata
        .namespace
        .clone()
        .ok_or(BuildError::MissingObjectKey("metadata.namespace"))?;
    (0..plan.nodes())
        .map(|rank| {
            // Each rank's peers by DNS name: `<pod>.<group>.<namespace>`.
            let address = group.address(&namespace, plan.nodes(), rank);
            rank_pod(base, input, plan, group, &address, spread)
        })
        .collect()
}

fn rank_pod(
    base: &Pod,
    input: &JobInput,
    plan: &Plan,
    group_of: &GroupOf<'_>,
    address: &RankAddress,
    spread: GroupSpread,
) -> Result<Pod, BuildError> {
    let mut pod = base.clone();
    let group = group_of.name();
    let group = group.as_str();
    let name = group_of.member(address.rank);
    pod.metadata.name = Some(name.clone());
    let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(GROUP_LABEL.to_string(), group.to_string());
    labels.insert(GROUP_RANK_LABEL.to_string(), address.rank.to_string());

    let spec = pod
        .spec
        .as_mut()
        .ok_or(BuildError::MissingObjectKey("spec"))?;
    // `<pod>.<group>.<namespace>` resolves to this pod through the headless Service.
    spec.hostname = Some(name);
    spec.subdomain = Some(group.to_string());
    if spread.one_pod_per_node() {
        spec.affinity
            .get_or_insert_with(Affinity::default)
            .pod_anti_affinity = Some(one_pod_per_node(group));
    }

    let launch = for_rank(input, plan, address);
    let container = spec
        .containers
        .first_mut()
        .ok_or(BuildError::MissingObjectKey("spec.containers"))?;
    if address.rank > 0 {
        // A worker runs the engine's worker process, which answers no health route: Ready
        // once its server listens, where the leader waits for that.
        container.startup_probe = worker_startup(plan);
        container.liveness_probe = None;
        container.readiness_probe = None;
    }
    // The one function `vramfit plan` shows each rank's command line and env with.
    let line = launch.command_line(CommandLine {
        command: container.command.take(),
        args: container.args.take().unwrap_or_default(),
    });
    container.command = line.command;
    container.args = (!line.args.is_empty()).then_some(line.args);
    let env = launch.with_env(
        container.env.take().unwrap_or_default(),
        |var: &EnvVar| var.name.as_str(),
        |name, value| EnvVar {
            name,
            value: Some(value),
            value_from: None,
        },
    );
    container.env = (!env.is_empty()).then_some(env);
    Ok(pod)
}

/// Seconds between two startup probes of a worker that the leader waits for.
const WORKER_STARTUP_PERIOD_SECONDS: i32 = 2;

/// Startup probes a worker's server may fail before the kubelet restarts it: 5 minutes to
/// listen (a GPU's `rpc-server` initializes CUDA first).
const WORKER_STARTUP_FAILURES: i32 = 150;

/// A worker's startup where its leader waits for it: its server (GPU 0's `rpc-server`, started
/// last) accepts a connection on the group's port; the worker is Ready from then on. A
/// startup probe, not a readiness probe: `rpc-server` serves one client at a time with a
/// listen backlog of 1, so once the leader is connected a probe's connection would time out
/// and turn the worker NotReady; the kubelet stops startup probes at the first success.
fn worker_startup(plan: &Plan) -> Option<Probe> {
    let group = plan
        .group
        .as_ref()
        .filter(|g| g.engine.leader_waits_for_workers())?;
    Some(Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(i32::try_from(group.port).ok()?),
            host: None,
        }),
        period_seconds: Some(WORKER_STARTUP_PERIOD_SECONDS),
        failure_threshold: Some(WORKER_STARTUP_FAILURES),
        ..Probe::default()
    })
}

/// The group's pods to create first: all of them, or the workers alone where the leader
/// waits for them (it is created once they are Ready, [`leader_with_worker_addresses`]).
pub fn without_awaited_leader(pods: Vec<Pod>, plan: &Plan) -> Vec<Pod> {
    let waits = plan
        .group
        .as_ref()
        .is_some_and(|g| g.engine.leader_waits_for_workers());
    if waits {
        pods.into_iter().skip(1).collect()
    } else {
        pods
    }
}

/// The leader, pointed at its Ready workers: each worker's DNS name (the one the leader's
/// flags name) resolves, in the leader's `/etc/hosts`, to the worker's pod address. The
/// leader then needs no DNS record of a pod (a cluster's DNS publishes one only once the
/// pod is Ready, and caches its absence), and the workers' annotations (plan, spec hash) are
/// the leader's, so the group stays one build. The addresses pinned are also written in the
/// leader's [`WORKER_ADDRESSES_ANNOTATION`].
pub fn leader_with_worker_addresses(
    mut leader: Pod,
    group: &GroupOf<'_>,
    workers: &[std::sync::Arc<Pod>],
    plan: &Plan,
) -> Result<Pod, BuildError> {
    let namespace = leader
        .metadata
        .namespace
        .clone()
        .ok_or(BuildError::MissingObjectKey("metadata.namespace"))?;
    let names = group.address(&namespace, plan.nodes(), 0).worker_addresses;
    let aliases: Vec<HostAlias> = names
        .into_iter()
        .zip(workers)
        .filter_map(|(name, worker)| {
            let ip = worker.status.as_ref()?.pod_ip.clone()?;
            Some(HostAlias {
                ip,
                hostnames: Some(vec![name]),
            })
        })
        .collect();
    if let Some(annotations) = workers.first().and_then(|w| w.metadata.annotations.clone()) {
        leader.metadata.annotations = Some(annotations);
    }
    // What the aliases pin, where the operator's pod cache shows it (it keeps no
    // `hostAliases`): a worker that moves then ends the group (`leader::moved_worker`).
    let pinned: Vec<String> = aliases
        .iter()
        .flat_map(|alias| {
            alias
                .hostnames
                .iter()
                .flatten()
                .map(|name| format!("{name}={}", alias.ip))
        })
        .collect();
    leader
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(WORKER_ADDRESSES_ANNOTATION.to_string(), pinned.join(","));
    leader
        .spec
        .as_mut()
        .ok_or(BuildError::MissingObjectKey("spec"))?
        .host_aliases = Some(aliases);
    Ok(leader)
}

/// Required anti-affinity to the group's own pods on the node's hostname: the scheduler puts
/// no two pods of the group on one node (each pod takes a node's planned GPUs).
fn one_pod_per_node(group: &str) -> PodAntiAffinity {
    PodAntiAffinity {
        required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    GROUP_LABEL.to_string(),
                    group.to_string(),
                )])),
                match_expressions: None,
            }),
            topology_key: HOSTNAME_TOPOLOGY.to_string(),
            ..PodAffinityTerm::default()
        }]),
        preferred_during_scheduling_ignored_during_execution: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::group::testing::{group_job, two_node_plan};
    use crate::pod::build::{desired_pod, recorded_spec_hash};
    use vramfit_api::InferenceJob;
    use vramfit_planner::resolve_job;

    #[test]
    fn each_rank_is_the_one_pod_build_with_its_group_identity() {
        let job = group_job("big", 2);
        let input = resolve_job(&job.spec).unwrap();
        let class = fixtures::class("a10g", 4);
        let plan = two_node_plan(&input, &class);
        let base = desired_pod(&job, &input, &plan, &class, 3).unwrap();
        let pods = group_pods(&base, &input, &plan, "big", 3, GroupSpread::Node).unwrap();
        assert_eq!(pods.len(), 2);
        for (rank, pod) in pods.iter().enumerate() {
            let name = format!("big-3-{rank}");
            assert_eq!(pod.metadata.name.as_deref(), Some(name.as_str()));
            let labels = pod.metadata.labels.as_ref().unwrap();
            assert_eq!(labels[GROUP_LABEL], "big-3");
            assert_eq!(labels[GROUP_RANK_LABEL], rank.to_string());
            assert_eq!(labels["vramfit.io/attempt"], "3");
            assert_eq!(labels["vramfit.io/job"], "big");
            let spec = pod.spec.as_ref().unwrap();
            assert_eq!(spec.hostname.as_deref(), Some(name.as_str()));
            assert_eq!(spec.subdomain.as_deref(), Some("big-3"));
            let anti = spec
                .affinity
                .as_ref()
                .and_then(|a| a.pod_anti_affinity.as_ref())
                .and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .unwrap();
            assert_eq!(anti[0].topology_key, HOSTNAME_TOPOLOGY);
            assert_eq!(
                anti[0].label_selector.as_ref().unwrap().match_labels,
                Some(BTreeMap::from([(GROUP_LABEL.into(), "big-3".into())]))
            );
            assert!(
                spec.affinity.as_ref().unwrap().node_affinity.is_some(),
                "still on the class's nodes"
            );
            let env = fixtures::container_env(pod);
            assert_eq!(env["LWS_LEADER_ADDRESS"], "big-3-0.big-3.ml");
            assert_eq!(env["LWS_GROUP_SIZE"], "2");
            assert_eq!(env["LWS_WORKER_INDEX"], rank.to_string());
            assert_eq!(
                env["VRAMFIT_NODE_CLASS"], class.name,
                "the planned env of the one-pod build"
            );
            assert_eq!(
                recorded_spec_hash(pod),
                recorded_spec_hash(&base),
                "the one-pod build's hash: a spec change replaces the group when it would replace the pod"
            );
        }
    }

    /// `job`'s one-pod build on an `a10g` class of 4 GPUs and its two ranks, generation 3,
    /// one a node.
    fn two_node_group(job: &InferenceJob) -> (Pod, Vec<Pod>) {
        let input = resolve_job(&job.spec).unwrap();
        let class = fixtures::class("a10g", 4);
        let plan = two_node_plan(&input, &class);
        let base = desired_pod(job, &input, &plan, &class, 3).unwrap();
        let pods = group_pods(&base, &input, &plan, "big", 3, GroupSpread::Node).unwrap();
        (base, pods)
    }

    fn command_line(pod: &Pod) -> (Option<Vec<String>>, Option<Vec<String>>) {
        let container = &pod.spec.as_ref().unwrap().containers[0];
        (container.command.clone(), container.args.clone())
    }

    #[test]
    fn a_vllm_leader_without_a_command_starts_the_ray_head_then_serves_with_every_flag() {
        let job = group_job("big", 2);
        assert!(job.spec.command.is_empty());
        let (base, pods) = two_node_group(&job);

        let (command, args) = command_line(&pods[0]);
        assert_eq!(
            command.unwrap(),
            [
                "sh",
                "-c",
                "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh leader --ray_port=6379 --ray_cluster_size=2 --ray_init_timeout=1800 && exec vllm serve \"$@\"",
                "vllm-leader",
            ]
        );
        // `"$@"`: the job's args, the plan's flags, then the group's.
        let args = args.unwrap();
        let (_, base_args) = command_line(&base);
        let base_args = base_args.unwrap();
        assert_eq!(args[..base_args.len()], base_args[..]);
        assert_eq!(args[..2], ["--model", "mistralai/Mistral-7B-Instruct-v0.3"]);
        assert_eq!(
            args[base_args.len()..],
            [
                "--pipeline-parallel-size",
                "2",
                "--distributed-executor-backend",
                "ray"
            ]
        );
        assert_eq!(fixtures::container_env(&pods[0])["RAY_ADDRESS"], "auto");

        let (command, args) = command_line(&pods[1]);
        assert_eq!(
            command.unwrap(),
            [
                "sh",
                "-c",
                "until ray start --address=big-3-0.big-3.ml:6379 --block; do echo 'waiting for the Ray head at 'big-3-0.big-3.ml:6379; sleep 5; done"
            ]
        );
        assert_eq!(args, None);
    }

    #[test]
    fn a_vllm_leader_keeps_the_jobs_own_command() {
        let mut job = group_job("big", 2);
        job.spec.command = vec![
            "sh".into(),
            "-c".into(),
            "ray start --head --port=$VRAMFIT_GROUP_PORT && exec vllm serve \"$VRAMFIT_MODEL\" $VRAMFIT_RUNTIME_ARGS".into(),
        ];
        let (base, pods) = two_node_group(&job);
        let (command, args) = command_line(&pods[0]);
        assert_eq!(command.unwrap(), job.spec.command);
        let (_, base_args) = command_line(&base);
        let mut expected = base_args.unwrap();
        expected.extend(
            [
                "--pipeline-parallel-size",
                "2",
                "--distributed-executor-backend",
                "ray",
            ]
            .map(String::from),
        );
        assert_eq!(args.unwrap(), expected);
        // The workers join the head whatever the leader runs.
        let (command, _) = command_line(&pods[1]);
        assert!(command.unwrap()[2].starts_with("until ray start --address="));
    }

    #[test]
    fn ranks_that_may_share_a_node_carry_no_anti_affinity() {
        let job = group_job("big", 2);
        let input = resolve_job(&job.spec).unwrap();
        let class = fixtures::class("a10g", 4);
        let plan = two_node_plan(&input, &class);
        let base = desired_pod(&job, &input, &plan, &class, 1).unwrap();
        let anti = |pods: &[Pod]| {
            pods.iter()
                .filter(|p| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.affinity.as_ref())
                        .and_then(|a| a.pod_anti_affinity.as_ref())
                        .is_some()
                })
                .count()
        };
        let pods = |spread| group_pods(&base, &input, &plan, "big", 1, spread).unwrap();
        assert_eq!(anti(&pods(GroupSpread::Node)), 2);
        let pods = pods(GroupSpread::None);
        assert_eq!(anti(&pods), 0);
        assert!(
            pods[0]
                .spec
                .as_ref()
                .unwrap()
                .affinity
                .as_ref()
                .unwrap()
                .node_affinity
                .is_some(),
            "still on the class's nodes"
        );
    }
}
