//! A replica pod that mounts its model from the node cache (pure): the PersistentVolume (a
//! read-only `hostPath` of the model's folder, `vramfit_cache::layout::Layout` deciding the
//! path), the job's claim bound to it, and the pod's volume, mount, required affinity to the
//! nodes holding the model, annotations and the env that points the runtime at the mount,
//! offline ([`CACHE_ENV`]).
use crate::capacity::HOSTNAME_TOPOLOGY;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, HostPathVolumeSource, NodeSelector, NodeSelectorRequirement,
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PersistentVolumeSpec, Pod, PodSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use thiserror::Error;
use vramfit_api::model_cache::{MOUNT_PATH, POD_MODEL_ANNOTATION, VOLUME_LABEL, WeightsSource};
use vramfit_api::{InferenceJob, Runtime};
use vramfit_cache::layout::{Layout, SERVED_DIR};
use vramfit_hub::RepoRef;

use super::job_model::JobModel;
use super::placement::CachePlacement;
use super::{WEIGHTS_NOTE_ANNOTATION, WEIGHTS_SOURCE_ANNOTATION};

/// The pod volume's name.
pub const VOLUME_NAME: &str = "vramfit-model";
/// The smallest volume size requested (a model listed with 0 bytes still asks for some).
pub const MIN_BYTES: u64 = 1 << 20;

/// Why the mount could not be built.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum MountError {
    /// The repository or revision is not one the Hub accepts.
    #[error("model {0}: {1}")]
    Repo(String, String),
    /// The job lacks a name, namespace or uid.
    #[error("the job has no {0}")]
    MissingKey(&'static str),
    /// The cache root is not a valid path.
    #[error("the model's folder {0:?} is not valid UTF-8")]
    Path(String),
}

/// What an env var of [`CACHE_ENV`] is set to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvValue {
    /// This text.
    Fixed(&'static str),
    /// The mount path.
    MountPath,
    /// The mount path joined with `model.huggingFace.file`.
    File,
}

/// One env var a pod that mounts its model gets, and which runtimes get it.
#[derive(Clone, Copy, Debug)]
pub struct CacheEnv {
    /// The name.
    pub name: &'static str,
    /// The runtimes that get it (empty: every runtime).
    pub runtimes: &'static [Runtime],
    /// Its value.
    pub value: EnvValue,
}

/// The env that points a runtime at the mounted model, offline (docs/runtime-contracts.md,
/// "Pointing the runtime at the cached model"). It wins over the job's own `pod.env` of the
/// same names while the cache is used.
pub const CACHE_ENV: [CacheEnv; 5] = [
    CacheEnv {
        name: "HF_HUB_OFFLINE",
        runtimes: &[],
        value: EnvValue::Fixed("1"),
    },
    CacheEnv {
        name: "VRAMFIT_MODEL_DIR",
        runtimes: &[],
        value: EnvValue::MountPath,
    },
    CacheEnv {
        name: "VRAMFIT_MODEL",
        runtimes: &[Runtime::Transformers, Runtime::Vllm],
        value: EnvValue::MountPath,
    },
    CacheEnv {
        name: "TRANSFORMERS_OFFLINE",
        runtimes: &[Runtime::Transformers],
        value: EnvValue::Fixed("1"),
    },
    CacheEnv {
        name: "LLAMA_ARG_MODEL",
        runtimes: &[Runtime::Llamacpp],
        value: EnvValue::File,
    },
];

/// vLLM's flag that keeps the repository's name as the model clients ask for.
pub const SERVED_MODEL_NAME_FLAG: &str = "--served-model-name";

/// The env of [`CACHE_ENV`] for `model`'s runtime.
pub fn cache_env(model: &JobModel) -> Vec<(&'static str, String)> {
    CACHE_ENV
        .iter()
        .filter(|e| e.runtimes.is_empty() || e.runtimes.contains(&model.runtime))
        .map(|e| {
            let value = match e.value {
                EnvValue::Fixed(text) => text.to_string(),
                EnvValue::MountPath => MOUNT_PATH.to_string(),
                EnvValue::File => format!("{MOUNT_PATH}/{}", model.file.as_deref().unwrap_or("")),
            };
            (e.name, value)
        })
        .collect()
}

fn sha256_hex(text: &str, chars: usize) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    hex.truncate(chars);
    hex
}

/// Every model claim's name starts so: the chart's pod policy
/// (`charts/vramfit/templates/model-cache-pod-guard.yaml`) knows a model claim by it, as a
/// pod names only its claim, and refuses a pod that mounts one without `readOnly: true`.
pub const CLAIM_PREFIX: &str = "vramfit-model-";

/// The longest object name (a DNS subdomain).
const MAX_NAME: usize = 253;

/// The claim's name: `vramfit-model-<job>-<8 hex of sha256(job/key)>` ([`CLAIM_PREFIX`]; a
/// job name too long for 253 characters is cut, the hash keeping names apart).
pub fn claim_name(job: &str, key: &str) -> String {
    let hash = sha256_hex(&format!("{job}/{key}"), 8);
    let room = MAX_NAME - CLAIM_PREFIX.len() - 1 - hash.len();
    let mut cut = job.len().min(room);
    while !job.is_char_boundary(cut) {
        cut -= 1;
    }
    let job = job[..cut].trim_end_matches(['-', '.']);
    format!("{CLAIM_PREFIX}{job}-{hash}")
}

/// The volume's name: `vramfit-model-<16 hex of sha256(namespace/job-uid/key/served)>`. The
/// `served` part gives a volume of the read-only `served/` folder another name than the
/// volume of `models/` an older operator made for the same job: that one stays bound to its
/// old claim until the job goes (the sweep then deletes it).
pub fn volume_name(namespace: &str, job_uid: &str, key: &str) -> String {
    format!(
        "vramfit-model-{}",
        sha256_hex(&format!("{namespace}/{job_uid}/{key}/{SERVED_DIR}"), 16)
    )
}

/// The model's folder as pods mount it, under `root`: `<root>/served/<owner>--<name>/<revision>`,
/// inside the read-only bind mount of `<root>/models` the cache agent makes (a container that
/// mounts it read-write, even as root, cannot change a file).
pub fn host_path(root: &str, model: &JobModel) -> Result<String, MountError> {
    let repo = RepoRef::new(&model.repo, &model.revision)
        .map_err(|e| MountError::Repo(model.key.clone(), e.to_string()))?;
    let dir = Layout::new(root).served_model_dir(&repo);
    dir.to_str()
        .map(str::to_string)
        .ok_or_else(|| MountError::Path(dir.display().to_string()))
}

/// A model's volume and the job's claim on it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelVolume {
    /// Cluster-scoped.
    pub volume: PersistentVolume,
    /// In the job's namespace, owned by the job.
    pub claim: PersistentVolumeClaim,
    /// What the mount replaced in the pod, for [`unmount`] when the claim is refused.
    pub undo: MountUndo,
}

/// What [`mount_pod`] replaced in a pod rather than added, so that [`unmount`] gives the pod
/// back as [`attach`] would have built it to fetch its model itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MountUndo {
    /// Per container (by name), the env vars of [`CACHE_ENV`]'s names it had, with their
    /// places in its env.
    pub env: Vec<(String, Vec<(usize, EnvVar)>)>,
    /// The repository `--served-model-name` was added with (vLLM), when it was added.
    pub served_name: Option<String>,
}

impl MountUndo {
    /// What mounting `model` would replace in `pod`.
    pub fn of(pod: &Pod, model: &JobModel) -> MountUndo {
        let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
        let env = containers
            .iter()
            .map(|c| {
                let replaced = c
                    .env
                    .iter()
                    .flatten()
                    .enumerate()
                    .filter(|(_, v)| CACHE_ENV.iter().any(|e| e.name == v.name))
                    .map(|(at, v)| (at, v.clone()))
                    .collect();
                (c.name.clone(), replaced)
            })
            .collect();
        let named = containers.iter().any(|c| {
            c.args
                .iter()
                .flatten()
                .any(|a| a == SERVED_MODEL_NAME_FLAG || a.starts_with("--served-model-name="))
        });
        let served_name = (model.runtime == Runtime::Vllm && !named).then(|| model.repo.clone());
        MountUndo { env, served_name }
    }
}

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([(VOLUME_LABEL.to_string(), "true".to_string())])
}

/// The volume and claim for `job`'s pods to mount `model` (`total_bytes` its size) from the
/// cache under `root`.
pub fn model_volume(
    job: &InferenceJob,
    model: &JobModel,
    root: &str,
    total_bytes: u64,
) -> Result<ModelVolume, MountError> {
    let name = job
        .metadata
        .name
        .clone()
        .ok_or(MountError::MissingKey("name"))?;
    let namespace = job.namespace().ok_or(MountError::MissingKey("namespace"))?;
    let uid = job
        .metadata
        .uid
        .clone()
        .ok_or(MountError::MissingKey("uid"))?;
    let claim_name = claim_name(&name, &model.key);
    let volume_name = volume_name(&namespace, &uid, &model.key);
    let size = BTreeMap::from([(
        "storage".to_string(),
        Quantity(total_bytes.max(MIN_BYTES).to_string()),
    )]);
    let read_only_many = Some(vec!["ReadOnlyMany".to_string()]);
    let volume = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(volume_name.clone()),
            labels: Some(labels()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: read_only_many.clone(),
            capacity: Some(size.clone()),
            host_path: Some(HostPathVolumeSource {
                path: host_path(root, model)?,
                type_: Some("Directory".to_string()),
            }),
            persistent_volume_reclaim_policy: Some("Retain".to_string()),
            storage_class_name: Some(String::new()),
            claim_ref: Some(ObjectReference {
                namespace: Some(namespace.clone()),
                name: Some(claim_name.clone()),
                ..ObjectReference::default()
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    };
    let owner = OwnerReference {
        api_version: InferenceJob::api_version(&()).to_string(),
        kind: InferenceJob::kind(&()).to_string(),
        name,
        uid,
        controller: Some(false),
        block_owner_deletion: None,
    };
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name),
            namespace: Some(namespace),
            labels: Some(labels()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: read_only_many,
            storage_class_name: Some(String::new()),
            volume_name: Some(volume_name),
            resources: Some(VolumeResourceRequirements {
                requests: Some(size),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    };
    Ok(ModelVolume {
        volume,
        claim,
        undo: MountUndo::default(),
    })
}

/// Writes where `pod`'s weights come from (read back after a restart: [`super::weights`]).
pub fn mark_source(pod: &mut Pod, source: WeightsSource) {
    pod.metadata.annotations.get_or_insert_default().insert(
        WEIGHTS_SOURCE_ANNOTATION.to_string(),
        source_name(source).to_string(),
    );
}

/// Writes why `pod` fetches its model itself (at most 512 bytes, cut on a character).
pub fn mark_note(pod: &mut Pod, why: &str) {
    let mut end = why.len().min(512);
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert(WEIGHTS_NOTE_ANNOTATION.to_string(), why[..end].to_string());
}

/// Whether `pod` mounts a cached model (its source annotation says `CacheHit` or
/// `FetchedByNode`).
pub fn mounts_model(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(WEIGHTS_SOURCE_ANNOTATION))
        .is_some_and(|s| s != source_name(WeightsSource::FetchedByPod))
}

/// `desired`, the metadata-only apply of a running pod, without its spec when `running`
/// mounts a cached model: the mount's affinity and args are not in `desired` (built without
/// the caches), and a pod's spec cannot change — the apply then sets the labels and
/// annotations alone, and the spec stays as created.
pub fn metadata_apply(mut desired: Pod, running: &Pod) -> Pod {
    if mounts_model(running) {
        desired.spec = None;
    }
    desired
}

/// A source's name, as annotations and metrics spell it.
pub fn source_name(source: WeightsSource) -> &'static str {
    match source {
        WeightsSource::CacheHit => "CacheHit",
        WeightsSource::FetchedByNode => "FetchedByNode",
        WeightsSource::FetchedByPod => "FetchedByPod",
    }
}

/// Makes `pod` take its weights as `placement` says (`None`: the job's pod as if no node
/// could serve it): the mount, returning the volume and claim to create before the pod; or
/// only the source annotation, with why, when the pod fetches the model itself. Shared by
/// served replicas, one-pod attempts and groups (each of a group's pods is built from the one
/// pod this marks).
pub fn attach(
    pod: &mut Pod,
    job: &InferenceJob,
    model: &JobModel,
    root: &str,
    placement: Option<CachePlacement>,
) -> Option<ModelVolume> {
    let why = match placement {
        Some(CachePlacement::Mount {
            source,
            nodes,
            total_bytes,
        }) => match model_volume(job, model, root, total_bytes) {
            Ok(mut volume) => {
                volume.undo = MountUndo::of(pod, model);
                let claim = volume.claim.name_any();
                mount_pod(pod, model, &claim, &nodes, source);
                return Some(volume);
            }
            Err(error) => Some(format!("the model's volume cannot be made: {error}")),
        },
        Some(CachePlacement::FetchedByPod { why }) => why,
        Some(CachePlacement::Wait { .. }) | None => None,
    };
    mark_source(pod, WeightsSource::FetchedByPod);
    if let Some(why) = why {
        mark_note(pod, &why);
    }
    None
}

/// Takes back what [`mount_pod`] did to `pod` (`undo` from the [`ModelVolume`] [`attach`]
/// returned): the pod fetches its model itself and says `why`, as [`attach`] builds it when no
/// node can serve it. For a claim the API server refused (a namespace's quota, a policy).
pub fn unmount(pod: &mut Pod, undo: &MountUndo, why: &str) {
    if let Some(annotations) = pod.metadata.annotations.as_mut() {
        annotations.remove(POD_MODEL_ANNOTATION);
    }
    mark_source(pod, WeightsSource::FetchedByPod);
    mark_note(pod, why);
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    if let Some(volumes) = spec.volumes.as_mut() {
        volumes.retain(|v| v.name != VOLUME_NAME);
        if volumes.is_empty() {
            spec.volumes = None;
        }
    }
    let terms = required_node_selector(spec);
    for term in terms.into_iter().flat_map(|t| &mut t.node_selector_terms) {
        // The hostname requirement was ANDed last into every term.
        if let Some(exprs) = term.match_expressions.as_mut()
            && exprs
                .last()
                .is_some_and(|e| e.key == HOSTNAME_TOPOLOGY && e.operator == "In")
        {
            exprs.pop();
            if exprs.is_empty() {
                term.match_expressions = None;
            }
        }
    }
    for container in &mut spec.containers {
        unpoint(container, undo);
    }
}

fn unpoint(container: &mut Container, undo: &MountUndo) {
    if let Some(mounts) = container.volume_mounts.as_mut() {
        mounts.retain(|m| m.name != VOLUME_NAME);
        if mounts.is_empty() {
            container.volume_mounts = None;
        }
    }
    if let Some(vars) = container.env.as_mut() {
        vars.retain(|v| !CACHE_ENV.iter().any(|e| e.name == v.name));
        let before = undo.env.iter().find(|(name, _)| *name == container.name);
        for (at, var) in before.into_iter().flat_map(|(_, vars)| vars) {
            vars.insert((*at).min(vars.len()), var.clone());
        }
        if vars.is_empty() {
            container.env = None;
        }
    }
    let Some(repo) = undo.served_name.as_deref() else {
        return;
    };
    if let Some(args) = container.args.as_mut()
        && let Some(at) = args
            .windows(2)
            .rposition(|w| w[0] == SERVED_MODEL_NAME_FLAG && w[1] == repo)
    {
        args.drain(at..at + 2);
    }
    let added = format!(" {SERVED_MODEL_NAME_FLAG} {repo}");
    if let Some(value) = container
        .env
        .iter_mut()
        .flatten()
        .find(|v| v.name == "VRAMFIT_RUNTIME_ARGS")
        .and_then(|v| v.value.as_mut())
        && let Some(at) = value.rfind(&added)
    {
        value.replace_range(at..at + added.len(), "");
    }
}

/// The pod's required node affinity, where it has one.
fn required_node_selector(spec: &mut PodSpec) -> Option<&mut NodeSelector> {
    spec.affinity
        .as_mut()
        .and_then(|a| a.node_affinity.as_mut())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_mut()
        })
}

/// Makes `pod` mount `model` through `claim` from one of `nodes`: its volume, the read-only
/// mount, the required affinity (ANDed into every term of the class's own), the annotations,
/// the env and, for vLLM, `--served-model-name <repo>`.
pub fn mount_pod(
    pod: &mut Pod,
    model: &JobModel,
    claim: &str,
    nodes: &[String],
    source: WeightsSource,
) {
    mark_source(pod, source);
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert(POD_MODEL_ANNOTATION.to_string(), model.key.clone());
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    spec.volumes.get_or_insert_default().push(Volume {
        name: VOLUME_NAME.to_string(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.to_string(),
            read_only: Some(true),
        }),
        ..Volume::default()
    });
    let hostname = NodeSelectorRequirement {
        key: HOSTNAME_TOPOLOGY.to_string(),
        operator: "In".to_string(),
        values: Some(nodes.to_vec()),
    };
    if let Some(terms) = required_node_selector(spec) {
        for term in &mut terms.node_selector_terms {
            term.match_expressions
                .get_or_insert_default()
                .push(hostname.clone());
        }
    }
    let env = cache_env(model);
    for container in &mut spec.containers {
        point_at_model(container, model, &env);
    }
}

fn point_at_model(container: &mut Container, model: &JobModel, env: &[(&'static str, String)]) {
    container
        .volume_mounts
        .get_or_insert_default()
        .push(VolumeMount {
            name: VOLUME_NAME.to_string(),
            mount_path: MOUNT_PATH.to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    let vars = container.env.get_or_insert_default();
    vars.retain(|v| !env.iter().any(|(name, _)| *name == v.name));
    vars.extend(env.iter().map(|(name, value)| EnvVar {
        name: name.to_string(),
        value: Some(value.clone()),
        value_from: None,
    }));
    if model.runtime != Runtime::Vllm {
        return;
    }
    let args = container.args.get_or_insert_default();
    if args
        .iter()
        .any(|a| a == SERVED_MODEL_NAME_FLAG || a.starts_with("--served-model-name="))
    {
        return;
    }
    args.extend([SERVED_MODEL_NAME_FLAG.to_string(), model.repo.clone()]);
    // The same flags as one string, for a `command` that is a shell script.
    if let Some(var) = vars.iter_mut().find(|v| v.name == "VRAMFIT_RUNTIME_ARGS")
        && let Some(value) = var.value.as_mut()
    {
        value.push_str(&format!(" {SERVED_MODEL_NAME_FLAG} {}", model.repo));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::model_cache::job_model::job_model;
    use crate::replicas::pod::replica_pod;
    use vramfit_api::Fallback;
    use vramfit_api::checkpoint::HuggingFaceModel;
    use vramfit_planner::{plan_for_class, resolve_job};

    fn served(runtime: Runtime, file: Option<&str>) -> (InferenceJob, Pod) {
        let mut spec = if runtime == Runtime::Llamacpp {
            fixtures::llamacpp_spec()
        } else {
            fixtures::vllm_mistral_spec()
        };
        spec.serve = Some(vramfit_api::ServeSpec {
            health_path: Some("/health".into()),
            ..Default::default()
        });
        spec.runtime = runtime;
        spec.model.hugging_face = Some(HuggingFaceModel {
            repo: "Org/Model-7B".into(),
            revision: Some("refs/pr/1".into()),
            file: file.map(str::to_string),
            ..Default::default()
        });
        let job = fixtures::job("chat", spec);
        let mut plain = job.clone();
        plain.spec.model.hugging_face = None;
        let input = resolve_job(&plain.spec).unwrap();
        let class = fixtures::class("a10g", 4);
        let plan = plan_for_class(&input, &class, &Fallback::default()).unwrap();
        let serve = job.spec.serve.clone().unwrap();
        let pod = replica_pod(&plain, &input, &serve, &plan, &class, (0, 1)).unwrap();
        (job, pod)
    }

    fn env_of(pod: &Pod) -> BTreeMap<String, String> {
        pod.spec.as_ref().unwrap().containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn each_runtime_is_pointed_at_the_mount_offline() {
        let (job, mut pod) = served(Runtime::Vllm, None);
        let model = job_model(&job).unwrap();
        mount_pod(
            &mut pod,
            &model,
            "c",
            &["n-1".into()],
            WeightsSource::CacheHit,
        );
        let env = env_of(&pod);
        assert_eq!(env["HF_HUB_OFFLINE"], "1");
        assert_eq!(env["VRAMFIT_MODEL"], MOUNT_PATH);
        assert_eq!(env["VRAMFIT_MODEL_DIR"], MOUNT_PATH);
        assert!(!env.contains_key("TRANSFORMERS_OFFLINE"));
        assert!(env["VRAMFIT_RUNTIME_ARGS"].ends_with("--served-model-name Org/Model-7B"));
        let args = pod.spec.as_ref().unwrap().containers[0]
            .args
            .clone()
            .unwrap();
        assert_eq!(
            args[args.len() - 2..],
            ["--served-model-name", "Org/Model-7B"]
        );
        assert_eq!(
            env.keys().filter(|k| *k == "VRAMFIT_MODEL").count(),
            1,
            "the planned VRAMFIT_MODEL is replaced, not doubled"
        );

        let (job, mut pod) = served(Runtime::Transformers, None);
        mount_pod(
            &mut pod,
            &job_model(&job).unwrap(),
            "c",
            &[],
            WeightsSource::CacheHit,
        );
        let env = env_of(&pod);
        assert_eq!(env["TRANSFORMERS_OFFLINE"], "1");
        assert_eq!(env["VRAMFIT_MODEL"], MOUNT_PATH);

        let (job, mut pod) = served(Runtime::Llamacpp, Some("q4/model.gguf"));
        mount_pod(
            &mut pod,
            &job_model(&job).unwrap(),
            "c",
            &[],
            WeightsSource::FetchedByNode,
        );
        let env = env_of(&pod);
        assert_eq!(
            env["LLAMA_ARG_MODEL"],
            format!("{MOUNT_PATH}/q4/model.gguf")
        );
        assert_ne!(
            env["VRAMFIT_MODEL"], MOUNT_PATH,
            "llama.cpp reads LLAMA_ARG_MODEL"
        );
        assert_eq!(
            pod.annotations()[WEIGHTS_SOURCE_ANNOTATION],
            "FetchedByNode"
        );
    }

    #[test]
    fn the_pod_mounts_the_claim_read_only_on_the_nodes_holding_the_model() {
        let (job, mut pod) = served(Runtime::Vllm, None);
        let model = job_model(&job).unwrap();
        let nodes: Vec<String> = vec!["gpu-1".into(), "gpu-7".into()];
        let terms_before = pod.spec.as_ref().unwrap().affinity.clone().unwrap();
        mount_pod(
            &mut pod,
            &model,
            "chat-model-x",
            &nodes,
            WeightsSource::CacheHit,
        );
        assert_eq!(
            pod.annotations()[POD_MODEL_ANNOTATION],
            "Org/Model-7B@refs/pr/1"
        );
        let spec = pod.spec.as_ref().unwrap();
        let volume = &spec.volumes.as_ref().unwrap().last().unwrap().clone();
        let claim = volume.persistent_volume_claim.as_ref().unwrap();
        assert_eq!(
            (claim.claim_name.as_str(), claim.read_only),
            ("chat-model-x", Some(true))
        );
        let mount = spec.containers[0]
            .volume_mounts
            .as_ref()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(
            (mount.mount_path.as_str(), mount.read_only),
            (MOUNT_PATH, Some(true))
        );
        let required = |a: &k8s_openapi::api::core::v1::Affinity| {
            a.node_affinity
                .clone()
                .unwrap()
                .required_during_scheduling_ignored_during_execution
                .unwrap()
                .node_selector_terms
        };
        let (before, after) = (
            required(&terms_before),
            required(spec.affinity.as_ref().unwrap()),
        );
        assert_eq!(before.len(), after.len());
        for (b, a) in before.iter().zip(&after) {
            let a = a.match_expressions.as_ref().unwrap();
            assert_eq!(
                a.len(),
                b.match_expressions.as_ref().unwrap().len() + 1,
                "the class's own terms kept, hostname ANDed"
            );
            let host = a.last().unwrap();
            assert_eq!(host.key, "kubernetes.io/hostname");
            assert_eq!(host.values.as_deref(), Some(&nodes[..]));
        }
    }

    #[test]
    fn the_volume_is_a_read_only_host_path_of_the_models_folder_claimed_by_the_job() {
        let (job, _) = served(Runtime::Vllm, None);
        let model = job_model(&job).unwrap();
        let mv = model_volume(&job, &model, "/var/lib/vramfit/cache", 5).unwrap();
        let spec = mv.volume.spec.as_ref().unwrap();
        let path = &spec.host_path.as_ref().unwrap().path;
        assert_eq!(
            path, "/var/lib/vramfit/cache/served/Org--Model-7B/refs%2Fpr%2F1",
            "the read-only served/ mount, never models/ the agent writes"
        );
        let layout = Layout::new("/var/lib/vramfit/cache");
        let repo = RepoRef::new("Org/Model-7B", "refs/pr/1").unwrap();
        assert_eq!(
            std::path::Path::new(path),
            layout.served_model_dir(&repo).as_path()
        );
        assert_eq!(
            layout
                .served_model_dir(&repo)
                .strip_prefix(layout.served_dir())
                .unwrap(),
            layout
                .model_dir(&repo)
                .strip_prefix(layout.models_dir())
                .unwrap(),
            "served/ shows models/ under the same two segments"
        );
        assert_eq!(
            spec.access_modes.as_deref(),
            Some(&["ReadOnlyMany".to_string()][..])
        );
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Retain")
        );
        assert!(spec.node_affinity.is_none());
        assert_eq!(
            spec.capacity.as_ref().unwrap()["storage"].0,
            MIN_BYTES.to_string(),
            "at least 1Mi"
        );
        let claim_ref = spec.claim_ref.as_ref().unwrap();
        assert_eq!(claim_ref.name.as_deref(), mv.claim.metadata.name.as_deref());
        assert_eq!(claim_ref.namespace, job.metadata.namespace);
        let name = mv.volume.name_any();
        assert!(
            name.starts_with("vramfit-model-") && name.len() == "vramfit-model-".len() + 16,
            "{name}"
        );
        assert_eq!(mv.volume.labels()[VOLUME_LABEL], "true");
        let claim = mv.claim.spec.as_ref().unwrap();
        assert_eq!(claim.volume_name.as_deref(), Some(name.as_str()));
        assert_eq!(claim.storage_class_name.as_deref(), Some(""));
        let claim_name = mv.claim.name_any();
        assert!(
            claim_name.starts_with("vramfit-model-chat-")
                && claim_name.len() == "vramfit-model-chat-".len() + 8,
            "{claim_name}"
        );
        let owner = &mv.claim.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("InferenceJob", "chat")
        );
        let big = model_volume(&job, &model, "/c", 16_000_000_000).unwrap();
        assert_eq!(
            big.claim.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0,
            "16000000000"
        );
    }

    #[test]
    fn every_claim_name_starts_with_the_prefix_the_pod_policy_keys_on() {
        let name = claim_name("chat", "o/m@main");
        assert!(name.starts_with(CLAIM_PREFIX) && name.starts_with("vramfit-model-chat-"));
        assert_ne!(name, claim_name("chat", "o/m@dev"), "one claim per model");
        assert_ne!(name, claim_name("chat2", "o/m@main"), "one claim per job");
        let long = "a".repeat(240);
        let cut = claim_name(&long, "o/m@main");
        assert_eq!(cut.len(), 253, "{cut}");
        assert!(cut.starts_with(CLAIM_PREFIX));
        let other = format!("{}b", "a".repeat(239));
        assert_ne!(cut, claim_name(&other, "o/m@main"), "cut names kept apart");
        let dotted = format!("{}.b", "a".repeat(229));
        let name = claim_name(&dotted, "k");
        assert!(!name.contains(".-"), "no empty label: {name}");
    }

    #[test]
    fn a_served_volume_is_named_apart_from_a_models_volume_of_the_same_job() {
        let old = format!("vramfit-model-{}", sha256_hex("ns/uid-1/o/m@main", 16),);
        assert_ne!(volume_name("ns", "uid-1", "o/m@main"), old);
    }

    /// `job`'s pod as [`attach`] builds it with `placement`.
    fn attached(
        runtime: Runtime,
        file: Option<&str>,
        placement: CachePlacement,
    ) -> (Pod, Option<ModelVolume>) {
        let (job, mut pod) = served(runtime, file);
        let model = job_model(&job).unwrap();
        let volume = attach(&mut pod, &job, &model, "/c", Some(placement));
        (pod, volume)
    }

    #[test]
    fn unmount_gives_back_the_pod_that_fetches_its_model_itself() {
        let why = "the model's claim was refused: exceeded quota";
        for (runtime, file) in [
            (Runtime::Vllm, None),
            (Runtime::Transformers, None),
            (Runtime::Llamacpp, Some("q4/model.gguf")),
        ] {
            let mount = CachePlacement::Mount {
                source: WeightsSource::CacheHit,
                nodes: vec!["gpu-1".into()],
                total_bytes: 5,
            };
            let (mut pod, volume) = attached(runtime, file, mount);
            let volume = volume.unwrap();
            let fetch = CachePlacement::FetchedByPod {
                why: Some(why.to_string()),
            };
            let (fetching, none) = attached(runtime, file, fetch);
            assert!(none.is_none());
            assert_ne!(pod, fetching);
            unmount(&mut pod, &volume.undo, why);
            assert_eq!(pod, fetching, "{runtime:?}");
        }
    }

    #[test]
    fn unmount_puts_back_the_jobs_own_env_and_keeps_its_own_served_name() {
        let (job, mut pod) = served(Runtime::Vllm, None);
        let container = &mut pod.spec.as_mut().unwrap().containers[0];
        container.env.get_or_insert_default().insert(
            0,
            EnvVar {
                name: "HF_HUB_OFFLINE".into(),
                value: Some("0".into()),
                value_from: None,
            },
        );
        container
            .args
            .get_or_insert_default()
            .extend(["--served-model-name".into(), "mine".into()]);
        let before = pod.clone();
        let model = job_model(&job).unwrap();
        let mount = CachePlacement::Mount {
            source: WeightsSource::FetchedByNode,
            nodes: vec!["gpu-1".into()],
            total_bytes: 5,
        };
        let volume = attach(&mut pod, &job, &model, "/c", Some(mount)).unwrap();
        assert_eq!(env_of(&pod)["HF_HUB_OFFLINE"], "1");
        unmount(&mut pod, &volume.undo, "refused");
        let mut expected = before;
        mark_source(&mut expected, WeightsSource::FetchedByPod);
        mark_note(&mut expected, "refused");
        assert_eq!(pod, expected);
    }
}
