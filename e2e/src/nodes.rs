//! The simulated nodes: the GPU nodes the suite registers, their labels as the agent writes
//! them, and the heartbeat a kubelet would send.
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::cleanup::CleanupPlan;
use crate::{MANAGER, PREFIX, RUN_LABEL, Suite, expect_eq, now};

/// A simulated GPU node: a name suffix, the agent fixture that labels it, and the
/// `nvidia.com/gpu` it advertises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimNode {
    /// Appended to `vramfit-e2e-<run>-`.
    pub suffix: &'static str,
    /// File under `agent/fixtures/`.
    pub fixture: &'static str,
    /// GPUs in capacity and allocatable.
    pub gpus: u32,
    /// Expected `vramfit.io/gpu.product` substring (None: no GPU).
    pub product: Option<&'static str>,
}

/// The nodes the suite creates: V100×4 16 GB, A10G×1, A10G×4, H100×8, and one without GPUs.
pub const SIM_NODES: [SimNode; 5] = [
    SimNode {
        suffix: "v100x4",
        fixture: "v100-16gb-x4.yaml",
        gpus: 4,
        product: Some("V100"),
    },
    SimNode {
        suffix: "a10gx1",
        fixture: "a10g-x1.yaml",
        gpus: 1,
        product: Some("A10G"),
    },
    SimNode {
        suffix: "a10gx4",
        fixture: "a10g-x4.yaml",
        gpus: 4,
        product: Some("A10G"),
    },
    SimNode {
        suffix: "h100x8",
        fixture: "h100-x8.yaml",
        gpus: 8,
        product: Some("H100"),
    },
    SimNode {
        suffix: "nogpu",
        fixture: "no-gpu.yaml",
        gpus: 0,
        product: None,
    },
];

/// The name of the suite's node `suffix` in run `run`: `vramfit-e2e-<run>-<suffix>`.
pub fn node_name(run: &str, suffix: &str) -> String {
    format!("{PREFIX}{run}-{suffix}")
}

impl SimNode {
    /// The node's name in run `run`.
    pub fn name(&self, run: &str) -> String {
        node_name(run, self.suffix)
    }

    /// Checks the labels the agent should have written.
    pub fn check_labels(&self, labels: &BTreeMap<String, String>) -> Result<()> {
        use vramfit_api::labels::*;
        let get = |k: &str| labels.get(k).map(String::as_str);
        match self.product {
            Some(product) => {
                expect_eq(GPU_PRESENT, get(GPU_PRESENT), Some("true"))?;
                let count = self.gpus.to_string();
                expect_eq(GPU_COUNT, get(GPU_COUNT), Some(count.as_str()))?;
                match get(GPU_PRODUCT) {
                    Some(p) if p.contains(product) => {}
                    seen => {
                        bail!("expected label {GPU_PRODUCT} to contain {product:?}, saw {seen:?}")
                    }
                }
                if get(GPU_MEMORY_MIB)
                    .and_then(|m| m.parse::<u64>().ok())
                    .unwrap_or(0)
                    == 0
                {
                    bail!(
                        "expected a positive {GPU_MEMORY_MIB}, saw {:?}",
                        get(GPU_MEMORY_MIB)
                    );
                }
                if gpu_facts(labels).is_none() {
                    bail!(
                        "vramfit_api::labels::gpu_facts cannot read the node's labels: {labels:?}"
                    );
                }
            }
            None => {
                expect_eq(GPU_PRESENT, get(GPU_PRESENT), Some("false"))?;
                expect_eq(GPU_ABSENT_REASON, get(GPU_ABSENT_REASON), Some("no-gpus"))?;
            }
        }
        Ok(())
    }
}

/// The Node object of a simulated GPU node (status is written separately, through the
/// nodes/status subresource).
pub fn node_manifest(node: &SimNode, run: &str) -> Value {
    node_object(&node.name(run), run, node.gpus > 0)
}

/// A Node object named `name` of run `run`, with the `nvidia.com/gpu=present:NoSchedule`
/// taint of a GPU node when `gpu_taint`.
pub fn node_object(name: &str, run: &str, gpu_taint: bool) -> Value {
    let mut taints = vec![];
    if gpu_taint {
        taints.push(json!({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                RUN_LABEL: run,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "spec": { "taints": taints },
    })
}

/// The status of a simulated node: GPUs in capacity and allocatable, and Ready (the
/// operator only places on Ready nodes; the suite re-sends it as a heartbeat).
pub fn node_status_patch(node: &SimNode, now: &str) -> Value {
    ready_node_status(&[("nvidia.com/gpu", node.gpus)], now)
}

/// A Ready node's status with `resources` (device-plugin resources and their counts) in
/// capacity and allocatable, next to CPU, memory and pods.
pub fn ready_node_status(resources: &[(&str, u32)], now: &str) -> Value {
    let mut all = json!({
        "cpu": "64",
        "memory": "512Gi",
        "pods": "110",
    });
    for (name, count) in resources {
        all[*name] = json!(count.to_string());
    }
    json!({
        "status": {
            "capacity": all,
            "allocatable": all,
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "simulated by vramfit-e2e",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }],
        }
    })
}

/// Registers a node as a kubelet would: creates `manifest` (noting it in `cleanup` at once),
/// sets its own taints back, and writes `status` through nodes/status.
pub async fn register_node(
    client: &Client,
    cleanup: &Mutex<CleanupPlan>,
    manifest: &Value,
    status: &Value,
) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let name = manifest["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let node: Node = serde_json::from_value(manifest.clone())?;
    nodes
        .create(&PostParams::default(), &node)
        .await
        .with_context(|| format!("creating node {name}"))?;
    cleanup
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .nodes
        .push(name.clone());
    // Admission taints every new Node `node.kubernetes.io/not-ready:NoSchedule`; a
    // kubelet's node-lifecycle controller lifts it once the node is Ready. Nothing does
    // here, so the simulated kubelet sets the node's own taints back, as registered.
    nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": manifest["spec"]["taints"]}})),
        )
        .await
        .with_context(|| format!("lifting the not-ready taint of node {name}"))?;
    nodes
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .with_context(|| format!("writing status of node {name}"))?;
    Ok(())
}

/// A simulated kubelet heartbeat: keeps the simulated nodes Ready (and their node Leases
/// fresh) so a node lifecycle controller, where one runs, does not mark them NotReady.
pub async fn heartbeat(client: Client, run: String) {
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
    /// The nodes of this run (labelled with its run id).
    pub async fn sim_nodes(&self) -> Result<Vec<Node>> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        Ok(nodes
            .list(&ListParams::default().labels(&format!("{RUN_LABEL}={}", self.run)))
            .await?
            .items)
    }

    /// The name of the suite's node `suffix`.
    pub fn node_name(&self, suffix: &str) -> String {
        node_name(&self.run, suffix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace_root;

    #[test]
    fn fixtures_of_the_simulated_nodes_exist() {
        for node in SIM_NODES {
            let path = workspace_root().join("agent/fixtures").join(node.fixture);
            assert!(path.is_file(), "{} is missing", path.display());
            assert!(node.name("abc").starts_with(PREFIX));
        }
    }
    #[test]
    fn node_labels_are_checked_against_the_fixture() {
        use vramfit_api::labels::*;
        let node = SIM_NODES[0];
        let mut labels: BTreeMap<String, String> = [
            (GPU_PRESENT, "true"),
            (GPU_PRODUCT, "Tesla-V100-SXM2-16GB"),
            (GPU_COUNT, "4"),
            (GPU_MEMORY_MIB, "16160"),
            (GPU_COMPUTE_CAPABILITY, "7.0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        node.check_labels(&labels).unwrap();
        labels.insert(GPU_COUNT.into(), "2".into());
        let err = node.check_labels(&labels).unwrap_err().to_string();
        assert!(
            err.contains("gpu.count") && err.contains("\"4\"") && err.contains("\"2\""),
            "{err}"
        );
        let none = SIM_NODES[4];
        assert!(none.check_labels(&labels).is_err());
        let absent = [(GPU_PRESENT, "false"), (GPU_ABSENT_REASON, "no-gpus")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        none.check_labels(&absent).unwrap();
    }
}
