//! The pod of one attempt of a job (pure): the planned env and runtime flags, the GPU count in
//! the `nvidia.com/gpu` limit, node affinity to the chosen class, and the job's own pod
//! settings passed through.
pub use crate::error::BuildError;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvVar, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, Pod, PodSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use vramfit_api::labels::is_gpu_resource;
use vramfit_api::{InferenceJob, Plan};
use vramfit_planner::workload::{host_memory_mib, plan_env, runtime_args};
use vramfit_planner::{JobInput, NodeClass};

use vramfit_api::pod_keys::{
    APP_COMPONENT_LABEL, APP_INSTANCE_LABEL, APP_MANAGED_BY_LABEL, APP_NAME, APP_NAME_LABEL,
    ATTEMPT_LABEL, CONCURRENCY_LABEL, CONTAINER_NAME, GPU_PRODUCT_LABEL, JOB_LABEL,
    NODE_CLASS_LABEL, PLAN_ANNOTATION, SPEC_HASH_ANNOTATION, fnv1a64, label_value, pod_name,
};

use crate::tolerations::{gpu_toleration, pod_tolerations};
use adapter_volumes::{adapter_keys, adapter_mounts};
use pod_security::{container_security_context, pod_security_context};
use tuning_volumes::tuning_mounts;

/// The pod of attempt `attempt` of `job`, running `plan` on `class`.
pub fn desired_pod(
    job: &InferenceJob,
    input: &JobInput,
    plan: &Plan,
    class: &NodeClass,
    attempt: u32,
) -> Result<Pod, BuildError> {
    let job_name = job
        .metadata
        .name
        .clone()
        .ok_or(BuildError::MissingObjectKey("metadata.name"))?;
    let namespace = job
        .namespace()
        .ok_or(BuildError::MissingObjectKey("metadata.namespace"))?;
    let owner = OwnerReference {
        api_version: InferenceJob::api_version(&()).to_string(),
        kind: InferenceJob::kind(&()).to_string(),
        name: job_name.clone(),
        uid: job
            .metadata
            .uid
            .clone()
            .ok_or(BuildError::MissingObjectKey("metadata.uid"))?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    if class.node_selector.is_empty() {
        return Err(BuildError::InvalidClass(format!(
            "node class {} has no node selector; refusing to place a pod anywhere",
            class.name
        )));
    }
    let template = job.spec.pod.clone().unwrap_or_default();

    // The job's keys never include vramfit's (reserved_pod_keys: refused by the CRD and by
    // resolve_job); should one get through, vramfit's value wins.
    let mut labels = template.labels.clone();
    let instance = label_value(&job_name);
    labels.extend([
        (APP_NAME_LABEL.to_string(), APP_NAME.to_string()),
        (APP_INSTANCE_LABEL.to_string(), instance.clone()),
        (
            APP_MANAGED_BY_LABEL.to_string(),
            crate::FIELD_MANAGER.to_string(),
        ),
        (APP_COMPONENT_LABEL.to_string(), "inference".to_string()),
        (JOB_LABEL.to_string(), instance),
        (ATTEMPT_LABEL.to_string(), attempt.to_string()),
        (NODE_CLASS_LABEL.to_string(), label_value(&class.name)),
    ]);
    // A served replica: what a gateway's endpoint picker can score it on.
    if let Some(concurrency) = plan.concurrency {
        labels.insert(CONCURRENCY_LABEL.to_string(), concurrency.to_string());
        labels.insert(GPU_PRODUCT_LABEL.to_string(), label_value(&class.product));
    }

    // A served replica's adapters: what an endpoint picker routes an adapter's requests by.
    let (adapter_labels, adapter_annotation) = adapter_keys(input);
    labels.extend(adapter_labels);

    let spec = pod_spec(job, input, plan, class, &template);
    let mut annotations = template.annotations.clone();
    annotations.extend(adapter_annotation);
    annotations.insert(
        PLAN_ANNOTATION.to_string(),
        serde_json::to_string(plan).map_err(BuildError::Serialize)?,
    );
    annotations.insert(SPEC_HASH_ANNOTATION.to_string(), spec_hash(&spec)?);

    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(&job_name, attempt)),
            namespace: Some(namespace),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

fn pod_spec(
    job: &InferenceJob,
    input: &JobInput,
    plan: &Plan,
    class: &NodeClass,
    template: &vramfit_api::PodTemplate,
) -> PodSpec {
    // The planned env first, so that the job's own variables may refer to it with $(NAME);
    // on a name clash the planned value wins.
    let planned = plan_env(input, plan);
    let mut env: Vec<EnvVar> = planned
        .iter()
        .map(|(name, value)| EnvVar {
            name: name.clone(),
            value: Some(value.clone()),
            value_from: None,
        })
        .collect();
    env.extend(
        template
            .env
            .iter()
            .filter(|var| !planned.iter().any(|(name, _)| *name == var.name))
            .cloned(),
    );

    let mut args = job.spec.args.clone();
    args.extend(runtime_args(input, plan));

    // The class's resource only (a whole GPU, a MIG slice, a share): GPUs of any other kind
    // the template asks for would not be what the plan was made for.
    let gpus = Quantity(plan.gpu_count.to_string());
    let mut resources = template.resources.clone().unwrap_or_default();
    for side in [&mut resources.limits, &mut resources.requests] {
        let side = side.get_or_insert_with(BTreeMap::new);
        side.retain(|name, _| !is_gpu_resource(name));
        side.insert(class.resource.clone(), gpus.clone());
    }
    // Layers llama.cpp leaves on the CPU keep weights and KV cache in host memory: request
    // and limit what the plan needs, so the kubelet does not kill the pod for a plan vramfit
    // made. A job that sets its own memory keeps it.
    if let Some(mib) = host_memory_mib(input, plan) {
        for side in [&mut resources.requests, &mut resources.limits] {
            side.get_or_insert_with(BTreeMap::new)
                .entry("memory".to_string())
                .or_insert_with(|| Quantity(format!("{mib}Mi")));
        }
    }

    let tolerations = pod_tolerations(gpu_toleration(), &template.tolerations);

    let container = Container {
        name: CONTAINER_NAME.to_string(),
        image: Some(job.spec.image.clone()),
        command: non_empty(job.spec.command.clone()),
        args: non_empty(args),
        env: non_empty(env),
        resources: Some(resources),
        volume_mounts: non_empty(
            template
                .volume_mounts
                .iter()
                .cloned()
                .chain(tuning_mounts(input))
                .chain(adapter_mounts(input))
                .collect(),
        ),
        termination_message_policy: Some(termination_message_policy(template).to_string()),
        security_context: Some(container_security_context()),
        ..Container::default()
    };

    PodSpec {
        containers: vec![container],
        restart_policy: Some("Never".to_string()),
        affinity: Some(class_affinity(class)),
        node_selector: (!template.node_selector.is_empty()).then(|| template.node_selector.clone()),
        tolerations: Some(tolerations),
        volumes: non_empty(template.volumes.clone()),
        service_account_name: template.service_account_name.clone(),
        // The namespace's default ServiceAccount token is of no use to an inference server
        // and is a credential a compromised workload could use; a job that names an account
        // gets what that account's own automount setting says.
        automount_service_account_token: template.service_account_name.is_none().then_some(false),
        security_context: Some(pod_security_context(template)),
        priority_class_name: template.priority_class_name.clone(),
        // The admin's, from the class's GpuNodeClass; a job has no field for it.
        runtime_class_name: class.runtime_class_name.clone(),
        ..PodSpec::default()
    }
}

/// `File` unless the job opts into log tails: the termination message is copied into the
/// job's status and events, which must not carry log lines (a secret printed by the workload)
/// that the job's owner did not choose to publish.
pub fn termination_message_policy(template: &vramfit_api::PodTemplate) -> &'static str {
    if template.termination_message_from_logs {
        "FallbackToLogsOnError"
    } else {
        "File"
    }
}

/// Required node affinity to every label of the class's node selector, away from the label
/// values the class excludes (mixed, MIG and shared nodes for a whole-GPU class), and away
/// from the nodes of admin-defined classes (`excluded_selectors`). A node of such a class
/// carries every label of its selector, so staying away takes one label of each selector
/// that the node lacks: one node-selector term per choice of a label from each (terms are
/// ORed), at most `capacity::inventory::MAX_AFFINITY_TERMS`.
fn class_affinity(class: &NodeClass) -> Affinity {
    let mut choices: Vec<Vec<(&String, &String)>> = vec![Vec::new()];
    for selector in &class.excluded_selectors {
        choices = choices
            .iter()
            .flat_map(|chosen| {
                selector.iter().map(move |label| {
                    let mut next = chosen.clone();
                    next.push(label);
                    next
                })
            })
            .collect();
    }
    let node_selector_terms = choices
        .into_iter()
        .map(|away| {
            let mut excluded: BTreeMap<&String, Vec<String>> = BTreeMap::new();
            for (key, values) in &class.node_exclusions {
                excluded
                    .entry(key)
                    .or_default()
                    .extend(values.iter().cloned());
            }
            for (key, value) in away {
                let values = excluded.entry(key).or_default();
                if !values.contains(value) {
                    values.push(value.clone());
                }
            }
            // The class's own exclusions first, in their order; an admin class's labels after.
            let mut keys: Vec<&String> = class.node_exclusions.iter().map(|(k, _)| k).collect();
            keys.extend(
                excluded
                    .keys()
                    .filter(|k| !keys.contains(k))
                    .copied()
                    .collect::<Vec<_>>(),
            );
            let selected = class
                .node_selector
                .iter()
                .map(|(key, value)| NodeSelectorRequirement {
                    key: key.clone(),
                    operator: "In".to_string(),
                    values: Some(vec![value.clone()]),
                });
            let not_in = keys.into_iter().map(|key| NodeSelectorRequirement {
                key: key.clone(),
                operator: "NotIn".to_string(),
                values: excluded.get(key).cloned(),
            });
            NodeSelectorTerm {
                match_expressions: Some(selected.chain(not_in).collect()),
                match_fields: None,
            }
        })
        .collect();
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms,
            }),
            preferred_during_scheduling_ignored_during_execution: None,
        }),
        ..Affinity::default()
    }
}

fn non_empty<T>(items: Vec<T>) -> Option<Vec<T>> {
    (!items.is_empty()).then_some(items)
}

/// A stable hash of a pod spec (FNV-1a over its JSON), stable across operator versions as long
/// as the spec serializes the same.
pub fn spec_hash(spec: &PodSpec) -> Result<String, BuildError> {
    let json = serde_json::to_vec(spec).map_err(BuildError::Serialize)?;
    Ok(format!("{:016x}", fnv1a64(&json)))
}

/// The spec hash a pod was created with.
pub fn recorded_spec_hash(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(SPEC_HASH_ANNOTATION)
        .map(String::as_str)
}

/// The plan a pod was created with, from its annotation.
pub fn recorded_plan(pod: &Pod) -> Option<Plan> {
    let json = pod.metadata.annotations.as_ref()?.get(PLAN_ANNOTATION)?;
    serde_json::from_str(json).ok()
}

/// Whether the pod's labels and annotations already hold every value vramfit wants.
pub fn metadata_matches(observed: &Pod, desired: &Pod) -> bool {
    fn contains(
        have: &Option<BTreeMap<String, String>>,
        want: &Option<BTreeMap<String, String>>,
    ) -> bool {
        let empty = BTreeMap::new();
        let have = have.as_ref().unwrap_or(&empty);
        want.as_ref()
            .is_none_or(|want| want.iter().all(|(k, v)| have.get(k) == Some(v)))
    }
    contains(&observed.metadata.labels, &desired.metadata.labels)
        && contains(
            &observed.metadata.annotations,
            &desired.metadata.annotations,
        )
}

pub mod adapter_volumes;
pub mod pod_security;
pub mod tuning_volumes;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use vramfit_api::labels::GPU_RESOURCE;
    use vramfit_api::{Fallback, Runtime};
    use vramfit_planner::{plan_for_class, resolve_job};

    fn build(job: &InferenceJob, class: &NodeClass, attempt: u32) -> (Pod, Plan) {
        let input = resolve_job(&job.spec).unwrap();
        let plan = plan_for_class(&input, class, &Fallback::default()).unwrap();
        (
            desired_pod(job, &input, &plan, class, attempt).unwrap(),
            plan,
        )
    }

    #[test]
    fn vllm_pod_carries_the_env_contract_gpus_affinity_and_flags() {
        let job = fixtures::job_with_pod_template("chat", fixtures::vllm_mistral_spec());
        let class = fixtures::class("a10g", 4);
        let (pod, plan) = build(&job, &class, 1);
        assert_eq!(pod.metadata.name.as_deref(), Some("chat-1"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some(fixtures::NAMESPACE));

        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(
            spec.node_name, None,
            "placement goes through affinity, not nodeName"
        );
        let c = &spec.containers[0];
        assert_eq!(c.name, CONTAINER_NAME);
        assert_eq!(
            c.termination_message_policy.as_deref(),
            Some("File"),
            "no log line reaches status unless the job opts in"
        );
        let gpus = Quantity(plan.gpu_count.to_string());
        let res = c.resources.as_ref().unwrap();
        assert_eq!(res.limits.as_ref().unwrap().get(GPU_RESOURCE), Some(&gpus));
        assert_eq!(
            res.requests.as_ref().unwrap().get(GPU_RESOURCE),
            Some(&gpus)
        );
        assert_eq!(
            res.limits.as_ref().unwrap().get("memory"),
            Some(&Quantity("64Gi".into())),
            "the job's resources are kept"
        );

        let env = fixtures::container_env(&pod);
        assert_eq!(env["TORCH_DTYPE"], "bfloat16");
        assert_eq!(env["USE_QUANTIZATION"], "false");
        assert_eq!(env["USE_FLASH_ATTN"], "true");
        assert_eq!(env["PYTORCH_CUDA_ALLOC_CONF"], "max_split_size_mb:128");
        assert_eq!(env["VRAMFIT_NODE_CLASS"], class.name);
        assert_eq!(env["VRAMFIT_GPU_COUNT"], plan.gpu_count.to_string());
        assert_eq!(env["HF_HOME"], "/cache", "the job's env is passed through");
        let names: Vec<_> = c
            .env
            .as_ref()
            .unwrap()
            .iter()
            .map(|e| e.name.clone())
            .collect();
        assert_eq!(names.iter().filter(|n| *n == "USE_FLASH_ATTN").count(), 1);
        // A job may not set a planned name at all: it never reaches the pod.
        let mut clash = job.spec.clone();
        if let Some(pod) = clash.pod.as_mut() {
            pod.env.push(k8s_openapi::api::core::v1::EnvVar {
                name: "USE_FLASH_ATTN".into(),
                value: Some("false".into()),
                value_from: None,
            });
        }
        let refused = vramfit_planner::resolve_job(&clash)
            .expect_err("a planned name")
            .to_string();
        assert!(refused.contains("USE_FLASH_ATTN"), "{refused}");

        let args = c.args.as_ref().unwrap();
        assert_eq!(
            &args[..2],
            &[
                "--model".to_string(),
                "mistralai/Mistral-7B-Instruct-v0.3".to_string()
            ]
        );
        let flag = |name: &str| {
            args.iter()
                .position(|a| a == name)
                .map(|i| args[i + 1].clone())
        };
        assert_eq!(flag("--dtype").as_deref(), Some("bfloat16"));
        assert_eq!(
            flag("--tensor-parallel-size"),
            Some(plan.gpu_count.to_string())
        );
        assert_eq!(flag("--max-model-len").as_deref(), Some("4096"));

        let terms = &spec
            .affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()
            .node_selector_terms;
        let exprs = terms[0].match_expressions.as_ref().unwrap();
        for (key, value) in &class.node_selector {
            assert!(exprs.iter().any(|e| &e.key == key
                && e.operator == "In"
                && e.values.as_deref() == Some(std::slice::from_ref(value))));
        }
        assert_eq!(spec.node_selector.as_ref().unwrap()["pool"], "inference");

        let tolerations = spec.tolerations.as_ref().unwrap();
        assert_eq!(tolerations[0], gpu_toleration());
        assert!(
            tolerations
                .iter()
                .any(|t| t.key.as_deref() == Some("dedicated"))
        );
        assert_eq!(spec.service_account_name.as_deref(), Some("inference"));
        assert_eq!(
            spec.automount_service_account_token, None,
            "a named account decides whether its token is mounted"
        );
        assert_eq!(spec.priority_class_name.as_deref(), Some("batch-high"));
        assert_eq!(spec.volumes.as_ref().unwrap()[0].name, "cache");
        assert_eq!(c.volume_mounts.as_ref().unwrap()[0].mount_path, "/cache");

        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.kind, "InferenceJob");
        assert_eq!(owner.api_version, "vramfit.io/v1alpha1");
        assert_eq!(owner.name, "chat");
        assert_eq!(owner.uid, fixtures::uid("chat"));
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));

        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["app.kubernetes.io/name"], "vramfit-job");
        assert_eq!(labels["app.kubernetes.io/instance"], "chat");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "vramfit-operator");
        assert_eq!(labels["app.kubernetes.io/component"], "inference");
        assert_eq!(labels[JOB_LABEL], "chat");
        assert_eq!(labels[ATTEMPT_LABEL], "1");
        assert_eq!(labels[NODE_CLASS_LABEL], class.name);
        assert_eq!(labels["team"], "research", "the job's pod labels are kept");
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations["example.com/owner"], "ml");
        assert_eq!(recorded_plan(&pod).as_ref(), Some(&plan));
        assert_eq!(
            recorded_spec_hash(&pod),
            Some(spec_hash(spec).unwrap().as_str())
        );
    }

    #[test]
    fn log_tails_become_the_termination_message_only_when_the_job_opts_in() {
        let class = fixtures::class("a10g", 4);
        let policy = |job: &InferenceJob| {
            let (pod, _) = build(job, &class, 1);
            pod.spec.unwrap().containers[0]
                .termination_message_policy
                .clone()
        };
        let plain = fixtures::job("chat", fixtures::vllm_mistral_spec());
        assert_eq!(policy(&plain).as_deref(), Some("File"));
        let mut opted_in = plain.clone();
        opted_in.spec.pod = Some(vramfit_api::PodTemplate {
            termination_message_from_logs: true,
            ..Default::default()
        });
        assert_eq!(policy(&opted_in).as_deref(), Some("FallbackToLogsOnError"));
        let (a, _) = build(&plain, &class, 1);
        let (b, _) = build(&opted_in, &class, 1);
        assert_ne!(
            recorded_spec_hash(&a),
            recorded_spec_hash(&b),
            "turning it on is a pod change"
        );
    }

    #[test]
    fn no_service_account_token_unless_the_job_names_an_account() {
        let class = fixtures::class("a10g", 4);
        let plain = fixtures::job("chat", fixtures::vllm_mistral_spec());
        let (pod, _) = build(&plain, &class, 1);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.service_account_name, None);
        assert_eq!(spec.automount_service_account_token, Some(false));
        let mut named = plain.clone();
        named.spec.pod = Some(vramfit_api::PodTemplate {
            service_account_name: Some("reader".into()),
            ..Default::default()
        });
        let (pod, _) = build(&named, &class, 1);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("reader"));
        assert_eq!(spec.automount_service_account_token, None);
    }

    #[test]
    fn the_runtime_class_is_the_admins_and_never_the_jobs() {
        let mut class = fixtures::class("a10g", 4);
        let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
        let (pod, _) = build(&job, &class, 1);
        assert_eq!(pod.spec.unwrap().runtime_class_name, None);
        class.apply_overrides(&vramfit_api::GpuNodeClassSpec {
            runtime_class_name: Some("nvidia".into()),
            allow_jobs: true,
            ..Default::default()
        });
        let (pod, _) = build(&job, &class, 1);
        assert_eq!(
            pod.spec.unwrap().runtime_class_name.as_deref(),
            Some("nvidia")
        );
    }

    #[test]
    fn llamacpp_pod_gets_offload_flags() {
        let job = fixtures::job("gguf", fixtures::llamacpp_spec());
        let class = fixtures::class("a10g", 1);
        let (pod, plan) = build(&job, &class, 2);
        assert_eq!(job.spec.runtime, Runtime::Llamacpp);
        assert_eq!(pod.metadata.name.as_deref(), Some("gguf-2"));
        let args = pod.spec.as_ref().unwrap().containers[0]
            .args
            .clone()
            .unwrap();
        let llama = plan.llama_cpp.unwrap();
        let flag = |name: &str| {
            args.iter()
                .position(|a| a == name)
                .map(|i| args[i + 1].clone())
        };
        assert_eq!(flag("--n-gpu-layers"), Some(llama.gpu_layers.to_string()));
        assert_eq!(
            flag("--cache-type-k").as_deref(),
            Some(llama.kv_cache_type.as_str())
        );
        assert_eq!(flag("--flash-attn").as_deref(), Some("on"));
        let env = fixtures::container_env(&pod);
        assert_eq!(
            env["VRAMFIT_LLAMACPP_GPU_LAYERS"],
            llama.gpu_layers.to_string()
        );
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[ATTEMPT_LABEL], "2");
    }

    #[test]
    fn a_partial_llamacpp_offload_requests_and_limits_host_memory() {
        let class = fixtures::class("a10g", 1);
        let big = fixtures::spec_from_json(
            r#"{"model": {"preset": "llama-3.1-70b-instruct-q4_k_m"}, "runtime": "llamacpp",
                "image": "llama", "contextLength": 8192}"#,
        );
        let job = fixtures::job("big", big);
        let (pod, plan) = build(&job, &class, 1);
        let llama = plan.llama_cpp.unwrap();
        assert!(llama.gpu_layers < llama.total_layers - 1, "{llama:?}");
        let input = vramfit_planner::resolve_job(&job.spec).unwrap();
        let mib = host_memory_mib(&input, &plan).unwrap();
        assert!(
            mib * 1024 * 1024 > 42_520_393_000,
            "at least the GGUF file: {mib}"
        );
        let res = pod.spec.unwrap().containers[0].resources.clone().unwrap();
        let want = Some(Quantity(format!("{mib}Mi")));
        assert_eq!(res.requests.unwrap().get("memory").cloned(), want);
        assert_eq!(res.limits.unwrap().get("memory").cloned(), want);
        // Everything on the GPUs: no host memory of vramfit's.
        let small = fixtures::job("small", fixtures::llamacpp_spec());
        let (pod, _) = build(&small, &class, 1);
        let res = pod.spec.unwrap().containers[0].resources.clone().unwrap();
        assert_eq!(res.limits.unwrap().get("memory"), None);
    }

    #[test]
    fn transformers_pod_on_a_v100_gets_float16_and_no_flags() {
        let job = fixtures::job("vision", fixtures::internvl_spec());
        let class = fixtures::class("v100", 4);
        let (pod, plan) = build(&job, &class, 1);
        let env = fixtures::container_env(&pod);
        assert_eq!(env["TORCH_DTYPE"], "float16");
        assert_eq!(env["USE_FLASH_ATTN"], "false");
        assert_eq!(env["PYTORCH_CUDA_ALLOC_CONF"], "max_split_size_mb:32");
        assert_eq!(env["MAX_TILES"], plan.max_tiles.unwrap().to_string());
        assert_eq!(pod.spec.as_ref().unwrap().containers[0].args, None);
    }

    #[test]
    fn spec_hash_tracks_the_spec_only() {
        let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
        let class = fixtures::class("a10g", 4);
        let (a, _) = build(&job, &class, 1);
        let mut relabelled = job.clone();
        relabelled.spec.pod = Some(vramfit_api::PodTemplate {
            labels: BTreeMap::from([("x".into(), "y".into())]),
            ..Default::default()
        });
        let (b, _) = build(&relabelled, &class, 1);
        assert_eq!(recorded_spec_hash(&a), recorded_spec_hash(&b));
        assert!(!metadata_matches(&a, &b));
        let mut reimaged = job.clone();
        reimaged.spec.image = "vllm/vllm-openai:v0.9.0".into();
        let (c, _) = build(&reimaged, &class, 1);
        assert_ne!(recorded_spec_hash(&a), recorded_spec_hash(&c));
    }
}
