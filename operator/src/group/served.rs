//! Served jobs whose replicas are groups (`spec.serve` with `gpus.maxNodes` above 1), pure.
//! The serving pipeline (`serving::decide`) follows, replaces, rolls and scales replicas
//! through one pod each; this module shows it each replica's group as that one pod and turns
//! its one-pod decisions into the group's writes, as [`super::decide`] does for batch attempts:
//!
//! | the serving pipeline sees / decides | the group |
//! |---|---|
//! | pod `<job>-r<slot>-<n>` | group `<job>-r<slot>-<n>`: pods `<job>-r<slot>-<n>-<rank>`, seen as one pod by [`group_seen_of`] (a member failed, lost or exited: the replica ended; Ready: the leader's readiness, once every member runs) |
//! | the job's pods | each group once, by its name |
//! | create a pod with its plan | the group's headless Service and NetworkPolicies (the members', and the leader's that opens the serving port on it alone), then one pod per node ([`group_pods_of`]); the workers without the server's probes (the leader answers for the group); a leader that waits for its workers (llama.cpp) once they are Ready |
//! | delete a pod | every pod of its group, then its Service and NetworkPolicies |
//! | apply a pod's labels | every member's (a member that mounts a cached model: its metadata alone) |
//! | a pod that mounts the cached model (`--model-cache`: decided for `plan.nodes()` pods, as a batch group) | every member mounts it (each built from that pod); a leader created after its workers takes their mount ([`crate::model_cache::group_placement::mount_like`]) |
//!
//! The placement (`serving::placement`) asks for `plan.nodes()` distinct nodes with room, the
//! job's Service and PodDisruptionBudget select the leaders only (`serving::service::
//! serving_selector`), and each replica's status line lists its members.
use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use vramfit_api::group::{GroupMember, MAX_GROUP_NODES};
use vramfit_api::pod_keys::{SPEC_HASH_ANNOTATION, replica_group_name, replica_group_pod_name};
use vramfit_api::{InferenceJob, InferenceJobStatus, Plan, ServeSpec};
use vramfit_planner::JobInput;

use super::build::{group_pods_of, without_awaited_leader};
use super::leader::{Ranks, leader_from_workers};
use super::names::GroupOf;
use super::state::{Ends, LeaderRecord, group_seen_of};
use super::{network_policy, service};
use crate::capacity::Inventory;
use crate::ownership::ObjectWrite;
use crate::pod::PodSeen;
use crate::pod::build::BuildError;
use crate::replicas::decide::ServedDecision;
use crate::replicas::service::controlled_by;
use crate::settings::GroupSpread;

/// The replica (slot, incarnation) whose group is named `name`, for `job_name`'s groups.
pub fn replica_of(job_name: &str, name: &str) -> Option<(u32, u32)> {
    let (rest, incarnation) = name.rsplit_once('-')?;
    let (_, slot) = rest.rsplit_once("-r")?;
    let (slot, incarnation) = (slot.parse().ok()?, incarnation.parse().ok()?);
    (replica_group_name(job_name, slot, incarnation) == name).then_some((slot, incarnation))
}

/// The group (its name) of `job_name`'s replica group pod `pod`, if it is one.
/// (Read from the name's end: a long job name is shortened to fit each name, so the member's
/// name does not start with the group's.)
pub fn group_of_member(job_name: &str, pod: &str) -> Option<String> {
    let mut parts = pod.rsplitn(3, '-');
    let rank: u32 = parts.next()?.parse().ok()?;
    let incarnation: u32 = parts.next()?.parse().ok()?;
    let (_, slot) = parts.next()?.rsplit_once("-r")?;
    let slot: u32 = slot.parse().ok()?;
    (replica_group_pod_name(job_name, slot, incarnation, rank) == pod)
        .then(|| replica_group_name(job_name, slot, incarnation))
}

/// How the serving pipeline sees `name`: a replica's group as one pod; any other name (a pod
/// of one node left from before the job spanned nodes) as it is, with no spec hash, so that a
/// rolling update replaces it with a group.
pub fn seen_as_one_pod(
    job_name: &str,
    name: &str,
    leader: &dyn Fn(&str) -> LeaderRecord,
    pods: &dyn Fn(&str) -> PodSeen,
    deleting: &dyn Fn(&str) -> bool,
) -> PodSeen {
    if let Some((slot, incarnation)) = replica_of(job_name, name) {
        let group = GroupOf::Replica {
            job: job_name,
            slot,
            incarnation,
        };
        let seen = group_seen_of(&group, Ends::WithAnyMember, leader(name), pods, deleting).seen;
        if !matches!(seen, PodSeen::Absent) {
            return seen;
        }
    }
    match pods(name) {
        PodSeen::Observed(pod) => {
            let mut pod = Arc::unwrap_or_clone(pod);
            if let Some(annotations) = pod.metadata.annotations.as_mut() {
                annotations.remove(SPEC_HASH_ANNOTATION);
            }
            PodSeen::Observed(Arc::new(pod))
        }
        other => other,
    }
}

/// Whether `job`'s status lists the leader of its replica group `group` (the replica's line
/// names the group's one pod).
pub fn leader_record(job: &InferenceJob, group: &str) -> LeaderRecord {
    let line = job.status.as_ref().and_then(|s| {
        s.replica_statuses
            .iter()
            .find(|line| line.pod_name == group)
    });
    LeaderRecord::of(line.map_or(&[][..], |line| &line.members[..]))
}

/// The job's pods as the serving pipeline counts them: each group once, by its name.
pub fn owned_as_groups(job_name: &str, owned: &[String]) -> Vec<String> {
    let names: BTreeSet<String> = owned
        .iter()
        .map(|pod| group_of_member(job_name, pod).unwrap_or_else(|| pod.clone()))
        .collect();
    names.into_iter().collect()
}

/// What the served group reconcile observed beside the serving pipeline's view.
pub struct ServedGroupObserved<'a> {
    /// The job.
    pub job: &'a InferenceJob,
    /// Its `serve` section.
    pub serve: &'a ServeSpec,
    /// The validated spec.
    pub input: Option<&'a JobInput>,
    /// Looks a pod of the job's namespace up by name (members, not groups).
    pub pods: &'a dyn Fn(&str) -> PodSeen,
    /// Whether this process deleted a pod of that name lately.
    pub deleting: &'a dyn Fn(&str) -> bool,
    /// The job's pods (members) that are not being deleted.
    pub owned: &'a [String],
    /// Looks a Service of the namespace up by name.
    pub service: &'a dyn Fn(&str) -> Option<Arc<Service>>,
    /// Looks a NetworkPolicy of the namespace up by name.
    pub network_policy: &'a dyn Fn(&str) -> Option<Arc<NetworkPolicy>>,
    /// The job's group Services (name, uid).
    pub owned_services: &'a [(String, String)],
    /// The job's group NetworkPolicies (name, uid).
    pub owned_network_policies: &'a [(String, String)],
    /// Classes and nodes (a leader created after its workers is built for their class).
    pub inventory: &'a Inventory,
    /// Whether a group's pods each need a node of their own.
    pub spread: GroupSpread,
    /// Whether the job's status lists a replica group's leader, by group name.
    pub leader: &'a dyn Fn(&str) -> LeaderRecord,
}

/// A group's headless Service and NetworkPolicy writes.
#[derive(Debug)]
pub struct GroupObjects {
    /// The group's name.
    pub group: String,
    /// Its Service.
    pub service: ObjectWrite<Service>,
    /// Its NetworkPolicy (the members let in only each other).
    pub network_policy: ObjectWrite<NetworkPolicy>,
    /// Its leader's NetworkPolicy (the serving port open to any client, on the leader alone).
    pub leader_network_policy: ObjectWrite<NetworkPolicy>,
}

/// The serving decision in the groups' terms.
#[derive(Debug)]
pub struct ServedGroupDecision {
    /// The serving decision, its pods the members (status lines list their groups' members).
    pub served: ServedDecision,
    /// The Service and NetworkPolicies of every group that has pods (written before its pods).
    pub objects: Vec<GroupObjects>,
    /// Services of groups that have no pods left (deleted after the status write).
    pub delete_services: Vec<ObjectWrite<Service>>,
    /// NetworkPolicies of groups that have no pods left.
    pub delete_network_policies: Vec<ObjectWrite<NetworkPolicy>>,
}

/// Turns the serving pipeline's one-pod decision into the groups' writes.
pub fn into_groups(
    obs: &ServedGroupObserved<'_>,
    mut served: ServedDecision,
) -> Result<ServedGroupDecision, BuildError> {
    let job_name = obs.job.name_any();
    let members_of = |group: &str| -> Vec<String> {
        let mut members: Vec<String> = obs
            .owned
            .iter()
            .filter(|pod| group_of_member(&job_name, pod).as_deref() == Some(group))
            .cloned()
            .collect();
        members.sort();
        members
    };

    // Deletions: every member of a deleted group.
    let mut delete_pods = Vec::new();
    for name in &served.delete_pods {
        if replica_of(&job_name, name).is_some() {
            delete_pods.extend(members_of(name));
        }
        if obs.owned.contains(name) {
            // A pod of that very name (one node, from before the job spanned nodes).
            delete_pods.push(name.clone());
        }
    }
    // A group that ended keeps nothing worth its GPUs: its running members go at once.
    delete_pods.extend(running_members_of_ended_groups(
        &job_name,
        obs.owned,
        obs.leader,
        obs.pods,
        obs.deleting,
    ));
    let mut seen_names = BTreeSet::new();
    delete_pods.retain(|name| seen_names.insert(name.clone()));

    // Creations: the group's pods, each with the plan.
    let mut create_pods = Vec::new();
    let mut created_groups = BTreeSet::new();
    if let Some(input) = obs.input {
        for (base, plan) in &served.create_pods {
            let group_name = base.name_any();
            let Some((slot, incarnation)) = replica_of(&job_name, &group_name) else {
                continue;
            };
            let group = GroupOf::Replica {
                job: &job_name,
                slot,
                incarnation,
            };
            let pods = group_pods_of(base, input, plan, &group, obs.spread)?;
            // A leader that waits for its workers comes once they are Ready.
            for pod in without_awaited_leader(pods, plan) {
                create_pods.push((pod, plan.clone()));
            }
            created_groups.insert(group_name);
        }
        for group_name in owned_as_groups(&job_name, obs.owned) {
            if created_groups.contains(&group_name)
                || delete_pods
                    .iter()
                    .any(|p| group_of_member(&job_name, p).as_deref() == Some(group_name.as_str()))
            {
                continue;
            }
            if let Some((leader, plan)) = awaited_replica_leader(obs, input, &group_name)? {
                create_pods.push((leader, plan));
            }
        }
    }

    // Metadata changes: every member's, built as the group's pods; a member that mounts a
    // cached model gets its metadata alone (its spec stays as created).
    let mut apply_pods = Vec::new();
    if let Some(input) = obs.input {
        for base in &served.apply_pods {
            let group_name = base.name_any();
            let (Some((slot, incarnation)), Some(plan)) = (
                replica_of(&job_name, &group_name),
                crate::pod::build::recorded_plan(base),
            ) else {
                continue;
            };
            let group = GroupOf::Replica {
                job: &job_name,
                slot,
                incarnation,
            };
            let Some(base) = with_spec(obs, input, base, &plan, (slot, incarnation))? else {
                continue;
            };
            let existing = members_of(&group_name);
            apply_pods.extend(
                group_pods_of(&base, input, &plan, &group, obs.spread)?
                    .into_iter()
                    .filter(|pod| existing.contains(&pod.name_any()))
                    .map(|pod| match (obs.pods)(&pod.name_any()) {
                        PodSeen::Observed(running) => {
                            crate::model_cache::mount::metadata_apply(pod, &running)
                        }
                        _ => pod,
                    }),
            );
        }
    }

    // Groups that keep or get pods: their objects stay or are written.
    let mut live: BTreeSet<String> = obs
        .owned
        .iter()
        .filter(|pod| !delete_pods.contains(pod))
        .filter_map(|pod| group_of_member(&job_name, pod))
        .collect();
    live.extend(created_groups);
    let mut objects = Vec::new();
    for group in &live {
        let desired_service = service::desired_service(obs.job, group)?;
        let desired_policy = network_policy::desired_network_policy(obs.job, group)?;
        let leader_policy = network_policy::leader_policy_name(group);
        let desired_leader_policy =
            network_policy::desired_leader_network_policy(obs.job, group, obs.serve.port)?;
        objects.push(GroupObjects {
            group: group.clone(),
            service: object_write(
                obs.job,
                (obs.service)(group),
                desired_service,
                service::as_desired,
            ),
            network_policy: object_write(
                obs.job,
                (obs.network_policy)(group),
                desired_policy,
                network_policy::as_desired,
            ),
            leader_network_policy: object_write(
                obs.job,
                (obs.network_policy)(&leader_policy),
                desired_leader_policy,
                network_policy::as_desired,
            ),
        });
    }
    let keep = |name: &str| live.contains(name);
    let keep_policy = |name: &str| {
        keep(name)
            || live
                .iter()
                .any(|group| network_policy::leader_policy_name(group) == name)
    };
    let owned = |objects: &[(String, String)]| {
        objects
            .iter()
            .map(|(n, u)| (n.clone(), u.clone()))
            .collect::<Vec<_>>()
    };
    let delete_services = super::stale_deletes(owned(obs.owned_services), keep);
    let delete_network_policies =
        super::stale_deletes(owned(obs.owned_network_policies), keep_policy);

    list_members(&job_name, &mut served.status, obs.pods, &create_pods);
    served.delete_pods = delete_pods;
    served.create_pods = create_pods;
    served.apply_pods = apply_pods;
    Ok(ServedGroupDecision {
        served,
        objects,
        delete_services,
        delete_network_policies,
    })
}

/// The replica's one-pod `base` of a metadata-only apply, with a spec to build the members
/// from: the serving pipeline leaves the spec out when the group, seen as one pod, mounts a
/// cached model (`model_cache::mount::metadata_apply`); it is built again for `plan` then
/// (each member's own apply is trimmed against that member). `None` when `plan`'s class is
/// gone.
fn with_spec(
    obs: &ServedGroupObserved<'_>,
    input: &JobInput,
    base: &Pod,
    plan: &Plan,
    replica: (u32, u32),
) -> Result<Option<Pod>, BuildError> {
    if base.spec.is_some() {
        return Ok(Some(base.clone()));
    }
    let Some(class) = obs.inventory.class(&plan.node_class) else {
        return Ok(None);
    };
    let built = crate::replicas::pod::replica_pod(obs.job, input, obs.serve, plan, class, replica)?;
    Ok(Some(Pod {
        spec: built.spec,
        ..base.clone()
    }))
}

/// The leader of the replica group `group_name`, when it waits for its workers and they are
/// all Ready now: the replica's one-pod build ([`leader_from_workers`]), with the model
/// mount (or the fetch and its note) its workers were created with
/// ([`crate::model_cache::group_placement::mount_like`]).
fn awaited_replica_leader(
    obs: &ServedGroupObserved<'_>,
    input: &JobInput,
    group_name: &str,
) -> Result<Option<(Pod, Plan)>, BuildError> {
    let job_name = obs.job.name_any();
    let Some((slot, incarnation)) = replica_of(&job_name, group_name) else {
        return Ok(None);
    };
    let group = GroupOf::Replica {
        job: &job_name,
        slot,
        incarnation,
    };
    let leader = (obs.leader)(group_name);
    let seen = group_seen_of(&group, Ends::WithAnyMember, leader, obs.pods, obs.deleting);
    if !seen.leader_due {
        return Ok(None);
    }
    let ranks = Ranks {
        group: &group,
        pods: obs.pods,
        inventory: obs.inventory,
        input,
        spread: obs.spread,
    };
    leader_from_workers(&ranks, |plan, class| {
        let mut leader = crate::replicas::pod::replica_pod(
            obs.job,
            input,
            obs.serve,
            plan,
            class,
            (slot, incarnation),
        )?;
        if let Some(model) = crate::model_cache::job_model::job_model(obs.job)
            && let PodSeen::Observed(worker) = (obs.pods)(&group.member(1))
        {
            crate::model_cache::group_placement::mount_like(&mut leader, &worker, &model);
        }
        Ok(leader)
    })
}

/// Each replica line's members: rank, pod and node of its group's pods (those that exist or
/// are created now).
fn list_members(
    job_name: &str,
    status: &mut InferenceJobStatus,
    pods: &dyn Fn(&str) -> PodSeen,
    created: &[(Pod, Plan)],
) {
    for line in &mut status.replica_statuses {
        let Some((slot, incarnation)) = replica_of(job_name, &line.pod_name) else {
            line.members = Vec::new();
            continue;
        };
        line.members = (0..MAX_GROUP_NODES)
            .filter_map(|rank| {
                let pod_name = replica_group_pod_name(job_name, slot, incarnation, rank);
                let node_name = match pods(&pod_name) {
                    PodSeen::Observed(pod) => pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .filter(|n| !n.is_empty()),
                    PodSeen::Applied(_) => None,
                    // Created by this decision, or no member of this rank.
                    PodSeen::Absent | PodSeen::Foreign => {
                        created.iter().find(|(p, _)| p.name_any() == pod_name)?;
                        None
                    }
                };
                Some(GroupMember {
                    rank,
                    pod_name,
                    node_name,
                })
            })
            .collect();
    }
}

/// The running members of the job's groups that ended (a member failed, exited or is lost):
/// such a group keeps nothing worth its GPUs, and its leader may still answer its health
/// route, so they go at once, whenever the replica's next group comes (after a backoff, or
/// when room frees up); the finished members stay for their logs until then. Their GPUs count
/// as free for the replica's next group (`owned`: the job's pods not being deleted).
pub fn running_members_of_ended_groups(
    job_name: &str,
    owned: &[String],
    leader: &dyn Fn(&str) -> LeaderRecord,
    pods: &dyn Fn(&str) -> PodSeen,
    deleting: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let mut running = Vec::new();
    for group in owned_as_groups(job_name, owned) {
        let Some((slot, incarnation)) = replica_of(job_name, &group) else {
            continue;
        };
        let replica = GroupOf::Replica {
            job: job_name,
            slot,
            incarnation,
        };
        let seen = group_seen_of(
            &replica,
            Ends::WithAnyMember,
            leader(&group),
            pods,
            deleting,
        );
        if !matches!(&seen.seen, PodSeen::Observed(pod) if finished(pod)) {
            continue;
        }
        let mut members: Vec<&String> = owned
            .iter()
            .filter(|pod| group_of_member(job_name, pod).as_deref() == Some(group.as_str()))
            .filter(|name| !matches!(pods(name), PodSeen::Observed(pod) if finished(&pod)))
            .collect();
        members.sort();
        running.extend(members.into_iter().cloned());
    }
    running
}

/// Whether a pod ended (it holds no GPUs).
fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Keep an object that is the job's and as desired, apply the desired one onto the job's own
/// that drifted (by uid), create it where the store shows none of the job's.
fn object_write<K: kube::Resource + Clone>(
    job: &InferenceJob,
    observed: Option<Arc<K>>,
    desired: K,
    as_desired: fn(&K, &K, &InferenceJob) -> bool,
) -> ObjectWrite<K> {
    match observed {
        Some(observed) if as_desired(&observed, &desired, job) => ObjectWrite::Keep,
        Some(observed)
            if controlled_by(
                observed
                    .meta()
                    .owner_references
                    .as_deref()
                    .unwrap_or_default(),
                job,
            ) =>
        {
            ObjectWrite::Apply {
                uid: observed.meta().uid.clone().unwrap_or_default(),
                object: Box::new(desired),
            }
        }
        // Absent, or not shown as the job's: a create, which never takes over another's.
        _ => ObjectWrite::Create(Box::new(desired)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn a_replica_group_and_its_members_are_read_from_their_names() {
        assert_eq!(replica_of("chat", "chat-r1-4"), Some((1, 4)));
        assert_eq!(replica_of("chat", "chat-r1-4-0"), None, "a member");
        assert_eq!(replica_of("chat-r1", "chat-r1-4"), None, "another job's");
        assert_eq!(replica_of("chat", "chat-4"), None);
        assert_eq!(
            group_of_member("chat", "chat-r1-4-0").as_deref(),
            Some("chat-r1-4")
        );
        assert_eq!(group_of_member("chat", "chat-r1-4"), None, "a group");
        let long = "c".repeat(70);
        let member = replica_group_pod_name(&long, 3, 12, 1);
        assert_eq!(
            group_of_member(&long, &member),
            Some(replica_group_name(&long, 3, 12))
        );
        assert_eq!(
            owned_as_groups(
                "chat",
                &[
                    "chat-r0-1-1".into(),
                    "chat-r0-1-0".into(),
                    "chat-r1-2-0".into(),
                    "stray".into()
                ]
            ),
            vec!["chat-r0-1", "chat-r1-2", "stray"]
        );
    }

    /// The group's pods of replica 0, number 1, created: Qwen-like plan on two nodes.
    fn group() -> (Vec<Pod>, Pod) {
        let mut spec = fixtures::vllm_mistral_spec();
        spec.gpus.max_nodes = 2;
        spec.serve = Some(ServeSpec::default());
        let job = fixtures::job("chat", spec);
        let input = input_of(&job);
        let class = fixtures::class("a10g", 4);
        let plan = crate::group::testing::two_node_plan(&input, &class);
        let serve = job.spec.serve.clone().unwrap();
        let base =
            crate::replicas::pod::replica_pod(&job, &input, &serve, &plan, &class, (0, 1)).unwrap();
        let group = GroupOf::Replica {
            job: "chat",
            slot: 0,
            incarnation: 1,
        };
        let pods = group_pods_of(&base, &input, &plan, &group, GroupSpread::Node)
            .unwrap()
            .into_iter()
            .map(fixtures::created)
            .collect();
        (pods, base)
    }

    fn seen(pods: &[Pod]) -> PodSeen {
        let lookup = |name: &str| match pods.iter().find(|p| p.name_any() == name) {
            Some(pod) => PodSeen::Observed(Arc::new(pod.clone())),
            None => PodSeen::Absent,
        };
        seen_as_one_pod(
            "chat",
            "chat-r0-1",
            &|_| LeaderRecord::Listed,
            &lookup,
            &|_| false,
        )
    }

    fn ready(pod: Pod, node: &str) -> Pod {
        let mut pod = fixtures::as_running(pod, node);
        pod.status.get_or_insert_default().conditions =
            Some(vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]);
        pod
    }

    fn replica(seen: &PodSeen) -> crate::replicas::pod_state::ReplicaPod {
        match seen {
            PodSeen::Observed(pod) => {
                assert_eq!(pod.name_any(), "chat-r0-1", "the group's name");
                crate::replicas::pod_state::replica_pod(pod)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_replica_is_ready_when_its_leader_is_and_every_member_runs() {
        let (pods, base) = group();
        assert_eq!(pods.len(), 2);
        let probes = |pod: &Pod| {
            pod.spec.as_ref().unwrap().containers[0]
                .readiness_probe
                .clone()
        };
        assert!(probes(&pods[0]).is_some(), "the leader serves");
        assert!(probes(&pods[1]).is_none(), "a worker has no health route");
        assert_eq!(
            crate::pod::build::recorded_spec_hash(&pods[1]),
            crate::pod::build::recorded_spec_hash(&base),
            "the one pod's hash: a spec change rolls the group as it would the pod"
        );
        let leader = ready(pods[0].clone(), "a-1");
        let pending = fixtures::as_pending(pods[1].clone(), None);
        assert!(!replica(&seen(&[leader.clone(), pending])).is_ready());
        let worker = fixtures::as_running(pods[1].clone(), "a-2");
        assert!(replica(&seen(&[leader.clone(), worker.clone()])).is_ready());
        let loading = fixtures::as_running(pods[0].clone(), "a-1");
        assert!(
            !replica(&seen(&[loading, worker])).is_ready(),
            "the leader's readiness"
        );
        let exited = fixtures::as_succeeded(pods[1].clone(), "a-2");
        assert!(
            matches!(
                replica(&seen(&[leader, exited])),
                crate::replicas::pod_state::ReplicaPod::Ended(_)
            ),
            "a server's worker that exits ends the replica"
        );
        assert!(matches!(seen(&[]), PodSeen::Absent));
    }

    /// The cached model the tests mount.
    fn model() -> crate::model_cache::job_model::JobModel {
        crate::model_cache::job_model::JobModel {
            repo: "o/m".into(),
            revision: "main".into(),
            key: "o/m@main".into(),
            file: Some("m.gguf".into()),
            runtime: vramfit_api::Runtime::Vllm,
        }
    }

    /// A served job `chat` of `o/m` from the Hub, its replicas allowed two nodes.
    fn cached_group_job(runtime: vramfit_api::Runtime) -> InferenceJob {
        let mut spec = match runtime {
            vramfit_api::Runtime::Llamacpp => fixtures::spec_from_json(
                r#"{"model": {"preset": "llama-3.1-70b-instruct-q4_k_m"}, "runtime": "llamacpp",
                    "image": "ghcr.io/ggml-org/llama.cpp:server-cuda", "contextLength": 4096,
                    "gpus": {"max": 1}}"#,
            ),
            _ => fixtures::vllm_mistral_spec(),
        };
        spec.gpus.max_nodes = 2;
        spec.serve = Some(ServeSpec::default());
        spec.model.hugging_face = Some(vramfit_api::checkpoint::HuggingFaceModel {
            repo: "o/m".into(),
            file: Some("m.gguf".into()),
            ..Default::default()
        });
        fixtures::job("chat", spec)
    }

    /// The job's validated spec, planned from its preset (the Hub's numbers are not read in
    /// these tests).
    fn input_of(job: &InferenceJob) -> JobInput {
        let mut spec = job.spec.clone();
        spec.model.hugging_face = None;
        vramfit_planner::resolve_job(&spec).unwrap()
    }

    /// The stores of `pods` (by name), and nothing else.
    struct World {
        job: InferenceJob,
        input: JobInput,
        pods: Vec<Pod>,
        owned: Vec<String>,
        inventory: Inventory,
    }

    impl World {
        fn new(job: InferenceJob, pods: Vec<Pod>) -> Self {
            let input = input_of(&job);
            let owned = pods.iter().map(|p| p.name_any()).collect();
            let nodes: Vec<Arc<k8s_openapi::api::core::v1::Node>> = ["a-1", "a-2"]
                .iter()
                .map(|n| Arc::new(fixtures::gpu_node(n, "a10g", 4, 4)))
                .collect();
            let inventory = crate::capacity::build_inventory(&nodes, &[]);
            Self {
                job,
                input,
                pods,
                owned,
                inventory,
            }
        }

        fn groups(
            &self,
            leader: LeaderRecord,
            served: ServedDecision,
        ) -> Result<ServedGroupDecision, BuildError> {
            let pods = |name: &str| match self.pods.iter().find(|p| p.name_any() == name) {
                Some(pod) => PodSeen::Observed(Arc::new(pod.clone())),
                None => PodSeen::Absent,
            };
            let serve = self.job.spec.serve.clone().unwrap();
            let obs = ServedGroupObserved {
                job: &self.job,
                serve: &serve,
                input: Some(&self.input),
                pods: &pods,
                deleting: &|_| false,
                owned: &self.owned,
                service: &|_| None,
                network_policy: &|_| None,
                owned_services: &[],
                owned_network_policies: &[],
                inventory: &self.inventory,
                spread: GroupSpread::Node,
                leader: &|_| leader,
            };
            into_groups(&obs, served)
        }
    }

    /// A decision that creates `create` and applies `apply`, nothing else.
    fn decision(create: Vec<(Pod, Plan)>, apply: Vec<Pod>) -> ServedDecision {
        ServedDecision {
            status: InferenceJobStatus::default(),
            delete_pods: Vec::new(),
            create_pods: create,
            volumes: Vec::new(),
            apply_pods: apply,
            service: ObjectWrite::Keep,
            pdb: ObjectWrite::Keep,
            events: Vec::new(),
            steps: Vec::new(),
            restarts: Vec::new(),
            waits_for_room: false,
            action: kube::runtime::controller::Action::await_change(),
        }
    }

    /// Replica 0, number 1's one pod on A10G×4 (`plan`, two nodes), as the serving pipeline
    /// builds it.
    fn one_pod(job: &InferenceJob, input: &JobInput, plan: &Plan) -> Pod {
        let class = fixtures::class("a10g", 4);
        let serve = job.spec.serve.clone().unwrap();
        crate::replicas::pod::replica_pod(job, input, &serve, plan, &class, (0, 1)).unwrap()
    }

    fn claim_of(
        pod: &Pod,
    ) -> Option<k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource> {
        pod.spec
            .as_ref()?
            .volumes
            .as_ref()?
            .iter()
            .find(|v| v.name == crate::model_cache::mount::VOLUME_NAME)?
            .persistent_volume_claim
            .clone()
    }

    fn annotation<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
        pod.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    #[test]
    fn every_member_of_a_replica_group_mounts_the_model_its_one_pod_mounts() {
        let job = cached_group_job(vramfit_api::Runtime::Vllm);
        let world = World::new(job.clone(), Vec::new());
        let class = fixtures::class("a10g", 4);
        let plan = crate::group::testing::two_node_plan(&world.input, &class);
        let mut base = one_pod(&job, &world.input, &plan);
        crate::model_cache::mount::mount_pod(
            &mut base,
            &model(),
            "vramfit-model-chat-1",
            &["a-1".into(), "a-2".into()],
            vramfit_api::model_cache::WeightsSource::CacheHit,
        );
        let out = world
            .groups(
                LeaderRecord::NotListed,
                decision(vec![(base, plan)], Vec::new()),
            )
            .unwrap();
        let names: Vec<String> = out
            .served
            .create_pods
            .iter()
            .map(|(p, _)| p.name_any())
            .collect();
        assert_eq!(names, ["chat-r0-1-0", "chat-r0-1-1"]);
        for (pod, _) in &out.served.create_pods {
            let claim = claim_of(pod).expect("every member mounts the claim");
            assert_eq!(claim.claim_name, "vramfit-model-chat-1");
            assert_eq!(claim.read_only, Some(true), "read-only");
            assert_eq!(
                annotation(pod, crate::model_cache::WEIGHTS_SOURCE_ANNOTATION),
                Some("CacheHit")
            );
            let mount = &pod.spec.as_ref().unwrap().containers[0];
            assert!(
                mount
                    .volume_mounts
                    .iter()
                    .flatten()
                    .any(|m| m.mount_path == vramfit_api::model_cache::MOUNT_PATH
                        && m.read_only == Some(true)),
                "{}",
                pod.name_any()
            );
            let affinity = pod.spec.as_ref().unwrap().affinity.as_ref().unwrap();
            let terms = &affinity
                .node_affinity
                .as_ref()
                .unwrap()
                .required_during_scheduling_ignored_during_execution
                .as_ref()
                .unwrap()
                .node_selector_terms;
            assert!(terms.iter().all(|t| {
                t.match_expressions.as_ref().unwrap().last().unwrap().values
                    == Some(vec!["a-1".to_string(), "a-2".to_string()])
            }));
            assert!(
                affinity.pod_anti_affinity.is_some(),
                "still one pod per node"
            );
        }
    }

    /// A label change of a running replica group whose members mount the model: the serving
    /// pipeline applies the group's one pod without its spec; each member gets its
    /// metadata alone (before, building the members from a pod without a spec failed).
    #[test]
    fn a_label_change_of_a_mounting_replica_group_applies_each_member_s_metadata_alone() {
        let job = cached_group_job(vramfit_api::Runtime::Vllm);
        let input = input_of(&job);
        let class = fixtures::class("a10g", 4);
        let plan = crate::group::testing::two_node_plan(&input, &class);
        let mut base = one_pod(&job, &input, &plan);
        crate::model_cache::mount::mount_pod(
            &mut base,
            &model(),
            "vramfit-model-chat-1",
            &["a-1".into(), "a-2".into()],
            vramfit_api::model_cache::WeightsSource::CacheHit,
        );
        let group = GroupOf::Replica {
            job: "chat",
            slot: 0,
            incarnation: 1,
        };
        let members: Vec<Pod> = group_pods_of(&base, &input, &plan, &group, GroupSpread::Node)
            .unwrap()
            .into_iter()
            .zip(["a-1", "a-2"])
            .map(|(pod, node)| ready(fixtures::created(pod), node))
            .collect();
        let world = World::new(job.clone(), members);
        // The spec's new label, on the one pod the serving pipeline applies (spec left out).
        let mut desired = one_pod(&job, &input, &plan);
        desired
            .metadata
            .labels
            .get_or_insert_default()
            .insert("team".into(), "vision".into());
        desired.spec = None;
        let out = world
            .groups(LeaderRecord::Listed, decision(Vec::new(), vec![desired]))
            .expect("the members' applies are built");
        let names: Vec<String> = out.served.apply_pods.iter().map(Pod::name_any).collect();
        assert_eq!(names, ["chat-r0-1-0", "chat-r0-1-1"]);
        for pod in &out.served.apply_pods {
            assert_eq!(
                pod.spec,
                None,
                "{}: the spec stays as created",
                pod.name_any()
            );
            let labels = pod.metadata.labels.as_ref().unwrap();
            assert_eq!(labels["team"], "vision");
            assert_eq!(labels[vramfit_api::pod_keys::GROUP_LABEL], "chat-r0-1");
        }
        // Members that fetch their model themselves get their whole apply, as before.
        let fetching: Vec<Pod> = world
            .pods
            .iter()
            .cloned()
            .map(|mut pod| {
                crate::model_cache::mount::mark_source(
                    &mut pod,
                    vramfit_api::model_cache::WeightsSource::FetchedByPod,
                );
                pod
            })
            .collect();
        let world = World::new(job.clone(), fetching);
        let mut desired = one_pod(&job, &input, &plan);
        desired
            .metadata
            .labels
            .get_or_insert_default()
            .insert("team".into(), "vision".into());
        let out = world
            .groups(LeaderRecord::Listed, decision(Vec::new(), vec![desired]))
            .unwrap();
        assert_eq!(out.served.apply_pods.len(), 2);
        assert!(out.served.apply_pods.iter().all(|p| p.spec.is_some()));
    }

    /// A llama.cpp replica's leader, created once its worker is Ready, mounts the model as
    /// the worker does (before, it fetched it while its worker mounted it), or fetches it
    /// with the worker's note.
    #[test]
    fn a_late_llama_cpp_leader_mounts_as_its_worker_does() {
        let job = cached_group_job(vramfit_api::Runtime::Llamacpp);
        let input = input_of(&job);
        let class = fixtures::class("a10g", 4);
        let plan = crate::group::testing::rpc_plan(&input, &class);
        let mut base = one_pod(&job, &input, &plan);
        crate::model_cache::mount::mount_pod(
            &mut base,
            &model(),
            "vramfit-model-chat-1",
            &["a-1".into(), "a-2".into()],
            vramfit_api::model_cache::WeightsSource::FetchedByNode,
        );
        let group = GroupOf::Replica {
            job: "chat",
            slot: 0,
            incarnation: 1,
        };
        let worker = group_pods_of(&base, &input, &plan, &group, GroupSpread::Node)
            .unwrap()
            .remove(1);
        let worker = crate::group::testing::ready_at(fixtures::created(worker), "a-2", "10.0.0.2");
        let world = World::new(job.clone(), vec![worker.clone()]);
        let out = world
            .groups(LeaderRecord::NotListed, decision(Vec::new(), Vec::new()))
            .unwrap();
        let [(leader, _)] = &out.served.create_pods[..] else {
            panic!("the leader is due: {:?}", out.served.create_pods);
        };
        assert_eq!(leader.name_any(), "chat-r0-1-0");
        assert_eq!(claim_of(leader), claim_of(&worker), "the worker's claim");
        assert_eq!(claim_of(leader).unwrap().read_only, Some(true));
        assert_eq!(
            annotation(leader, crate::model_cache::WEIGHTS_SOURCE_ANNOTATION),
            Some("FetchedByNode")
        );
        // A worker that fetches: the leader fetches too, with the worker's note.
        let mut fetching = one_pod(&job, &input, &plan);
        crate::model_cache::mount::mark_source(
            &mut fetching,
            vramfit_api::model_cache::WeightsSource::FetchedByPod,
        );
        crate::model_cache::mount::mark_note(&mut fetching, "no node holds it");
        let worker = group_pods_of(&fetching, &input, &plan, &group, GroupSpread::Node)
            .unwrap()
            .remove(1);
        let worker = crate::group::testing::ready_at(fixtures::created(worker), "a-2", "10.0.0.2");
        let world = World::new(job, vec![worker]);
        let out = world
            .groups(LeaderRecord::NotListed, decision(Vec::new(), Vec::new()))
            .unwrap();
        let leader = &out.served.create_pods[0].0;
        assert_eq!(claim_of(leader), None);
        assert_eq!(
            annotation(leader, crate::model_cache::WEIGHTS_NOTE_ANNOTATION),
            Some("no node holds it")
        );
    }
}
