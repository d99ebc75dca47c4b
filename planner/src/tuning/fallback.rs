//! The step-downs of a fine-tuning job (docs/planning.md, "Fine-tuning"). After an
//! out-of-memory failure: halve the micro-batch (the accumulation grows, the effective batch
//! stays where a smaller micro-batch splits it exactly), then gradient checkpointing on, then the next cheaper method. After the workload
//! reports a NaN or infinite loss: the other 16-bit dtype, where a card allows it.
use vramfit_api::tuning::{TuningFallback, TuningMethod, TuningMethodRequest, TuningPlan};
use vramfit_api::{Dtype, DtypeRequest, Fallback, Plan};

use crate::job_input::JobInput;
use crate::tuning::batch_split::split;

/// One step down from `plan` (a tuning plan, `tuning`) after an out-of-memory failure: the new
/// fallback state and a one-line description, or `None` when nothing is left to give up.
/// Every step keeps what the failed plan gave up (never more GPUs' worth of memory per GPU,
/// never a larger micro-batch, never checkpointing off, never a better method).
pub fn next_step(
    job: &JobInput,
    plan: &Plan,
    tuning: &TuningPlan,
    fallback: &Fallback,
) -> Option<(Fallback, String)> {
    let before = fallback.tuning.clone().unwrap_or_default();
    let held = TuningFallback {
        max_micro_batch: Some(tuning.micro_batch),
        gradient_checkpointing: before.gradient_checkpointing || tuning.gradient_checkpointing,
        min_method: Some(tuning.method),
        ..before
    };
    let with = |steps: TuningFallback| Fallback {
        min_gpus: Some(plan.gpu_count),
        tuning: Some(steps),
        ..fallback.clone()
    };
    let mb = tuning.micro_batch;
    if mb > 1 {
        let half = mb / 2;
        let asked = job
            .tuning
            .as_ref()
            .map_or(tuning.effective_batch, |t| t.effective_batch);
        // The next plan splits the effective batch with a micro-batch of at most `half`, as
        // every plan does: exactly where a micro-batch up to `half` divides it.
        let next = split(asked, plan.gpu_count, half);
        let kept = if next.effective == tuning.effective_batch {
            "the effective batch is kept".to_string()
        } else {
            format!(
                "effective batch {} → {}",
                tuning.effective_batch, next.effective
            )
        };
        return Some((
            with(TuningFallback {
                max_micro_batch: Some(half),
                ..held
            }),
            format!(
                "micro-batch {mb} → {}, gradient accumulation {} → {} ({kept})",
                next.micro_batch, tuning.gradient_accumulation, next.accumulation
            ),
        ));
    }
    if !tuning.gradient_checkpointing {
        return Some((
            with(TuningFallback {
                gradient_checkpointing: true,
                ..held
            }),
            "gradient checkpointing on".to_string(),
        ));
    }
    let tuning_input = job.tuning.as_ref()?;
    if tuning_input.method != TuningMethodRequest::Auto {
        return None;
    }
    let cheaper = TuningMethod::LADDER
        .iter()
        .copied()
        .find(|m| *m > tuning.method)?;
    Some((
        // The cheaper method gets its own largest micro-batch; checkpointing stays on.
        with(TuningFallback {
            min_method: Some(cheaper),
            max_micro_batch: None,
            ..held
        }),
        format!("method {} → {}", tuning.method.as_str(), cheaper.as_str()),
    ))
}

/// The step after the workload reported a NaN or infinite loss: float16 (with loss scaling)
/// instead of bfloat16, or bfloat16 instead of float16 on a class that has it
/// (`bfloat16_elsewhere`: some class the job may use has compute capability ≥ 8.0). A pinned
/// dtype is kept. `None`: nothing is left to change, the job fails with the report.
pub fn next_after_diverged_loss(
    job: &JobInput,
    plan: &Plan,
    fallback: &Fallback,
    bfloat16_elsewhere: bool,
) -> Option<(Fallback, String)> {
    if job.dtype != DtypeRequest::Auto {
        return None;
    }
    let steps = fallback.tuning.clone().unwrap_or_default();
    match plan.dtype {
        Dtype::Bfloat16 if !steps.bfloat16 => Some((
            Fallback {
                float16: true,
                ..fallback.clone()
            },
            "float16 with loss scaling instead of bfloat16".to_string(),
        )),
        Dtype::Float16 if !fallback.float16 && bfloat16_elsewhere => Some((
            Fallback {
                tuning: Some(TuningFallback {
                    bfloat16: true,
                    ..steps
                }),
                ..fallback.clone()
            },
            "bfloat16 instead of float16: only classes with compute capability ≥ 8.0".to_string(),
        )),
        _ => None,
    }
}

/// The kind of an out-of-memory step from a tuning plan to `after`, for
/// `vramfit_fallbacks_total{reason}`: `method`, `checkpointing`, `micro_batch`.
pub fn step_kind(tuning: &TuningPlan, after: &Fallback) -> &'static str {
    let steps = after.tuning.clone().unwrap_or_default();
    if steps.min_method.is_some_and(|m| m > tuning.method) {
        "method"
    } else if steps.gradient_checkpointing && !tuning.gradient_checkpointing {
        "checkpointing"
    } else if steps
        .max_micro_batch
        .is_some_and(|mb| mb < tuning.micro_batch)
    {
        "micro_batch"
    } else {
        "other"
    }
}

/// Whether some class the job may use has bfloat16 (compute capability ≥ 8.0): where the
/// float16 loss diverged, a next attempt in bfloat16 has somewhere to go.
pub fn bfloat16_available(job: &JobInput, classes: &[crate::NodeClass]) -> bool {
    classes
        .iter()
        .any(|c| c.capability.supports_bf16() && crate::plan_common::admission(job, c).is_ok())
}
