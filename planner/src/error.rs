//! Why the planner refuses: a job's spec ([`SpecError`], [`ModelError`]), a class defined by
//! a `GpuNodeClass` ([`ClassDefinitionError`]), or a job on a class ([`PlanError`]). Each
//! `Display` is the one line that goes to a status condition, an event, a table or stderr;
//! the fields hold the numbers behind it.
use thiserror::Error;
use vramfit_api::labels::ComputeCapability;
use vramfit_api::{KvCacheType, Quantization};

use crate::memory::LLAMACPP_OVERHEAD_MIB;
use crate::model_catalog::PRESETS;
use crate::plan_common::gib;
use crate::runtime_vllm::FP8_MIN_CAPABILITY;

/// Why a job's `model` cannot be resolved.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ModelError {
    /// `model.preset` names no preset.
    #[error(
        "unknown model preset {key:?}; {}known presets: {}",
        did_you_mean(key),
        known_presets()
    )]
    UnknownPreset {
        /// The key the job gave.
        key: String,
    },
    /// A number the estimator needs is neither given nor in a preset.
    #[error("model.{field} is required when no preset is given")]
    Missing {
        /// The field's manifest name (`layers`, `hiddenSize`, …).
        field: &'static str,
    },
    /// Parameters, layers, hidden size or attention heads is zero.
    #[error("model parameters, layers, hiddenSize and attentionHeads must be positive")]
    NotPositive,
    /// More KV heads than attention heads.
    #[error("model.kvHeads ({kv_heads}) cannot exceed attentionHeads ({attention_heads})")]
    TooManyKvHeads {
        /// KV heads.
        kv_heads: u32,
        /// Attention heads.
        attention_heads: u32,
    },
}

/// `did you mean <preset>? ` for the preset nearest to `key`, as a mistyped field gets (the
/// same nearness: `vramfit_api::schema_check::nearest`); nothing when none is near.
fn did_you_mean(key: &str) -> String {
    let keys: Vec<String> = PRESETS.iter().map(|p| p.key.to_string()).collect();
    vramfit_api::schema_check::nearest(key, keys.iter())
        .map_or_else(String::new, |near| format!("did you mean {near}? "))
}

fn known_presets() -> String {
    PRESETS.iter().map(|p| p.key).collect::<Vec<_>>().join(", ")
}

/// Why a job spec cannot be planned at all: the user's to fix (the operator's `InvalidSpec`).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SpecError {
    /// The model cannot be resolved.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// `gpus.min` is 0 or above `gpus.max`.
    #[error("gpus.min ({min}) must be at least 1 and not exceed gpus.max ({max})")]
    GpuRange {
        /// `gpus.min`.
        min: u32,
        /// `gpus.max`.
        max: u32,
    },
    /// `pod.env` sets a variable vramfit or the device plugin owns.
    #[error("pod.env may not set {name}: {why}")]
    ReservedEnv {
        /// The variable.
        name: String,
        /// Who owns it.
        why: &'static str,
    },
    /// `pod.labels` or `pod.annotations` sets a key vramfit reserves
    /// (`vramfit_api::reserved_pod_keys`).
    #[error("{field} may not set {key}: {why}")]
    ReservedPodKey {
        /// `spec.pod.labels` or `spec.pod.annotations`.
        field: &'static str,
        /// The key.
        key: String,
        /// Why it is reserved.
        why: &'static str,
    },
    /// The job's command or args contradict the planned flags.
    #[error("command/args: {contradiction}")]
    CommandArgs {
        /// The first contradiction (`user_args::first_contradiction`).
        contradiction: String,
    },
    /// `batchSize` is 0.
    #[error("batchSize must be at least 1")]
    ZeroBatchSize,
    /// llama.cpp without a GGUF file size.
    #[error("runtime llamacpp needs a GGUF model: a GGUF preset or model.ggufFileBytes")]
    NoGgufModel,
    /// A pre-quantized Hugging Face checkpoint under llama.cpp, which reads GGUF files only.
    #[error(
        "runtime llamacpp reads GGUF files: a {method} checkpoint (model.preQuantized) runs under vllm, transformers or custom"
    )]
    PreQuantizedUnderLlamaCpp {
        /// The checkpoint's method.
        method: &'static str,
    },
    /// `model.ggufLayout` does not have one block per layer.
    #[error("model.ggufLayout.blockBytes has {blocks} entries for {layers} layers: one per layer")]
    GgufLayoutBlocks {
        /// Entries of `blockBytes`.
        blocks: usize,
        /// The model's layers.
        layers: u32,
    },
    /// `allowedQuantizations` or `kvCacheTypes` leaves nothing.
    #[error("allowedQuantizations and kvCacheTypes may not be empty")]
    EmptyLadder,
    /// The `tuning` section cannot be planned.
    #[error(transparent)]
    Tuning(#[from] crate::tuning::TuningSpecError),
    /// A served job of a runtime with no health route of its own names none.
    #[error(
        "serve.healthPath is required for runtime {runtime} (vLLM and llama.cpp answer GET /health; vramfit probes the route a server answers once its model is loaded)"
    )]
    NoHealthPath {
        /// The runtime, as the manifest names it.
        runtime: &'static str,
    },
    /// `serve.healthPath` is not an absolute path.
    #[error("serve.healthPath must start with / (got {path:?})")]
    BadHealthPath {
        /// What the job gave.
        path: String,
    },
    /// `serve.port` is 0.
    #[error("serve.port must be between 1 and 65535")]
    ZeroPort,
    /// `serve.adapters` on a job whose replicas may span nodes.
    #[error(
        "serve.adapters: adapters on replicas that span nodes are not supported yet; set gpus.maxNodes to 1"
    )]
    AdaptersInGroup,
    /// `serve.adapters` on a mixture-of-experts model.
    #[error(
        "serve.adapters: LoRA adapters on a mixture-of-experts model ({experts} experts) are not planned: vLLM gives its experts no LoRA buffers in the supported versions and vramfit cannot size them; serve the adapters on a dense model"
    )]
    AdaptersOnExperts {
        /// The model's experts per MoE layer.
        experts: u32,
    },
}

/// Why a `GpuNodeClass` does not define a class of its own.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ClassDefinitionError {
    /// No `spec.gpu`.
    #[error("GpuNodeClass {name}: spec.gpu is needed to define a class")]
    NoGpu {
        /// The GpuNodeClass.
        name: String,
    },
    /// An empty `spec.nodeSelector`.
    #[error("GpuNodeClass {name}: spec.nodeSelector is needed to define a class")]
    NoNodeSelector {
        /// The GpuNodeClass.
        name: String,
    },
    /// `spec.gpu.computeCapability` is not `major.minor`.
    #[error("GpuNodeClass {name}: computeCapability {value:?} is not major.minor")]
    BadComputeCapability {
        /// The GpuNodeClass.
        name: String,
        /// What it gave.
        value: String,
    },
}

/// The most GPUs a pod gets on a class, and why.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PodGpuLimit {
    /// Whole GPUs: at most a node's.
    #[error("nodes of this class have {gpus_per_node}")]
    NodeGpus {
        /// GPUs per node.
        gpus_per_node: u32,
    },
    /// One MIG slice per pod.
    #[error(
        "a pod gets one MIG {profile} slice: a model is never spread over slices (no tensor parallel across MIG slices)"
    )]
    MigSlice {
        /// The MIG profile.
        profile: String,
    },
    /// One share of a shared GPU per pod.
    #[error(
        "a pod gets one share of a GPU shared {replicas} ways ({strategy}): multi-GPU plans are refused on shared GPUs"
    )]
    SharedGpu {
        /// Pods per GPU.
        replicas: u32,
        /// `time-slicing` or `mps`.
        strategy: String,
    },
}

/// vLLM has no 8-bit on a GPU: its FP8 needs Ampere and its in-flight bitsandbytes is 4-bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error(
    "no 8-bit under vLLM at compute capability {capability} < {min}: FP8 needs {min} and in-flight bitsandbytes is 4-bit only",
    min = FP8_MIN_CAPABILITY
)]
pub struct NoEightBitUnderVllm {
    /// The class's compute capability.
    pub capability: ComputeCapability,
}

/// A pre-quantized checkpoint on a GPU below the runtime's kernels for its scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error(
    "{scheme} checkpoint: {} has no kernel for it at compute capability {capability} < {floor} ({evidence})",
    runtime_label(*.runtime)
)]
pub struct PreQuantizedBelowFloor {
    /// The checkpoint's scheme.
    pub scheme: &'static str,
    /// The runtime.
    pub runtime: vramfit_api::Runtime,
    /// The class's compute capability.
    pub capability: ComputeCapability,
    /// The scheme's floor under the runtime.
    pub floor: ComputeCapability,
    /// Where the floor is read.
    pub evidence: &'static str,
}

/// MiB as `184 MiB` below a GiB, else `1.2 GiB`: the adapters' share of a GPU.
pub fn adapters_share(mib: u64) -> String {
    if mib < 1024 {
        format!("{mib} MiB")
    } else {
        gib(mib)
    }
}

/// A runtime as its project writes it.
pub fn runtime_label(runtime: vramfit_api::Runtime) -> &'static str {
    match runtime {
        vramfit_api::Runtime::Vllm => "vLLM",
        vramfit_api::Runtime::Transformers => "transformers",
        vramfit_api::Runtime::Llamacpp => "llama.cpp",
        vramfit_api::Runtime::Custom => "the custom runtime",
    }
}

/// A size the planner computes from the job's numbers passes 64 bits: no GPU holds it, and
/// the plan refuses the class rather than wrap or panic (release builds check overflow).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("{what} is more than 16 EiB (2^64 bytes), far beyond any GPU")]
pub struct SizeOverflow {
    /// The quantity and the numbers it is computed from.
    pub what: &'static str,
}

/// Why a class cannot run a job (a `ClassRejection`'s reason).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PlanError {
    /// The class's GpuNodeClass has `allowJobs: false`.
    #[error("jobs are not allowed on this class (GpuNodeClass allowJobs: false)")]
    JobsNotAllowed,
    /// The job's `nodeClasses.denied` names the class.
    #[error("denied by the job's nodeClasses.denied")]
    DeniedByJob,
    /// The job's `nodeClasses.allowed` does not name the class.
    #[error("not in the job's nodeClasses.allowed")]
    NotAllowedByJob,
    /// The job tolerates a taint the class does not allow.
    #[error(
        "the job tolerates taint key {key}, which GpuNodeClass allowedTolerationKeys does not list ({})",
        .allowed.join(", ")
    )]
    TolerationNotAllowed {
        /// The taint key (`*` for every taint).
        key: String,
        /// The class's `allowedTolerationKeys`.
        allowed: Vec<String>,
    },
    /// The job's priority class is not allowed on the class.
    #[error(
        "priority class {priority_class} is not in GpuNodeClass allowedPriorityClasses ({})",
        .allowed.join(", ")
    )]
    PriorityClassNotAllowed {
        /// The job's priority class.
        priority_class: String,
        /// The class's `allowedPriorityClasses`.
        allowed: Vec<String>,
    },
    /// bfloat16 is pinned on a GPU without it.
    #[error(
        "bfloat16 is pinned but compute capability {capability} < 8.0: bf16 would be emulated and answer garbage"
    )]
    Bfloat16Unsupported {
        /// The class's compute capability.
        capability: ComputeCapability,
    },
    /// The job's `gpus.min` is more than a pod gets on the class.
    #[error("job needs at least {needed} GPUs; {limit}")]
    TooFewGpus {
        /// `gpus.min`.
        needed: u32,
        /// What a pod gets here.
        limit: PodGpuLimit,
    },
    /// After out-of-memory step-downs, the job needs more GPUs than a pod gets on the class.
    #[error("needs at least {needed} GPUs (after step-downs); {limit}")]
    TooFewGpusAfterStepDowns {
        /// The fewest GPUs left to try.
        needed: u32,
        /// What a pod gets here.
        limit: PodGpuLimit,
    },
    /// The runtime cannot run any quantization left.
    #[error("no allowed quantization is left: {0}")]
    QuantizationUnsupported(NoEightBitUnderVllm),
    /// Step-downs left no allowed quantization.
    #[error("no allowed quantization is left after step-downs")]
    NoQuantizationLeft,
    /// Neither one node nor a group of up to `gpus.maxNodes` nodes holds the job: `largest`
    /// is why the largest group allowed does not.
    #[error("not even on {nodes} nodes (gpus.maxNodes): {largest}")]
    GroupDoesNotFit {
        /// The most nodes tried.
        nodes: u32,
        /// Why that many do not hold it.
        largest: Box<PlanError>,
    },
    /// A step-down to more nodes asks for more than `gpus.maxNodes` allows.
    #[error("needs at least {needed} nodes (after step-downs); gpus.maxNodes is {max_nodes}")]
    NodesAfterStepDowns {
        /// Nodes the step-downs ask for.
        needed: u32,
        /// `gpus.maxNodes`.
        max_nodes: u32,
    },
    /// The runtime cannot split the model over that many nodes.
    #[error("{0}")]
    NoGroupShape(String),
    /// The runtime has no engine that spans nodes, so `gpus.maxNodes` cannot help.
    #[error("{one_node}; {why}")]
    NoGroupEngine {
        /// Why one node does not hold it.
        one_node: Box<PlanError>,
        /// Why no group is planned here.
        why: &'static str,
    },
    /// A pre-quantized checkpoint below its scheme's compute-capability floor.
    #[error(transparent)]
    PreQuantizedBelowFloor(#[from] PreQuantizedBelowFloor),
    /// The job pins bfloat16 but the checkpoint's kernel on this class takes float16 only.
    #[error(
        "the job pins bfloat16 but {kernel} takes float16 activations only at compute capability {capability}"
    )]
    PinnedBfloat16Float16Kernel {
        /// The kernel.
        kernel: &'static str,
        /// The class's compute capability.
        capability: ComputeCapability,
    },
    /// Even the most compact quantization on the most GPUs needs more memory than there is.
    #[error(
        "does not fit: needs {} per GPU with {} on {gpus}×{gpu}, {} usable",
        gib(*.needed_per_gpu_mib),
        .quantization.as_str(),
        gib(*.usable_per_gpu_mib)
    )]
    DoesNotFit {
        /// Memory needed per GPU, MiB.
        needed_per_gpu_mib: u64,
        /// Memory usable per GPU, MiB.
        usable_per_gpu_mib: u64,
        /// The most compact quantization allowed.
        quantization: Quantization,
        /// The most GPUs allowed.
        gpus: u32,
        /// One GPU of the class (`NodeClass::describe_gpu`).
        gpu: String,
    },
    /// The class would hold the model, or hold it differently, without its LoRA adapters.
    #[error(
        "{refusal}; {} of that per GPU is for its {}",
        adapters_share(*.adapters_mib),
        if *.count == 1 { "LoRA adapter".to_string() } else { format!("{} LoRA adapters", .count) }
    )]
    AdaptersDoNotFit {
        /// Why the model with its adapters does not fit (the sizes include the adapters').
        refusal: Box<PlanError>,
        /// Adapters served.
        count: u32,
        /// Their share of each GPU, MiB.
        adapters_mib: u64,
    },
    /// llama.cpp's target share of VRAM leaves nothing beside its overhead.
    #[error(
        "no offload budget: {target_percent}% of {} is below llama.cpp's {overhead} MiB overhead",
        gib(*.vram_per_gpu_mib),
        overhead = LLAMACPP_OVERHEAD_MIB
    )]
    NoOffloadBudget {
        /// The target share of VRAM, percent.
        target_percent: u32,
        /// VRAM per GPU, MiB.
        vram_per_gpu_mib: u64,
    },
    /// Only quantized KV caches are allowed, and flash attention is off.
    #[error(
        "only quantized KV-cache types are allowed, and they need flash attention, which is off here"
    )]
    QuantizedKvCacheNeedsFlashAttention,
    /// Not even one layer fits llama.cpp's budget.
    #[error(
        "not one layer fits: {} for one layer with KV {} and llama.cpp's {overhead} MiB, {} budget per GPU",
        gib(*.one_layer_mib),
        .kv_cache_type.as_str(),
        gib(*.budget_per_gpu_mib),
        overhead = LLAMACPP_OVERHEAD_MIB
    )]
    NoLayerFits {
        /// One layer's weights and KV cache with llama.cpp's overhead, MiB.
        one_layer_mib: u64,
        /// The most compact KV-cache type allowed.
        kv_cache_type: KvCacheType,
        /// The budget per GPU (the plan's usable memory), MiB.
        budget_per_gpu_mib: u64,
    },
    /// The job's numbers are too large to size on any GPU.
    #[error("cannot size the job: {0}")]
    SizeOverflow(#[from] SizeOverflow),
    /// Not even micro-batch 1 with gradient checkpointing fits, with the cheapest method left.
    #[error(
        "does not fit: {} fine-tuning needs {} per GPU at micro-batch 1 with gradient checkpointing on {gpus}×{gpu}, {} usable",
        .method.as_str(),
        gib(*.needed_per_gpu_mib),
        gib(*.usable_per_gpu_mib)
    )]
    TuningDoesNotFit {
        /// The cheapest method tried.
        method: vramfit_api::tuning::TuningMethod,
        /// Memory needed per GPU, MiB.
        needed_per_gpu_mib: u64,
        /// Memory usable per GPU, MiB.
        usable_per_gpu_mib: u64,
        /// The GPUs of the layout that needed least.
        gpus: u32,
        /// One GPU of the class.
        gpu: String,
    },
    /// Step-downs left no fine-tuning method.
    #[error("no fine-tuning method is left after step-downs")]
    NoTuningMethodLeft,
    /// The loss diverged in float16; bfloat16 is needed and this class has none.
    #[error(
        "bfloat16 is needed (the loss diverged in float16) but compute capability {capability} < 8.0"
    )]
    Bfloat16AfterDivergedLoss {
        /// The class's compute capability.
        capability: ComputeCapability,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message, character for character as the planner wrote it before it had types
    /// (status conditions, events and the CLI's golden files carry them).
    #[test]
    fn messages_are_the_one_liners_status_and_stderr_carry() {
        let cc = ComputeCapability::new(7, 0);
        let cases: Vec<(Box<dyn std::error::Error>, &str)> = vec![
            (
                Box::new(SpecError::from(ModelError::UnknownPreset {
                    key: "nope".into(),
                })),
                "unknown model preset \"nope\"; known presets: internvl3-8b, llama-3.2-11b-vision-instruct, mistral-7b-instruct-v0.3, llama-3.1-8b-instruct, mistral-7b-instruct-v0.3-q4_k_m, mistral-7b-instruct-v0.3-q8_0, llama-3.1-8b-instruct-q4_k_m, llama-3.1-70b-instruct-q4_k_m, \
                 qwen2.5-7b-instruct, qwen2.5-vl-7b-instruct, qwen3-4b, qwen3-8b, qwen3-14b, phi-4, qwen3-32b, gemma-3-4b-it, gemma-3-27b-it, llama-3.2-1b-instruct, llama-3.2-3b-instruct, llama-3.1-70b-instruct, \
                 llama-3.2-90b-vision-instruct, mixtral-8x7b-instruct-v0.1, qwen3-30b-a3b, qwen3-4b-q4_k_m, qwen3-4b-q6_k, qwen3-4b-q8_0, qwen3-8b-q6_k, qwen3-8b-q8_0, qwq-32b-preview-awq, qwen2.5-7b-instruct-gptq-int4, qwen2.5-7b-fp8-dynamic",
            ),
            (
                Box::new(ModelError::Missing {
                    field: "hiddenSize",
                }),
                "model.hiddenSize is required when no preset is given",
            ),
            (
                Box::new(ModelError::NotPositive),
                "model parameters, layers, hiddenSize and attentionHeads must be positive",
            ),
            (
                Box::new(SpecError::GpuRange { min: 3, max: 2 }),
                "gpus.min (3) must be at least 1 and not exceed gpus.max (2)",
            ),
            (
                Box::new(SpecError::ReservedEnv {
                    name: "MAX_TILES".into(),
                    why: "vramfit plans it from the node class",
                }),
                "pod.env may not set MAX_TILES: vramfit plans it from the node class",
            ),
            (
                Box::new(SpecError::CommandArgs {
                    contradiction: "x".into(),
                }),
                "command/args: x",
            ),
            (
                Box::new(ClassDefinitionError::NoGpu { name: "c".into() }),
                "GpuNodeClass c: spec.gpu is needed to define a class",
            ),
            (
                Box::new(ClassDefinitionError::NoNodeSelector { name: "c".into() }),
                "GpuNodeClass c: spec.nodeSelector is needed to define a class",
            ),
            (
                Box::new(ClassDefinitionError::BadComputeCapability {
                    name: "c".into(),
                    value: "8".into(),
                }),
                "GpuNodeClass c: computeCapability \"8\" is not major.minor",
            ),
            (
                Box::new(PlanError::TooFewGpus {
                    needed: 2,
                    limit: PodGpuLimit::NodeGpus { gpus_per_node: 1 },
                }),
                "job needs at least 2 GPUs; nodes of this class have 1",
            ),
            (
                Box::new(PlanError::TooFewGpusAfterStepDowns {
                    needed: 2,
                    limit: PodGpuLimit::SharedGpu {
                        replicas: 4,
                        strategy: "time-slicing".into(),
                    },
                }),
                "needs at least 2 GPUs (after step-downs); a pod gets one share of a GPU shared 4 ways (time-slicing): multi-GPU plans are refused on shared GPUs",
            ),
            (
                Box::new(PlanError::TooFewGpus {
                    needed: 2,
                    limit: PodGpuLimit::MigSlice {
                        profile: "3g.40gb".into(),
                    },
                }),
                "job needs at least 2 GPUs; a pod gets one MIG 3g.40gb slice: a model is never spread over slices (no tensor parallel across MIG slices)",
            ),
            (
                Box::new(PlanError::QuantizationUnsupported(NoEightBitUnderVllm {
                    capability: cc,
                })),
                "no allowed quantization is left: no 8-bit under vLLM at compute capability 7.0 < 8.0: FP8 needs 8.0 and in-flight bitsandbytes is 4-bit only",
            ),
            (
                Box::new(PlanError::NoQuantizationLeft),
                "no allowed quantization is left after step-downs",
            ),
            (
                Box::new(PlanError::GroupDoesNotFit {
                    nodes: 2,
                    largest: Box::new(PlanError::NoQuantizationLeft),
                }),
                "not even on 2 nodes (gpus.maxNodes): no allowed quantization is left after step-downs",
            ),
            (
                Box::new(PlanError::NodesAfterStepDowns {
                    needed: 3,
                    max_nodes: 2,
                }),
                "needs at least 3 nodes (after step-downs); gpus.maxNodes is 2",
            ),
            (
                Box::new(PlanError::NoGroupEngine {
                    one_node: Box::new(PlanError::NoQuantizationLeft),
                    why: "transformers has no engine across nodes",
                }),
                "no allowed quantization is left after step-downs; transformers has no engine across nodes",
            ),
            (
                Box::new(PlanError::from(PreQuantizedBelowFloor {
                    scheme: "AWQ",
                    runtime: vramfit_api::Runtime::Vllm,
                    capability: cc,
                    floor: ComputeCapability::new(7, 5),
                    evidence: "`awq.py` 75",
                })),
                "AWQ checkpoint: vLLM has no kernel for it at compute capability 7.0 < 7.5 (`awq.py` 75)",
            ),
            (
                Box::new(PlanError::DoesNotFit {
                    needed_per_gpu_mib: 26_112,
                    usable_per_gpu_mib: 18_432,
                    quantization: Quantization::Nf4,
                    gpus: 4,
                    gpu: "A10G".into(),
                }),
                "does not fit: needs 25.5 GiB per GPU with nf4 on 4×A10G, 18.0 GiB usable",
            ),
            (
                Box::new(PlanError::NoOffloadBudget {
                    target_percent: 10,
                    vram_per_gpu_mib: 8_192,
                }),
                "no offload budget: 10% of 8.0 GiB is below llama.cpp's 500 MiB overhead",
            ),
            (
                Box::new(PlanError::QuantizedKvCacheNeedsFlashAttention),
                "only quantized KV-cache types are allowed, and they need flash attention, which is off here",
            ),
            (
                Box::new(PlanError::NoLayerFits {
                    one_layer_mib: 2_048,
                    kv_cache_type: KvCacheType::Q4_0,
                    budget_per_gpu_mib: 1_536,
                }),
                "not one layer fits: 2.0 GiB for one layer with KV q4_0 and llama.cpp's 500 MiB, 1.5 GiB budget per GPU",
            ),
            (
                Box::new(PlanError::from(SizeOverflow {
                    what: "the KV cache",
                })),
                "cannot size the job: the KV cache is more than 16 EiB (2^64 bytes), far beyond any GPU",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }
}
