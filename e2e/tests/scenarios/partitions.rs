//! Node classes that tell the truth, on the real API server and kube-scheduler: a node mixing
//! GPU models and a MIG-partitioned node, both labelled by the agent from its fixtures, next
//! to the suite's homogeneous nodes.
//! * A bf16 job for `a10g-x4` lands on the homogeneous A10G×4 node; a second one waits
//!   Unschedulable although the mixed node (3×A10G + V100, product and count labels of an
//!   A10G×4) has four free GPUs: the mixed node is not in the class, and the pod's node
//!   affinity keeps the scheduler off it.
//! * A job on the mixed node's own class is planned in float16 (its weakest GPU is a V100).
//! * A job on the MIG node's 3g.40gb class requests `nvidia.com/mig-3g.40gb`, which only that
//!   node advertises, and the scheduler binds it there; a second waits for the one slice.
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use vramfit_api::{Dtype, Phase};
use vramfit_e2e::{
    Suite, expect_eq, node_name, node_object, node_of, now, pinned_job, ready_node_status,
    register_node,
};

/// A node this scenario adds: its name suffix, the agent fixture that labels it, and the GPU
/// resources its device plugin would advertise.
struct ExtraNode {
    suffix: &'static str,
    fixture: &'static str,
    resources: &'static [(&'static str, u32)],
}

const MIXED: ExtraNode = ExtraNode {
    suffix: "mixed",
    fixture: "mixed-a10g-v100-32gb.yaml",
    resources: &[("nvidia.com/gpu", 4)],
};

const MIG: ExtraNode = ExtraNode {
    suffix: "migmixed",
    fixture: "a100-80gb-mig-mixed.yaml",
    // The device plugin's mixed strategy: one resource per profile, no nvidia.com/gpu.
    resources: &[("nvidia.com/mig-3g.40gb", 1), ("nvidia.com/mig-2g.20gb", 2)],
};

impl ExtraNode {
    fn name(&self, run: &str) -> String {
        node_name(run, self.suffix)
    }

    fn status(&self, now: &str) -> Value {
        ready_node_status(self.resources, now)
    }
}

pub async fn mixed_and_mig_nodes(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    for node in [&MIXED, &MIG] {
        add_node(s, node).await?;
    }
    let heartbeat = tokio::spawn(heartbeat(s.client.clone(), s.run.clone()));
    let outcome = jobs_on_extra_nodes(s).await;
    heartbeat.abort();
    let nodes: Api<Node> = Api::all(s.client.clone());
    for node in [&MIXED, &MIG] {
        nodes
            .delete(&node.name(&s.run), &DeleteParams::default())
            .await
            .with_context(|| format!("deleting node {}", node.name(&s.run)))?;
    }
    outcome
}

/// Registers a node as a kubelet would (Ready, its own taint only), then labels it with the
/// agent from its fixture.
async fn add_node(s: &Suite, extra: &ExtraNode) -> Result<()> {
    let nodes: Api<Node> = Api::all(s.client.clone());
    let name = extra.name(&s.run);
    register_node(
        &s.client,
        &s.cleanup,
        &node_object(&name, &s.run, true),
        &extra.status(&now()),
    )
    .await?;
    s.label_with_agent(extra.fixture, &name).await?;
    let labels = nodes.get(&name).await?.labels().clone();
    println!(
        "     {name} labelled from {}: mixed={:?} mig={:?}",
        extra.fixture,
        labels.get(vramfit_api::labels::GPU_MIXED),
        labels.get(vramfit_api::labels::GPU_MIG)
    );
    Ok(())
}

/// Keeps the added nodes Ready while the scenario runs (the suite's heartbeat knows only its
/// own nodes).
async fn heartbeat(client: kube::Client, run: String) {
    let nodes: Api<Node> = Api::all(client);
    loop {
        for node in [&MIXED, &MIG] {
            let _ = nodes
                .patch_status(
                    &node.name(&run),
                    &PatchParams::default(),
                    &Patch::Merge(node.status(&now())),
                )
                .await;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

fn limits_of(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| c.resources.as_ref()?.limits.as_ref())
        .flatten()
        .filter(|(name, _)| name.starts_with("nvidia.com/"))
        .map(|(name, q)| (name.clone(), q.0.clone()))
        .collect()
}

async fn jobs_on_extra_nodes(s: &mut Suite) -> Result<()> {
    let names: Vec<String> = [
        "bf16-a10g-x4",
        "bf16-a10g-x4-waits",
        "on-mixed",
        "on-slice",
        "slice-waits",
    ]
    .map(String::from)
    .to_vec();

    // Two bf16 jobs that each want four A10Gs: one homogeneous node has them.
    for name in &names[..2] {
        let mut job = pinned_job(s, name, &["a10g-x4"], "quality");
        job["spec"]["dtype"] = json!("bfloat16");
        job["spec"]["gpus"] = json!({"min": 4, "max": 4});
        s.apply_job(job).await?;
    }
    let (_, pod) = s.wait_pod(&names[0], 1).await?;
    expect_eq(
        "node of the first bf16 A10G×4 pod",
        node_of(&pod),
        Some(s.node_name("a10gx4").as_str()),
    )?;
    let affinity = serde_json::to_value(pod.spec.as_ref().and_then(|s| s.affinity.clone()))?;
    ensure!(
        affinity
            .to_string()
            .contains(r#""key":"vramfit.io/gpu.mixed","operator":"NotIn""#),
        "the a10g-x4 pod's node affinity does not keep mixed nodes out: {affinity}"
    );
    let waiting = s.wait_phase(&names[1], &[Phase::Unschedulable]).await?;
    ensure!(
        s.pods_of(&waiting).await?.is_empty(),
        "the second bf16 A10G×4 job got a pod: the mixed node was taken for an A10G×4"
    );
    println!(
        "     {} waits Unschedulable: the mixed node's four GPUs are not an A10G×4",
        names[1]
    );

    // The mixed node's own class: planned by its V100.
    let mixed_class = "mixed-cc7.0-23028mib-x4";
    s.apply_job(pinned_job(s, &names[2], &[mixed_class], "quality"))
        .await?;
    let (job, pod) = s.wait_pod(&names[2], 1).await?;
    expect_eq(
        "node of the mixed-class pod",
        node_of(&pod),
        Some(s.node_name("mixed").as_str()),
    )?;
    let plan = job.status.and_then(|st| st.plan).context("no plan")?;
    expect_eq("dtype on the mixed node", plan.dtype, Dtype::Float16)?;

    // A MIG slice: the pod requests the profile's resource and binds where it is advertised.
    let slice_class = "a100-sxm4-80gb-mig-3g-40gb-x1";
    s.apply_job(pinned_job(s, &names[3], &[slice_class], "quality"))
        .await?;
    let (job, pod) = s.wait_pod(&names[3], 1).await?;
    expect_eq(
        "GPU limits of the slice pod",
        limits_of(&pod),
        vec![("nvidia.com/mig-3g.40gb".to_string(), "1".to_string())],
    )?;
    expect_eq(
        "node of the slice pod",
        node_of(&pod),
        Some(s.node_name("migmixed").as_str()),
    )?;
    let plan = job.status.and_then(|st| st.plan).context("no plan")?;
    ensure!(
        plan.reasons
            .first()
            .is_some_and(|r| r.starts_with("MIG slice 3g.40gb")),
        "the slice plan's first reason should name the slice: {:?}",
        plan.reasons
    );
    s.apply_job(pinned_job(s, &names[4], &[slice_class], "quality"))
        .await?;
    s.wait_phase(&names[4], &[Phase::Unschedulable]).await?;
    println!(
        "     {} runs on {} with nvidia.com/mig-3g.40gb: 1; {} waits for the one slice",
        names[3],
        s.node_name("migmixed"),
        names[4]
    );
    s.delete_jobs(&names).await
}
