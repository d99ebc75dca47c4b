//! Choosing a node class for an attempt (pure): plan the job on every class and let
//! `ranking::choose_class` take the best of the classes that have a node with the plan's GPUs
//! free (deterministic: ties break by class name).
use vramfit_api::{ClassRejection, Fallback, Plan};
use vramfit_planner::ranking::{self, ClassVerdict, Verdict};
use vramfit_planner::{JobInput, NodeClass, plan_for_class};

use crate::capacity::{Capacity, Inventory};

/// The class chosen for an attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The plan on the chosen class.
    pub plan: Plan,
    /// The chosen class.
    pub class: NodeClass,
    /// Classes that could not take the job, and why.
    pub passed_over: Vec<ClassRejection>,
}

/// Why no class can take the job now.
#[derive(Clone, Debug, PartialEq)]
pub struct NoClassFits {
    /// Every class and why it cannot.
    pub rejections: Vec<ClassRejection>,
    /// One message naming, per class, why.
    pub message: String,
    /// Some class could run the job once GPUs free up there.
    pub room_may_free: bool,
}

/// Plans `job` on every class but the `excluded` ones (rejected with their reason, unplanned)
/// and chooses one with room.
pub fn choose(
    job: &JobInput,
    inventory: &Inventory,
    capacity: &Capacity,
    fallback: &Fallback,
    excluded: &[ClassRejection],
) -> Result<Choice, NoClassFits> {
    let is_excluded = |class: &NodeClass| excluded.iter().any(|e| e.node_class == class.name);
    let planned = inventory
        .classes
        .iter()
        .filter(|class| !is_excluded(class))
        .map(|class| (class, plan_for_class(job, class, fallback)));
    let choice = ranking::choose_class(job.preference, planned, |class, plan| {
        // A group needs that many distinct nodes with the GPUs of one pod free (all or nothing).
        capacity.has_room_on(&class.name, plan.gpu_count, plan.nodes())
    });
    let mut chosen = None;
    let mut room_may_free = false;
    let mut rejections: Vec<ClassRejection> = Vec::new();
    for ClassVerdict { class, verdict } in choice.classes {
        let reason = match verdict {
            Verdict::Chosen(plan) => {
                chosen = Some((class.clone(), plan));
                continue;
            }
            Verdict::RankedLower(_) => continue,
            Verdict::NoRoom(plan) => {
                room_may_free = true;
                capacity.shortage_on(&class.name, plan.gpu_count, plan.nodes())
            }
            Verdict::CannotRun(why) => why.to_string(),
        };
        rejections.push(ClassRejection {
            node_class: class.name.clone(),
            reason,
        });
    }
    rejections.extend(
        excluded
            .iter()
            .filter(|e| inventory.class(&e.node_class).is_some())
            .cloned(),
    );
    match chosen {
        Some((class, plan)) => Ok(Choice {
            plan,
            class,
            passed_over: rejections,
        }),
        None => Err(NoClassFits {
            message: no_fit_message(&rejections, &inventory.problems),
            rejections,
            room_may_free,
        }),
    }
}

fn no_fit_message(rejections: &[ClassRejection], problems: &[String]) -> String {
    let mut message = if rejections.is_empty() {
        "no GPU node classes: no node carries vramfit.io/gpu.* or nvidia.com/gpu.* labels, and no GpuNodeClass defines one"
            .to_string()
    } else {
        let per_class: Vec<String> = rejections
            .iter()
            .map(|r| format!("{}: {}", r.node_class, r.reason))
            .collect();
        format!(
            "no node class can run the job now: {}",
            per_class.join("; ")
        )
    };
    if !problems.is_empty() {
        message.push_str(&format!(" (ignored: {})", problems.join("; ")));
    }
    message
}

/// One line that says what a plan is: `a10g-x4: 2×GPU bfloat16, int8, flash attention on, MAX_TILES 18`.
pub fn plan_summary(plan: &Plan) -> String {
    let mut parts = vec![
        format!("{}×GPU {}", plan.gpu_count, plan.dtype.as_str()),
        match plan.quantization {
            vramfit_api::Quantization::None => "no quantization".to_string(),
            q => q.as_str().to_string(),
        },
        format!(
            "flash attention {}",
            if plan.flash_attention { "on" } else { "off" }
        ),
    ];
    if let Some(tiles) = plan.max_tiles {
        parts.push(format!("MAX_TILES {tiles}"));
    }
    if let Some(l) = plan.llama_cpp {
        parts.push(format!(
            "{}/{} layers on GPU, KV cache {}",
            l.gpu_layers,
            l.total_layers,
            l.kv_cache_type.as_str()
        ));
    }
    parts.push(format!(
        "{:.1}/{:.1} GiB per GPU",
        plan.memory.needed_per_gpu_mib as f64 / 1024.0,
        plan.memory.usable_per_gpu_mib as f64 / 1024.0
    ));
    format!("{}: {}", plan.node_class, parts.join(", "))
}

/// The kind of step taken down from `plan` (run with `before`) to `after`, for
/// `vramfit_fallbacks_total{reason}`: `tiles`, `quantization`, `gpus`, `flash_attention`,
/// `kv_cache`, `offload`; for fine-tuning `micro_batch`, `checkpointing`, `method`.
pub fn step_kind(plan: &Plan, before: &Fallback, after: &Fallback) -> &'static str {
    if let Some(tuning) = &plan.tuning {
        return vramfit_planner::tuning::fallback::step_kind(tuning, after);
    }
    let kv = plan.llama_cpp.map(|l| l.kv_cache_type);
    if after.tile_steps > before.tile_steps {
        "tiles"
    } else if after
        .min_quantization
        .is_some_and(|q| q > plan.quantization)
    {
        "quantization"
    } else if after.min_gpus.is_some_and(|n| n > plan.gpu_count) {
        "gpus"
    } else if after.flash_attention_off && !before.flash_attention_off {
        "flash_attention"
    } else if after.min_kv_cache_type.is_some_and(|t| Some(t) > kv) {
        "kv_cache"
    } else if after.offload_steps > before.offload_steps {
        "offload"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::{PodConstraints, build_inventory};
    use crate::fixtures;
    use crate::stores::gpu_usage::{GpuUsage, gpu_usage};
    use std::sync::Arc;
    use vramfit_planner::resolve_job;

    fn capacity(inventory: &Inventory, usage: &GpuUsage) -> Capacity {
        let constraints =
            PodConstraints::of_job(&fixtures::job("j", fixtures::vllm_mistral_spec()));
        Capacity::compute(inventory, usage, &[], &constraints, &|_| true)
    }

    #[test]
    fn best_class_wins_while_it_has_room_then_the_next_best() {
        let nodes = vec![
            Arc::new(fixtures::gpu_node("h-1", "h100", 8, 8)),
            Arc::new(fixtures::gpu_node("a-1", "a10g", 4, 4)),
        ];
        let inventory = build_inventory(&nodes, &[]);
        let input = resolve_job(&fixtures::vllm_mistral_spec()).unwrap();

        let free = capacity(&inventory, &GpuUsage::default());
        let choice = choose(&input, &inventory, &free, &Fallback::default(), &[]).unwrap();
        assert_eq!(choice.class.name, "h100-80gb-hbm3-x8");
        assert!(choice.passed_over.is_empty());

        // The H100 node is full: the A10G class is next best.
        let busy = gpu_usage(&[Arc::new(fixtures::gpu_pod(
            "other",
            "train",
            Some("h-1"),
            8,
        ))]);
        let choice = choose(
            &input,
            &inventory,
            &capacity(&inventory, &busy),
            &Fallback::default(),
            &[],
        )
        .unwrap();
        assert_eq!(choice.class.name, "a10g-x4");
        assert_eq!(choice.passed_over.len(), 1);
        assert!(
            choice.passed_over[0].reason.starts_with("no free GPUs"),
            "{:?}",
            choice.passed_over
        );

        // Everything is full: no class fits, and the message names each class.
        let busy = gpu_usage(&[
            Arc::new(fixtures::gpu_pod("other", "train", Some("h-1"), 8)),
            Arc::new(fixtures::gpu_pod("other", "train-2", Some("a-1"), 4)),
        ]);
        let none = choose(
            &input,
            &inventory,
            &capacity(&inventory, &busy),
            &Fallback::default(),
            &[],
        )
        .unwrap_err();
        assert_eq!(none.rejections.len(), 2);
        assert!(
            none.message
                .starts_with("no node class can run the job now: a10g-x4: no free GPUs"),
            "{}",
            none.message
        );
        assert!(
            none.message.contains("h100-80gb-hbm3-x8: no free GPUs"),
            "{}",
            none.message
        );
    }

    #[test]
    fn bf16_pinned_job_never_lands_below_ampere() {
        let nodes = vec![Arc::new(fixtures::gpu_node("v-1", "v100", 4, 4))];
        let inventory = build_inventory(&nodes, &[]);
        let input = resolve_job(&fixtures::bf16_pinned_spec()).unwrap();
        let none = choose(
            &input,
            &inventory,
            &capacity(&inventory, &GpuUsage::default()),
            &Fallback::default(),
            &[],
        )
        .unwrap_err();
        assert!(
            none.message
                .contains("bfloat16 is pinned but compute capability 7.0 < 8.0"),
            "{}",
            none.message
        );
    }

    #[test]
    fn no_classes_at_all_says_so() {
        let inventory = build_inventory(&[Arc::new(fixtures::cpu_node("cpu"))], &[]);
        let input = resolve_job(&fixtures::vllm_mistral_spec()).unwrap();
        let none = choose(
            &input,
            &inventory,
            &capacity(&inventory, &GpuUsage::default()),
            &Fallback::default(),
            &[],
        )
        .unwrap_err();
        assert!(
            none.message.starts_with("no GPU node classes"),
            "{}",
            none.message
        );
    }

    #[test]
    fn summaries_are_one_line() {
        let plan = fixtures::plan_on("a10g", 4);
        let summary = plan_summary(&plan);
        assert!(
            summary.starts_with("a10g-x4: 1×GPU bfloat16, no quantization, flash attention on"),
            "{summary}"
        );
        assert!(!summary.contains('\n'));
    }
}
