//! Sizing for GGUF models under llama.cpp (docs/planning.md): how many layers to offload, with
//! which KV-cache type, on how many GPUs.
use vramfit_api::{Fallback, GpuLayers, KvCacheType, LlamaCppPlan, MemoryEstimate, Preference};

use vramfit_api::checkpoint::GgufLayout;

use crate::error::{PlanError, SizeOverflow};
use crate::job_input::JobInput;
use crate::memory::{self, LLAMACPP_OVERHEAD_MIB};
use crate::node_class::NodeClass;
use crate::plan_common::gib;
use crate::plan_transformers::gpu_range;

/// Share of the budget each offload step-down gives up, in percent points.
const OFFLOAD_STEP_PERCENT: u32 = 10;

/// How a GGUF job fits a class.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaCppSizing {
    /// GPUs taken.
    pub gpu_count: u32,
    /// Offload decisions.
    pub llama_cpp: LlamaCppPlan,
    /// Memory per GPU.
    pub memory: MemoryEstimate,
    /// Share of VRAM planned, percent: `targetUsagePercent` less the offload step-downs.
    pub budget_percent: u32,
    /// Why.
    pub reasons: Vec<String>,
    /// A pinned layer count that cannot fit.
    pub warnings: Vec<String>,
}

struct Budget<'a> {
    job: &'a JobInput,
    class: &'a NodeClass,
    target_percent: u32,
    /// Served LoRA adapters' tensors on each GPU, MiB (0 without).
    adapters_mib: u64,
}

/// What overflows when a GGUF offload does.
const OFFLOAD: &str =
    "the offloaded weights and KV cache (ggufFileBytes per layer and the KV cache of each layer)";

impl Budget<'_> {
    /// Per GPU, MiB: VRAM × target usage, the plan's usable memory.
    fn usable_mib(&self) -> u64 {
        memory::percent_of(self.class.memory_mib, self.target_percent)
    }

    /// Per GPU, MiB, for the offloaded weights and KV cache: the usable memory less the
    /// runtime overhead and the adapters.
    fn per_gpu_mib(&self) -> u64 {
        self.usable_mib()
            .saturating_sub(LLAMACPP_OVERHEAD_MIB)
            .saturating_sub(self.adapters_mib)
    }

    /// The transformer blocks (GGUF `block_count`).
    fn blocks(&self) -> u32 {
        self.job.model.layers
    }

    /// One block's share of the file: more than a block, since the file also holds the token
    /// embeddings (kept in host memory) and the output layer.
    fn unit_bytes(&self) -> u64 {
        memory::div_ceil(
            self.job.model.gguf_file_bytes.unwrap_or(0),
            u64::from(self.blocks()),
        )
    }

    /// Weights on the GPUs for `--n-gpu-layers n`. All `blocks + 1` layers: at most the whole
    /// file. Fewer: `n` shares. llama.cpp's `load_tensors` puts `n` of its layers on the GPUs,
    /// never more: the last `n` blocks, or from PR 18148 on the output layer and the last
    /// `n - 1` blocks (the output layer then takes a block's place, and that place's KV cache
    /// stays on the CPU). With the file's layout known, each tensor by its real bytes instead.
    fn weights_bytes(&self, n: u32) -> Result<u64, SizeOverflow> {
        if let Some(layout) = &self.job.gguf_layout {
            return Ok(offloaded_bytes(layout, n));
        }
        if n > self.blocks() {
            Ok(self.job.model.gguf_file_bytes.unwrap_or(0))
        } else {
            self.unit_bytes()
                .checked_mul(u64::from(n))
                .ok_or(SizeOverflow { what: OFFLOAD })
        }
    }

    /// KV cache on the GPUs: one per offloaded block (the output layer has none), `n` blocks'
    /// worth for a partial count (the builds before PR 18148 offload `n` blocks).
    fn kv_bytes(&self, n: u32, kv: KvCacheType) -> Result<u64, SizeOverflow> {
        memory::kv_cache_bytes_per_layer(&self.job.model, self.job.tokens(), kv)?
            .checked_mul(u64::from(n.min(self.blocks())))
            .ok_or(SizeOverflow { what: OFFLOAD })
    }

    fn bytes(&self, n: u32, kv: KvCacheType) -> Result<u64, SizeOverflow> {
        memory::sum(OFFLOAD, self.weights_bytes(n)?, self.kv_bytes(n, kv)?)
    }

    /// Weights on the fullest of `gpus` GPUs for `--n-gpu-layers n`: it holds
    /// [`fullest_device_layers`] of the offloaded layers, each counted at the most a layer
    /// may weigh (a share of the file, or with the file's layout the largest of the offloaded
    /// blocks and the output layer), and never more than all of them.
    fn fullest_weights_bytes(&self, n: u32, gpus: u32) -> Result<u64, SizeOverflow> {
        let all = self.weights_bytes(n)?;
        let k = fullest_device_layers(n, gpus);
        let fullest = match &self.job.gguf_layout {
            Some(layout) => largest_offloaded_bytes(layout, n, k),
            None => self
                .unit_bytes()
                .checked_mul(u64::from(k))
                .ok_or(SizeOverflow { what: OFFLOAD })?,
        };
        Ok(fullest.min(all))
    }

    /// MiB on the fullest of `gpus` GPUs for `--n-gpu-layers n`: its weights and the KV cache
    /// of its layers (each counted as a block: the output layer has none, so never less),
    /// each rounded up as the plan's memory estimate shows them. llama.cpp splits whole layers
    /// over its devices, so this device, not the average, decides what fits (an RPC group's
    /// workers come first in llama.cpp's order and take the extra layers).
    fn weights_and_kv_per_gpu_mib(
        &self,
        n: u32,
        kv: KvCacheType,
        gpus: u32,
    ) -> Result<(u64, u64), SizeOverflow> {
        let k = fullest_device_layers(n, gpus);
        let kv_bytes = memory::kv_cache_bytes_per_layer(&self.job.model, self.job.tokens(), kv)?
            .checked_mul(u64::from(k.min(n).min(self.blocks())))
            .ok_or(SizeOverflow { what: OFFLOAD })?;
        Ok((
            memory::mib(self.fullest_weights_bytes(n, gpus)?),
            memory::mib(kv_bytes),
        ))
    }

    /// Whether `n` layers fit on `gpus` GPUs, judged on the rounded-up figures the estimate
    /// reports (exact bytes could fit while the reported MiB, each rounded up, exceed the
    /// budget by one). A size past 64 bits fits nowhere.
    fn fits(&self, n: u32, kv: KvCacheType, gpus: u32) -> bool {
        self.weights_and_kv_per_gpu_mib(n, kv, gpus)
            .is_ok_and(|(weights, kv_cache)| weights.saturating_add(kv_cache) <= self.per_gpu_mib())
    }

    /// The largest `--n-gpu-layers` whose layers fit on `gpus` GPUs (llama.cpp splits layers
    /// across GPUs), at most `blocks + 1`. Up to `blocks` the memory grows with every layer,
    /// so a binary search finds it in a few steps whatever the block count.
    fn layers_that_fit(&self, gpus: u32, kv: KvCacheType) -> u32 {
        let all = total_layers(self.job);
        if self.fits(all, kv, gpus) {
            return all;
        }
        // Invariant: `fit` fits (0 always does: nothing offloaded), `too_many` does not.
        let (mut fit, mut too_many) = (0u32, self.blocks().saturating_add(1));
        while too_many.saturating_sub(fit) > 1 {
            let middle = fit.saturating_add(too_many.saturating_sub(fit) / 2);
            if self.fits(middle, kv, gpus) {
                fit = middle;
            } else {
                too_many = middle;
            }
        }
        fit
    }
}

/// Tensor bytes on the GPUs for `--n-gpu-layers n`, by the file's layout. llama.cpp offloads
/// the last blocks: before PR 18148 the last `n` blocks, the output layer only when every
/// block is offloaded; from it on, the output layer first and then the last `n - 1` blocks.
/// Budgeted as the larger of the two, so the plan holds on either build. The token embeddings
/// stay in host memory. Sums of `u64` tensor bytes read from one file saturate (a file holds
/// less than 2^64 bytes).
pub fn offloaded_bytes(layout: &GgufLayout, n: u32) -> u64 {
    let blocks = &layout.block_bytes;
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    let last = |count: usize| -> u64 {
        blocks
            .iter()
            .rev()
            .take(count)
            .fold(0u64, |sum, b| sum.saturating_add(*b))
    };
    if n == 0 {
        return 0;
    }
    if n > blocks.len() {
        return last(blocks.len()).saturating_add(layout.output_bytes);
    }
    let before_18148 = last(n);
    let from_18148 = last(n.saturating_sub(1)).saturating_add(layout.output_bytes);
    before_18148.max(from_18148)
}

/// The most layers one of `gpus` devices holds for `--n-gpu-layers n`: llama.cpp gives each
/// device whole layers by `--tensor-split` (the plan's even split) or by free memory (even on
/// one class), so the fullest holds `ceil(n / gpus)`.
pub fn fullest_device_layers(n: u32, gpus: u32) -> u32 {
    n.div_ceil(gpus.max(1))
}

/// The bytes of the `k` largest layers `--n-gpu-layers n` may offload by the file's layout:
/// the last `n` blocks and the output layer (either llama.cpp build offloads a subset of
/// those), so no device of the split holds more.
fn largest_offloaded_bytes(layout: &GgufLayout, n: u32, k: u32) -> u64 {
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    let mut candidates: Vec<u64> = layout.block_bytes.iter().rev().take(n).copied().collect();
    if n > 0 {
        candidates.push(layout.output_bytes);
    }
    candidates.sort_unstable();
    candidates
        .iter()
        .rev()
        .take(usize::try_from(k).unwrap_or(usize::MAX))
        .fold(0u64, |sum, b| sum.saturating_add(*b))
}

/// llama.cpp's host buffers (CPU compute buffers, logits, runtime) beside the model.
pub const LLAMACPP_HOST_OVERHEAD_MIB: u64 = 1024;

/// Host memory a partial offload needs, MiB: the whole GGUF file (memory-mapped; the CPU
/// layers run from it and loading reads every layer through the page cache), the KV cache
/// of the blocks left on the CPU, and llama.cpp's host buffers. `None` when every layer is
/// on the GPUs. A partial `--n-gpu-layers n` leaves `blocks - n` blocks on the CPU before
/// llama.cpp PR 18148 and `blocks + 1 - n` from it on (the output layer goes first): the
/// larger is counted.
pub fn host_memory_mib(job: &JobInput, plan: &LlamaCppPlan) -> Result<Option<u64>, SizeOverflow> {
    const WHAT: &str = "the host memory (ggufFileBytes and the KV cache of the layers on the CPU)";
    let blocks = job.model.layers;
    if plan.gpu_layers > blocks {
        return Ok(None);
    }
    let on_cpu = blocks_on_cpu(blocks, plan.gpu_layers);
    let kv = memory::kv_cache_bytes_per_layer(&job.model, job.tokens(), plan.kv_cache_type)?;
    let kv_on_cpu = kv
        .checked_mul(u64::from(on_cpu))
        .ok_or(SizeOverflow { what: WHAT })?;
    let bytes = memory::sum(WHAT, job.model.gguf_file_bytes.unwrap_or(0), kv_on_cpu)?;
    Ok(Some(
        memory::mib(bytes).saturating_add(LLAMACPP_HOST_OVERHEAD_MIB),
    ))
}

/// The blocks a partial `--n-gpu-layers n` (`n <= blocks`) may leave on the CPU: all of them
/// for 0, else `blocks + 1 - n` (from llama.cpp PR 18148 on, the output layer takes one of the
/// `n` places).
pub fn blocks_on_cpu(blocks: u32, n: u32) -> u32 {
    if n == 0 {
        blocks
    } else {
        blocks.saturating_add(1).saturating_sub(n).min(blocks)
    }
}

/// Layers as llama.cpp counts them for `--n-gpu-layers`: the blocks and the output layer.
pub fn total_layers(job: &JobInput) -> u32 {
    job.model.layers.saturating_add(1)
}

/// Sizes a GGUF job on a class.
pub fn size(
    job: &JobInput,
    class: &NodeClass,
    fallback: &Fallback,
    flash_attention: bool,
) -> Result<LlamaCppSizing, PlanError> {
    let adapters = crate::adapters::budget::need(job, 1);
    size_within(job, class, fallback, flash_attention).map_err(|refusal| match adapters {
        Some(a)
            if matches!(
                refusal,
                PlanError::NoOffloadBudget { .. } | PlanError::NoLayerFits { .. }
            ) =>
        {
            PlanError::AdaptersDoNotFit {
                refusal: Box::new(refusal),
                count: a.count,
                adapters_mib: a.per_gpu_mib,
            }
        }
        _ => refusal,
    })
}

fn size_within(
    job: &JobInput,
    class: &NodeClass,
    fallback: &Fallback,
    flash_attention: bool,
) -> Result<LlamaCppSizing, PlanError> {
    let (lo, hi) = gpu_range(job, class, fallback)?;
    // `offload_steps` is read back from status: saturate rather than trust it.
    let target_percent = job
        .target_usage_percent
        .saturating_sub(OFFLOAD_STEP_PERCENT.saturating_mul(fallback.offload_steps))
        .max(OFFLOAD_STEP_PERCENT);
    let adapters_mib = crate::adapters::budget::per_gpu_mib(job, 1);
    let budget = Budget {
        job,
        class,
        target_percent,
        adapters_mib,
    };
    if budget.per_gpu_mib() == 0 {
        return Err(PlanError::NoOffloadBudget {
            target_percent,
            vram_per_gpu_mib: class.memory_mib,
        });
    }
    let mut reasons = Vec::new();
    let kv_types: Vec<KvCacheType> = job
        .kv_cache_types
        .iter()
        .copied()
        .filter(|t| fallback.min_kv_cache_type.is_none_or(|min| *t >= min))
        .filter(|t| flash_attention || !t.is_quantized())
        .collect();
    if kv_types.is_empty() {
        return Err(PlanError::QuantizedKvCacheNeedsFlashAttention);
    }
    if !flash_attention && job.kv_cache_types.iter().any(|t| t.is_quantized()) {
        reasons.push(
            "KV cache f16 only: a quantized V cache needs flash attention, off here".to_string(),
        );
    }

    let total_layers = total_layers(job);
    let wanted = match job.gpu_layers {
        GpuLayers::Auto => total_layers,
        GpuLayers::Count(n) => n.min(total_layers),
    };
    let candidates: Vec<(KvCacheType, u32)> = match job.preference {
        Preference::Quality => kv_types
            .iter()
            .flat_map(|&kv| (lo..=hi).map(move |n| (kv, n)))
            .collect(),
        Preference::Economy => (lo..=hi)
            .flat_map(|n| kv_types.iter().map(move |&kv| (kv, n)))
            .collect(),
    };
    let full = candidates
        .iter()
        .copied()
        .find(|&(kv, n)| budget.layers_that_fit(n, kv) >= wanted);
    let mut warnings = Vec::new();
    let (kv, gpus, layers) = match (full, job.gpu_layers) {
        (Some((kv, n)), _) => (kv, n, wanted),
        (None, GpuLayers::Auto) => {
            let kv = *kv_types.last().unwrap_or(&KvCacheType::F16);
            let fit = budget.layers_that_fit(hi, kv);
            if fit == 0 {
                return Err(PlanError::NoLayerFits {
                    one_layer_mib: memory::mib(budget.bytes(1, kv)?)
                        .saturating_add(LLAMACPP_OVERHEAD_MIB),
                    kv_cache_type: kv,
                    budget_per_gpu_mib: budget.usable_mib(),
                });
            }
            reasons.push(format!(
                "partial offload: {fit}/{total_layers} layers fit on {hi}×{} even with KV {}; the rest run on the CPU",
                class.describe_gpu(),
                kv.as_str()
            ));
            (kv, hi, fit)
        }
        (None, GpuLayers::Count(pinned)) => {
            let kv = *kv_types.last().unwrap_or(&KvCacheType::F16);
            let fit = budget.layers_that_fit(hi, kv);
            warnings.push(format!(
                "gpuLayers {pinned} is pinned but only {fit} layers fit in the budget on {hi}×{}; expect an out-of-memory failure",
                class.describe_gpu()
            ));
            (kv, hi, wanted)
        }
    };
    let all_fit = full.is_some();
    if fallback.min_kv_cache_type == Some(kv) {
        reasons.push(format!(
            "KV cache {}: step down after an out-of-memory failure",
            kv.as_str()
        ));
    } else if all_fit && kv == KvCacheType::F16 {
        reasons.push(format!(
            "KV cache f16: all {wanted} layers fit at full precision"
        ));
    } else if all_fit {
        reasons.push(format!(
            "KV cache {}: all {wanted} layers do not fit with a better KV type",
            kv.as_str()
        ));
    }
    let pinned = matches!(job.gpu_layers, GpuLayers::Count(_));
    // The budget named here is the plan's usable memory per GPU: NEED/GPU (layers, KV cache and
    // the overhead) is measured against the same figure.
    reasons.push(format!(
        "GPU layers {layers}/{total_layers} ({} blocks and the output layer){}{} on {gpus} GPU(s): budget {} per GPU ({target_percent}% of {}), {LLAMACPP_OVERHEAD_MIB} MiB of it for llama.cpp's own buffers",
        job.model.layers,
        if pinned { " (pinned by the job)" } else { "" },
        if job.gguf_layout.is_some() {
            ", each by the GGUF file's tensor bytes"
        } else {
            ", each an even share of the GGUF file (file ÷ blocks) with its KV cache"
        },
        gib(budget.usable_mib()),
        gib(class.memory_mib),
    ));

    let llama_cpp = LlamaCppPlan {
        gpu_layers: layers,
        total_layers,
        kv_cache_type: kv,
    };
    if let Some(host) = host_memory_mib(job, &llama_cpp)? {
        reasons.push(format!(
            "host memory {} requested and limited: the GGUF file, the KV cache of {} layer(s) on the CPU and {LLAMACPP_HOST_OVERHEAD_MIB} MiB of host buffers",
            gib(host),
            blocks_on_cpu(job.model.layers, layers)
        ));
    }
    let (weights_mib, kv_cache_mib) = budget.weights_and_kv_per_gpu_mib(layers, kv, gpus)?;
    Ok(LlamaCppSizing {
        gpu_count: gpus,
        llama_cpp,
        memory: MemoryEstimate {
            weights_mib,
            kv_cache_mib,
            overhead_mib: LLAMACPP_OVERHEAD_MIB,
            adapters_mib,
            // MiB of u64 byte counts: below 2^44 each, so the sum never saturates.
            needed_per_gpu_mib: weights_mib
                .saturating_add(kv_cache_mib)
                .saturating_add(LLAMACPP_OVERHEAD_MIB)
                .saturating_add(adapters_mib),
            vram_per_gpu_mib: class.memory_mib,
            usable_per_gpu_mib: budget.usable_mib(),
        },
        budget_percent: target_percent,
        reasons,
        warnings,
    })
}
