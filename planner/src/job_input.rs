//! A job's spec, checked and resolved into what the planner needs. Spec errors here are
//! the user's to fix: the operator reports them as `InvalidSpec` and waits for a change.
use vramfit_api::{
    DtypeRequest, GpuLayers, InferenceJobSpec, JobOverrides, KvCacheType, NodeClassSelection,
    Preference, Quantization, Runtime,
};

use vramfit_api::checkpoint::GgufLayout;

use crate::error::SpecError;
use crate::model_catalog::{self, ModelShape};

/// Context length when the job sets none.
pub const DEFAULT_CONTEXT_LENGTH: u32 = 4096;
/// vLLM prefills in chunks (chunked prefill, `max_num_batched_tokens`): activations are
/// sized for at most this many tokens at once.
pub const VLLM_PREFILL_CHUNK_TOKENS: u64 = 8192;
/// llama.cpp share of VRAM planned for, when the job sets none (docs/planning.md).
pub const DEFAULT_TARGET_USAGE_PERCENT: u32 = 80;

/// A job ready to plan.
#[derive(Clone, Debug, PartialEq)]
pub struct JobInput {
    /// The model's numbers.
    pub model: ModelShape,
    /// A GGUF file's bytes per block, output layer and token embeddings, where known.
    pub gguf_layout: Option<GgufLayout>,
    /// Runtime.
    pub runtime: Runtime,
    /// Context length planned for (capped at the model's limit).
    pub context_length: u32,
    /// Sequences at once.
    pub batch_size: u32,
    /// Requested dtype.
    pub dtype: DtypeRequest,
    /// Allowed quantizations, best first.
    pub quantizations: Vec<Quantization>,
    /// Allowed KV-cache types (llama.cpp), best first.
    pub kv_cache_types: Vec<KvCacheType>,
    /// Fewest GPUs.
    pub min_gpus: u32,
    /// Most GPUs.
    pub max_gpus: u32,
    /// Most nodes one attempt may span (`gpus.maxNodes`); 1 keeps it on one node.
    pub max_nodes: u32,
    /// Set by the group planner while it sizes a group: the GPUs of one node, so vLLM's
    /// tensor parallel size (the heads it must split evenly) is one node's GPUs while the
    /// memory is split over every GPU of the group. `None` for a one-node plan.
    pub group_node_gpus: Option<u32>,
    /// Preference.
    pub preference: Preference,
    /// llama.cpp layers.
    pub gpu_layers: GpuLayers,
    /// llama.cpp share of VRAM, percent.
    pub target_usage_percent: u32,
    /// Per-job overrides.
    pub overrides: JobOverrides,
    /// Allowed / denied classes.
    pub classes: NodeClassSelection,
    /// Notes for the plan's reasons (context capped, say).
    pub notes: Vec<String>,
    /// The container's command is a shell script, which never sees appended flags.
    pub shell_command: bool,
    /// Taint keys the job's own tolerations name (`*` for a toleration without a key).
    pub toleration_keys: Vec<String>,
    /// The priority class the job asks for.
    pub priority_class: Option<String>,
    /// A fine-tuning job's section, resolved; `None` for an inference job.
    pub tuning: Option<crate::tuning::TuningInput>,
    /// A served job's port and adapters (docs/serving.md); `None` for a batch job.
    pub serve: Option<crate::serving::ServeInput>,
}

impl JobInput {
    /// Tokens held at once: batch × context.
    pub fn tokens(&self) -> u64 {
        crate::memory::tokens(self.batch_size, self.context_length)
    }

    /// Tokens processed at once during prefill: all of them, except under vLLM's chunked
    /// prefill.
    pub fn prefill_tokens(&self) -> u64 {
        match self.runtime {
            Runtime::Vllm => self.tokens().min(VLLM_PREFILL_CHUNK_TOKENS),
            _ => self.tokens(),
        }
    }
}

/// Checks a job spec and resolves its model. The error's `Display` is one line for a status
/// condition or stderr.
pub fn resolve_job(spec: &InferenceJobSpec) -> Result<JobInput, SpecError> {
    let model = model_catalog::resolve(&spec.model)?;
    if spec.gpus.min == 0 || spec.gpus.min > spec.gpus.max {
        return Err(SpecError::GpuRange {
            min: spec.gpus.min,
            max: spec.gpus.max,
        });
    }
    let mut pod_env = spec.pod.iter().flat_map(|pod| &pod.env);
    if let Some((name, why)) =
        pod_env.find_map(|var| crate::workload::reserved_env(&var.name).map(|why| (&var.name, why)))
    {
        return Err(SpecError::ReservedEnv {
            name: name.clone(),
            why,
        });
    }
    if let Some((field, key, why)) = spec.pod.as_ref().and_then(|pod| {
        vramfit_api::reserved_pod_keys::first_reserved(pod.labels.keys(), pod.annotations.keys())
    }) {
        return Err(SpecError::ReservedPodKey {
            field: field.path(),
            key: key.to_string(),
            why,
        });
    }
    if let Some(why) =
        crate::user_args::first_contradiction(spec.runtime, &spec.command, &spec.args)
    {
        return Err(SpecError::CommandArgs { contradiction: why });
    }
    let serve = crate::serving::check(spec)?;
    if let Some(experts) = model.experts
        && spec.serve.as_ref().is_some_and(|s| !s.adapters.is_empty())
    {
        return Err(SpecError::AdaptersOnExperts { experts });
    }
    if spec.batch_size == 0 {
        return Err(SpecError::ZeroBatchSize);
    }
    if spec.runtime == Runtime::Llamacpp && model.gguf_file_bytes.is_none() {
        return Err(SpecError::NoGgufModel);
    }
    if let (Runtime::Llamacpp, Some(q)) = (spec.runtime, model.pre_quantized) {
        return Err(SpecError::PreQuantizedUnderLlamaCpp {
            method: q.method.as_str(),
        });
    }
    let gguf_layout = spec.model.gguf_layout.clone();
    if let Some(layout) = &gguf_layout
        && usize::try_from(model.layers).ok() != Some(layout.block_bytes.len())
    {
        return Err(SpecError::GgufLayoutBlocks {
            blocks: layout.block_bytes.len(),
            layers: model.layers,
        });
    }
    let mut notes = Vec::new();
    let tuning = crate::tuning::input::resolve(spec, &model, &mut notes)?;
    let requested = spec.context_length.unwrap_or(DEFAULT_CONTEXT_LENGTH);
    // A tuning job's sequences are its context (capped in `tuning::input`).
    let context_length = tuning
        .as_ref()
        .map_or(requested.min(model.context_limit), |t| t.sequence_length);
    if tuning.is_none() && context_length < requested {
        notes.push(format!(
            "context {context_length}: capped at the model's limit (asked {requested})"
        ));
    }
    // A pre-quantized checkpoint gets no in-flight quantization on top: its own bytes are
    // what runs.
    let quantizations = match model.pre_quantized {
        Some(q) => {
            notes.push(format!(
                "pre-quantized {} checkpoint ({}-bit weights): no in-flight quantization on top{}",
                q.method.as_str(),
                q.weight_bits,
                if spec.allowed_quantizations.is_some() {
                    "; allowedQuantizations does not apply"
                } else {
                    ""
                }
            ));
            vec![Quantization::None]
        }
        None => ordered(spec.allowed_quantizations.as_deref(), &Quantization::LADDER),
    };
    let llama = spec.llama_cpp.clone().unwrap_or_default();
    let kv_cache_types = ordered(llama.kv_cache_types.as_deref(), &KvCacheType::LADDER);
    if quantizations.is_empty() || kv_cache_types.is_empty() {
        return Err(SpecError::EmptyLadder);
    }
    Ok(JobInput {
        model,
        gguf_layout,
        runtime: spec.runtime,
        context_length,
        batch_size: spec.batch_size,
        dtype: spec.dtype,
        quantizations,
        kv_cache_types,
        min_gpus: spec.gpus.min,
        max_gpus: spec.gpus.max,
        // The schema bounds it; a stored object past the bounds is planned at them.
        max_nodes: spec
            .gpus
            .max_nodes
            .clamp(1, vramfit_api::group::MAX_GROUP_NODES),
        group_node_gpus: None,
        preference: spec.preference,
        gpu_layers: llama.gpu_layers,
        target_usage_percent: llama
            .target_usage_percent
            .unwrap_or(DEFAULT_TARGET_USAGE_PERCENT)
            .clamp(1, 100),
        overrides: spec.overrides.clone().unwrap_or_default(),
        classes: spec.node_classes.clone().unwrap_or_default(),
        notes,
        shell_command: crate::user_args::is_shell(&spec.command),
        toleration_keys: spec
            .pod
            .iter()
            .flat_map(|pod| &pod.tolerations)
            .map(|t| {
                t.key
                    .clone()
                    .filter(|k| !k.is_empty())
                    .unwrap_or("*".into())
            })
            .collect(),
        priority_class: spec
            .pod
            .as_ref()
            .and_then(|pod| pod.priority_class_name.clone()),
        tuning,
        serve,
    })
}

/// The allowed subset of a ladder, in ladder order, without duplicates. `None` = all.
fn ordered<T: Copy + PartialEq>(allowed: Option<&[T]>, ladder: &[T]) -> Vec<T> {
    ladder
        .iter()
        .copied()
        .filter(|level| allowed.is_none_or(|a| a.contains(level)))
        .collect()
}
