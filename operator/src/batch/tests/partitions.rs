//! Controller tests for nodes that are not whole GPUs of one model (mixed nodes, MIG slices,
//! shared GPUs): the pod the reconcile applies requests the class's resource and carries its
//! node affinity.
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};
use vramfit_api::labels::{
    self, GFD_PRODUCT, GFD_REPLICAS, GFD_SHARING_STRATEGY, GPU_MIG, GPU_MIXED, mig_count_key,
    mig_memory_key,
};
use vramfit_api::{InferenceJobSpec, NodeClassSelection};

use crate::batch::tests::first_reconcile;
use crate::fixtures;
use crate::verifier::test_context;

/// The agent's labels for `kind` ×`count` with `extra` on top, and `allocatable` resources.
fn node(
    name: &str,
    kind: &str,
    count: u32,
    extra: &[(&str, &str)],
    allocatable: &[(&str, u32)],
) -> Node {
    let mut labels = fixtures::agent_labels(kind, count);
    for (k, v) in extra {
        labels.insert(k.to_string(), v.to_string());
    }
    let pairs: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut node = fixtures::labelled_node(name, &pairs, 0);
    let resources = node
        .status
        .get_or_insert_default()
        .allocatable
        .get_or_insert_default();
    resources.remove(labels::GPU_RESOURCE);
    for (resource, n) in allocatable {
        resources.insert(resource.to_string(), Quantity(n.to_string()));
    }
    node
}

fn only_on(class: &str, spec: InferenceJobSpec) -> InferenceJobSpec {
    InferenceJobSpec {
        node_classes: Some(NodeClassSelection {
            allowed: vec![class.to_string()],
            ..NodeClassSelection::default()
        }),
        ..spec
    }
}

fn match_expressions(pod: &Value) -> &Value {
    &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        [0]["matchExpressions"]
}

fn has_expression(pod: &Value, expression: Value) -> bool {
    match_expressions(pod)
        .as_array()
        .is_some_and(|all| all.contains(&expression))
}

#[tokio::test]
async fn a_bf16_pod_for_a10g_x2_stays_off_a_mixed_node_seen_after_it() {
    let (ctx, mut api, mut writers) = test_context();
    // The order that used to break: the homogeneous node forms `a10g-x2` first, then a node
    // whose smallest GPU is an A10G but whose other GPU is a V100 (compute capability 7.0).
    writers.apply_node(node(
        "a-1",
        "a10g",
        2,
        &[(GPU_MIXED, "false")],
        &[("nvidia.com/gpu", 2)],
    ));
    let mut mixed = fixtures::agent_labels("a10g", 2);
    mixed.insert(labels::GPU_COMPUTE_CAPABILITY.into(), "7.0".into());
    mixed.insert(GPU_MIXED.into(), "true".into());
    let pairs: Vec<(&str, &str)> = mixed
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    writers.apply_node(fixtures::labelled_node("m-1", &pairs, 2));
    writers.mark_ready();
    let job = fixtures::job("chat", only_on("a10g-x2", fixtures::bf16_pinned_spec()));
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;

    assert_eq!(status["status"]["nodeClass"], "a10g-x2");
    assert!(
        has_expression(
            &pod,
            json!({ "key": "vramfit.io/gpu.mixed", "operator": "NotIn", "values": ["true"] })
        ),
        "{}",
        match_expressions(&pod)
    );
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "1"
    );
    let inventory = ctx.inventory();
    let mixed_class = inventory
        .classes
        .iter()
        .find(|c| c.mixed)
        .expect("the mixed node forms its own class");
    assert_eq!(mixed_class.name, "mixed-cc7.0-23028mib-x2");
    let a10g = inventory.class("a10g-x2").unwrap();
    assert!(a10g.capability.supports_bf16());
    let member_of_a10g: Vec<&str> = inventory
        .nodes
        .iter()
        .filter(|n| {
            n.classes
                .iter()
                .any(|&i| inventory.classes[i].name == "a10g-x2")
        })
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(member_of_a10g, ["a-1"]);
}

#[tokio::test]
async fn a_mig_mixed_strategy_pod_requests_its_slice_resource() {
    let (ctx, mut api, mut writers) = test_context();
    writers.apply_node(node(
        "mig-1",
        "a100",
        1,
        &[
            (GPU_MIG, "enabled"),
            (&mig_count_key("3g.40gb"), "1"),
            (&mig_memory_key("3g.40gb"), "40192"),
            (&mig_count_key("2g.20gb"), "2"),
            (&mig_memory_key("2g.20gb"), "19968"),
        ],
        // The device plugin's mixed strategy: one resource per profile, no nvidia.com/gpu.
        &[("nvidia.com/mig-3g.40gb", 1), ("nvidia.com/mig-2g.20gb", 2)],
    ));
    writers.mark_ready();
    let class = "a100-sxm4-80gb-mig-3g-40gb-x1";
    let job = fixtures::job("chat", only_on(class, fixtures::vllm_mistral_spec()));
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;

    assert_eq!(status["status"]["nodeClass"], class);
    let limits = &pod["spec"]["containers"][0]["resources"]["limits"];
    assert_eq!(limits["nvidia.com/mig-3g.40gb"], "1");
    assert_eq!(limits["nvidia.com/gpu"], Value::Null);
    assert!(has_expression(
        &pod,
        json!({ "key": "vramfit.io/mig-3g.40gb.count", "operator": "In", "values": ["1"] })
    ));
    let plan = &status["status"]["plan"];
    assert_eq!(plan["gpuCount"], 1);
    assert!(
        plan["reasons"][0]
            .as_str()
            .is_some_and(|r| r.starts_with("MIG slice 3g.40gb of an A100")),
        "{plan}"
    );
    let inventory = ctx.inventory();
    let names: Vec<&str> = inventory.classes.iter().map(|c| c.name.as_str()).collect();
    assert!(
        names.contains(&"a100-sxm4-80gb-mig-2g-20gb-x2"),
        "{names:?}"
    );
    assert!(
        !names.contains(&"a100-sxm4-80gb-x1"),
        "no whole-GPU class: {names:?}"
    );
}

#[tokio::test]
async fn a_shared_gpu_pod_requests_the_renamed_resource_and_says_memory_is_shared() {
    let (ctx, mut api, mut writers) = test_context();
    writers.apply_node(node(
        "s-1",
        "a10g",
        1,
        &[
            (GFD_PRODUCT, "NVIDIA-A10G-SHARED"),
            (GFD_REPLICAS, "2"),
            (GFD_SHARING_STRATEGY, "time-slicing"),
        ],
        &[("nvidia.com/gpu.shared", 2)],
    ));
    writers.mark_ready();
    let class = "a10g-x1-shared2";
    let job = fixtures::job("chat", only_on(class, fixtures::llamacpp_spec()));
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;

    assert_eq!(status["status"]["nodeClass"], class);
    let limits = &pod["spec"]["containers"][0]["resources"]["limits"];
    assert_eq!(limits["nvidia.com/gpu.shared"], "1");
    assert_eq!(limits["nvidia.com/gpu"], Value::Null);
    assert!(has_expression(
        &pod,
        json!({ "key": "nvidia.com/gpu.replicas", "operator": "In", "values": ["2"] })
    ));
    let plan = &status["status"]["plan"];
    assert_eq!(plan["memory"]["vramPerGpuMib"], 11_514);
    assert!(
        plan["reasons"][0]
            .as_str()
            .is_some_and(|r| r.contains("memory is shared")),
        "{plan}"
    );
}
