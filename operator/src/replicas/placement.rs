//! Where a served job's new pod goes (pure): a replacement stays on its replica's class when
//! that class still has room for its plan; otherwise, and for a new replica or a surge pod,
//! the batch placement chooses ([`choose`]: every class planned, the best with room by the
//! job's preference). With `replicaClasses: Single`, only the class of the job's replicas.
//! A replica whose plan spans nodes needs that many distinct nodes of its class with room
//! (all or nothing). Each placement takes its GPUs from the capacity, so several replicas placed in one reconcile
//! do not count the same free GPUs twice.
use vramfit_api::{Fallback, Plan};
use vramfit_planner::{JobInput, NodeClass, plan_for_class};

use crate::capacity::{Capacity, Inventory};
use crate::model_cache::placement::{CacheAsk, prefer_cached_class};
use crate::placement::{Choice, NoClassFits, choose};

/// Where one pod may go.
#[derive(Clone, Copy, Debug, Default)]
pub struct Where<'a> {
    /// Try this class first (a replacement's own class).
    pub preferred: Option<&'a str>,
    /// Only this class (`replicaClasses: Single`).
    pub only: Option<&'a str>,
    /// The job's model and the node caches: among classes whose plans rank equal, one holding
    /// the model is preferred (`--model-cache`).
    pub cache: Option<CacheAsk<'a>>,
}

/// Places one pod of `job` with `fallback`: its plan and class, its GPUs taken from
/// `capacity`; or why no class has room.
pub fn place(
    job: &JobInput,
    inventory: &Inventory,
    capacity: &mut Capacity,
    fallback: &Fallback,
    at: Where<'_>,
) -> Result<(Plan, NodeClass), NoClassFits> {
    let preferred = at
        .preferred
        .filter(|p| at.only.is_none_or(|only| only == *p))
        .and_then(|name| inventory.class(name));
    if let Some(class) = preferred
        && let Ok(plan) = plan_for_class(job, class, fallback)
        && capacity.has_room_on(&class.name, plan.gpu_count, plan.nodes())
    {
        capacity.take_on(&class.name, plan.gpu_count, plan.nodes());
        return Ok((plan, class.clone()));
    }
    let restricted;
    let job = match at.only.filter(|only| inventory.class(only).is_some()) {
        Some(only) => {
            restricted = JobInput {
                classes: vramfit_api::NodeClassSelection {
                    allowed: vec![only.to_string()],
                    denied: Vec::new(),
                },
                ..job.clone()
            };
            &restricted
        }
        None => job,
    };
    let Choice { plan, class, .. } = choose(job, inventory, capacity, fallback, &[])?;
    let (plan, class) = match at.cache {
        Some(ask) => prefer_cached_class(job, inventory, capacity, fallback, (plan, class), ask),
        None => (plan, class),
    };
    // A replica that is a group takes one pod's GPUs on each of its nodes.
    capacity.take_on(&class.name, plan.gpu_count, plan.nodes());
    Ok((plan, class))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::{PodConstraints, build_inventory};
    use crate::fixtures;
    use crate::stores::gpu_usage::GpuUsage;
    use std::sync::Arc;
    use vramfit_planner::resolve_job;

    fn cluster() -> (Inventory, Capacity, JobInput) {
        // One A10G×1 node and one L40S×1 node: one GPU each.
        let nodes = vec![
            Arc::new(fixtures::gpu_node("a-1", "a10g", 1, 1)),
            Arc::new(fixtures::gpu_node("l-1", "l40s", 1, 1)),
        ];
        let inventory = build_inventory(&nodes, &[]);
        // Context 8192 × batch 4: bfloat16 on an L40S, 8-bit on one A10G (the example's plans).
        let mut spec = fixtures::vllm_mistral_spec();
        spec.context_length = Some(8192);
        spec.batch_size = 4;
        let job = fixtures::job("chat", spec);
        let capacity = Capacity::compute(
            &inventory,
            &GpuUsage::default(),
            &[],
            &PodConstraints::of_job(&job),
            &|_| true,
        );
        (inventory, capacity, resolve_job(&job.spec).unwrap())
    }

    #[test]
    fn the_best_class_first_then_the_next_as_each_fills() {
        let (inventory, mut capacity, job) = cluster();
        let fallback = Fallback::default();
        let (first, _) =
            place(&job, &inventory, &mut capacity, &fallback, Where::default()).unwrap();
        let (second, _) =
            place(&job, &inventory, &mut capacity, &fallback, Where::default()).unwrap();
        assert_ne!(
            first.node_class, second.node_class,
            "the first class is full"
        );
        assert_eq!(
            first.node_class, "l40s-x1",
            "quality: full precision on the L40S first"
        );
        assert_eq!(second.node_class, "a10g-x1");
        assert_eq!(
            second.quantization,
            vramfit_api::Quantization::Int8,
            "its class's own plan"
        );
        let none = place(&job, &inventory, &mut capacity, &fallback, Where::default()).unwrap_err();
        assert!(none.message.contains("no free GPUs"), "{}", none.message);
    }

    #[test]
    fn a_replacement_keeps_its_class_while_it_has_room_and_single_stays_on_one_class() {
        let (inventory, mut capacity, job) = cluster();
        let fallback = Fallback::default();
        let own = Where {
            preferred: Some("a10g-x1"),
            only: None,
            cache: None,
        };
        let (plan, _) = place(&job, &inventory, &mut capacity, &fallback, own).unwrap();
        assert_eq!(
            plan.node_class, "a10g-x1",
            "not the better L40S: its own class"
        );
        // Its class is full now: a mixed replica goes elsewhere, a single-class one waits.
        let single = Where {
            preferred: Some("a10g-x1"),
            only: Some("a10g-x1"),
            cache: None,
        };
        let (mut full, mut spare) = (capacity.clone(), capacity.clone());
        assert!(place(&job, &inventory, &mut full, &fallback, single).is_err());
        let (moved, _) = place(&job, &inventory, &mut spare, &fallback, own).unwrap();
        assert_eq!(moved.node_class, "l40s-x1");
    }
}
