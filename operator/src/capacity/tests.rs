//! Classes, GPU usage and room from stores' contents.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Taint};
use kube::runtime::watcher;
use vramfit_api::pod_keys::NODE_CLASS_LABEL;

use super::*;
use crate::capacity::inventory::admin_exclusions;
use crate::fixtures;
use crate::settings::GroupSpread;
use crate::stores::gpu_usage::{GpuUsage, gpu_usage, pod_key};
use crate::stores::{JobRef, PodOwner};
use vramfit_api::labels::GPU_RESOURCE;

#[test]
fn classes_come_from_labels_and_definitions() {
    let nodes = vec![
        Arc::new(fixtures::gpu_node("a-1", "a10g", 4, 4)),
        Arc::new(fixtures::gpu_node("a-2", "a10g", 4, 4)),
        Arc::new(fixtures::gpu_node("v-1", "v100", 4, 4)),
        Arc::new(fixtures::cpu_node("cpu-1")),
    ];
    let custom = fixtures::labelled_node("x-1", &[("pool", "mystery")], 2);
    let mut with_custom = nodes.clone();
    with_custom.push(Arc::new(custom));
    let definitions = vec![
        fixtures::gpu_node_class_override("a10g-x4", 75),
        fixtures::gpu_node_class_definition(
            "mystery-x2",
            &[("pool", "mystery")],
            "Mystery GPU",
            2,
            32_000,
            "8.9",
        ),
        fixtures::malformed_gpu_node_class("broken"),
    ];
    let inventory = build_inventory(&with_custom, &definitions);
    let names: Vec<_> = inventory.classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["a10g-x4", "mystery-x2", "v100-sxm2-16gb-x4"]);
    assert_eq!(
        inventory
            .class("a10g-x4")
            .unwrap()
            .hourly_price_cents_per_gpu,
        Some(75)
    );
    assert_eq!(inventory.nodes.len(), 4, "the CPU node belongs to no class");
    assert_eq!(inventory.problems.len(), 1, "{:?}", inventory.problems);
    assert!(inventory.problems[0].contains("broken"));
    let gpus: HashMap<_, _> = inventory
        .gpu_inventory()
        .into_iter()
        .map(|(c, _, g)| (c, g))
        .collect();
    assert_eq!(gpus["a10g-x4"], 8);
    assert_eq!(gpus["mystery-x2"], 2);
}

#[test]
fn nodes_labelled_only_by_nvidia_gfd_form_classes_selected_by_gfd_labels() {
    let gfd = fixtures::labelled_node(
        "h-1",
        &[
            ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
            ("nvidia.com/gpu.count", "8"),
            ("nvidia.com/gpu.memory", "81559"),
            ("nvidia.com/gpu.compute.major", "9"),
            ("nvidia.com/gpu.compute.minor", "0"),
            ("nvidia.com/gpu.family", "hopper"),
        ],
        8,
    );
    let inventory = build_inventory(&[Arc::new(gfd)], &[]);
    let class = inventory
        .class("h100-80gb-hbm3-x8")
        .expect("a class from GFD labels");
    assert_eq!(
        class.capability,
        vramfit_api::labels::ComputeCapability::new(9, 0)
    );
    assert_eq!(class.pytorch_cuda_alloc_conf, "max_split_size_mb:256");
    assert_eq!(
        class
            .node_selector
            .get("nvidia.com/gpu.product")
            .map(String::as_str),
        Some("NVIDIA-H100-80GB-HBM3"),
        "pods are pinned with GFD's own labels"
    );
    assert_eq!(inventory.nodes.len(), 1);
}

#[test]
fn free_gpus_subtract_bound_unbound_and_reserved_pods() {
    let nodes = vec![
        Arc::new(fixtures::gpu_node("a-1", "a10g", 4, 4)),
        Arc::new(fixtures::gpu_node("a-2", "a10g", 4, 4)),
    ];
    let inventory = build_inventory(&nodes, &[]);
    let pods = vec![
        Arc::new(fixtures::gpu_pod("other", "train-1", Some("a-1"), 3)),
        Arc::new(fixtures::gpu_pod("other", "train-2", Some("a-2"), 1)),
        Arc::new(fixtures::succeeded_gpu_pod("other", "done", "a-2", 3)),
    ];
    let usage = gpu_usage(&pods);
    assert_eq!(usage.used_on("a-1", GPU_RESOURCE), 3);
    assert_eq!(usage.used_on("a-2", GPU_RESOURCE), 1);
    assert_eq!(usage.len(), 2, "the finished pod takes nothing");
    let constraints = PodConstraints::of_job(&fixtures::job("j", fixtures::vllm_mistral_spec()));
    let capacity = Capacity::compute(&inventory, &usage, &[], &constraints, &|_| true);
    assert!(capacity.has_room("a10g-x4", 3));
    assert!(!capacity.has_room("a10g-x4", 4));
    // A reservation of 2 takes the best fit (a-2, 3 free → 1), leaving a-1's 1 and a-2's 1.
    let capacity = Capacity::compute(
        &inventory,
        &usage,
        &[("a10g-x4".into(), 2)],
        &constraints,
        &|_| true,
    );
    assert!(capacity.has_room("a10g-x4", 1));
    assert!(!capacity.has_room("a10g-x4", 2));
    assert_eq!(
        capacity.shortage("a10g-x4", 2),
        "no free GPUs: no usable node has 2 GPUs free (2 usable node(s))"
    );
}

/// `pod` as an InferenceJob's own pod: labelled with `class` and controlled by `job`.
fn job_pod_of_class(mut pod: Pod, job: &str, class: &str) -> Pod {
    pod.metadata.labels = Some(BTreeMap::from([(
        NODE_CLASS_LABEL.to_string(),
        class.to_string(),
    )]));
    pod.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "vramfit.io/v1alpha1".into(),
            kind: "InferenceJob".into(),
            name: job.into(),
            uid: fixtures::uid(job),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    ]);
    pod
}

#[test]
fn a_tenants_labelled_pod_does_not_make_a_class_look_full() {
    let nodes = vec![Arc::new(fixtures::gpu_node("a-1", "a10g", 4, 4))];
    let inventory = build_inventory(&nodes, &[]);
    let constraints = PodConstraints::of_job(&fixtures::job("j", fixtures::vllm_mistral_spec()));
    // The job store holds `chat`, with its uid.
    let known = |owner: &PodOwner| {
        owner.job == JobRef::new("chat").within("tenant") && owner.uid == fixtures::uid("chat")
    };
    let room_for_4 = |pods: Vec<Pod>| {
        let usage = gpu_usage(&pods.into_iter().map(Arc::new).collect::<Vec<_>>());
        Capacity::compute(&inventory, &usage, &[], &constraints, &known).has_room("a10g-x4", 4)
    };
    // A pending pod that asks for every GPU of the class and carries the class label,
    // created by someone else: it may never bind, and holds no room.
    let mut forged = job_pod_of_class(
        fixtures::gpu_pod("tenant", "squat", None, 4),
        "chat",
        "a10g-x4",
    );
    // It names the job too, as vramfit's own pods do.
    forged
        .metadata
        .labels
        .get_or_insert_default()
        .insert(vramfit_api::pod_keys::JOB_LABEL.to_string(), "chat".into());
    let mut unowned = forged.clone();
    unowned.metadata.owner_references = None;
    assert!(room_for_4(vec![unowned.clone()]));
    let mut not_controller = forged.clone();
    if let Some(owner) = not_controller.metadata.owner_references.as_mut() {
        owner[0].controller = Some(false);
    }
    assert!(room_for_4(vec![not_controller]));
    let mut other_kind = forged.clone();
    if let Some(owner) = other_kind.metadata.owner_references.as_mut() {
        owner[0].kind = "Job".into();
        owner[0].api_version = "batch/v1".into();
    }
    assert!(room_for_4(vec![other_kind]));
    // A controller reference to a job that is not in the store, or to a job of that name with
    // another uid: anyone who may create pods can write one.
    let mut no_such_job = forged.clone();
    if let Some(owner) = no_such_job.metadata.owner_references.as_mut() {
        owner[0].name = "nobody".into();
        owner[0].uid = fixtures::uid("nobody");
    }
    assert!(room_for_4(vec![no_such_job]));
    let mut other_uid = forged.clone();
    if let Some(owner) = other_uid.metadata.owner_references.as_mut() {
        owner[0].uid = "00000000-0000-4000-8000-000000000bad".into();
    }
    assert!(room_for_4(vec![other_uid]));
    // A job's own unbound pod holds its room; any pod bound to the node takes its real
    // request, whoever made it.
    assert!(!room_for_4(vec![forged]));
    assert!(!room_for_4(vec![fixtures::as_running(unowned, "a-1")]));
}

#[test]
fn usage_follows_watch_events_and_relists() {
    let mut usage = GpuUsage::default();
    let bound = fixtures::gpu_pod("other", "train", Some("a-1"), 2);
    usage.apply_event(&watcher::Event::Apply(bound.clone()));
    let ours = fixtures::gpu_pod(fixtures::NAMESPACE, "chat-1", None, 1);
    let mut ours = job_pod_of_class(ours, "chat", "a10g-x4");
    usage.apply_event(&watcher::Event::Apply(ours.clone()));
    assert_eq!(usage.used_on("a-1", GPU_RESOURCE), 2);
    assert_eq!(
        usage
            .unbound_in("a10g-x4")
            .map(|(gpus, owner)| (gpus, owner.job.name.clone()))
            .collect::<Vec<_>>(),
        [(1, "chat".to_string())]
    );
    // Bound by the scheduler: it moves from the class to the node.
    ours.spec.get_or_insert_default().node_name = Some("a-1".into());
    usage.apply_event(&watcher::Event::Apply(ours.clone()));
    assert_eq!(usage.used_on("a-1", GPU_RESOURCE), 3);
    assert_eq!(usage.unbound_in("a10g-x4").count(), 0);
    usage.apply_event(&watcher::Event::Delete(bound.clone()));
    assert_eq!(usage.used_on("a-1", GPU_RESOURCE), 1);
    assert!(usage.contains(&pod_key(fixtures::NAMESPACE, "chat-1")));
    // A re-list replaces everything at its end.
    assert!(!usage.is_listed());
    usage.apply_event(&watcher::Event::Init);
    usage.apply_event(&watcher::Event::InitApply(bound));
    assert_eq!(
        usage.used_on("a-1", GPU_RESOURCE),
        1,
        "unchanged until the list is complete"
    );
    usage.apply_event(&watcher::Event::InitDone);
    assert_eq!(usage.used_on("a-1", GPU_RESOURCE), 2);
    assert!(!usage.contains(&pod_key(fixtures::NAMESPACE, "chat-1")));
    assert!(usage.is_listed());
}

#[test]
fn cordoned_not_ready_and_tainted_nodes_do_not_count() {
    let mut cordoned = fixtures::gpu_node("a-1", "a10g", 1, 1);
    cordoned.spec.get_or_insert_default().unschedulable = Some(true);
    let mut tainted = fixtures::gpu_node("a-2", "a10g", 1, 1);
    tainted.spec.get_or_insert_default().taints = Some(vec![Taint {
        key: "dedicated".into(),
        value: Some("training".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }]);
    let mut gpu_tainted = fixtures::gpu_node("a-3", "a10g", 1, 1);
    gpu_tainted.spec.get_or_insert_default().taints = Some(vec![Taint {
        key: GPU_RESOURCE.into(),
        value: Some("present".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }]);
    let nodes = vec![Arc::new(cordoned), Arc::new(tainted), Arc::new(gpu_tainted)];
    let inventory = build_inventory(&nodes, &[]);
    let constraints = PodConstraints::of_job(&fixtures::job("j", fixtures::vllm_mistral_spec()));
    let capacity = Capacity::compute(&inventory, &GpuUsage::default(), &[], &constraints, &|_| {
        true
    });
    assert!(
        capacity.has_room("a10g-x1", 1),
        "the GPU taint is tolerated"
    );
    let only_tainted = build_inventory(&nodes[..2], &[]);
    let capacity = Capacity::compute(
        &only_tainted,
        &GpuUsage::default(),
        &[],
        &constraints,
        &|_| true,
    );
    assert!(!capacity.has_room("a10g-x1", 1));
    assert!(
        capacity
            .shortage("a10g-x1", 1)
            .starts_with("no usable node"),
        "{}",
        capacity.shortage("a10g-x1", 1)
    );
}

/// `node` with extra labels (an admin's pool label on an agent-labelled GPU node).
fn relabelled(
    mut node: k8s_openapi::api::core::v1::Node,
    extra: &[(&str, &str)],
) -> Arc<k8s_openapi::api::core::v1::Node> {
    let labels = node.metadata.labels.get_or_insert_default();
    for (k, v) in extra {
        labels.insert(k.to_string(), v.to_string());
    }
    Arc::new(node)
}

/// An admin class "sandboxed" (a runtime class, no jobs) defined on `pool=sandbox`.
fn sandbox_class(
    selector: &[(&str, &str)],
) -> Arc<kube::core::DeserializeGuard<vramfit_api::GpuNodeClass>> {
    let defined =
        fixtures::gpu_node_class_definition("sandboxed", selector, "NVIDIA A10G", 4, 23_028, "8.6");
    let mut object = defined.0.clone().unwrap();
    object.spec.runtime_class_name = Some("kata".into());
    object.spec.allow_jobs = false;
    Arc::new(kube::core::DeserializeGuard(Ok(object)))
}

/// Regression: a node of an admin-defined class was also a node of the discovered class of its
/// GPU model, so a job could land there through the discovered class, without the admin class's
/// runtime class and despite its allowJobs: false.
#[test]
fn a_node_of_an_admin_class_is_no_node_of_a_discovered_class() {
    let sandboxed = relabelled(
        fixtures::gpu_node("s-1", "a10g", 4, 4),
        &[("pool", "sandbox")],
    );
    let open = Arc::new(fixtures::gpu_node("a-1", "a10g", 4, 4));
    let inventory = build_inventory(
        &[sandboxed.clone(), open.clone()],
        &[sandbox_class(&[("pool", "sandbox")])],
    );
    let members = |class: &str| -> Vec<String> {
        let index = inventory
            .classes
            .iter()
            .position(|c| c.name == class)
            .unwrap();
        inventory
            .nodes
            .iter()
            .filter(|n| n.classes.contains(&index))
            .map(|n| n.name.clone())
            .collect()
    };
    assert_eq!(members("a10g-x4"), ["a-1"]);
    assert_eq!(members("sandboxed"), ["s-1"]);
    let gpus: HashMap<_, _> = inventory
        .gpu_inventory()
        .into_iter()
        .map(|(c, _, g)| (c, g))
        .collect();
    assert_eq!((gpus["a10g-x4"], gpus["sandboxed"]), (4, 4));
    let discovered = inventory.class("a10g-x4").unwrap();
    assert_eq!(
        discovered.excluded_selectors,
        [BTreeMap::from([(
            "pool".to_string(),
            "sandbox".to_string()
        )])]
    );
    assert!(!discovered.selects(sandboxed.metadata.labels.as_ref().unwrap()));

    // Every A10G node in the admin's class: there is no discovered A10G class at all.
    let only_sandboxed = build_inventory(&[sandboxed], &[sandbox_class(&[("pool", "sandbox")])]);
    let names: Vec<_> = only_sandboxed
        .classes
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["sandboxed"]);
}

#[test]
fn admin_selectors_are_reduced_to_what_tells_a_class_s_nodes_apart() {
    let class = fixtures::class("a10g", 4);
    let product = class
        .node_selector
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap();
    let pinned_same = BTreeMap::from([product.clone(), ("pool".into(), "sandbox".into())]);
    let pinned_other = BTreeMap::from([
        (product.0.clone(), "NVIDIA-H100".into()),
        ("pool".into(), "x".into()),
    ]);
    let excluded = admin_exclusions(&class, &[&pinned_same, &pinned_other]).unwrap();
    assert_eq!(
        excluded,
        [BTreeMap::from([(
            "pool".to_string(),
            "sandbox".to_string()
        )])],
        "the label every node of the class has is dropped; a selector for another product never matches"
    );
    // Every node of the class would be the admin's: nothing can tell them apart.
    let whole = BTreeMap::from([product]);
    assert_eq!(admin_exclusions(&class, &[&whole]), None);
    // Five classes of two labels each: 32 terms, more than a pod should carry.
    let many: Vec<BTreeMap<String, String>> = (0..5)
        .map(|i| BTreeMap::from([(format!("a{i}"), "x".into()), (format!("b{i}"), "y".into())]))
        .collect();
    let refs: Vec<&BTreeMap<String, String>> = many.iter().collect();
    assert_eq!(
        admin_exclusions(&class, &refs[..4]).map(|e| e.len()),
        Some(4)
    );
    assert_eq!(admin_exclusions(&class, &refs), None);
    let inventory = build_inventory(
        &[Arc::new(fixtures::gpu_node("a-1", "a10g", 4, 4))],
        &(0..5)
            .map(|i| {
                let (a, b) = (format!("a{i}"), format!("b{i}"));
                fixtures::gpu_node_class_definition(
                    &format!("admin-{i}"),
                    &[(a.as_str(), "x"), (b.as_str(), "y")],
                    "NVIDIA A10G",
                    4,
                    23_028,
                    "8.6",
                )
            })
            .collect::<Vec<_>>(),
    );
    assert!(inventory.class("a10g-x4").is_none());
    assert!(
        inventory
            .problems
            .iter()
            .any(|p| p.starts_with("node class a10g-x4 is left out")),
        "{:?}",
        inventory.problems
    );
}

#[test]
fn a_group_counts_distinct_nodes_with_the_gpus_of_one_pod_free() {
    let nodes = vec![
        Arc::new(fixtures::gpu_node("a-1", "a10g", 4, 4)),
        Arc::new(fixtures::gpu_node("a-2", "a10g", 4, 4)),
        Arc::new(fixtures::gpu_node("a-3", "a10g", 4, 4)),
    ];
    let inventory = build_inventory(&nodes, &[]);
    // a-1 has 1 free, a-2 and a-3 have 4: 8 GPUs free in all, on two nodes with 4.
    let usage = gpu_usage(&[Arc::new(fixtures::gpu_pod(
        "other",
        "train",
        Some("a-1"),
        3,
    ))]);
    let constraints = PodConstraints::of_job(&fixtures::job("j", fixtures::vllm_mistral_spec()));
    let capacity = Capacity::compute(&inventory, &usage, &[], &constraints, &|_| true);
    assert_eq!(capacity.nodes_with_room("a10g-x4", 4), 2);
    assert_eq!(capacity.nodes_with_room("a10g-x4", 1), 3);
    assert_eq!(capacity.nodes_with_room("no-such-class", 1), 0);
    assert!(capacity.has_room_on("a10g-x4", 4, 2));
    assert!(
        !capacity.has_room_on("a10g-x4", 4, 3),
        "9 GPUs free in all, but only two nodes hold a pod of 4"
    );
    assert_eq!(
        capacity.shortage_on("a10g-x4", 4, 3),
        "no room for a group of 3: 2 of 3 usable node(s) have 4 GPUs free"
    );
    assert_eq!(
        capacity.shortage_on("a10g-x4", 4, 1),
        capacity.shortage("a10g-x4", 4),
        "one node: the plain pod's message"
    );
    // A pod of another job placed on a-2 (best fit takes a whole node) leaves one node.
    let capacity = Capacity::compute(
        &inventory,
        &usage,
        &[("a10g-x4".into(), 4)],
        &constraints,
        &|_| true,
    );
    assert_eq!(capacity.nodes_with_room("a10g-x4", 4), 1);
    assert!(!capacity.has_room_on("a10g-x4", 4, 2));
}

/// A replica that is a group takes one pod's GPUs on as many distinct nodes: never twice the
/// same node's remainder, so a second group does not count GPUs the first one holds.
#[test]
fn a_group_takes_its_gpus_on_distinct_nodes() {
    let nodes = vec![
        Arc::new(fixtures::gpu_node("a-1", "a10g", 4, 4)),
        Arc::new(fixtures::gpu_node("a-2", "a10g", 4, 4)),
    ];
    let inventory = build_inventory(&nodes, &[]);
    let job = fixtures::job("big", fixtures::vllm_mistral_spec());
    let mut capacity = Capacity::compute(
        &inventory,
        &GpuUsage::default(),
        &[],
        &PodConstraints::of_job(&job),
        &|_| true,
    );
    assert!(capacity.has_room_on("a10g-x4", 2, 2));
    capacity.take_on("a10g-x4", 2, 2);
    assert_eq!(
        capacity.nodes_with_room("a10g-x4", 2),
        2,
        "2 GPUs left on each"
    );
    capacity.take_on("a10g-x4", 2, 2);
    assert!(!capacity.has_room("a10g-x4", 1), "both nodes full");
}

/// With `--group-spread none` a node with GPUs for several of a group's pods counts once per
/// pod: one 4-GPU node holds a group of two 2-GPU pods, never a third.
#[test]
fn ranks_that_may_share_a_node_count_pods_not_nodes() {
    let nodes = vec![Arc::new(fixtures::gpu_node("a-1", "a10g", 4, 4))];
    let inventory = build_inventory(&nodes, &[]);
    let job = fixtures::job("big", fixtures::vllm_mistral_spec());
    let room = || {
        Capacity::compute(
            &inventory,
            &GpuUsage::default(),
            &[],
            &PodConstraints::of_job(&job),
            &|_| true,
        )
    };
    assert!(
        !room().has_room_on("a10g-x4", 2, 2),
        "one pod per node: one node is no group of two"
    );
    let mut shared = room().with_group_spread(GroupSpread::None);
    assert!(shared.has_room_on("a10g-x4", 2, 2));
    assert!(
        !shared.has_room_on("a10g-x4", 2, 3),
        "4 GPUs hold two pods of 2"
    );
    assert_eq!(
        shared.shortage_on("a10g-x4", 2, 3),
        "no room for a group of 3: the 1 usable node(s) have room for 2 pod(s) of 2 GPUs"
    );
    shared.take_on("a10g-x4", 2, 2);
    assert!(!shared.has_room("a10g-x4", 1), "both pods' GPUs taken");
}
