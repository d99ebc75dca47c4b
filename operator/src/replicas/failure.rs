//! A replica that ran out of memory (pure): the next step down for that replica alone, on its
//! class — the batch ladder (`fallback::next_step`: fewer tiles, then the next quantization or
//! one more GPU by preference, then flash attention off; llama.cpp: KV cache, GPUs, fewer
//! layers) applied to the replica's own fallback. The other replicas keep their plans.
use vramfit_api::Plan;
use vramfit_planner::fallback::next_step;
use vramfit_planner::{NodeClass, plan_for_class};

use super::decide::Draft;
use crate::placement::step_kind;

/// The fallback, the step's text and its kind for slot `index` after its pod on `class`
/// (which ran `plan`, when known) ran out of memory; `None` when no step is left (or the spec is
/// invalid).
pub(super) fn step_down(
    draft: &Draft<'_>,
    index: usize,
    class: &str,
    plan: Option<&Plan>,
) -> Option<(vramfit_api::Fallback, String, &'static str)> {
    let input = draft.obs.input.as_ref().ok()?;
    let current = draft.lines[index].fallback.clone().unwrap_or_default();
    let class = draft.obs.inventory.class(class);
    // The failed pod's own plan; recomputed from its class when its annotation is gone.
    let plan = match (plan, class) {
        (Some(plan), _) => plan.clone(),
        (None, Some(class)) => plan_for_class(input, class, &current).ok()?,
        (None, None) => return None,
    };
    let max_gpus_per_pod = class.map_or(plan.gpu_count, NodeClass::max_gpus_per_pod);
    let capability = class.map(|c| c.capability);
    let (next, text) = next_step(input, &plan, &current, max_gpus_per_pod, capability)?;
    let kind = step_kind(&plan, &current, &next);
    Some((next, text, kind))
}
