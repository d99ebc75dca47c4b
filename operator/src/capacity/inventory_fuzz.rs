//! Random node labels, allocatable counts and pod requests through the inventory, the room
//! computation and the planner: never a panic (release builds check overflow), and every class
//! read from labels stays within the physical bounds.
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;
use vramfit_api::labels::{self, GPU_RESOURCE, MAX_GPU_MEMORY_MIB, MAX_GPUS_PER_NODE};

use crate::capacity::{Capacity, PodConstraints, build_inventory};
use crate::fixtures;
use crate::stores::gpu_usage::GpuUsage;

/// Numbers as labels carry them, huge and negative ones included, and some non-numbers.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..=100_000).prop_map(|n| n.to_string()),
        any::<u32>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| format!("{a}.{b}")),
        "[a-z0-9.-]{0,12}",
    ]
}

fn gpu_labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    let keys = [
        labels::GPU_PRESENT,
        labels::GPU_PRODUCT,
        labels::GPU_COUNT,
        labels::GPU_MEMORY_MIB,
        labels::GPU_COMPUTE_CAPABILITY,
        labels::GFD_PRODUCT,
        labels::GFD_COUNT,
        labels::GFD_MEMORY,
        labels::GFD_COMPUTE_MAJOR,
        labels::GFD_COMPUTE_MINOR,
    ];
    let value = prop_oneof![
        number(),
        Just("true".to_string()),
        Just("NVIDIA-A10G".to_string())
    ];
    proptest::collection::vec((proptest::sample::select(keys.to_vec()), value), 0..12)
        .prop_map(|pairs| pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn node(name: String, labels: BTreeMap<String, String>, allocatable: String) -> Arc<Node> {
    let mut node = fixtures::labelled_node(&name, &[], 0);
    node.metadata.labels = Some(labels);
    let status = node.status.get_or_insert_default();
    status.allocatable = Some([(GPU_RESOURCE.to_string(), Quantity(allocatable))].into());
    Arc::new(node)
}

fn pod(name: String, node: String, requests: Vec<String>) -> Pod {
    let containers = requests
        .into_iter()
        .enumerate()
        .map(|(i, gpus)| Container {
            name: format!("c{i}"),
            resources: Some(ResourceRequirements {
                limits: Some([(GPU_RESOURCE.to_string(), Quantity(gpus))].into()),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        })
        .collect();
    let mut pod = fixtures::pending_pod(&name, Some(&node));
    pod.spec = Some(PodSpec {
        node_name: Some(node),
        containers,
        ..PodSpec::default()
    });
    pod
}

proptest! {
    #[test]
    fn any_labels_and_requests_plan_without_panic(
        nodes in proptest::collection::vec((gpu_labels(), number()), 1..6),
        requests in proptest::collection::vec(proptest::collection::vec(number(), 1..4), 0..6),
    ) {
        let nodes: Vec<Arc<Node>> = nodes
            .into_iter()
            .enumerate()
            .map(|(i, (labels, allocatable))| node(format!("n-{i}"), labels, allocatable))
            .collect();
        let inventory = build_inventory(&nodes, &[]);
        for class in &inventory.classes {
            prop_assert!(class.gpus_per_node <= MAX_GPUS_PER_NODE, "{class:?}");
            prop_assert!(class.memory_mib <= MAX_GPU_MEMORY_MIB, "{class:?}");
        }
        let mut usage = GpuUsage::default();
        for (i, requests) in requests.into_iter().enumerate() {
            let on = format!("n-{}", i % nodes.len());
            let pod = pod(format!("p-{i}"), on, requests);
            usage.apply_event(&kube::runtime::watcher::Event::Apply(pod));
        }
        let rooms = Capacity::compute(
            &inventory,
            &usage,
            &[],
            &PodConstraints::default(),
            &|_| true,
        );
        let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
        let input = vramfit_planner::resolve_job(&job.spec)
            .map_err(|why| TestCaseError::fail(why.to_string()))?;
        for class in &inventory.classes {
            let _ = rooms.has_room(&class.name, 1);
            let _ = vramfit_planner::plan_for_class(&input, class, &Default::default());
        }
    }
}
