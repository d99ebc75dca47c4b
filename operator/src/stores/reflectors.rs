//! The reflectors that fill the stores, one watch per purpose (see [`crate::controller`] for
//! the table), and what each keeps of the objects it watches.
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Pod};
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::Notify;
use tracing::warn;
use vramfit_api::GpuNodeClass;
use vramfit_api::labels::is_gpu_resource;
use vramfit_api::pod_keys::{JOB_LABEL, NODE_CLASS_LABEL, fnv1a64};

use super::StoreWriters;
use super::gpu_resources::{GpuResources, is_schedulable, pod_gpu_request};
use super::listed::Listing;
use super::namespaces::{WatchNamespaces, watch_namespaces};
use super::relist::ChangedPodOwners;
use super::relist::PodChange;
use super::slim::SlimPod;
use super::watch_retry::with_backoff;
use crate::stores::extended_resources::{self, is_extended_resource};

/// Field selector of the GPU accounting pod store.
pub const NON_TERMINAL_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// Runs the four reflectors that fill the stores; returns only if all of them end. Each job
/// pod's change is sent on `pod_changes` (with the job it names) once the store holds it (after a relist:
/// once the whole new list is in, see [`crate::stores::relist`]). The job pods are watched in
/// `namespaces` (one watch per namespace with `--watch-namespaces`, see
/// [`crate::stores::namespaces`]); nodes, GpuNodeClasses and the GPU accounting pods always
/// cluster-wide (a GPU any pod of a node takes is taken).
pub async fn drive_reflectors(
    client: Client,
    writers: StoreWriters,
    wake: Arc<Notify>,
    pod_changes: UnboundedSender<PodChange>,
    namespaces: WatchNamespaces,
) {
    let StoreWriters {
        nodes,
        job_pods,
        gpu_usage,
        node_classes,
        inventory_version,
        jobs: _,
        model_caches: _,
        listed,
    } = writers;

    let node_wake = wake.clone();
    let node_version = inventory_version.clone();
    let nodes_listed = listed.clone();
    let mut fingerprints: HashMap<String, u64> = HashMap::new();
    let nodes = with_backoff(
        "nodes",
        watcher(Api::<Node>::all(client.clone()), list_config()),
    )
    .modify(trim_node)
    .reflect(nodes)
    .for_each(move |event| {
        match event {
            Ok(watcher::Event::Apply(node)) => {
                let fingerprint = node_fingerprint(&node);
                if fingerprints.insert(node.name_any(), fingerprint) != Some(fingerprint) {
                    node_version.fetch_add(1, Ordering::AcqRel);
                    node_wake.notify_one();
                }
            }
            Ok(watcher::Event::InitApply(node)) => {
                fingerprints.insert(node.name_any(), node_fingerprint(&node));
            }
            Ok(watcher::Event::Delete(node)) => {
                fingerprints.remove(&node.name_any());
                node_version.fetch_add(1, Ordering::AcqRel);
            }
            Ok(watcher::Event::InitDone) => {
                nodes_listed.mark(Listing::Nodes);
                node_version.fetch_add(1, Ordering::AcqRel);
                node_wake.notify_one();
            }
            Ok(watcher::Event::Init) => {}
            Err(error) => warn!(%error, "node watch failed; retrying"),
        }
        futures::future::ready(())
    });

    let class_wake = wake.clone();
    let class_version = inventory_version;
    let classes_listed = listed.clone();
    let classes = with_backoff(
        "gpunodeclasses",
        watcher(
            Api::<DeserializeGuard<GpuNodeClass>>::all(client.clone()),
            list_config(),
        ),
    )
    .reflect(node_classes)
    .for_each(move |event| {
        match event {
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Ok(watcher::Event::Apply(class)) => {
                if let Err(invalid) = &class.0 {
                    warn!(class = %class.name_any(), error = %invalid.error, "GpuNodeClass cannot be read; ignored");
                }
                class_version.fetch_add(1, Ordering::AcqRel);
                class_wake.notify_one();
            }
            Ok(event) => {
                if matches!(event, watcher::Event::InitDone) {
                    classes_listed.mark(Listing::NodeClasses);
                }
                class_version.fetch_add(1, Ordering::AcqRel);
                class_wake.notify_one();
            }
            Err(error) => warn!(%error, "GpuNodeClass watch failed; retrying"),
        }
        futures::future::ready(())
    });

    let pod_wake = wake;
    let gpu_pods = with_backoff(
        "pods (GPU accounting)",
        watcher(
            Api::<SlimPod>::all(client.clone()),
            list_config().fields(NON_TERMINAL_PODS),
        ),
    )
    .for_each(move |event| {
        match event.map(|event| full_pods(&event)) {
            Ok(event) => {
                // GPUs freed on a node or in a class: waiting jobs may fit now.
                let freed = match &event {
                    watcher::Event::Delete(pod) => frees_room(pod),
                    watcher::Event::InitDone => true,
                    _ => false,
                };
                gpu_usage
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .apply_event(&event);
                if freed {
                    pod_wake.notify_one();
                }
            }
            Err(error) => warn!(%error, "pod watch (GPU accounting) failed; retrying"),
        }
        futures::future::ready(())
    });

    let job_pod_store = job_pods.as_reader();
    let mut changed_owners = ChangedPodOwners::default();
    let job_pod_config = list_config().labels(JOB_LABEL);
    let job_pod_events = match namespaces.listed() {
        None => with_backoff(
            "pods (job pods)",
            watcher(Api::<SlimPod>::all(client), job_pod_config),
        )
        .boxed(),
        Some(listed) => watch_namespaces(
            &client,
            listed,
            &job_pod_config,
            job_pod_store.clone(),
            "pods (job pods)",
        )
        .boxed(),
    };
    let job_pods = job_pod_events.reflect(job_pods).for_each(move |event| {
        match event {
            Ok(event) => {
                if matches!(event, watcher::Event::InitDone) {
                    listed.mark(Listing::JobPods);
                }
                for change in changed_owners.observe(&event, &job_pod_store) {
                    // Fails only once the controller has stopped: nothing left to trigger.
                    let _ = pod_changes.unbounded_send(change);
                }
            }
            Err(error) => warn!(%error, "pod watch (job pods) failed; retrying"),
        }
        futures::future::ready(())
    });

    futures::join!(nodes, classes, gpu_pods, job_pods);
}

/// Whether a pod that went gave GPUs back: bound to a node, or, not bound yet, holding room in
/// a class (an attempt's pod whose schedule deadline passed, say).
fn frees_room(pod: &Pod) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some();
    let held_in_class = pod.labels().contains_key(NODE_CLASS_LABEL);
    pod_gpu_request(pod) > 0 && (bound || held_in_class)
}

/// Objects per page of a watch's (re)list.
pub const LIST_PAGE: u32 = 250;

/// How every watch lists: in pages, from the current state. (`any_semantic`, i.e.
/// `resourceVersion=0`, lets the API server answer from its cache, but then it ignores the page
/// size: 5,000 jobs or pods came as one response of tens of MiB, held and parsed at once, the
/// operator's peak memory.)
pub fn list_config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE)
}

/// What of a node matters to classes and room: labels, allocatable GPUs and extended
/// resources, cordon, taints, readiness.
pub fn node_fingerprint(node: &Node) -> u64 {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    let text = format!(
        "{:?}|{:?}|{:?}|{}|{:?}",
        node.labels(),
        GpuResources::allocatable(node),
        extended_resources::allocatable(node),
        is_schedulable(node),
        taints.map(|t| t
            .iter()
            .map(|t| (&t.key, &t.value, &t.effect))
            .collect::<Vec<_>>())
    );
    fnv1a64(text.as_bytes())
}

/// A watch event of slim pods as one of `Pod`s (what the GPU accounting reads).
fn full_pods(event: &watcher::Event<SlimPod>) -> watcher::Event<Pod> {
    match event {
        watcher::Event::Apply(pod) => watcher::Event::Apply(pod.to_pod()),
        watcher::Event::Delete(pod) => watcher::Event::Delete(pod.to_pod()),
        watcher::Event::InitApply(pod) => watcher::Event::InitApply(pod.to_pod()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Keeps only what classes and placement read from a node: its identity and labels, cordon
/// and taints, allocatable GPUs and extended resources, and whether it is Ready. A real node also carries its images,
/// addresses, system info, every condition with its messages and every allocatable resource:
/// several KiB per node, at 1,000 nodes several MiB of cache nobody reads.
pub fn trim_node(node: &mut Node) {
    let metadata = &mut node.metadata;
    metadata.managed_fields = None;
    metadata.annotations = None;
    metadata.owner_references = None;
    metadata.finalizers = None;
    if let Some(spec) = node.spec.as_mut() {
        *spec = NodeSpec {
            unschedulable: spec.unschedulable,
            taints: spec.taints.take(),
            ..NodeSpec::default()
        };
    }
    if let Some(status) = node.status.as_mut() {
        let allocatable = status.allocatable.take().map(|mut resources| {
            resources.retain(|name, _| is_gpu_resource(name) || is_extended_resource(name));
            resources
        });
        let ready = status.conditions.take().map(|conditions| {
            conditions
                .into_iter()
                .filter(|c| c.type_ == "Ready")
                .map(|c| NodeCondition {
                    type_: c.type_,
                    status: c.status,
                    ..NodeCondition::default()
                })
                .collect()
        });
        *status = NodeStatus {
            allocatable,
            conditions: ready,
            ..NodeStatus::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::stores::gpu_resources::allocatable_gpus;
    use crate::stores::{JobRef, owning_job};

    #[test]
    fn a_pod_change_triggers_only_the_job_that_controls_the_pod() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let owned_by = |kind: &str, controller: Option<bool>| {
            let mut pod = fixtures::pending_pod("chat-1", None);
            pod.metadata.namespace = Some("team-a".to_string());
            pod.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "vramfit.io/v1alpha1".to_string(),
                kind: kind.to_string(),
                name: "chat".to_string(),
                uid: "u".to_string(),
                controller,
                block_owner_deletion: Some(true),
            }]);
            owning_job(&pod)
        };
        assert_eq!(
            owned_by("InferenceJob", Some(true)),
            Some(JobRef::new("chat").within("team-a"))
        );
        assert_eq!(owned_by("InferenceJob", None), None, "not the controller");
        assert_eq!(owned_by("Job", Some(true)), None, "another kind");
        assert_eq!(owning_job(&fixtures::pending_pod("loose", None)), None);
    }

    #[test]
    fn a_deleted_pod_frees_room_when_bound_or_held_in_a_class() {
        let bound = fixtures::gpu_pod("other", "train", Some("a-1"), 2);
        assert!(frees_room(&bound));
        let unbound = fixtures::gpu_pod("other", "train", None, 2);
        assert!(!frees_room(&unbound), "it held nothing");
        let mut attempt = unbound.clone();
        attempt
            .metadata
            .labels
            .get_or_insert_default()
            .insert(NODE_CLASS_LABEL.into(), "a10g-x4".into());
        assert!(
            frees_room(&attempt),
            "an attempt's unbound pod held its class's GPUs"
        );
        assert!(!frees_room(&fixtures::pending_pod("cpu-only", None)));
    }

    #[test]
    fn node_fingerprints_follow_what_matters() {
        let node = fixtures::gpu_node("a-1", "a10g", 4, 4);
        let mut heartbeat = node.clone();
        heartbeat.metadata.resource_version = Some("999".into());
        assert_eq!(node_fingerprint(&node), node_fingerprint(&heartbeat));
        let mut relabelled = node.clone();
        relabelled
            .metadata
            .labels
            .get_or_insert_default()
            .insert("x".into(), "y".into());
        assert_ne!(node_fingerprint(&node), node_fingerprint(&relabelled));
        let fewer = fixtures::gpu_node("a-1", "a10g", 4, 3);
        assert_ne!(node_fingerprint(&node), node_fingerprint(&fewer));
    }

    #[test]
    fn trimmed_nodes_answer_placement_as_before() {
        use k8s_openapi::api::core::v1::{ContainerImage, NodeSystemInfo, Taint};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let mut node = fixtures::gpu_node("a-1", "a10g", 4, 3);
        let spec = node.spec.get_or_insert_default();
        spec.pod_cidr = Some("10.0.0.0/24".into());
        spec.taints = Some(vec![Taint {
            key: "gpu".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }]);
        let status = node.status.get_or_insert_default();
        status.images = Some(vec![ContainerImage {
            names: Some(vec!["vllm/vllm-openai:v0.10.1".into()]),
            size_bytes: Some(1 << 33),
        }]);
        status.node_info = Some(NodeSystemInfo::default());
        let allocatable = status.allocatable.get_or_insert_default();
        allocatable.insert("cpu".into(), Quantity("32".into()));
        allocatable.insert("nvidia.com/mig-3g.40gb".into(), Quantity("2".into()));
        allocatable.insert("example.com/fpga".into(), Quantity("1".into()));
        status
            .conditions
            .get_or_insert_default()
            .push(NodeCondition {
                type_: "MemoryPressure".into(),
                status: "False".into(),
                message: Some("kubelet has sufficient memory available".into()),
                ..NodeCondition::default()
            });

        let mut trimmed = node.clone();
        trim_node(&mut trimmed);
        assert_eq!(allocatable_gpus(&trimmed), allocatable_gpus(&node));
        assert_eq!(allocatable_gpus(&trimmed), 3);
        assert_eq!(
            GpuResources::allocatable(&trimmed).get("nvidia.com/mig-3g.40gb"),
            2,
            "MIG slices are GPUs too"
        );
        assert_eq!(is_schedulable(&trimmed), is_schedulable(&node));
        assert!(is_schedulable(&trimmed));
        assert_eq!(node_fingerprint(&trimmed), node_fingerprint(&node));
        assert_eq!(trimmed.metadata.labels, node.metadata.labels);
        let status = trimmed.status.unwrap_or_default();
        assert_eq!((status.images, status.node_info), (None, None));
        assert_eq!(
            status
                .allocatable
                .map(|a| a.into_keys().collect::<Vec<_>>()),
            Some(vec![
                "example.com/fpga".to_string(),
                "nvidia.com/gpu".to_string(),
                "nvidia.com/mig-3g.40gb".to_string()
            ]),
            "nvidia.com/gpu, the slices and extended resources a job may ask for"
        );
        assert_eq!(status.conditions.map(|c| c.len()), Some(1));
        assert_eq!(trimmed.spec.and_then(|s| s.pod_cidr), None);
    }

    #[test]
    fn watches_list_in_pages() {
        let config = list_config();
        assert_eq!(config.page_size, Some(LIST_PAGE));
        assert_eq!(config.list_semantic, watcher::ListSemantic::MostRecent);
    }
}
