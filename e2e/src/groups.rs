//! Groups (a plan that spans nodes) on simulated nodes: the nodes of a class of their own that
//! a scenario adds and removes, and what a placed group must look like (its pods, one per
//! node, its headless Service and its NetworkPolicy).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use vramfit_api::pod_keys::{GROUP_LABEL, GROUP_RANK_LABEL, group_name, group_pod_name};
use vramfit_api::{AttemptOutcome, InferenceJob, Phase, Plan};

use crate::{
    ATTEMPT_LABEL, CONTAINER, JOB_LABEL, SETTLE, Suite, check_pod_of_plan, conditions_of,
    eventually, expect_eq, is_live, job_manifest, node_name, node_object, node_of, now,
    ready_node_status, register_node,
};

/// The GPU of the group scenarios' nodes: a model no other scenario's node has, so that the
/// classes it forms (`a10-x<N>`) hold only the nodes a group scenario adds.
pub const GROUP_GPU: &str = "NVIDIA A10";
const GROUP_GPU_MEMORY_MIB: u64 = 23028;
const GROUP_GPU_COMPUTE_CAPABILITY: &str = "8.6";

/// The class the agent forms from `gpus` of [`GROUP_GPU`] per node (`a10-x<gpus>`).
pub fn group_class(gpus: u32) -> String {
    vramfit_planner::node_class::class_name(GROUP_GPU, gpus)
}

/// The agent fixture (as NVML would report it) of a node of `gpus` × [`GROUP_GPU`].
pub fn group_fixture(gpus: u32) -> String {
    format!(
        "# {gpus}x {GROUP_GPU}, a simulated node of the group scenarios (vramfit-e2e)\n\
         driverVersion: \"550.54.15\"\ncudaDriverVersion: 12040\ngpus:\n\
         \x20 - name: {GROUP_GPU}\n    memoryMiB: {GROUP_GPU_MEMORY_MIB}\n\
         \x20   computeCapability: \"{GROUP_GPU_COMPUTE_CAPABILITY}\"\n\
         \x20   migMode: unsupported\n    count: {gpus}\n"
    )
}

/// A batch job (vLLM, 16-bit only, up to 4 nodes) allowed only `class`, of `preset`.
fn group_job(s: &Suite, name: &str, preset: &str, context: u32, class: &str) -> Value {
    job_manifest(
        s,
        name,
        json!({
            "model": {"preset": preset},
            "runtime": "vllm",
            "image": "vllm/vllm-openai:v0.10.2",
            "contextLength": context,
            "batchSize": 1,
            "allowedQuantizations": ["none"],
            "gpus": {"min": 1, "max": 8, "maxNodes": 4},
            "nodeClasses": {"allowed": [class]},
            "maxAttempts": 3,
        }),
    )
}

/// Mixtral-8x7B in 16-bit (87 GiB of weights) on `a10-x4` nodes: one node's four A10 (18 GiB
/// usable each) cannot hold it, two nodes' eight can: a group of 2 nodes × 4 GPUs.
pub fn two_node_job(s: &Suite, name: &str) -> Value {
    group_job(s, name, "mixtral-8x7b-instruct-v0.1", 4096, &group_class(4))
}

/// Qwen3-32B in 16-bit (61 GiB of weights) at context 1024 on `a10-x1` nodes: three A10
/// (54 GiB usable) cannot hold it, four can: a group of 4 nodes × 1 GPU.
pub fn four_node_job(s: &Suite, name: &str) -> Value {
    group_job(s, name, "qwen3-32b", 1024, &group_class(1))
}

/// The nodes one group scenario added: kept Ready by a heartbeat of their own (the suite's
/// knows only its own nodes) until [`GroupNodes::remove_all`] or drop.
pub struct GroupNodes {
    tag: String,
    added: Arc<Mutex<Vec<(String, u32)>>>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl Drop for GroupNodes {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

impl GroupNodes {
    /// Adds `count` nodes of `gpus` × [`GROUP_GPU`], registered as a kubelet would and
    /// labelled by the real agent; returns their names.
    pub async fn add(&self, s: &Suite, gpus: u32, count: u32) -> Result<Vec<String>> {
        let fixture = s.logs.join(format!("fixture-{}.yaml", group_class(gpus)));
        std::fs::create_dir_all(&s.logs)?;
        std::fs::write(&fixture, group_fixture(gpus))
            .with_context(|| format!("writing {}", fixture.display()))?;
        let mut names = vec![];
        for _ in 0..count {
            let index = self.lock().len() + 1;
            let name = node_name(&s.run, &format!("g{}-{index}", self.tag));
            register_node(
                &s.client,
                &s.cleanup,
                &node_object(&name, &s.run, true),
                &ready_node_status(&[("nvidia.com/gpu", gpus)], &now()),
            )
            .await?;
            self.lock().push((name.clone(), gpus));
            s.label_with_agent_from(&fixture, &name).await?;
            names.push(name);
        }
        println!("     added nodes of class {}: {names:?}", group_class(gpus));
        Ok(names)
    }

    /// Deletes every node this set added (their pods first, forcefully: no kubelet confirms).
    pub async fn remove_all(&self, s: &Suite) -> Result<()> {
        let names: Vec<String> = self.lock().drain(..).map(|(n, _)| n).collect();
        let nodes: Api<Node> = Api::all(s.client.clone());
        for name in &names {
            let on_node = ListParams::default().fields(&format!("spec.nodeName={name}"));
            for pod in s.pods().list(&on_node).await? {
                let _ = s
                    .pods()
                    .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                    .await;
            }
            nodes
                .delete(name, &DeleteParams::default())
                .await
                .with_context(|| format!("deleting node {name}"))?;
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, u32)>> {
        self.added.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn heartbeat(client: kube::Client, added: Arc<Mutex<Vec<(String, u32)>>>) {
    let nodes: Api<Node> = Api::all(client);
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let current = added.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (name, gpus) in current {
            let _ = nodes
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(ready_node_status(&[("nvidia.com/gpu", gpus)], &now())),
                )
                .await;
        }
    }
}

/// The selector string of a label selector (`k=v`, `k in (a,b)`, `k notin (…)`, `k`, `!k`).
pub fn selector_string(selector: &LabelSelector) -> Result<String> {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => bail!("unknown label selector operator {other:?}"),
        });
    }
    Ok(parts.join(","))
}

/// The rank of a group's pod (its [`GROUP_RANK_LABEL`]).
pub fn rank_of(pod: &Pod) -> Option<u32> {
    pod.labels().get(GROUP_RANK_LABEL)?.parse().ok()
}

impl Suite {
    /// A set of group nodes for one scenario, named `g<tag>-<n>`. The jobs that still wait for
    /// a node are deleted first: they could take the new nodes' GPUs.
    pub async fn group_nodes(&self, tag: &str) -> Result<GroupNodes> {
        self.drop_waiting_jobs().await?;
        let added = Arc::new(Mutex::new(vec![]));
        let heartbeat = tokio::spawn(heartbeat(self.client.clone(), added.clone()));
        Ok(GroupNodes {
            tag: tag.to_string(),
            added,
            heartbeat,
        })
    }

    /// The pods of `job`'s group for `attempt` (labelled with its name), by rank.
    pub async fn group_pods(&self, job: &InferenceJob, attempt: u32) -> Result<Vec<Pod>> {
        let group = group_name(&job.name_any(), attempt);
        let mut pods: Vec<Pod> = self
            .pods_of(job)
            .await?
            .into_iter()
            .filter(|p| p.labels().get(GROUP_LABEL) == Some(&group))
            .collect();
        pods.sort_by_key(rank_of);
        Ok(pods)
    }

    /// Waits until job `name`'s attempt `attempt` has its whole group: as many live pods, each
    /// bound to a node, as its plan has nodes (one node: a group of one), each listed with its
    /// rank in the attempt's `members` (with its node, or none yet: a binding alone is no
    /// status write; [`Suite::set_group_running`] waits for the nodes). Pods being deleted are confirmed gone
    /// meanwhile, as a kubelet would (they hold their GPUs until then). Returns the job and the
    /// pods by rank.
    pub async fn wait_group(&self, name: &str, attempt: u32) -> Result<(InferenceJob, Vec<Pod>)> {
        eventually(
            &format!("job {name} to have the whole group of attempt {attempt}, bound"),
            SETTLE,
            || async {
                let job = self.job(name).await?;
                self.confirm_deletions(&job).await?;
                let status = job.status.clone().unwrap_or_default();
                let pods = self.group_pods(&job, attempt).await?;
                let nodes = status.plan.as_ref().map(Plan::nodes);
                let bound = pods
                    .iter()
                    .filter(|p| is_live(p) && node_of(p).is_some())
                    .count();
                // The attempt's status lists each member: rank, pod and node.
                let members: Vec<(u32, String, Option<String>)> = status
                    .attempts
                    .iter()
                    .find(|a| a.number == attempt)
                    .map(|a| {
                        a.members
                            .iter()
                            .map(|m| (m.rank, m.pod_name.clone(), m.node_name.clone()))
                            .collect()
                    })
                    .unwrap_or_default();
                let expected: Vec<(u32, String, Option<String>)> = pods
                    .iter()
                    .map(|p| {
                        (
                            rank_of(p).unwrap_or(u32::MAX),
                            p.name_any(),
                            node_of(p).map(str::to_string),
                        )
                    })
                    .collect();
                // A member's node comes with the next status write after its binding.
                let members_match = members.len() == expected.len()
                    && members.iter().zip(&expected).all(|(m, e)| {
                        m.0 == e.0 && m.1 == e.1 && (m.2.is_none() || m.2 == e.2)
                    });
                ensure!(
                    status.attempt_count == attempt
                        && nodes.is_some_and(|n| n as usize == bound)
                        && bound == pods.len()
                        && members_match,
                    "attemptCount {}, plan nodes {nodes:?}, group pods (name, node, live) {:?}, attempt {attempt}'s members (rank, pod, node) {members:?}, conditions {:?}",
                    status.attempt_count,
                    pods.iter()
                        .map(|p| (p.name_any(), node_of(p).map(str::to_string), is_live(p)))
                        .collect::<Vec<_>>(),
                    conditions_of(&job)
                );
                Ok((job, pods))
            },
        )
        .await
    }

    /// Waits until every pod of `job`'s group for `attempt` is deleted (asked by the operator:
    /// a deletion timestamp, or gone), confirming the deletions as a kubelet would.
    pub async fn wait_group_deleted(&self, job: &InferenceJob, attempt: u32) -> Result<()> {
        eventually(
            &format!(
                "every pod of group {} to be deleted",
                group_name(&job.name_any(), attempt)
            ),
            SETTLE,
            || async {
                let left: Vec<String> = self
                    .group_pods(job, attempt)
                    .await?
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .map(|p| {
                        let phase = p.status.as_ref().and_then(|s| s.phase.clone());
                        format!("{} ({phase:?})", p.name_any())
                    })
                    .collect();
                self.confirm_deletions(job).await?;
                ensure!(left.is_empty(), "not deleted: {left:?}");
                Ok(())
            },
        )
        .await
    }

    /// Writes every pod of a group Running (as its kubelet would) and waits until job `name`
    /// says `Running`.
    pub async fn set_group_running(&self, name: &str, pods: &[Pod]) -> Result<InferenceJob> {
        for pod in pods {
            self.set_pod_running(pod).await?;
        }
        let job = self.wait_phase(name, &[Phase::Running]).await?;
        // The write that says Running names every member's node.
        let status = job.status.clone().unwrap_or_default();
        let members = status
            .attempts
            .iter()
            .find(|a| a.number == status.attempt_count)
            .map(|a| a.members.clone())
            .unwrap_or_default();
        for pod in pods {
            let listed = members
                .iter()
                .find(|m| m.pod_name == pod.name_any())
                .and_then(|m| m.node_name.clone());
            ensure!(
                listed.as_deref() == node_of(pod),
                "running job {name} lists member {} on {listed:?}, bound to {:?}",
                pod.name_any(),
                node_of(pod)
            );
        }
        Ok(job)
    }

    /// Waits until the operator deletes `pod` of `job`'s group (a deletion timestamp, or
    /// gone), confirming the deletions as a kubelet would; `role` names it in messages.
    pub async fn wait_member_deleted(
        &self,
        job: &InferenceJob,
        pod: &Pod,
        role: &str,
    ) -> Result<()> {
        let name = pod.name_any();
        eventually(&format!("{role} {name} to be deleted"), SETTLE, || async {
            let left = self.pods().get_opt(&name).await?;
            ensure!(
                left.as_ref()
                    .is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
                "{role} {name} is neither deleted nor being deleted"
            );
            self.confirm_deletions(job).await?;
            Ok(())
        })
        .await
    }

    /// Waits until attempt 1's group of `job` is deleted and attempt 2's is whole, as
    /// [`check_group`] and [`Suite::check_group_objects`] want it, with attempt 1's outcome
    /// `outcome`. Returns the job and attempt 2's pods by rank.
    pub async fn wait_group_replaced(
        &self,
        job: &InferenceJob,
        outcome: AttemptOutcome,
    ) -> Result<(InferenceJob, Vec<Pod>)> {
        self.wait_group_deleted(job, 1).await?;
        let (job, second) = self.wait_group(&job.name_any(), 2).await?;
        check_group(&job, 2, &second, &self.sim_nodes().await?)?;
        self.check_group_objects(&job, 2, &second).await?;
        let status = job.status.clone().unwrap_or_default();
        ensure!(
            status.attempts.len() == 2,
            "status.attempts should have 2 entries: {:?}",
            status.attempts
        );
        expect_eq(
            "attempts[0].outcome",
            status.attempts[0].outcome.clone(),
            Some(outcome),
        )?;
        Ok((job, second))
    }

    /// The names of the pods in `namespace` that `selector` selects.
    pub async fn pods_selected(
        &self,
        namespace: &str,
        selector: &LabelSelector,
    ) -> Result<BTreeSet<String>> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let selector = selector_string(selector)?;
        ensure!(!selector.is_empty(), "an empty selector selects every pod");
        Ok(pods
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .iter()
            .map(|p| p.name_any())
            .collect())
    }

    /// Checks the headless Service and the NetworkPolicy of `job`'s group `attempt`, whose
    /// pods are `pods`: named after the group, owned by the job; the Service selects the group
    /// (clusterIP None, not-ready addresses published); the NetworkPolicy applies to exactly
    /// the group's pods and admits ingress from exactly them. Returns the two objects.
    pub async fn check_group_objects(
        &self,
        job: &InferenceJob,
        attempt: u32,
        pods: &[Pod],
    ) -> Result<(Service, NetworkPolicy)> {
        let group = group_name(&job.name_any(), attempt);
        self.check_named_group_objects(job, &group, pods, None)
            .await
    }

    /// [`Self::check_group_objects`] of the group named `group`. A served replica's group is
    /// named after the replica's pod, and has a second policy `<group>-leader` that applies to
    /// exactly its leader (`<group>-0`) and admits any client on the serving port
    /// (`served_port`, TCP, where the job's Service sends them), that port alone; the group's
    /// own policy opens nothing to other clients on any member.
    pub async fn check_named_group_objects(
        &self,
        job: &InferenceJob,
        group: &str,
        pods: &[Pod],
        served_port: Option<u16>,
    ) -> Result<(Service, NetworkPolicy)> {
        let ns = job.namespace().unwrap_or_else(|| self.ns.clone());
        let uid = job.uid().unwrap_or_default();
        let members: BTreeSet<String> = pods.iter().map(|p| p.name_any()).collect();

        let services: Api<Service> = Api::namespaced(self.client.clone(), &ns);
        let service = services
            .get_opt(group)
            .await?
            .ok_or_else(|| anyhow!("no headless Service {ns}/{group}"))?;
        ensure!(
            service
                .owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true)),
            "Service {group}: no controller owner reference to the job: {:?}",
            service.owner_references()
        );
        let spec = service.spec.clone().unwrap_or_default();
        expect_eq(
            &format!("Service {group} clusterIP"),
            spec.cluster_ip.as_deref(),
            Some("None"),
        )?;
        expect_eq(
            &format!("Service {group} publishNotReadyAddresses"),
            spec.publish_not_ready_addresses,
            Some(true),
        )?;
        let selected = self
            .pods_selected(
                &ns,
                &LabelSelector {
                    match_labels: spec.selector.clone(),
                    ..Default::default()
                },
            )
            .await?;
        expect_eq(
            &format!("pods selected by Service {group}"),
            &selected,
            &members,
        )?;

        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &ns);
        let policy = policies
            .get_opt(group)
            .await?
            .ok_or_else(|| anyhow!("no NetworkPolicy {ns}/{group}"))?;
        ensure!(
            policy
                .owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true)),
            "NetworkPolicy {group}: no controller owner reference to the job: {:?}",
            policy.owner_references()
        );
        let spec = policy
            .spec
            .clone()
            .ok_or_else(|| anyhow!("NetworkPolicy {group} has no spec"))?;
        // An absent or empty podSelector would apply to every pod of the namespace.
        let pod_selector = spec
            .pod_selector
            .clone()
            .ok_or_else(|| anyhow!("NetworkPolicy {group} has no podSelector"))?;
        let applies_to = self.pods_selected(&ns, &pod_selector).await?;
        expect_eq(
            &format!("pods NetworkPolicy {group}'s podSelector selects"),
            &applies_to,
            &members,
        )?;
        ensure!(
            spec.policy_types.iter().flatten().any(|t| t == "Ingress"),
            "NetworkPolicy {group}: policyTypes {:?} has no Ingress",
            spec.policy_types
        );
        let rules = spec.ingress.clone().unwrap_or_default();
        ensure!(
            rules
                .iter()
                .any(|r| r.from.as_ref().is_some_and(|f| !f.is_empty())),
            "NetworkPolicy {group} admits no ingress from its pods (its ranks could not meet): \
             {rules:?}"
        );
        for rule in &rules {
            let peers = rule.from.clone().unwrap_or_default();
            ensure!(
                !peers.is_empty(),
                "NetworkPolicy {group}: an ingress rule without `from` admits every source, on \
                 every member: {rule:?}"
            );
            for peer in peers {
                ensure!(
                    peer.ip_block.is_none() && peer.namespace_selector.is_none(),
                    "NetworkPolicy {group}: a peer outside the group's own pods: {peer:?}"
                );
                let selector = peer
                    .pod_selector
                    .ok_or_else(|| anyhow!("NetworkPolicy {group}: a peer without podSelector"))?;
                let from = self.pods_selected(&ns, &selector).await?;
                expect_eq(
                    &format!("pods NetworkPolicy {group} admits ingress from"),
                    &from,
                    &members,
                )?;
            }
        }
        if let Some(port) = served_port {
            self.check_leader_policy(job, group, port).await?;
        }
        Ok((service, policy))
    }

    /// Checks a served group's `<group>-leader` NetworkPolicy: owned by the job, it applies to
    /// exactly the leader `<group>-0` and has one ingress rule, from any source, on `port`
    /// (TCP) alone.
    async fn check_leader_policy(&self, job: &InferenceJob, group: &str, port: u16) -> Result<()> {
        let ns = job.namespace().unwrap_or_else(|| self.ns.clone());
        let uid = job.uid().unwrap_or_default();
        let name = format!("{group}-leader");
        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &ns);
        let policy = policies
            .get_opt(&name)
            .await?
            .ok_or_else(|| anyhow!("no NetworkPolicy {ns}/{name}"))?;
        ensure!(
            policy
                .owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true)),
            "NetworkPolicy {name}: no controller owner reference to the job: {:?}",
            policy.owner_references()
        );
        let spec = policy
            .spec
            .clone()
            .ok_or_else(|| anyhow!("NetworkPolicy {name} has no spec"))?;
        let pod_selector = spec
            .pod_selector
            .clone()
            .ok_or_else(|| anyhow!("NetworkPolicy {name} has no podSelector"))?;
        let applies_to = self.pods_selected(&ns, &pod_selector).await?;
        expect_eq(
            &format!("pods NetworkPolicy {name}'s podSelector selects"),
            &applies_to,
            &BTreeSet::from([format!("{group}-0")]),
        )?;
        let rules = spec.ingress.clone().unwrap_or_default();
        let open: Vec<_> = rules
            .iter()
            .map(|r| {
                let ports: Vec<_> = r
                    .ports
                    .iter()
                    .flatten()
                    .map(|p| (p.port.clone(), p.protocol.clone()))
                    .collect();
                (r.from.clone().unwrap_or_default().is_empty(), ports)
            })
            .collect();
        expect_eq(
            &format!("NetworkPolicy {name}'s ingress (from anyone, ports)"),
            open,
            vec![(
                true,
                vec![(
                    Some(IntOrString::Int(i32::from(port))),
                    Some("TCP".to_string()),
                )],
            )],
        )?;
        Ok(())
    }
}

/// Everything the operator wrote for a group: as many pods as the plan has nodes, ranks 0 to
/// N-1 named `<job>-<attempt>-<rank>`, each on a node of its own of the plan's class, each the
/// pod of its plan ([`check_pod_of_plan`]) with the group's labels, a stable hostname under the
/// group's Service, required anti-affinity to the group's other pods per node, and
/// LeaderWorkerSet's env names. `nodes`: the suite's nodes.
pub fn check_group(job: &InferenceJob, attempt: u32, pods: &[Pod], nodes: &[Node]) -> Result<()> {
    let name = job.name_any();
    let ns = job.namespace().unwrap_or_default();
    let status = job
        .status
        .as_ref()
        .ok_or_else(|| anyhow!("job {name} has no status"))?;
    let plan = status
        .plan
        .as_ref()
        .ok_or_else(|| anyhow!("job {name}: status.plan is unset"))?;
    // A plan of one node under the group pipeline is a group of one, with no `group`.
    let group_plan = plan.group.as_ref();
    let class = status
        .node_class
        .clone()
        .ok_or_else(|| anyhow!("job {name}: status.nodeClass is unset"))?;
    expect_eq(
        &format!("job {name} plan.nodeClass"),
        plan.node_class.as_str(),
        class.as_str(),
    )?;
    let n = plan.nodes();
    expect_eq(
        &format!("job {name}: pods in the group"),
        pods.len(),
        n as usize,
    )?;
    let group = group_name(&name, attempt);
    let leader_address = format!("{}.{group}.{ns}", group_pod_name(&name, attempt, 0));
    let mut used_nodes = BTreeSet::new();
    for (rank, pod) in (0..n).zip(pods) {
        let pod_name = pod.name_any();
        expect_eq(
            &format!("name of rank {rank}"),
            pod_name.clone(),
            group_pod_name(&name, attempt, rank),
        )?;
        let labels = pod.labels();
        for (key, value) in [
            (GROUP_LABEL, group.clone()),
            (GROUP_RANK_LABEL, rank.to_string()),
            (ATTEMPT_LABEL, attempt.to_string()),
            (JOB_LABEL, name.clone()),
        ] {
            expect_eq(
                &format!("pod {pod_name} label {key}"),
                labels.get(key),
                Some(&value),
            )?;
        }
        let as_planned = leader_flags_checked(job, plan, rank, pod)?;
        check_pod_of_plan(job, &as_planned, plan, &class, nodes)?;
        let spec = pod
            .spec
            .as_ref()
            .ok_or_else(|| anyhow!("pod {pod_name} has no spec"))?;
        expect_eq(
            &format!("pod {pod_name} hostname"),
            spec.hostname.as_deref(),
            Some(pod_name.as_str()),
        )?;
        expect_eq(
            &format!("pod {pod_name} subdomain"),
            spec.subdomain.as_deref(),
            Some(group.as_str()),
        )?;
        check_anti_affinity(pod, &group)?;
        let env: BTreeMap<String, String> = spec
            .containers
            .iter()
            .find(|c| c.name == CONTAINER)
            .and_then(|c| c.env.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect();
        // LeaderWorkerSet's names, where the plan spans nodes.
        let lws = [
            ("LWS_LEADER_ADDRESS", leader_address.clone()),
            ("LWS_GROUP_SIZE", n.to_string()),
            ("LWS_WORKER_INDEX", rank.to_string()),
        ];
        for (key, value) in lws.iter().filter(|_| group_plan.is_some()) {
            expect_eq(
                &format!("pod {pod_name} env {key}"),
                env.get(*key),
                Some(value),
            )?;
        }
        let node = node_of(pod).ok_or_else(|| anyhow!("pod {pod_name} is not bound"))?;
        ensure!(
            used_nodes.insert(node.to_string()),
            "two pods of group {group} on node {node}: {:?}",
            pods.iter()
                .map(|p| (p.name_any(), node_of(p).map(str::to_string)))
                .collect::<Vec<_>>()
        );
    }
    println!(
        "     group {group}: {n} pods × {} GPUs on {used_nodes:?} ({:?})",
        plan.gpu_count,
        group_plan.map(|g| (g.engine, &g.why))
    );
    Ok(())
}

/// The env that describes the runtime's flags.
const RUNTIME_ARGS_ENV: &str = "VRAMFIT_RUNTIME_ARGS";

/// The leader of a group gets its engine's flags (vLLM: `--pipeline-parallel-size <nodes>`…)
/// after the plan's, in its container's args and in `VRAMFIT_RUNTIME_ARGS`. Checks that the env
/// is the plan's flags followed by exactly the flags appended to the args (and, for vLLM, the
/// pipeline over the group's nodes); returns the pod with the plan's own value there, for the
/// checks every planned pod passes. Any other pod must carry the plan's value unchanged.
fn leader_flags_checked(job: &InferenceJob, plan: &Plan, rank: u32, pod: &Pod) -> Result<Pod> {
    let pod_name = pod.name_any();
    let input = vramfit_planner::resolve_job(&job.spec).map_err(|e| anyhow!("{e}"))?;
    let planned = vramfit_planner::workload::plan_env(&input, plan)
        .into_iter()
        .find(|(k, _)| k == RUNTIME_ARGS_ENV)
        .map(|(_, v)| v);
    let mut pod = pod.clone();
    let Some(container) = pod
        .spec
        .as_mut()
        .and_then(|s| s.containers.iter_mut().find(|c| c.name == CONTAINER))
    else {
        bail!("pod {pod_name} has no container {CONTAINER}");
    };
    let args = container.args.clone().unwrap_or_default();
    let Some(var) = container
        .env
        .iter_mut()
        .flatten()
        .find(|e| e.name == RUNTIME_ARGS_ENV)
    else {
        return Ok(pod);
    };
    let (Some(planned), Some(seen)) = (planned, var.value.clone()) else {
        return Ok(pod);
    };
    if seen == planned {
        return Ok(pod);
    }
    ensure!(
        rank == 0,
        "pod {pod_name} (rank {rank}) env {RUNTIME_ARGS_ENV} = {seen:?}, the plan's is {planned:?}"
    );
    let extra: Vec<&str> = seen
        .strip_prefix(planned.as_str())
        .ok_or_else(|| {
            anyhow!("leader {pod_name} env {RUNTIME_ARGS_ENV} = {seen:?} does not start with the plan's {planned:?}")
        })?
        .split_whitespace()
        .collect();
    ensure!(
        args.len() >= extra.len() && args[args.len() - extra.len()..] == extra[..],
        "leader {pod_name}: the flags {extra:?} that {RUNTIME_ARGS_ENV} adds to the plan's are not the last of its args {args:?}"
    );
    if let Some(group) = plan
        .group
        .as_ref()
        .filter(|g| g.engine == vramfit_api::group::GroupEngine::VllmRay)
    {
        let pipeline = format!("--pipeline-parallel-size {}", group.nodes);
        ensure!(
            extra.join(" ").contains(&pipeline),
            "leader {pod_name}: vLLM over {} nodes without {pipeline:?} in {extra:?}",
            group.nodes
        );
    }
    println!("     leader {pod_name}: the plan's flags, then {extra:?}");
    var.value = Some(planned);
    Ok(pod)
}

/// A required pod anti-affinity on `kubernetes.io/hostname` against the group's own pods: the
/// scheduler never puts two of them on one node.
fn check_anti_affinity(pod: &Pod, group: &str) -> Result<()> {
    let terms = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .clone()
        })
        .unwrap_or_default();
    let found = terms.iter().any(|t| {
        t.topology_key == "kubernetes.io/hostname"
            && t.label_selector.as_ref().is_some_and(|s| {
                s.match_labels
                    .as_ref()
                    .and_then(|l| l.get(GROUP_LABEL))
                    .is_some_and(|g| g == group)
                    || s.match_expressions.iter().flatten().any(|e| {
                        e.key == GROUP_LABEL
                            && e.operator == "In"
                            && e.values.as_deref() == Some(&[group.to_string()][..])
                    })
            })
    });
    ensure!(
        found,
        "pod {}: no required podAntiAffinity on kubernetes.io/hostname for {GROUP_LABEL}={group}: {terms:?}",
        pod.name_any()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn group_nodes_form_classes_of_their_own() {
        assert_eq!(group_class(4), "a10-x4");
        assert_eq!(group_class(1), "a10-x1");
        let fixture = group_fixture(4);
        assert!(fixture.contains("name: NVIDIA A10\n"), "{fixture}");
        assert!(fixture.contains("count: 4\n"), "{fixture}");
        // Not the class of the suite's own A10G nodes, which other scenarios fill.
        assert_ne!(
            vramfit_planner::node_class::class_name("NVIDIA A10G", 4),
            group_class(4)
        );
    }

    #[test]
    fn selectors_are_written_as_the_api_server_reads_them() {
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([("a".into(), "1".into())])),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "b".into(),
                    operator: "In".into(),
                    values: Some(vec!["x".into(), "y".into()]),
                },
                LabelSelectorRequirement {
                    key: "c".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        assert_eq!(selector_string(&selector).unwrap(), "a=1,b in (x,y),!c");
        let bad = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "b".into(),
                operator: "Near".into(),
                values: None,
            }]),
            ..Default::default()
        };
        assert!(selector_string(&bad).is_err());
    }
}
