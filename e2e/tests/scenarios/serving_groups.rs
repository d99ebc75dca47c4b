//! A served job whose replicas are groups (`gpus.maxNodes` 2) on the real API server, its
//! kube-scheduler and EndpointSlice controller: two replicas of Qwen3-32B in 16 bits, each a
//! group of two pods of two A10Gs on two distinct A10G×4 nodes (the suite's and one this
//! scenario adds). The job's Service selects the leaders only, so its EndpointSlice lists
//! exactly the two leaders although all four pods are Ready; each group has its headless
//! Service and NetworkPolicies (the members', and the leader's serving port). A worker that
//! fails ends its group only: its leader is deleted at once and leaves the endpoints, the
//! replica gets a new group after its backoff, the other replica keeps its pods and its
//! endpoint throughout.
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use vramfit_api::InferenceJob;
use vramfit_api::group::GroupMember;
use vramfit_e2e::{
    SETTLE, Suite, conditions_of, eventually, expect_eq, job_manifest, node_name, node_object,
    node_of, now, pod_ip, ready_node_status, register_node,
};

/// The A10G×4 node this scenario adds beside the suite's.
const EXTRA: &str = "a10gx4-second";

pub async fn served_group_service_has_only_leaders(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let extra = node_name(&s.run, EXTRA);
    register_node(
        &s.client,
        &s.cleanup,
        &node_object(&extra, &s.run, true),
        &ready_node_status(&[("nvidia.com/gpu", 4)], &now()),
    )
    .await?;
    s.label_with_agent("a10g-x4.yaml", &extra).await?;
    let heartbeat = tokio::spawn(heartbeat(s.client.clone(), extra.clone()));
    let outcome = leaders_behind_the_service(s).await;
    heartbeat.abort();
    let nodes: Api<Node> = Api::all(s.client.clone());
    nodes
        .delete(&extra, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting node {extra}"))?;
    outcome
}

/// Keeps the added node Ready while the scenario runs.
async fn heartbeat(client: kube::Client, name: String) {
    let nodes: Api<Node> = Api::all(client);
    loop {
        let _ = nodes
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(ready_node_status(&[("nvidia.com/gpu", 4)], &now())),
            )
            .await;
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// Each replica's group: its name (the line's `podName`) and its members' pods, rank 0 first.
type Groups = BTreeMap<u32, (String, Vec<Pod>)>;

/// Waits until every replica of `name` has a group of two bound members on distinct nodes.
async fn wait_groups(s: &Suite, name: &str) -> Result<(InferenceJob, Groups)> {
    eventually(
        &format!("job {name} to have 2 replicas, each a group of 2 bound pods"),
        SETTLE,
        || async {
            let job = s.job(name).await?;
            let status = job.status.clone().unwrap_or_default();
            let pods = s.pods_of(&job).await?;
            ensure!(
                status.replica_statuses.len() == 2,
                "replicas {:?}, conditions {:?}",
                status.replica_statuses,
                conditions_of(&job)
            );
            let mut groups = Groups::new();
            for line in &status.replica_statuses {
                ensure!(line.members.len() == 2, "replica {}: {line:?}", line.slot);
                let mut members = Vec::new();
                for GroupMember { pod_name, .. } in &line.members {
                    let pod = pods
                        .iter()
                        .find(|p| {
                            &p.name_any() == pod_name && p.metadata.deletion_timestamp.is_none()
                        })
                        .with_context(|| format!("pod {pod_name}"))?;
                    ensure!(node_of(pod).is_some(), "pod {pod_name} is not bound");
                    members.push(pod.clone());
                }
                let nodes: BTreeSet<_> = members.iter().filter_map(node_of).collect();
                ensure!(nodes.len() == 2, "group {} shares a node", line.pod_name);
                groups.insert(line.slot, (line.pod_name.clone(), members));
            }
            Ok((job, groups))
        },
    )
    .await
}

fn leader_ips(groups: &Groups) -> BTreeSet<String> {
    groups
        .values()
        .map(|(_, members)| pod_ip(&members[0].name_any()))
        .collect()
}

async fn leaders_behind_the_service(s: &mut Suite) -> Result<()> {
    let name = "e2e-served-group";
    let spec = json!({
        "model": {"preset": "qwen3-32b"},
        "runtime": "vllm",
        "image": "vllm/vllm-openai:v0.10.2",
        "allowedQuantizations": ["none"],
        "contextLength": 2048,
        "gpus": {"max": 2, "maxNodes": 2},
        "nodeClasses": {"allowed": ["a10g-x4"]},
        "serve": {"port": 8000, "replicas": 2},
    });
    s.apply_job(job_manifest(s, name, spec)).await?;
    let (job, groups) = wait_groups(s, name).await?;
    let uid = job.uid().unwrap_or_default();
    for (slot, (group, members)) in &groups {
        for (rank, pod) in members.iter().enumerate() {
            expect_eq("member name", pod.name_any(), format!("{group}-{rank}"))?;
            expect_eq(
                "rank label",
                pod.labels().get("vramfit.io/group-rank").cloned(),
                Some(rank.to_string()),
            )?;
            expect_eq(
                "replica label",
                pod.labels().get("vramfit.io/replica").cloned(),
                Some(slot.to_string()),
            )?;
        }
    }

    // The job's Service and budget select the leaders only.
    let services: Api<Service> = Api::namespaced(s.client.clone(), &s.ns);
    let service = services.get(name).await.context("the job's Service")?;
    expect_eq(
        "Service selector",
        service
            .spec
            .clone()
            .unwrap_or_default()
            .selector
            .unwrap_or_default(),
        [
            ("vramfit.io/job".to_string(), name.to_string()),
            ("vramfit.io/job-uid".to_string(), uid.clone()),
            ("vramfit.io/group-rank".to_string(), "0".to_string()),
        ]
        .into(),
    )?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.ns);
    let pdb = pdbs.get(name).await.context("the job's budget")?;
    let pdb_spec = pdb.spec.unwrap_or_default();
    expect_eq(
        "budget: replicas less one",
        pdb_spec.min_available,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)),
    )?;
    expect_eq(
        "budget selects leaders",
        pdb_spec
            .selector
            .and_then(|s| s.match_labels)
            .and_then(|l| l.get("vramfit.io/group-rank").cloned()),
        Some("0".to_string()),
    )?;
    // Each group's headless Service and NetworkPolicy.
    let policies: Api<NetworkPolicy> = Api::namespaced(s.client.clone(), &s.ns);
    for (group, _) in groups.values() {
        let headless = services
            .get(group)
            .await
            .with_context(|| format!("Service {group}"))?;
        expect_eq(
            "headless",
            headless.spec.and_then(|s| s.cluster_ip),
            Some("None".to_string()),
        )?;
        for policy in [group.clone(), format!("{group}-leader")] {
            policies
                .get(&policy)
                .await
                .with_context(|| format!("NetworkPolicy {policy}"))?;
        }
    }

    // The kubelet: every pod runs and is Ready; the endpoints are the two leaders.
    for (_, members) in groups.values() {
        for pod in members {
            s.set_pod_serving(pod, true).await?;
        }
    }
    s.wait_endpoints(name, &leader_ips(&groups)).await?;
    eventually("2/2 replicas Ready", SETTLE, || async {
        let job = s.job(name).await?;
        let ready = job.status.as_ref().and_then(|st| st.ready_replicas);
        ensure!(ready == Some(2), "ready {ready:?}");
        Ok(())
    })
    .await?;

    // Replica 1's worker fails: its leader goes at once, replica 0 stays.
    let (old_group, old_members) = groups[&1].clone();
    s.set_pod_ended(
        &old_members[1],
        1,
        "Error",
        "RuntimeError: the Ray worker died",
    )
    .await?;
    eventually(
        "the failed group's leader to be deleted",
        SETTLE,
        || async {
            let leader = s.pods().get_opt(&old_members[0].name_any()).await?;
            ensure!(
                leader.is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
                "leader {} still live",
                old_members[0].name_any()
            );
            Ok(())
        },
    )
    .await?;
    s.confirm_deletions(&job).await?;
    let kept: BTreeSet<String> = [pod_ip(&groups[&0].1[0].name_any())].into();
    s.wait_endpoints(name, &kept).await?;

    // After the backoff, replica 1 has a new group; replica 0 kept its own.
    let (job, after) = eventually("replica 1's new group", SETTLE, || async {
        let (job, after) = wait_groups(s, name).await?;
        ensure!(after[&1].0 != old_group, "replica 1 still {old_group}");
        Ok((job, after))
    })
    .await?;
    expect_eq("replica 0's group", &after[&0].0, &groups[&0].0)?;
    for pod in &groups[&0].1 {
        let live = s.pods().get(&pod.name_any()).await?;
        expect_eq(
            "replica 0's pods untouched",
            live.metadata.deletion_timestamp.is_none(),
            true,
        )?;
    }
    for pod in &after[&1].1 {
        s.set_pod_serving(pod, true).await?;
    }
    s.wait_endpoints(name, &leader_ips(&after)).await?;
    s.confirm_deletions(&job).await?;
    eventually(
        "the ended group's Service and policy to go",
        SETTLE,
        || async {
            ensure!(
                services.get_opt(&old_group).await?.is_none(),
                "Service {old_group}"
            );
            for policy in [old_group.clone(), format!("{old_group}-leader")] {
                ensure!(
                    policies.get_opt(&policy).await?.is_none(),
                    "NetworkPolicy {policy}"
                );
            }
            Ok(())
        },
    )
    .await?;

    // Its pods too: on a node without a kubelet a deleted pod stays Terminating and keeps its
    // GPUs, and a later scenario's job of this class would wait for room.
    s.delete_jobs(&[name.to_string()]).await
}
