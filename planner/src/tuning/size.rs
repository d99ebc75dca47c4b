//! Sizing a fine-tuning job on a class (docs/planning.md, "Fine-tuning"): the method, the GPUs
//! and how they share the work, the optimizer, the largest micro-batch that fits, gradient
//! checkpointing only when that micro-batch needs it, and the accumulation that keeps the
//! effective batch. Every choice comes with its reason.
use vramfit_api::tuning::{
    LoraPlan, Optimizer, Parallelism, TrainingMemory, TuningFallback, TuningMethod,
    TuningMethodRequest, TuningPlan,
};
use vramfit_api::{Dtype, Fallback, Preference, Quantization};

use crate::error::PlanError;
use crate::job_input::JobInput;
use crate::node_class::NodeClass;
use crate::plan_common::gib;
use crate::plan_transformers::gpu_range;
use crate::tuning::batch_split::{BatchSplit, split};
use crate::tuning::input::TuningInput;
use crate::tuning::memory::{Adapters, StepShape, trained_parameters, training_need};
use crate::tuning::shape::{adapted_linears, adapter_parameters};

/// How a tuning job fits a class.
#[derive(Clone, Debug, PartialEq)]
pub struct TuningSizing {
    /// GPUs taken.
    pub gpu_count: u32,
    /// The base weights' quantization (nf4 for QLoRA).
    pub quantization: Quantization,
    /// The training plan.
    pub plan: TuningPlan,
    /// The largest micro-batch that fits (at most the effective batch per GPU, and no more than
    /// a step-down allows); the plan's may be smaller, to split the effective batch exactly.
    pub largest_micro_batch: u32,
    /// Why, one line each.
    pub reasons: Vec<String>,
    /// What the user should know.
    pub warnings: Vec<String>,
}

/// One way to run a method: optimizer, GPUs and how they share the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    optimizer: Optimizer,
    gpus: u32,
    parallelism: Parallelism,
}

/// A layout that fits: its micro-batch and checkpointing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fit {
    layout: Layout,
    micro_batch: u32,
    gradient_checkpointing: bool,
    memory: TrainingMemory,
}

/// What one method came to on the class.
enum MethodOutcome {
    Fits(Fit),
    /// The least memory any of its layouts needs (micro-batch 1, checkpointing on).
    DoesNotFit {
        needed_mib: u64,
        gpus: u32,
    },
}

/// Sizes `tuning` on `class`, with the step-downs in `fallback`.
pub fn size(
    job: &JobInput,
    tuning: &TuningInput,
    class: &NodeClass,
    fallback: &Fallback,
    dtype: Dtype,
    tf32: bool,
) -> Result<TuningSizing, PlanError> {
    let steps = fallback.tuning.clone().unwrap_or_default();
    let (lo, hi) = gpu_range(job, class, fallback)?;
    let methods = methods(tuning.method, job.preference, &steps);
    let Some(&cheapest) = methods.last() else {
        return Err(PlanError::NoTuningMethodLeft);
    };
    let usable = class.usable_per_gpu_mib();
    let sizer = Sizer {
        job,
        tuning,
        usable,
        steps: &steps,
    };
    let mut skipped: Vec<(TuningMethod, u64, u32)> = Vec::new();
    let mut chosen = None;
    for &method in &methods {
        match sizer.method(method, layouts(method, job.preference, lo, hi))? {
            MethodOutcome::Fits(fit) => {
                chosen = Some((method, fit));
                break;
            }
            MethodOutcome::DoesNotFit { needed_mib, gpus } => {
                skipped.push((method, needed_mib, gpus));
            }
        }
    }
    let Some((method, largest_fit)) = chosen else {
        let (_, needed_mib, gpus) = skipped.last().copied().unwrap_or((cheapest, 0, hi));
        return Err(PlanError::TuningDoesNotFit {
            method: cheapest,
            needed_per_gpu_mib: needed_mib,
            usable_per_gpu_mib: usable,
            gpus,
            gpu: class.describe_gpu(),
        });
    };
    let gpus = largest_fit.layout.gpus;
    let batch = split(tuning.effective_batch, gpus, largest_fit.micro_batch);
    let fit = sizer.at_micro_batch(method, &largest_fit, batch.micro_batch)?;
    let memory = TrainingMemory {
        buffer_mib: class.memory_buffer_mib,
        usable_mib: usable,
        ..fit.memory
    };
    let (accumulation, effective) = (batch.accumulation, batch.effective);
    let adapters = sizer.adapters(method);
    let mut reasons = vec![
        method_reason(
            tuning.method,
            job.preference,
            &steps,
            method,
            &skipped,
            class,
        ),
        gpus_reason(&fit.layout, lo),
        optimizer_reason(method, &fit.layout),
        sizer.micro_batch_reason(method, &largest_fit, &batch),
        sizer.checkpointing_reason(method, &fit),
        accumulation_reason(
            tuning.effective_batch,
            &batch,
            gpus,
            largest_fit.micro_batch,
        ),
        precision_reason(dtype, tf32, class),
        memory_reason(method, &memory, class),
    ];
    if tuning.shape.intermediate_derived && method.is_lora() {
        reasons.push(format!(
            "LoRA sizes from an intermediate size of {} derived from the parameter count (set model.intermediateSize for the config's)",
            tuning.shape.dims.intermediate
        ));
    }
    let mut warnings = Vec::new();
    if tuning.shape.vocab_assumed {
        warnings.push(format!(
            "vocabulary unknown: the logits are counted for {} tokens; set model.vocabSize",
            tuning.shape.vocab_size
        ));
    }
    let (_, unknown) = adapted_linears(&tuning.lora.target_modules, &tuning.shape.dims);
    if method.is_lora() && !unknown.is_empty() {
        warnings.push(format!(
            "LoRA target modules {} are not Llama-family layer names: each is counted as the block's largest linear layer",
            unknown.join(", ")
        ));
    }
    Ok(TuningSizing {
        gpu_count: gpus,
        quantization: if method == TuningMethod::Qlora {
            Quantization::Nf4
        } else {
            Quantization::None
        },
        plan: TuningPlan {
            method,
            micro_batch: fit.micro_batch,
            gradient_accumulation: accumulation,
            batch: format!("{}×{accumulation}", fit.micro_batch),
            effective_batch: effective,
            gradient_checkpointing: fit.gradient_checkpointing,
            optimizer: fit.layout.optimizer,
            parallelism: fit.layout.parallelism,
            sequence_length: tuning.sequence_length,
            lora: method.is_lora().then(|| LoraPlan {
                rank: tuning.lora.rank,
                alpha: tuning.lora.alpha,
                dropout_percent: tuning.lora.dropout_percent,
                target_modules: tuning.lora.target_modules.clone(),
            }),
            trainable_parameters: trained_parameters(&job.model, method, adapters.as_ref()),
            memory,
        },
        largest_micro_batch: largest_fit.micro_batch,
        reasons,
        warnings,
    })
}

/// The methods to try, best first for the preference, none better than a step-down allows.
fn methods(
    request: TuningMethodRequest,
    preference: Preference,
    steps: &TuningFallback,
) -> Vec<TuningMethod> {
    let ladder: Vec<TuningMethod> = match (request, preference) {
        (TuningMethodRequest::Full, _) => vec![TuningMethod::Full],
        (TuningMethodRequest::Lora, _) => vec![TuningMethod::Lora],
        (TuningMethodRequest::Qlora, _) => vec![TuningMethod::Qlora],
        (TuningMethodRequest::Auto, Preference::Quality) => TuningMethod::LADDER.to_vec(),
        (TuningMethodRequest::Auto, Preference::Economy) => {
            TuningMethod::LADDER.iter().rev().copied().collect()
        }
    };
    ladder
        .into_iter()
        .filter(|m| steps.min_method.is_none_or(|min| *m >= min))
        .collect()
}

/// The layouts of a method in the order tried. The whole model on each GPU (one GPU, or data
/// parallel over the job's minimum) first; sharding (FSDP) over more GPUs when it does not
/// fit, for full and LoRA (QLoRA's 4-bit base is not sharded); for full, AdamW before the paged
/// 8-bit optimizer under `quality`, the 8-bit one before more GPUs under `economy`.
fn layouts(method: TuningMethod, preference: Preference, lo: u32, hi: u32) -> Vec<Layout> {
    let whole = |optimizer| Layout {
        optimizer,
        gpus: lo,
        parallelism: if lo == 1 {
            Parallelism::Single
        } else {
            Parallelism::Ddp
        },
    };
    let sharded = |optimizer| {
        (lo.max(2)..=hi).map(move |gpus| Layout {
            optimizer,
            gpus,
            parallelism: Parallelism::Fsdp,
        })
    };
    match (method, preference) {
        (TuningMethod::Qlora, _) => vec![whole(Optimizer::PagedAdamW8bit)],
        (TuningMethod::Lora, _) => std::iter::once(whole(Optimizer::AdamW))
            .chain(sharded(Optimizer::AdamW))
            .collect(),
        (TuningMethod::Full, Preference::Quality) => std::iter::once(whole(Optimizer::AdamW))
            .chain(sharded(Optimizer::AdamW))
            .chain(std::iter::once(whole(Optimizer::PagedAdamW8bit)))
            .collect(),
        (TuningMethod::Full, Preference::Economy) => {
            [whole(Optimizer::AdamW), whole(Optimizer::PagedAdamW8bit)]
                .into_iter()
                .chain(sharded(Optimizer::AdamW))
                .collect()
        }
    }
}

struct Sizer<'a> {
    job: &'a JobInput,
    tuning: &'a TuningInput,
    usable: u64,
    steps: &'a TuningFallback,
}

impl Sizer<'_> {
    fn adapters(&self, method: TuningMethod) -> Option<Adapters> {
        method.is_lora().then(|| {
            let (adapted, _) =
                adapted_linears(&self.tuning.lora.target_modules, &self.tuning.shape.dims);
            Adapters {
                parameters: adapter_parameters(
                    self.tuning.lora.rank,
                    &adapted,
                    self.job.model.layers,
                ),
                inputs_per_block: adapted.iter().map(|(i, _)| *i).fold(0, u64::saturating_add),
                dropout: self.tuning.lora.dropout_percent > 0,
            }
        })
    }

    fn need(
        &self,
        method: TuningMethod,
        layout: &Layout,
        micro_batch: u32,
        gradient_checkpointing: bool,
    ) -> Result<TrainingMemory, PlanError> {
        let step = StepShape {
            method,
            optimizer: layout.optimizer,
            gpus: layout.gpus,
            parallelism: layout.parallelism,
            gradient_checkpointing,
            micro_batch,
            sequence_length: self.tuning.sequence_length,
        };
        Ok(training_need(
            &self.job.model,
            &self.tuning.shape,
            self.adapters(method).as_ref(),
            &step,
        )?)
    }

    fn fits(&self, method: TuningMethod, layout: &Layout, mb: u32, ckpt: bool) -> bool {
        self.need(method, layout, mb, ckpt)
            .is_ok_and(|m| m.needed_mib <= self.usable)
    }

    /// The most sequences per GPU a step needs: the effective batch spread over the GPUs,
    /// and no more than a step-down allows.
    fn cap(&self, gpus: u32) -> u32 {
        self.tuning
            .effective_batch
            .div_ceil(gpus.max(1))
            .min(self.steps.max_micro_batch.unwrap_or(u32::MAX))
            .max(1)
    }

    /// `fit` at a smaller micro-batch (the one the effective batch splits into): its memory,
    /// and checkpointing only where that micro-batch needs it.
    fn at_micro_batch(
        &self,
        method: TuningMethod,
        fit: &Fit,
        micro_batch: u32,
    ) -> Result<Fit, PlanError> {
        if micro_batch == fit.micro_batch {
            return Ok(*fit);
        }
        let gradient_checkpointing = self.steps.gradient_checkpointing
            || !self.fits(method, &fit.layout, micro_batch, false);
        Ok(Fit {
            micro_batch,
            gradient_checkpointing,
            memory: self.need(method, &fit.layout, micro_batch, gradient_checkpointing)?,
            ..*fit
        })
    }

    /// The first layout of `method` that fits, with its micro-batch and checkpointing.
    fn method(
        &self,
        method: TuningMethod,
        layouts: Vec<Layout>,
    ) -> Result<MethodOutcome, PlanError> {
        let mut least: Option<(u64, u32)> = None;
        for layout in layouts {
            let cap = self.cap(layout.gpus);
            match largest(cap, |mb| self.fits(method, &layout, mb, true)) {
                Some(micro_batch) => {
                    let gradient_checkpointing = self.steps.gradient_checkpointing
                        || !self.fits(method, &layout, micro_batch, false);
                    let memory = self.need(method, &layout, micro_batch, gradient_checkpointing)?;
                    return Ok(MethodOutcome::Fits(Fit {
                        layout,
                        micro_batch,
                        gradient_checkpointing,
                        memory,
                    }));
                }
                None => {
                    let needed = self.need(method, &layout, 1, true)?.needed_mib;
                    if least.is_none_or(|(n, _)| needed < n) {
                        least = Some((needed, layout.gpus));
                    }
                }
            }
        }
        let (needed_mib, gpus) = least.unwrap_or((0, 1));
        Ok(MethodOutcome::DoesNotFit { needed_mib, gpus })
    }

    /// Why the micro-batch: `largest` is the largest that fits, `batch` what the effective
    /// batch splits into.
    fn micro_batch_reason(
        &self,
        method: TuningMethod,
        largest: &Fit,
        batch: &BatchSplit,
    ) -> String {
        let mb = largest.micro_batch;
        let gpus = largest.layout.gpus;
        let asked = self.tuning.effective_batch;
        let wanted = asked.div_ceil(gpus.max(1)).max(1);
        let seq = self.tuning.sequence_length;
        if batch.micro_batch < mb {
            // What the largest micro-batch would make: the asked batch rounded up to its steps.
            let per_step = u64::from(mb).saturating_mul(u64::from(gpus.max(1)));
            let with_largest = u64::from(asked)
                .div_ceil(per_step.max(1))
                .saturating_mul(per_step);
            let chosen = batch.micro_batch;
            return if batch.is_exact(asked) {
                format!(
                    "micro-batch {chosen}: the largest up to {mb} (the largest that fits at sequence {seq}) that splits the effective batch {asked} exactly; {mb} would make it {with_largest}"
                )
            } else {
                format!(
                    "micro-batch {chosen}: of those up to {mb} (the largest that fits at sequence {seq}) none splits the effective batch {asked} over {gpus} GPUs exactly; {chosen} overshoots least ({mb} would make it {with_largest})"
                )
            };
        }
        if self
            .steps
            .max_micro_batch
            .is_some_and(|cap| cap == mb && cap < wanted)
        {
            return format!(
                "micro-batch {mb}: at most {mb} after out-of-memory failures (halved each time)"
            );
        }
        if mb >= wanted {
            return format!(
                "micro-batch {mb}: the whole effective batch per GPU fits at sequence {seq}"
            );
        }
        let next = mb.saturating_add(1);
        let needed = self
            .need(method, &largest.layout, next, true)
            .map_or_else(|_| "more than 16 EiB".to_string(), |m| gib(m.needed_mib));
        format!(
            "micro-batch {mb}: the largest that fits at sequence {seq} ({next} would need {needed} per GPU with checkpointing, {} usable)",
            gib(self.usable)
        )
    }

    fn checkpointing_reason(&self, method: TuningMethod, fit: &Fit) -> String {
        let mb = fit.micro_batch;
        if !fit.gradient_checkpointing {
            return format!("gradient checkpointing off: micro-batch {mb} fits without it");
        }
        let without = self.need(method, &fit.layout, mb, false);
        let needs = without
            .as_ref()
            .map_or_else(|_| "more than 16 EiB".to_string(), |m| gib(m.needed_mib));
        if self.steps.gradient_checkpointing && !without.is_ok_and(|m| m.needed_mib > self.usable) {
            return "gradient checkpointing on: kept on after an out-of-memory failure".to_string();
        }
        format!(
            "gradient checkpointing on: without it micro-batch {mb} needs {needs} per GPU, {} usable",
            gib(self.usable)
        )
    }
}

/// The largest `n` in 1..=`cap` for which `fits` holds (`fits` only turns false as `n`
/// grows); `None` when 1 does not fit.
fn largest(cap: u32, fits: impl Fn(u32) -> bool) -> Option<u32> {
    if !fits(1) {
        return None;
    }
    if fits(cap) {
        return Some(cap);
    }
    // fits(good) and not fits(bad), always.
    let (mut good, mut bad) = (1u32, cap);
    while bad.saturating_sub(good) > 1 {
        let mid = good.saturating_add(bad.saturating_sub(good) / 2);
        if fits(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(good)
}

fn method_reason(
    request: TuningMethodRequest,
    preference: Preference,
    steps: &TuningFallback,
    method: TuningMethod,
    skipped: &[(TuningMethod, u64, u32)],
    class: &NodeClass,
) -> String {
    let name = method.as_str();
    if request != TuningMethodRequest::Auto {
        return format!("method {name}: set by the job");
    }
    if steps.min_method == Some(method) {
        return format!("method {name}: no better method after an out-of-memory failure");
    }
    if skipped.is_empty() {
        return match preference {
            Preference::Quality => {
                format!("method {name}: the best that fits (quality: full → lora → qlora)")
            }
            Preference::Economy => {
                format!("method {name}: the cheapest that fits (economy: qlora → lora → full)")
            }
        };
    }
    let gpu = class.describe_gpu();
    let why: Vec<String> = skipped
        .iter()
        .map(|(m, needed, gpus)| {
            format!(
                "{} needs {} per GPU on {gpus}×{gpu} at micro-batch 1 with checkpointing",
                m.as_str(),
                gib(*needed)
            )
        })
        .collect();
    format!(
        "method {name}: {}, {} usable",
        why.join("; "),
        gib(class.usable_per_gpu_mib())
    )
}

fn gpus_reason(layout: &Layout, lo: u32) -> String {
    let n = layout.gpus;
    match layout.parallelism {
        Parallelism::Single => "1 GPU: the whole model fits on one".to_string(),
        Parallelism::Ddp => format!(
            "{n} GPUs (the job's minimum), data parallel (DDP): each holds the whole model and takes its own micro-batches"
        ),
        Parallelism::Fsdp if n == lo => format!(
            "{n} GPUs (the job's minimum), FSDP: weights, gradients and optimizer states sharded across them"
        ),
        Parallelism::Fsdp => format!(
            "{n} GPUs, FSDP: the fewest over which the sharded weights, gradients and optimizer states fit"
        ),
    }
}

fn optimizer_reason(method: TuningMethod, layout: &Layout) -> String {
    match (method, layout.optimizer) {
        (TuningMethod::Qlora, _) => "optimizer paged_adamw_8bit: QLoRA's paged 8-bit AdamW (its states page to host memory in the spikes of long sequences)".to_string(),
        (_, Optimizer::AdamW) => "optimizer adamw_torch: 32-bit AdamW states (8 bytes per trained parameter) fit".to_string(),
        (_, Optimizer::PagedAdamW8bit) => "optimizer paged_adamw_8bit: 32-bit AdamW states do not fit; the 8-bit ones take 2 bytes per parameter".to_string(),
    }
}

/// Why the accumulation: the effective batch asked, how it splits, and when it cannot split
/// exactly, that the plan takes the smallest overshoot.
fn accumulation_reason(asked: u32, batch: &BatchSplit, gpus: u32, largest: u32) -> String {
    let BatchSplit {
        micro_batch,
        accumulation,
        effective,
    } = *batch;
    let over = if gpus > 1 {
        format!("micro-batch {micro_batch} × {gpus} GPUs")
    } else {
        format!("micro-batch {micro_batch}")
    };
    if batch.is_exact(asked) {
        format!(
            "gradient accumulation {accumulation}: effective batch {asked} = {over} × {accumulation}"
        )
    } else {
        format!(
            "gradient accumulation {accumulation}: effective batch {effective}, not the {asked} asked: no micro-batch up to {largest} splits {asked} over {gpus} GPUs exactly, and {over} × {accumulation} overshoots least"
        )
    }
}

fn precision_reason(dtype: Dtype, tf32: bool, class: &NodeClass) -> String {
    let cc = class.capability;
    let mixed = match dtype {
        Dtype::Bfloat16 => "bf16 mixed precision".to_string(),
        Dtype::Float16 => "fp16 mixed precision with dynamic loss scaling".to_string(),
    };
    if tf32 {
        format!("{mixed}; TF32 matmuls on (compute capability {cc} ≥ 8.0)")
    } else {
        format!("{mixed}; TF32 off (compute capability {cc} < 8.0)")
    }
}

fn memory_reason(method: TuningMethod, m: &TrainingMemory, class: &NodeClass) -> String {
    let trainable = match method {
        TuningMethod::Full => "gradients and master weights",
        _ => "adapters",
    };
    format!(
        "memory: {} per GPU needed (weights {}, {trainable} {}, optimizer {}, activations {}, logits {}, runtime {}), {} usable of {} ({})",
        gib(m.needed_mib),
        gib(m.weights_mib),
        gib(m.trainable_mib),
        gib(m.optimizer_mib),
        gib(m.activations_mib),
        gib(m.logits_mib),
        gib(m.runtime_mib),
        gib(m.usable_mib),
        gib(class.memory_mib),
        crate::plan_common::kept_free(class, m.usable_mib)
    )
}

#[cfg(test)]
mod tests {
    use super::largest;

    #[test]
    fn the_largest_fitting_micro_batch_is_found_by_bisection() {
        for limit in 0..40u32 {
            for cap in 1..40u32 {
                let found = largest(cap, |n| n <= limit);
                let expected = (limit >= 1).then(|| limit.min(cap));
                assert_eq!(found, expected, "limit {limit}, cap {cap}");
            }
        }
    }
}
