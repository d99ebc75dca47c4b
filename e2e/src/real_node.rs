//! A real node: a kubelet that runs pods, for the scenarios whose promises need one (a
//! container that writes `/dev/termination-log`, an image that cannot be pulled). Which node
//! qualifies, the image it must hold, the GPU fixture the agent labels it from, and the
//! removal of those labels at the end.
use anyhow::{Context as _, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt as _};
use serde_json::{Map, Value};
use vramfit_api::Phase;
use vramfit_api::labels::{GPU_PREFIX, GPU_RESOURCE, MIG_PREFIX};

use crate::{RUN_LABEL, Suite};

/// The env var naming the workload image the real-node scenarios run.
pub const WORKLOAD_IMAGE_ENV: &str = "VRAMFIT_E2E_WORKLOAD_IMAGE";

/// The workload image when [`WORKLOAD_IMAGE_ENV`] is not set: the scripted generator
/// (`workload/examples/scripted`), as e2e/README.md builds it.
pub const DEFAULT_WORKLOAD_IMAGE: &str = "localhost/vramfit-scripted:dev";

/// The env var naming the llama-server image (with the tiny GGUF model at
/// [`LLAMA_SERVER_MODEL`]) that the served real-node scenarios run.
pub const LLAMA_SERVER_IMAGE_ENV: &str = "VRAMFIT_E2E_LLAMA_SERVER_IMAGE";

/// The llama-server image when [`LLAMA_SERVER_IMAGE_ENV`] is not set: the
/// `with-tiny-model` target of `workload/examples/llama-server/Dockerfile`.
pub const DEFAULT_LLAMA_SERVER_IMAGE: &str = "localhost/llama-server:b11312-tiny";

/// Where that image holds its tiny random-weight GGUF model.
pub const LLAMA_SERVER_MODEL: &str = "/models/tiny-llama.gguf";

/// GPUs the real node must advertise (`nvidia.com/gpu`): an out-of-memory step adds one.
pub const MIN_GPUS: u32 = 2;

/// The GPU model of the real node's fixture: one no simulated node has (so the real node is
/// a class of its own) and that runs bfloat16 (so garbage in bfloat16 has a float16 step).
const FIXTURE_GPU: &str = "NVIDIA L40S";
const FIXTURE_MEMORY_MIB: u64 = 46068;
const FIXTURE_COMPUTE_CAPABILITY: &str = "8.9";

/// A kubelet whose node Lease is older than this is not running.
const LEASE_FRESH_SECONDS: i64 = 60;

/// The real node the scenarios use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RealNode {
    /// Its name.
    pub name: String,
    /// The `nvidia.com/gpu` it advertises (allocatable).
    pub gpus: u32,
}

impl RealNode {
    /// The node class vramfit forms from the fixture's labels.
    pub fn class(&self) -> String {
        vramfit_planner::node_class::class_name(FIXTURE_GPU, self.gpus)
    }

    /// The agent fixture (as NVML would report it) of `gpus` GPUs of the fixture's model.
    pub fn fixture(&self) -> String {
        format!(
            "# {gpus}x {FIXTURE_GPU} claimed for a real node without GPUs (vramfit-e2e)\n\
             driverVersion: \"550.54.15\"\ncudaDriverVersion: 12040\ngpus:\n\
             \x20 - name: {FIXTURE_GPU}\n    memoryMiB: {FIXTURE_MEMORY_MIB}\n\
             \x20   computeCapability: \"{FIXTURE_COMPUTE_CAPABILITY}\"\n\
             \x20   migMode: unsupported\n    count: {gpus}\n",
            gpus = self.gpus
        )
    }
}

/// The workload image: [`WORKLOAD_IMAGE_ENV`], else [`DEFAULT_WORKLOAD_IMAGE`].
pub fn workload_image() -> String {
    std::env::var(WORKLOAD_IMAGE_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_WORKLOAD_IMAGE.to_string())
}

/// The llama-server image: [`LLAMA_SERVER_IMAGE_ENV`], else [`DEFAULT_LLAMA_SERVER_IMAGE`].
pub fn llama_server_image() -> String {
    std::env::var(LLAMA_SERVER_IMAGE_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_LLAMA_SERVER_IMAGE.to_string())
}

/// An image reference as container runtimes list it: `docker.io/library/` for a bare name,
/// `docker.io/` for a name without a registry, `:latest` without a tag or digest.
pub fn normalized_image(image: &str) -> String {
    let (first, _) = image.split_once('/').unwrap_or(("", image));
    let named = if first.contains(['.', ':']) || first == "localhost" {
        image.to_string()
    } else if first.is_empty() {
        format!("docker.io/library/{image}")
    } else {
        format!("docker.io/{image}")
    };
    let last = named.rsplit('/').next().unwrap_or_default();
    if last.contains([':', '@']) {
        named
    } else {
        format!("{named}:latest")
    }
}

/// Why `node` is not a real node the scenarios can place on, or `None` when it is: a kubelet
/// reports it (its version, a Lease renewed within a minute of `now`), it is Ready, not
/// cordoned, tainted only with `nvidia.com/gpu` (which vramfit's pods tolerate), advertises
/// [`MIN_GPUS`] or more, and holds `image`.
pub fn unsuitable(
    node: &Node,
    lease_renewed: Option<Timestamp>,
    now: Timestamp,
    image: &str,
) -> Option<String> {
    if node.labels().contains_key(RUN_LABEL) {
        return Some("a simulated node of the suite".into());
    }
    let status = node.status.clone().unwrap_or_default();
    let kubelet = status
        .node_info
        .as_ref()
        .map(|i| i.kubelet_version.clone())
        .unwrap_or_default();
    if kubelet.is_empty() {
        return Some("no kubelet reports it (status.nodeInfo.kubeletVersion is empty)".into());
    }
    let fresh =
        lease_renewed.is_some_and(|t| now.duration_since(t).as_secs() < LEASE_FRESH_SECONDS);
    if !fresh {
        return Some(format!(
            "its kubelet renewed no Lease in kube-node-lease within {LEASE_FRESH_SECONDS} s"
        ));
    }
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return Some("not Ready".into());
    }
    // Under pressure the kubelet refuses and evicts pods (and, short of disk, removes the
    // images no container uses).
    if let Some(pressure) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_.ends_with("Pressure") && c.status == "True")
    {
        return Some(format!(
            "under {} (the kubelet evicts pods)",
            pressure.type_
        ));
    }
    let spec = node.spec.clone().unwrap_or_default();
    if spec.unschedulable == Some(true) {
        return Some("cordoned".into());
    }
    if let Some(taint) =
        spec.taints.iter().flatten().find(|t| {
            t.key != GPU_RESOURCE && matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
        })
    {
        return Some(format!("tainted {}:{}", taint.key, taint.effect));
    }
    let gpus = advertised_gpus(node);
    if gpus < MIN_GPUS {
        return Some(format!(
            "advertises {gpus} {GPU_RESOURCE} (allocatable), the scenarios need {MIN_GPUS} \
             (a device plugin's, or a status patch as e2e/README.md shows)"
        ));
    }
    let wanted = normalized_image(image);
    let present = status
        .images
        .iter()
        .flatten()
        .flat_map(|i| i.names.iter().flatten())
        .any(|n| normalized_image(n) == wanted);
    if !present {
        return Some(format!(
            "image {image} is not on it (build and load it as e2e/README.md shows)"
        ));
    }
    None
}

/// The node's allocatable `nvidia.com/gpu` (0 when absent or not a whole number).
fn advertised_gpus(node: &Node) -> u32 {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(GPU_RESOURCE))
        .and_then(|q| q.0.parse().ok())
        .unwrap_or(0)
}

/// The first real node (by name) that can run every one of `images`, or why there is none:
/// one line naming each node and what it lacks.
pub async fn find(client: &Client, images: &[String]) -> Result<Result<RealNode, String>> {
    let mut nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing nodes")?
        .items;
    nodes.sort_by_key(|n| n.name_any());
    let leases = Api::<Lease>::namespaced(client.clone(), "kube-node-lease")
        .list(&ListParams::default())
        .await
        .context("listing node Leases")?
        .items;
    let renewed = |name: &str| {
        leases
            .iter()
            .find(|l| l.name_any() == name)
            .and_then(|l| l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0))
    };
    let mut reasons = vec![];
    for node in &nodes {
        let name = node.name_any();
        let now = Timestamp::now();
        match images
            .iter()
            .find_map(|image| unsuitable(node, renewed(&name), now, image))
        {
            None => {
                return Ok(Ok(RealNode {
                    name,
                    gpus: advertised_gpus(node),
                }));
            }
            Some(why) if node.labels().contains_key(RUN_LABEL) => drop(why),
            Some(why) => reasons.push(format!("{name}: {why}")),
        }
    }
    Ok(Err(if reasons.is_empty() {
        "no node but the suite's simulated ones".into()
    } else {
        reasons.join("; ")
    }))
}

/// Removes the agent's labels (`vramfit.io/gpu.*`, `vramfit.io/mig-*`) from node `name`.
pub async fn remove_gpu_labels(client: &Client, name: &str) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(name).await?;
    let gone: Map<String, Value> = node
        .labels()
        .keys()
        .filter(|k| k.starts_with(GPU_PREFIX) || k.starts_with(MIG_PREFIX))
        .map(|k| (k.clone(), Value::Null))
        .collect();
    if gone.is_empty() {
        return Ok(());
    }
    let patch = serde_json::json!({"metadata": {"labels": gone}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("removing the vramfit.io/ GPU labels of node {name}"))?;
    Ok(())
}

impl Suite {
    /// The real node and the workload image, with the node labelled by the real agent from
    /// its fixture (noted for cleanup first); `Err(Skipped)` naming what is missing.
    pub async fn real_node(&self) -> Result<(RealNode, String)> {
        let image = workload_image();
        let node = self.real_node_holding(std::slice::from_ref(&image)).await?;
        Ok((node, image))
    }

    /// The real node that holds every one of `images`, labelled by the real agent from its
    /// fixture (noted for cleanup first); `Err(Skipped)` naming what is missing.
    pub async fn real_node_holding(&self, images: &[String]) -> Result<RealNode> {
        let node = match find(&self.client, images).await? {
            Ok(node) => node,
            Err(why) => {
                return Err(crate::Skipped(format!("no schedulable real node: {why}")).into());
            }
        };
        let first = {
            let mut plan = self.cleanup.lock().unwrap_or_else(|e| e.into_inner());
            let first = !plan.labelled_nodes.contains(&node.name);
            if first {
                plan.labelled_nodes.push(node.name.clone());
            }
            first
        };
        if first {
            self.drop_waiting_jobs().await?;
        }
        let fixture = self.logs.join(format!("fixture-{}.yaml", node.name));
        std::fs::create_dir_all(&self.logs)?;
        std::fs::write(&fixture, node.fixture())
            .with_context(|| format!("writing {}", fixture.display()))?;
        self.label_with_agent_from(&fixture, &node.name).await?;
        Ok(node)
    }

    /// Deletes the test namespace's jobs that still wait for a node (Pending,
    /// Unschedulable): once a node is added or labelled they could take its GPUs (and, on
    /// the real node, their images are not there).
    pub(crate) async fn drop_waiting_jobs(&self) -> Result<()> {
        let waiting: Vec<String> = self
            .jobs()
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|j| {
                matches!(
                    j.status.as_ref().and_then(|st| st.phase),
                    None | Some(Phase::Pending) | Some(Phase::Unschedulable)
                )
            })
            .map(|j| j.name_any())
            .collect();
        if !waiting.is_empty() {
            println!("     deleting the jobs that wait for a node: {waiting:?}");
            self.delete_jobs(&waiting).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerImage, NodeStatus, NodeSystemInfo};
    use serde_json::json;
    use std::path::Path;
    use vramfit_agent::gpu::fixture::FixtureFile;
    use vramfit_api::labels::{GPU_BF16, GPU_COUNT, GPU_PRODUCT, gpu_facts};
    use vramfit_planner::node_class::class_name;

    fn real(image: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "worker"},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"nvidia.com/gpu": "4"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {
                    "kubeletVersion": "v1.32.13", "containerRuntimeVersion": "containerd://1.6.20",
                    "architecture": "amd64", "bootID": "", "kernelVersion": "", "kubeProxyVersion": "",
                    "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""
                },
                // An image that lost its last tag is listed without names.
                "images": [{"names": null, "sizeBytes": 2}, {"names": [image], "sizeBytes": 1}],
            }
        }))
        .unwrap()
    }

    fn why(node: &Node, image: &str) -> Option<String> {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let renewed: Timestamp = "2026-01-01T00:00:30Z".parse().unwrap();
        unsuitable(node, Some(renewed), now, image)
    }

    #[test]
    fn a_ready_kubelet_node_with_gpus_and_the_image_qualifies() {
        let node = real("localhost/vramfit-scripted:dev");
        assert_eq!(why(&node, "localhost/vramfit-scripted:dev"), None);
        let miss = why(&node, "localhost/other:dev").unwrap();
        assert!(
            miss.contains("image localhost/other:dev is not on it"),
            "{miss}"
        );
    }

    #[test]
    fn simulated_stale_cordoned_tainted_or_gpu_less_nodes_do_not() {
        let image = "localhost/x:1";
        let mut node = real(image);
        node.metadata.labels = Some([(RUN_LABEL.to_string(), "r".to_string())].into());
        assert!(why(&node, image).unwrap().contains("simulated"));

        let mut node = real(image);
        node.status = Some(NodeStatus {
            node_info: Some(NodeSystemInfo::default()),
            ..node.status.unwrap()
        });
        assert!(why(&node, image).unwrap().contains("kubeletVersion"));

        let node = real(image);
        let now: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
        let old: Timestamp = "2026-01-01T00:00:30Z".parse().unwrap();
        assert!(
            unsuitable(&node, Some(old), now, image)
                .unwrap()
                .contains("Lease")
        );
        assert!(
            unsuitable(&node, None, now, image)
                .unwrap()
                .contains("Lease")
        );

        let mut node = real(image);
        node.spec.as_mut().unwrap().unschedulable = Some(true);
        assert_eq!(why(&node, image).as_deref(), Some("cordoned"));

        let mut node = real(image);
        node.spec.as_mut().unwrap().taints.as_mut().unwrap()[0].key =
            "node-role.kubernetes.io/control-plane".into();
        assert!(why(&node, image).unwrap().contains("tainted node-role"));

        let mut node = real(image);
        node.status
            .as_mut()
            .unwrap()
            .allocatable
            .as_mut()
            .unwrap()
            .insert(
                GPU_RESOURCE.into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
            );
        assert!(
            why(&node, image)
                .unwrap()
                .contains("advertises 1 nvidia.com/gpu")
        );
        node.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        assert_eq!(why(&node, image).as_deref(), Some("not Ready"));

        let mut node = real(image);
        let conditions = node.status.as_mut().unwrap().conditions.as_mut().unwrap();
        for (kind, status) in [("MemoryPressure", "False"), ("DiskPressure", "True")] {
            conditions
                .push(serde_json::from_value(json!({"type": kind, "status": status})).unwrap());
        }
        assert!(why(&node, image).unwrap().contains("under DiskPressure"));
    }

    #[test]
    fn image_names_compare_as_the_runtime_lists_them() {
        assert_eq!(
            normalized_image("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(normalized_image("me/app:1"), "docker.io/me/app:1");
        assert_eq!(normalized_image("localhost/app"), "localhost/app:latest");
        assert_eq!(
            normalized_image("reg.io:5000/a/b@sha256:00"),
            "reg.io:5000/a/b@sha256:00"
        );
        let node = real("docker.io/library/scripted:dev");
        assert_eq!(why(&node, "scripted:dev"), None);
        let listed = ContainerImage {
            names: Some(vec!["localhost/app:latest".into()]),
            size_bytes: None,
        };
        assert_eq!(
            normalized_image(&listed.names.unwrap()[0]),
            normalized_image("localhost/app")
        );
    }

    #[test]
    fn the_fixture_claims_the_advertised_gpus_as_a_class_of_its_own() {
        let node = RealNode {
            name: "worker".into(),
            gpus: 4,
        };
        assert_eq!(node.class(), "l40s-x4");
        // What the agent reads from it and labels the node with.
        let file = FixtureFile::parse(&node.fixture(), Path::new("real-node")).unwrap();
        let labels = vramfit_agent::labels::render(&file.to_probe());
        assert_eq!(labels[GPU_COUNT], "4");
        assert_eq!(labels[GPU_BF16], "true");
        let facts = gpu_facts(&labels).unwrap();
        assert_eq!(class_name(&labels[GPU_PRODUCT], facts.count), node.class());
        for sim in crate::SIM_NODES {
            assert!(
                !sim.fixture.starts_with("l40s"),
                "{} is an L40S",
                sim.fixture
            );
        }
    }
}
