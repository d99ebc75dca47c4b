//! `InferenceJob`: a model to run on whichever GPU class suits it.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements, Toleration, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::outcome::AttemptOutcome;
use crate::plan::{KvCacheType, Plan, Quantization};
use crate::pod_security::PodSecurity;
use crate::schema;
use crate::serve::{ReplicaRestart, ReplicaStatus, ServeSpec};
use crate::tuning::{TuningFallback, TuningSpec};

/// A GPU inference job. vramfit plans its configuration (dtype, quantization, GPU count,
/// flash attention, allocator settings, image tiles, llama.cpp offload) for each node class,
/// picks a class with room, runs a pod there, and retries one step down after an
/// out-of-memory failure.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "vramfit.io",
    version = "v1alpha1",
    kind = "InferenceJob",
    namespaced,
    status = "InferenceJobStatus",
    shortname = "ij",
    category = "vramfit",
    doc = "A GPU inference job whose configuration vramfit plans for the GPU it lands on.",
    // A served job's Service is named after it, and a Service's name is a DNS-1035 label: a
    // name such as `7b-chat.v2` would run its replicas while the Service is refused forever.
    validation = Rule::new("!has(self.spec.serve) || (size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$'))").message("metadata.name of a served job must be a DNS-1035 label (at most 63 lowercase letters, digits and '-', starting with a letter and ending with a letter or digit): its Service is named after it"),
    // A group's headless Service is named `<job>-<attempt>`, so the job's name must start one.
    validation = Rule::new("!has(self.spec.gpus) || !has(self.spec.gpus.maxNodes) || self.spec.gpus.maxNodes <= 1 || self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name of a job with gpus.maxNodes above 1 must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter and ending with a letter or digit): its group's headless Service is named after it"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.ready"),
    printcolumn(name = "Class", type_ = "string", json_path = ".status.nodeClass"),
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".status.plan.gpuCount"),
    printcolumn(name = "Dtype", type_ = "string", json_path = ".status.plan.dtype"),
    printcolumn(
        name = "Quant",
        type_ = "string",
        json_path = ".status.plan.quantization"
    ),
    printcolumn(
        name = "Waiting",
        type_ = "integer",
        json_path = ".status.replicasWaitingForModel"
    ),
    printcolumn(
        name = "Attempts",
        type_ = "integer",
        json_path = ".status.attemptCount",
        priority = 1
    ),
    printcolumn(
        name = "Pod",
        type_ = "string",
        json_path = ".status.podName",
        priority = 1
    ),
    printcolumn(
        name = "Items/h",
        type_ = "number",
        json_path = ".status.result.itemsPerHour",
        priority = 1
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".status.endpoint",
        priority = 1
    ),
    printcolumn(
        name = "Method",
        type_ = "string",
        json_path = ".status.plan.tuning.method",
        priority = 1
    ),
    printcolumn(
        name = "Batch",
        type_ = "string",
        json_path = ".status.plan.tuning.batch",
        priority = 1
    ),
    printcolumn(
        name = "Ckpt",
        type_ = "boolean",
        json_path = ".status.plan.tuning.gradientCheckpointing",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    scale(
        spec_replicas_path = ".spec.serve.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    )
)]
#[x_kube(validation = Rule::new("self.gpus.min <= self.gpus.max").message("gpus.min must not exceed gpus.max"))]
#[x_kube(validation = Rule::new("self.runtime != 'llamacpp' || has(self.model.ggufFileBytes) || has(self.model.preset)").message("a llamacpp job needs a GGUF model: a GGUF preset or model.ggufFileBytes"))]
#[x_kube(validation = Rule::new("!has(self.tuning) || self.runtime == 'transformers' || self.runtime == 'custom'").message("a tuning job runs a training program: runtime transformers or custom"))]
#[x_kube(validation = Rule::new("!has(self.tuning) || !has(self.allowedQuantizations)").message("a tuning job chooses its method with tuning.method (qlora trains on a 4-bit base), not allowedQuantizations"))]
#[x_kube(validation = Rule::new("!has(self.tuning) || !has(self.contextLength)").message("a tuning job sets tuning.sequenceLength, not contextLength"))]
#[x_kube(validation = Rule::new("!has(self.tuning) || !has(self.serve)").message("a job is either served (spec.serve) or fine-tuned (spec.tuning), not both: a tuning job trains and ends; serve its adapter or weights from a separate InferenceJob"))]
#[x_kube(validation = Rule::new("has(self.serve) == has(oldSelf.serve)").message("a batch job cannot become a served job, nor a served job a batch job (kubectl scale sets spec.serve.replicas): create a new InferenceJob"))]
#[x_kube(validation = Rule::new("!has(self.serve) || self.runtime == 'vllm' || self.runtime == 'llamacpp' || has(self.serve.healthPath)").message("serve.healthPath is required for runtime transformers and custom (vLLM and llama.cpp answer GET /health)"))]
#[x_kube(validation = Rule::new("!has(self.serve) || !has(self.serve.autoscaling) || self.runtime == 'vllm' || self.runtime == 'llamacpp' || has(self.serve.autoscaling.metric)").message("serve.autoscaling.metric is required for runtime transformers and custom (vLLM and llama.cpp are read by their own metrics)"))]
#[serde(rename_all = "camelCase")]
pub struct InferenceJobSpec {
    /// The model: a preset from vramfit's catalog (`vramfit presets`), explicit numbers, or
    /// a preset with some numbers overridden.
    pub model: ModelSpec,
    /// The serving runtime; decides the arguments and env vramfit adds to the container.
    pub runtime: Runtime,
    /// Container image of the workload.
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,
    /// Container entrypoint; the image's when empty. At most 64 words of 4 KiB (a shell
    /// script longer than that belongs in the image or a ConfigMap).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 4096)))]
    pub command: Vec<String>,
    /// Container arguments. For vllm and llamacpp, vramfit appends its planned flags after
    /// these. At most 256 of 4 KiB.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 4096)))]
    pub args: Vec<String>,
    /// Context length in tokens (prompt + output, image tokens included). Defaults to 4096,
    /// capped at the model's context limit. 128 to 1,048,576 (2^20, the longest context a
    /// published model serves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 128, max = 1048576))]
    pub context_length: Option<u32>,
    /// Sequences processed at once, 1 to 1024 (vLLM's `--max-num-seqs` default is 256; a
    /// thousand sequences already fill the largest GPU's KV cache).
    #[serde(default = "default_batch_size")]
    #[schemars(range(min = 1, max = 1024))]
    pub batch_size: u32,
    /// `auto` picks bfloat16 where compute capability >= 8.0 and float16 below. A pinned
    /// `bfloat16` never lands on a GPU below 8.0, where it is emulated and answers garbage.
    #[serde(default)]
    pub dtype: DtypeRequest,
    /// Quantizations vramfit may choose, tried in the order none → int8 → nf4. Unset means
    /// all of them (`auto`); `[none]` forbids quantization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 3))]
    pub allowed_quantizations: Option<Vec<Quantization>>,
    /// Bounds on the GPUs of one node the job may take.
    #[serde(default)]
    pub gpus: GpuBounds,
    /// `quality` (default): full precision on more GPUs before quantizing.
    /// `economy`: fewest GPUs and lowest price first, quantizing before adding GPUs.
    #[serde(default)]
    pub preference: Preference,
    /// llama.cpp settings (runtime `llamacpp` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llama_cpp: Option<LlamaCppSpec>,
    /// Per-job overrides of the planned defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<JobOverrides>,
    /// Which node classes the job may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_classes: Option<NodeClassSelection>,
    /// Pods vramfit may create for this job, the first included; after an out-of-memory
    /// failure it retries one step down until this many have run. At most 10: the step-down
    /// ladders are shorter than that.
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1, max = 10))]
    pub max_attempts: u32,
    /// Seconds a pod bound to a node may take to start (pull its image, mount its volumes)
    /// before vramfit ends the attempt and frees its GPUs; default 900. An image that cannot
    /// be pulled or a container that cannot be created fails the job; a pod stuck otherwise
    /// is tried again in a new pod. 30 s to a day (86,400 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 86400))]
    pub start_deadline_seconds: Option<u32>,
    /// Seconds a pod may wait to be scheduled to a node (the scheduler finds none that fits it:
    /// a resource, an affinity or a taint that none of the class's nodes satisfies) before
    /// vramfit ends the attempt and deletes the pod, so that it no longer holds the class's
    /// GPUs; default 600. The next attempt runs on another class (never one where a pod of the
    /// job was not scheduled in time); with none left, the job fails
    /// (`ScheduleDeadlineExceeded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 86400))]
    pub schedule_deadline_seconds: Option<u32>,
    /// Pod settings passed through to the workload pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodTemplate>,
    /// Fine-tune the model instead of running it (docs/tuning.md): vramfit plans the method
    /// (QLoRA, LoRA or full), micro-batch, gradient checkpointing, accumulation, optimizer and
    /// GPU count for each class. Unset: an inference job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuning: Option<TuningSpec>,
    /// Serve the model: replicas behind one Service named after the job, each replica
    /// planned for the class it lands on, with probes on the health route and rolling updates
    /// (docs/serving.md). Unset: a batch job, one pod run to its end. Set when the job is
    /// created; a batch job cannot become a server later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<ServeSpec>,
}

/// How long a bound pod may take to start when the job does not say.
pub const DEFAULT_START_DEADLINE_SECONDS: u32 = 900;

/// How long a pod may wait to be scheduled when the job does not say.
pub const DEFAULT_SCHEDULE_DEADLINE_SECONDS: u32 = 600;

fn default_batch_size() -> u32 {
    1
}
fn default_max_attempts() -> u32 {
    3
}

/// The model to run.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("has(self.preset) || has(self.huggingFace) || (has(self.parameters) && has(self.layers) && has(self.hiddenSize) && has(self.attentionHeads))").message("model needs a preset, huggingFace, or parameters, layers, hiddenSize and attentionHeads"))]
#[serde(rename_all = "camelCase")]
pub struct ModelSpec {
    /// A catalog preset (`vramfit presets` lists them with their sources), e.g. `qwen3-8b`,
    /// `llama-3.1-70b-instruct`, `qwen2.5-7b-fp8-dynamic`, `mistral-7b-instruct-v0.3-q4_k_m`.
    /// Explicit fields below override the preset's numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub preset: Option<String>,
    /// Model identifier passed to the runtime (e.g. a Hugging Face repo or a GGUF path).
    /// Defaults to the preset's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub name: Option<String>,
    /// Parameter count (all of them: vision tower included). 10^6 to 10^13 (ten times the
    /// largest published model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1000000, max = 10000000000000_u64))]
    pub parameters: Option<u64>,
    /// Transformer layers (decoder layers for the KV cache and llama.cpp offload). At most
    /// 1024 (published models have at most a few hundred).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub layers: Option<u32>,
    /// Hidden size, 64 to 1,048,576 (2^20; published models stay below 2^15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 64, max = 1048576))]
    pub hidden_size: Option<u32>,
    /// Attention heads, at most 4096 (published models have at most a few hundred).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub attention_heads: Option<u32>,
    /// Key/value heads (grouped-query attention). Unset: as many as attention heads, which
    /// over-estimates the KV cache but never under-estimates it. At most 4096, as attention
    /// heads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub kv_heads: Option<u32>,
    /// Dimension of one head. Unset: hiddenSize / attentionHeads. At most 4096 (published
    /// models use 64 to 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub head_dim: Option<u32>,
    /// Longest context the model supports, in tokens: 128 to 10,485,760 (ten times the
    /// longest context a job may ask for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 128, max = 10485760))]
    pub context_limit: Option<u32>,
    /// Size of the GGUF file in bytes (llama.cpp models). At most 40 TB: the largest model
    /// the schema takes (10^13 parameters) at 4 bytes each, GGUF's widest tensor type (F32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 40000000000000_u64))]
    pub gguf_file_bytes: Option<u64>,
    /// Whether the model takes images (enables MAX_TILES planning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision: Option<bool>,
    /// Read the numbers this block leaves unset from this Hub repository at reconcile time
    /// (the operator's endpoint and token; docs/models.md). Status `resolvedModel` shows what
    /// was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hugging_face: Option<crate::checkpoint::HuggingFaceModel>,
    /// Vocabulary size: the token embeddings and output layer, which in-flight quantization
    /// leaves at 16 bits. At most 2^22.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4194304))]
    pub vocab_size: Option<u32>,
    /// MLP intermediate size (config.json `intermediate_size`), 1 to 4,194,304: LoRA adapter
    /// sizes and training activations. Unset: derived from the parameter count (docs/planning.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4194304))]
    pub intermediate_size: Option<u32>,
    /// Exact bytes of the checkpoint's weights (safetensors headers): how a pre-quantized
    /// model is sized. At most 40 TB, as ggufFileBytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 40000000000000_u64))]
    pub weight_bytes: Option<u64>,
    /// How the checkpoint was quantized before it was published: planned by its real weight
    /// bytes, with no in-flight quantization on top.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_quantized: Option<crate::checkpoint::PreQuantized>,
    /// Mixture of experts: routed experts per MoE layer (all of them sit in memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub experts: Option<u32>,
    /// Mixture of experts: parameters one token runs through (speed, not memory). 10^6 to
    /// 10^13, as parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1000000, max = 10000000000000_u64))]
    pub active_parameters: Option<u64>,
    /// A GGUF file's bytes per block, output layer and token embeddings: llama.cpp plans then
    /// budget each block by its real bytes instead of even shares of the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gguf_layout: Option<crate::checkpoint::GgufLayout>,
}

/// The serving runtime.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// Hugging Face transformers (reads the env contract).
    Transformers,
    /// vLLM (env contract plus `--dtype`, `--quantization`, `--tensor-parallel-size`, ...).
    Vllm,
    /// llama.cpp server (env contract plus `--n-gpu-layers`, `--ctx-size`, `--cache-type-k/v`, ...).
    Llamacpp,
    /// Any other program: env contract only.
    Custom,
}

/// The dtype a job asks for.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DtypeRequest {
    /// bfloat16 on compute capability >= 8.0, float16 below.
    #[default]
    Auto,
    /// Pinned bfloat16: only classes with compute capability >= 8.0.
    Bfloat16,
    /// Pinned float16: every class.
    Float16,
}

/// Plan preference.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Preference {
    /// Full precision on more GPUs before quantizing; the best plan wins.
    #[default]
    Quality,
    /// Fewest GPUs first, quantize before adding GPUs; the cheapest class that fits wins.
    Economy,
}

/// Bounds on GPU count (GPUs of one node).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GpuBounds {
    /// Fewest GPUs to use, 1 to 64 (a node has at most 64; a pod never spans nodes).
    #[serde(default = "default_min_gpus")]
    #[schemars(range(min = 1, max = 64))]
    pub min: u32,
    /// Most GPUs to use, 1 to 64 (a node has at most 64; a pod never spans nodes).
    #[serde(default = "default_max_gpus")]
    #[schemars(range(min = 1, max = 64))]
    pub max: u32,
    /// Most nodes one attempt (or one replica of a served job) may span, 1 to 16. Above 1,
    /// a job no node of a class holds runs as a group of pods, one per node, each with the
    /// planned GPUs of its node, joined by the runtime's distributed engine
    /// (docs/planning.md). 1, the default, keeps every attempt on one node.
    #[serde(default = "default_max_nodes", skip_serializing_if = "is_one")]
    #[schemars(range(min = 1, max = 16))]
    pub max_nodes: u32,
}

fn default_max_nodes() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn default_min_gpus() -> u32 {
    1
}
fn default_max_gpus() -> u32 {
    8
}

impl Default for GpuBounds {
    fn default() -> Self {
        Self {
            min: default_min_gpus(),
            max: default_max_gpus(),
            max_nodes: default_max_nodes(),
        }
    }
}

/// llama.cpp offload settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LlamaCppSpec {
    /// `auto` (default): the most layers that fit. A number (0 to 1025: model.layers is at
    /// most 1024, plus the output layer) is respected as given, with a warning in status when
    /// it cannot fit.
    #[serde(default)]
    #[schemars(schema_with = "schema::int_or_auto")]
    pub gpu_layers: GpuLayers,
    /// KV-cache types vramfit may choose, tried in order f16 → q8_0 → q4_0. Unset: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 3))]
    pub kv_cache_types: Option<Vec<KvCacheType>>,
    /// Share of VRAM the offload may plan for, in percent (default 80), 10 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 100))]
    pub target_usage_percent: Option<u32>,
}

/// llama.cpp GPU layers: `auto` or a number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuLayers {
    /// The most layers that fit.
    #[default]
    Auto,
    /// Exactly this many layers.
    Count(u32),
}

impl Serialize for GpuLayers {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            GpuLayers::Auto => s.serialize_str("auto"),
            GpuLayers::Count(n) => s.serialize_u32(*n),
        }
    }
}

impl<'de> Deserialize<'de> for GpuLayers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u32),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(GpuLayers::Count(n)),
            Raw::Text(t) if t == "auto" => Ok(GpuLayers::Auto),
            Raw::Text(t) => t.parse().map(GpuLayers::Count).map_err(|_| {
                serde::de::Error::custom(format!(
                    "gpuLayers must be `auto` or a non-negative integer, got {t:?}"
                ))
            }),
        }
    }
}

/// Per-job overrides of planned defaults.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobOverrides {
    /// MAX_TILES for vision models (otherwise from VRAM per GPU), 1 to 64 (the tile ladder
    /// tops out at 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub max_tiles: Option<u32>,
    /// `false` turns flash attention off everywhere. `true` cannot turn it on below compute
    /// capability 8.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flash_attention: Option<bool>,
    /// PYTORCH_CUDA_ALLOC_CONF value (otherwise from the class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub pytorch_cuda_alloc_conf: Option<String>,
}

/// Allowed / denied node classes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassSelection {
    /// Only these classes (by name). Empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::name_set")]
    pub allowed: Vec<String>,
    /// Never these classes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::name_set")]
    pub denied: Vec<String>,
}

/// Pod settings passed through to the workload pod as written.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplate {
    /// Extra environment variables. Names vramfit plans (`VRAMFIT_*`, `TORCH_DTYPE`,
    /// `PYTORCH_CUDA_ALLOC_CONF`, …) and names that select GPUs (`NVIDIA_*`,
    /// `CUDA_VISIBLE_DEVICES`) are reserved: the API server refuses a job that sets one (and
    /// the operator marks it InvalidSpec should one get past).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::env_list")]
    pub env: Vec<EnvVar>,
    /// Container resources. `nvidia.com/gpu` is always set by vramfit from the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::preserve_unknown_object")]
    pub resources: Option<ResourceRequirements>,
    /// Pod volumes (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::volume_list")]
    pub volumes: Vec<Volume>,
    /// Container volume mounts (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::volume_list")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Extra tolerations (the `nvidia.com/gpu` taint is always tolerated; at most 32).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::toleration_list")]
    pub tolerations: Vec<Toleration>,
    /// Extra node selector, combined with the class's node affinity.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::bounded_string_map")]
    pub node_selector: BTreeMap<String, String>,
    /// Service account of the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
    /// Extra pod labels. `vramfit.io/*` and the `app.kubernetes.io/` name, instance,
    /// managed-by and component are vramfit's, set on every pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::pod_labels")]
    pub labels: BTreeMap<String, String>,
    /// Extra pod annotations. `vramfit.io/*` is vramfit's; AppArmor and seccomp annotations,
    /// container-runtime options (`io.kubernetes.cri-o.*`, `io.katacontainers.*`) and CDI
    /// devices (`cdi.k8s.io/*`) would change the pod's security and are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::pod_annotations")]
    pub annotations: BTreeMap<String, String>,
    /// Priority class of the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
    /// Who the workload runs as (`runAsUser`, `runAsGroup`, `runAsNonRoot`, `fsGroup`).
    /// vramfit always adds seccomp `RuntimeDefault`, `allowPrivilegeEscalation: false` and
    /// drops every capability; a job in a Pod Security `restricted` namespace must also run
    /// as non-root (a non-zero `runAsUser`, or `runAsNonRoot` with a non-root image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurity>,
    /// `false` (default): the failure message vramfit reads, keeps in status and puts in a
    /// Warning event is only what the container wrote to `/dev/termination-log`
    /// (`terminationMessagePolicy: File`), so no log line ever reaches them. `true`: when
    /// that file is empty, Kubernetes takes the tail of the container's log instead (at most
    /// 80 lines or 2 KiB, `FallbackToLogsOnError`), so that a CUDA out-of-memory error an
    /// image only prints (stock vLLM, llama.cpp) still starts the retry one step down;
    /// whatever the log prints (tokens, secrets) may then appear in status and events.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub termination_message_from_logs: bool,
}

/// Where a job stands.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub enum Phase {
    /// Not planned yet, or the spec is invalid (see the InvalidSpec condition).
    Pending,
    /// No node class can run the job now; see the Scheduled condition.
    Unschedulable,
    /// A pod exists and waits to run.
    Scheduled,
    /// The pod runs.
    Running,
    /// The pod finished successfully.
    Succeeded,
    /// The job failed for good (attempts exhausted, no step left to take down, or a failure
    /// that is not out of memory).
    Failed,
}

impl Phase {
    /// Every phase, for metrics that report zeros too.
    pub const ALL: [Phase; 6] = [
        Phase::Pending,
        Phase::Unschedulable,
        Phase::Scheduled,
        Phase::Running,
        Phase::Succeeded,
        Phase::Failed,
    ];

    /// Finished for good: nothing more is reconciled.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }

    /// The name as it appears in status.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Unschedulable => "Unschedulable",
            Phase::Scheduled => "Scheduled",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }
}

/// What vramfit observed and decided.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InferenceJobStatus {
    /// Pending, Unschedulable, Scheduled, Running, Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Scheduled, InvalidSpec, OutOfMemory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,
    /// The node class chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class: Option<String>,
    /// The plan of the current attempt, with its reasons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Plan>,
    /// Why each class that cannot run the job cannot (when no class fits, or a class was
    /// passed over).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected_classes: Vec<ClassRejection>,
    /// The pod of the current attempt (a group's: its leader, rank 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// The node the pod runs on, once bound (a group's: its leader's, once every pod is bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Number of attempts so far.
    #[serde(default)]
    pub attempt_count: u32,
    /// Every attempt, oldest first, with its plan and how it ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// Steps taken down after out-of-memory failures; the planner applies them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
    /// When the first pod was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the job reached Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// What the workload reported when it finished (docs/workload-contract.md): items,
    /// seconds, items per hour, peak GPU memory, and the cost of one item at the class's price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<crate::workload_report::JobResult>,
    /// The model numbers read from `model.huggingFace`, and where from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_model: Option<crate::checkpoint::ResolvedModel>,
    /// Served jobs: replicas with a pod (the scale subresource's status replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// Served jobs: replicas whose pod is Ready (in the Service's endpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<u32>,
    /// Served jobs: ready replicas over desired, as `kubectl get` shows it (`2/3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// Served jobs: the label selector of the replicas' pods (what an HPA reads through the
    /// scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Served jobs: the Service's URL, `http://NAME.NAMESPACE.svc:PORT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Served jobs: one line per replica (pod, class, plan summary, ready, restarts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub replica_statuses: Vec<ReplicaStatus>,
    /// Served jobs: the latest replica pods replaced after they ended (at most 10, oldest
    /// first; every replica's count is in `replicaStatuses`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub recent_restarts: Vec<ReplicaRestart>,
    /// Replicas waiting for a node to download their model into its cache (`kubectl get`
    /// column `Waiting`); a batch job or group whose next attempt waits counts 1; unset when
    /// none waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas_waiting_for_model: Option<u32>,
    /// Served jobs with `serve.autoscaling`: the load the autoscaler last read and the
    /// replicas it wants (its `Autoscaling` condition says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<crate::autoscaling::AutoscalingStatus>,
    /// Served jobs with `serve.adapters`: each adapter as the operator last accepted it (its
    /// source, the path in a pod, its rank); the `AdaptersReady` condition says whether the
    /// current list is accepted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adapters: Vec<crate::adapters::ResolvedAdapter>,
    /// Batch jobs and groups using the node model cache: where the current attempt's weights
    /// come from (the node's cache or the pod's own fetch, and why) and how long the load
    /// took, read back from its pod (a group's: its leader's); unset without
    /// `model.huggingFace` or with the cache off. Served jobs say it per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<crate::model_cache::ReplicaWeights>,
}

/// A status condition (same shape as metav1.Condition).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// Spec generation the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When status last changed.
    pub last_transition_time: Time,
}

/// Why a class cannot run the job.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClassRejection {
    /// The class.
    pub node_class: String,
    /// Why, in one line.
    pub reason: String,
}

/// One pod vramfit created for the job.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// 1 for the first pod.
    pub number: u32,
    /// The pod (a group's: its leader, rank 0; `members` lists every rank).
    pub pod_name: String,
    /// The class it was planned for.
    pub node_class: String,
    /// One-line summary of its plan.
    pub plan_summary: String,
    /// Why this attempt differs from the previous one (the step taken down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// How it ended: Succeeded, OutOfMemory, HostOutOfMemory, BadOutput (the workload's output
    /// check found garbage), StartTimeout, ScheduleTimeout, Failed, Disrupted (ended by
    /// Kubernetes: evicted, preempted, drained, node shutdown; run again with the same plan
    /// at once), AdmissionRefused (refused by the kubelet at admission; run again with the
    /// same plan after a backoff), or Replaced (deleted for a new pod after a spec change);
    /// unset while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<AttemptOutcome>,
    /// The failure message (termination message or reason), trimmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the operator saw it end (set with `outcome`); the backoff after a refusal at
    /// admission counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// A group's pods (a plan that spans nodes): each rank, its pod and its node once bound,
    /// leader (rank 0) first. Empty for an attempt of one pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub members: Vec<crate::group::GroupMember>,
}

/// Steps taken down after out-of-memory failures and failed output checks (docs/planning.md);
/// the planner applies them.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Fallback {
    /// Steps down the MAX_TILES ladder (vision models).
    #[serde(default)]
    pub tile_steps: u32,
    /// No quantization better than this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_quantization: Option<Quantization>,
    /// At least this many GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_gpus: Option<u32>,
    /// At least this many nodes (a group stepped down by one more node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_nodes: Option<u32>,
    /// Flash attention turned off.
    #[serde(default)]
    pub flash_attention_off: bool,
    /// float16 instead of bfloat16, after the output check found garbage in bfloat16.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub float16: bool,
    /// llama.cpp: no KV-cache type better than this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_kv_cache_type: Option<KvCacheType>,
    /// llama.cpp: tenths of the offload budget given up.
    #[serde(default)]
    pub offload_steps: u32,
    /// Fine-tuning: micro-batch, checkpointing, method and dtype steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuning: Option<TuningFallback>,
}

impl Fallback {
    /// No step taken.
    pub fn is_empty(&self) -> bool {
        *self == Fallback::default()
    }
}
