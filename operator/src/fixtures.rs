//! Builders of jobs, nodes, pods and classes for tests and the benchmark harness. Nothing here
//! runs in the operator itself.
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStatus, EmptyDirVolumeSource,
    EnvVar, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus,
    ResourceRequirements, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use vramfit_api::labels::{self, ComputeCapability, GpuFacts, LabelSource};
use vramfit_api::partitions::MigFacts;
use vramfit_api::{
    DtypeRequest, Fallback, GpuDescription, GpuNodeClass, GpuNodeClassSpec, InferenceJob,
    InferenceJobSpec, ModelSpec, Plan, PodTemplate,
};
use vramfit_planner::{NodeClass, classes_from_facts, plan_for_class, resolve_job};

/// The namespace of every fixture job.
pub const NAMESPACE: &str = "ml";

/// A deterministic uid for a fixture object.
pub fn uid(name: &str) -> String {
    format!(
        "00000000-0000-4000-8000-{:012x}",
        vramfit_api::pod_keys::fnv1a64(name.as_bytes()) & 0xffff_ffff_ffff
    )
}

/// GPU facts of a well-known model: `(product label, MiB per GPU, compute capability)`.
pub fn gpu(kind: &str) -> (&'static str, u64, ComputeCapability) {
    match kind {
        "a10g" => ("NVIDIA-A10G", 23_028, ComputeCapability::new(8, 6)),
        "v100" => ("Tesla-V100-SXM2-16GB", 16_160, ComputeCapability::new(7, 0)),
        "h100" => (
            "NVIDIA-H100-80GB-HBM3",
            81_559,
            ComputeCapability::new(9, 0),
        ),
        "a100" => (
            "NVIDIA-A100-SXM4-80GB",
            81_920,
            ComputeCapability::new(8, 0),
        ),
        "l40s" => ("NVIDIA-L40S", 46_068, ComputeCapability::new(8, 9)),
        "t4" => ("Tesla-T4", 15_360, ComputeCapability::new(7, 5)),
        other => panic!("no fixture GPU {other}"),
    }
}

/// The facts the agent's labels give for `count` GPUs of `kind`.
pub fn facts(kind: &str, count: u32) -> GpuFacts {
    let (product, memory_mib, capability) = gpu(kind);
    GpuFacts {
        product: product.to_string(),
        count,
        memory_mib,
        compute_capability: Some(capability),
        source: LabelSource::Vramfit,
        mixed: false,
        mig: MigFacts::default(),
        sharing: None,
    }
}

/// The class of nodes with `count` GPUs of `kind`.
pub fn class(kind: &str, count: u32) -> NodeClass {
    classes_from_facts(&facts(kind, count), None).remove(0)
}

/// The vramfit agent's labels for `count` GPUs of `kind`.
pub fn agent_labels(kind: &str, count: u32) -> BTreeMap<String, String> {
    let (product, memory_mib, capability) = gpu(kind);
    BTreeMap::from([
        (labels::GPU_PRESENT.to_string(), "true".to_string()),
        (labels::GPU_PRODUCT.to_string(), product.to_string()),
        (labels::GPU_COUNT.to_string(), count.to_string()),
        (labels::GPU_MEMORY_MIB.to_string(), memory_mib.to_string()),
        (
            labels::GPU_COMPUTE_CAPABILITY.to_string(),
            capability.to_string(),
        ),
    ])
}

/// A Ready node with `labels` and `allocatable` GPUs.
pub fn labelled_node(name: &str, labels: &[(&str, &str)], allocatable: u32) -> Node {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    node_with(name, labels, allocatable)
}

fn node_with(name: &str, mut labels: BTreeMap<String, String>, allocatable: u32) -> Node {
    labels.insert("kubernetes.io/hostname".to_string(), name.to_string());
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels),
            resource_version: Some("1".to_string()),
            uid: Some(uid(name)),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            allocatable: Some(BTreeMap::from([
                (
                    labels::GPU_RESOURCE.to_string(),
                    Quantity(allocatable.to_string()),
                ),
                ("cpu".to_string(), Quantity("32".to_string())),
            ])),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".to_string(),
                status: "True".to_string(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        }),
    }
}

/// A Ready GPU node labelled by the vramfit agent.
pub fn gpu_node(name: &str, kind: &str, count: u32, allocatable: u32) -> Node {
    node_with(name, agent_labels(kind, count), allocatable)
}

/// A Ready node without GPUs.
pub fn cpu_node(name: &str) -> Node {
    node_with(
        name,
        BTreeMap::from([(labels::GPU_PRESENT.to_string(), "false".to_string())]),
        0,
    )
}

/// A GpuNodeClass that overrides a discovered class's price.
pub fn gpu_node_class_override(
    name: &str,
    cents_per_gpu: u32,
) -> Arc<DeserializeGuard<GpuNodeClass>> {
    let mut class = GpuNodeClass::new(
        name,
        GpuNodeClassSpec {
            hourly_price_cents_per_gpu: Some(cents_per_gpu),
            allow_jobs: true,
            ..GpuNodeClassSpec::default()
        },
    );
    class.metadata.uid = Some(uid(name));
    Arc::new(DeserializeGuard(Ok(class)))
}

/// A GpuNodeClass that defines a class of its own.
pub fn gpu_node_class_definition(
    name: &str,
    selector: &[(&str, &str)],
    product: &str,
    count: u32,
    memory_mib: u64,
    capability: &str,
) -> Arc<DeserializeGuard<GpuNodeClass>> {
    let class = GpuNodeClass::new(
        name,
        GpuNodeClassSpec {
            node_selector: selector
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            gpu: Some(GpuDescription {
                product: product.to_string(),
                count,
                memory_mib,
                compute_capability: capability.to_string(),
            }),
            allow_jobs: true,
            ..GpuNodeClassSpec::default()
        },
    );
    Arc::new(DeserializeGuard(Ok(class)))
}

/// A GpuNodeClass that did not deserialize.
pub fn malformed_gpu_node_class(name: &str) -> Arc<DeserializeGuard<GpuNodeClass>> {
    Arc::new(DeserializeGuard(Err(InvalidObject {
        error: "spec.tier: unknown variant `huge`".to_string(),
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
    })))
}

/// A job spec from JSON, as a user would write it (panics on a bad fixture).
pub fn spec_from_json(json: &str) -> InferenceJobSpec {
    match serde_json::from_str(json) {
        Ok(spec) => spec,
        Err(error) => panic!("bad fixture spec: {error}"),
    }
}

/// Mistral-7B on vLLM.
pub fn vllm_mistral_spec() -> InferenceJobSpec {
    spec_from_json(
        r#"{"model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "vllm",
            "image": "vllm/vllm-openai:v0.8.5",
            "args": ["--model", "mistralai/Mistral-7B-Instruct-v0.3"]}"#,
    )
}

/// InternVL3-8B (vision) on transformers.
pub fn internvl_spec() -> InferenceJobSpec {
    spec_from_json(
        r#"{"model": {"preset": "internvl3-8b"}, "runtime": "transformers",
            "image": "ghcr.io/example/internvl-batch:1"}"#,
    )
}

/// A GGUF model on llama.cpp.
pub fn llamacpp_spec() -> InferenceJobSpec {
    spec_from_json(
        r#"{"model": {"preset": "mistral-7b-instruct-v0.3-q4_k_m"}, "runtime": "llamacpp",
            "image": "ghcr.io/ggml-org/llama.cpp:server-cuda",
            "args": ["--model", "/models/mistral.gguf"]}"#,
    )
}

/// A job that pins bfloat16.
pub fn bf16_pinned_spec() -> InferenceJobSpec {
    InferenceJobSpec {
        dtype: DtypeRequest::Bfloat16,
        ..vllm_mistral_spec()
    }
}

/// A job whose model is unknown (fails `resolve_job`).
pub fn invalid_spec() -> InferenceJobSpec {
    InferenceJobSpec {
        model: ModelSpec {
            preset: Some("gpt-5".to_string()),
            ..ModelSpec::default()
        },
        ..vllm_mistral_spec()
    }
}

/// A job in [`NAMESPACE`] at generation 1.
pub fn job(name: &str, spec: InferenceJobSpec) -> InferenceJob {
    let mut job = InferenceJob::new(name, spec);
    job.metadata.namespace = Some(NAMESPACE.to_string());
    job.metadata.uid = Some(uid(name));
    job.metadata.generation = Some(1);
    job.metadata.resource_version = Some("1".to_string());
    job
}

/// A job whose `spec.pod` sets every pass-through field.
pub fn job_with_pod_template(name: &str, mut spec: InferenceJobSpec) -> InferenceJob {
    spec.pod = Some(PodTemplate {
        env: vec![EnvVar {
            name: "HF_HOME".into(),
            value: Some("/cache".into()),
            value_from: None,
        }],
        resources: Some(ResourceRequirements {
            limits: Some(BTreeMap::from([("memory".into(), Quantity("64Gi".into()))])),
            ..ResourceRequirements::default()
        }),
        volumes: vec![Volume {
            name: "cache".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        }],
        volume_mounts: vec![VolumeMount {
            name: "cache".into(),
            mount_path: "/cache".into(),
            ..VolumeMount::default()
        }],
        tolerations: vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("inference".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }],
        node_selector: BTreeMap::from([("pool".into(), "inference".into())]),
        service_account_name: Some("inference".into()),
        labels: BTreeMap::from([("team".into(), "research".into())]),
        annotations: BTreeMap::from([("example.com/owner".into(), "ml".into())]),
        priority_class_name: Some("batch-high".into()),
        ..PodTemplate::default()
    });
    job(name, spec)
}

/// The plan of Mistral-7B on vLLM on `count` GPUs of `kind`.
pub fn plan_on(kind: &str, count: u32) -> Plan {
    let input = match resolve_job(&vllm_mistral_spec()) {
        Ok(input) => input,
        Err(error) => panic!("{error}"),
    };
    match plan_for_class(&input, &class(kind, count), &Fallback::default()) {
        Ok(plan) => plan,
        Err(error) => panic!("{error}"),
    }
}

/// A bare pod of [`NAMESPACE`].
pub fn pod_named(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(NAMESPACE.to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec::default()),
        status: None,
    }
}

/// `pod` as the API shows it once created: uid, resource version, Pending.
pub fn created(mut pod: Pod) -> Pod {
    let name = pod.metadata.name.clone().unwrap_or_default();
    pod.metadata.uid = Some(uid(&name));
    pod.metadata.resource_version = Some("1".to_string());
    with_phase(pod, "Pending", None)
}

fn with_phase(mut pod: Pod, phase: &str, node: Option<&str>) -> Pod {
    if let Some(node) = node {
        pod.spec.get_or_insert_default().node_name = Some(node.to_string());
    }
    pod.status = Some(PodStatus {
        phase: Some(phase.to_string()),
        ..PodStatus::default()
    });
    pod
}

/// `pod`, bound to `node` (or not) and waiting.
pub fn as_pending(pod: Pod, node: Option<&str>) -> Pod {
    with_phase(pod, "Pending", node)
}

/// `pod` whose container waits for `reason` (`ContainerCreating`, `ImagePullBackOff`…), as a
/// kubelet reports it.
pub fn with_waiting_container(mut pod: Pod, reason: &str) -> Pod {
    let status = pod.status.get_or_insert_default();
    status.container_statuses = Some(vec![ContainerStatus {
        name: vramfit_api::pod_keys::CONTAINER_NAME.to_string(),
        state: Some(ContainerState {
            waiting: Some(k8s_openapi::api::core::v1::ContainerStateWaiting {
                reason: Some(reason.to_string()),
                message: None,
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }]);
    pod
}

/// `pod`, running on `node`.
pub fn as_running(pod: Pod, node: &str) -> Pod {
    with_phase(pod, "Running", Some(node))
}

/// `pod`, finished successfully on `node`.
pub fn as_succeeded(pod: Pod, node: &str) -> Pod {
    with_phase(pod, "Succeeded", Some(node))
}

/// `pod`, finished successfully on `node`, its container's termination message `message`.
pub fn as_succeeded_with_message(pod: Pod, node: &str, message: &str) -> Pod {
    let mut pod = as_failed(pod, node, "Completed", 0, message);
    if let Some(status) = pod.status.as_mut() {
        status.phase = Some("Succeeded".to_string());
    }
    pod
}

/// `pod`, failed on `node`: its container terminated with `reason`, `exit_code` and
/// termination `message`.
pub fn as_failed(pod: Pod, node: &str, reason: &str, exit_code: i32, message: &str) -> Pod {
    let mut pod = with_phase(pod, "Failed", Some(node));
    if let Some(status) = pod.status.as_mut() {
        status.container_statuses = Some(vec![ContainerStatus {
            name: vramfit_api::pod_keys::CONTAINER_NAME.to_string(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code,
                    reason: Some(reason.to_string()),
                    message: (!message.is_empty()).then(|| message.to_string()),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }]);
    }
    pod
}

/// `pod` the scheduler could not place, as it says so (`PodScheduled=False`, `Unschedulable`,
/// `message`).
pub fn with_unschedulable_condition(mut pod: Pod, message: &str) -> Pod {
    pod.status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default()
        .push(PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some(message.into()),
            ..PodCondition::default()
        });
    pod
}

/// A bare pod waiting, bound to `node` or not.
pub fn pending_pod(name: &str, node: Option<&str>) -> Pod {
    as_pending(pod_named(name), node)
}

/// A bare pod running on `node`.
pub fn running_pod(name: &str, node: &str) -> Pod {
    as_running(pod_named(name), node)
}

/// A bare pod finished on `node`.
pub fn succeeded_pod(name: &str, node: &str) -> Pod {
    as_succeeded(pod_named(name), node)
}

/// A bare pod failed on `node`.
pub fn failed_pod(name: &str, node: &str, reason: &str, exit_code: i32, message: &str) -> Pod {
    as_failed(pod_named(name), node, reason, exit_code, message)
}

/// A pod bound to `node` whose kubelet refused it at admission with `reason`
/// (`UnexpectedAdmissionError`, `OutOfnvidia.com/gpu`, …): Failed, no container ran.
pub fn refused_pod(name: &str, node: &str, reason: &str) -> Pod {
    as_refused(pod_named(name), node, reason)
}

/// `pod`, bound to `node` and refused there at admission with `reason`.
pub fn as_refused(pod: Pod, node: &str, reason: &str) -> Pod {
    let mut pod = with_phase(pod, "Failed", Some(node));
    if let Some(status) = pod.status.as_mut() {
        status.reason = Some(reason.to_string());
        status.message = Some(format!("Pod was rejected: {reason}"));
    }
    pod
}

/// Another workload's pod taking `gpus` GPUs (running when bound).
pub fn gpu_pod(namespace: &str, name: &str, node: Option<&str>, gpus: u32) -> Pod {
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "train".to_string(),
                resources: Some(ResourceRequirements {
                    limits: Some(BTreeMap::from([(
                        labels::GPU_RESOURCE.to_string(),
                        Quantity(gpus.to_string()),
                    )])),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    };
    match node {
        Some(node) => as_running(pod, node),
        None => as_pending(pod, None),
    }
}

/// Another workload's finished pod that took `gpus` GPUs on `node`.
pub fn succeeded_gpu_pod(namespace: &str, name: &str, node: &str, gpus: u32) -> Pod {
    as_succeeded(gpu_pod(namespace, name, Some(node), gpus), node)
}

/// The first container's environment, name → value (a value taken from elsewhere reads empty).
pub fn container_env(pod: &Pod) -> BTreeMap<String, String> {
    pod.spec
        .iter()
        .filter_map(|spec| spec.containers.first())
        .flat_map(|container| container.env.iter().flatten())
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}
