//! The adapters' share of each GPU of a replica on a class, the runtime's LoRA settings, and
//! the plan's line that explains them.
use vramfit_api::adapters::DEFAULT_MAX_ADAPTERS_PER_BATCH;
use vramfit_api::{AdaptersPlan, Runtime};

use super::memory::{
    LORA_DTYPE_BYTES, llamacpp_adapter_bytes, vllm_buffer_bytes, vllm_max_lora_rank,
};
use crate::job_input::JobInput;
use crate::memory::mib;

/// What a replica's adapters take on each GPU, and vLLM's settings for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptersNeed {
    /// Adapters served.
    pub count: u32,
    /// MiB on each GPU: vLLM's LoRA buffers, or the adapters' weights.
    pub per_gpu_mib: u64,
    /// vLLM: `--max-loras`.
    pub max_per_batch: Option<u32>,
    /// vLLM: `--max-lora-rank`.
    pub max_rank: Option<u32>,
}

impl AdaptersNeed {
    /// The plan's `adapters`.
    pub fn plan(&self) -> AdaptersPlan {
        AdaptersPlan {
            count: self.count,
            max_per_batch: self.max_per_batch,
            max_rank: self.max_rank,
            memory_mib: self.per_gpu_mib,
        }
    }
}

/// vLLM's `--max-loras` for `job`: `serve.maxAdaptersPerBatch`, else as many as it serves up
/// to [`DEFAULT_MAX_ADAPTERS_PER_BATCH`]; never more than it serves (buffers for adapters
/// that cannot exist would only take memory), never 0.
pub fn max_per_batch(job: &JobInput) -> u32 {
    let Some(serve) = &job.serve else {
        return 1;
    };
    let count = u32::try_from(serve.adapters.len()).unwrap_or(u32::MAX);
    serve
        .max_adapters_per_batch
        .unwrap_or(DEFAULT_MAX_ADAPTERS_PER_BATCH)
        .min(count)
        .max(1)
}

/// The largest rank of `job`'s adapters, as vLLM's `--max-lora-rank` takes it (rounded up to
/// one of its ranks; a rank past its largest, which resolution refuses, is kept as it is).
pub fn max_rank(job: &JobInput) -> u32 {
    let largest = job
        .serve
        .iter()
        .flat_map(|s| &s.adapters)
        .map(|a| a.rank)
        .max()
        .unwrap_or(1);
    vllm_max_lora_rank(largest).unwrap_or(largest)
}

/// What `job`'s adapters take on each of `gpus` GPUs (vLLM: tensor parallel over one node's
/// GPUs); `None` without adapters.
pub fn need(job: &JobInput, gpus: u32) -> Option<AdaptersNeed> {
    let adapters = &job.serve.as_ref()?.adapters;
    if adapters.is_empty() {
        return None;
    }
    let count = u32::try_from(adapters.len()).unwrap_or(u32::MAX);
    Some(match job.runtime {
        Runtime::Vllm => {
            let (lm, r) = (max_per_batch(job), max_rank(job));
            let t = job.group_node_gpus.unwrap_or(gpus);
            AdaptersNeed {
                count,
                per_gpu_mib: mib(vllm_buffer_bytes(&job.model, r, lm, t, LORA_DTYPE_BYTES)),
                max_per_batch: Some(lm),
                max_rank: Some(r),
            }
        }
        // llama.cpp puts an adapter's tensors beside the layers they modify; each GPU is
        // budgeted for all of them (an upper bound, whatever the split). Transformers and
        // custom servers are budgeted the same for the adapters their code loads.
        Runtime::Llamacpp | Runtime::Transformers | Runtime::Custom => AdaptersNeed {
            count,
            per_gpu_mib: mib(adapters.iter().fold(0u64, |sum, a| {
                sum.saturating_add(llamacpp_adapter_bytes(a, &job.model))
            })),
            max_per_batch: None,
            max_rank: None,
        },
    })
}

/// MiB `job`'s adapters take on each of `gpus` GPUs; 0 without adapters.
pub fn per_gpu_mib(job: &JobInput, gpus: u32) -> u64 {
    need(job, gpus).map_or(0, |n| n.per_gpu_mib)
}

/// The plan's line for the adapters.
pub fn reason(job: &JobInput, need: &AdaptersNeed) -> String {
    let names: Vec<&str> = job
        .serve
        .iter()
        .flat_map(|s| &s.adapters)
        .map(|a| a.name.as_str())
        .collect();
    let plural = if need.count == 1 {
        "adapter"
    } else {
        "adapters"
    };
    let listed = format!("{} {plural} ({})", need.count, names.join(", "));
    let share = crate::error::adapters_share(need.per_gpu_mib);
    match (job.runtime, need.max_per_batch, need.max_rank) {
        (Runtime::Vllm, Some(lm), Some(r)) => format!(
            "LoRA: {listed}, buffers for {lm} per batch at rank {r} (--max-loras {lm}, --max-lora-rank {r}): {share} per GPU, taken from the KV cache (vLLM counts them as weights)"
        ),
        (Runtime::Llamacpp, _, _) => format!(
            "LoRA: {listed} loaded at start (--lora), each applied at scale 1 unless a request's \"lora\" field says otherwise: {share} per GPU beside the offloaded layers"
        ),
        _ => format!(
            "LoRA: {listed} mounted for the server's code (VRAMFIT_ADAPTERS): {share} per GPU budgeted for their weights"
        ),
    }
}
