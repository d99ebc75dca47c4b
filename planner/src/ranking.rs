//! Choosing among the classes that can run a job (docs/planning.md): quality takes the best plan,
//! economy the cheapest that fits. Ties break deterministically by class name.
//!
//! [`choose_class`] is the one choice: the operator passes whether a class has a node with the
//! plan's GPUs free, `vramfit plan` (no cluster) room everywhere.
use std::cmp::Ordering;

use vramfit_api::{Dtype, Plan, Preference};

use crate::error::PlanError;
use crate::node_class::NodeClass;

/// What became of one class in a choice.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// The best plan among the classes with room.
    Chosen(Plan),
    /// The class has room, but a better plan won.
    RankedLower(Plan),
    /// The class can run the job, but has no room for the plan now.
    NoRoom(Plan),
    /// The class cannot run the job.
    CannotRun(PlanError),
}

impl Verdict {
    /// The plan, when the class can run the job.
    pub fn plan(&self) -> Option<&Plan> {
        match self {
            Verdict::Chosen(plan) | Verdict::RankedLower(plan) | Verdict::NoRoom(plan) => {
                Some(plan)
            }
            Verdict::CannotRun(_) => None,
        }
    }
}

/// One class and what became of it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassVerdict<'c> {
    /// The class.
    pub class: &'c NodeClass,
    /// What became of it.
    pub verdict: Verdict,
}

/// Every class given to [`choose_class`], in the order given, each with its verdict; at most
/// one is [`Verdict::Chosen`].
#[derive(Clone, Debug, PartialEq)]
pub struct Choice<'c> {
    /// The classes, in the order given.
    pub classes: Vec<ClassVerdict<'c>>,
}

impl<'c> Choice<'c> {
    /// The chosen class and its plan; `None` when no class can run the job and has room.
    pub fn chosen(&self) -> Option<(&'c NodeClass, &Plan)> {
        self.classes.iter().find_map(|c| match &c.verdict {
            Verdict::Chosen(plan) => Some((c.class, plan)),
            _ => None,
        })
    }

    /// The classes not chosen, in the order given.
    pub fn passed_over(&self) -> impl Iterator<Item = &ClassVerdict<'c>> {
        self.classes
            .iter()
            .filter(|c| !matches!(c.verdict, Verdict::Chosen(_)))
    }
}

/// Chooses among planned classes: of those that can run the job and for which `has_room`
/// (asked only about classes with a plan) says yes, the best plan for `preference`
/// ([`compare`]). Every class comes back in the order given with its verdict.
pub fn choose_class<'c>(
    preference: Preference,
    planned: impl IntoIterator<Item = (&'c NodeClass, Result<Plan, PlanError>)>,
    has_room: impl Fn(&NodeClass, &Plan) -> bool,
) -> Choice<'c> {
    let planned: Vec<(&'c NodeClass, Result<Plan, PlanError>, bool)> = planned
        .into_iter()
        .map(|(class, planned)| {
            let room = planned.as_ref().is_ok_and(|plan| has_room(class, plan));
            (class, planned, room)
        })
        .collect();
    let best = planned
        .iter()
        .enumerate()
        .filter_map(|(i, (_, planned, room))| Some((i, planned.as_ref().ok().filter(|_| *room)?)))
        .min_by(|(_, a), (_, b)| compare(preference, a, b))
        .map(|(i, _)| i);
    let classes = planned
        .into_iter()
        .enumerate()
        .map(|(i, (class, planned, room))| ClassVerdict {
            class,
            verdict: match planned {
                Err(why) => Verdict::CannotRun(why),
                Ok(plan) if best == Some(i) => Verdict::Chosen(plan),
                Ok(plan) if room => Verdict::RankedLower(plan),
                Ok(plan) => Verdict::NoRoom(plan),
            },
        })
        .collect();
    Choice { classes }
}

/// Orders plans best first for a preference.
pub fn compare(preference: Preference, a: &Plan, b: &Plan) -> Ordering {
    let by_name = a.node_class.cmp(&b.node_class);
    match preference {
        Preference::Quality => quality(a, b)
            .then(price(a, b))
            .then(headroom(a, b))
            .then(by_name),
        Preference::Economy => price(a, b)
            .then(quality(a, b))
            .then(headroom(a, b))
            .then(by_name),
    }
}

/// The best plan for a preference, if any.
pub fn best(preference: Preference, plans: &[Plan]) -> Option<&Plan> {
    plans.iter().min_by(|a, b| compare(preference, a, b))
}

/// Better quality first: for fine-tuning, the better method (full, lora, qlora); less
/// quantization, all layers on the GPU, bf16, flash attention,
/// more image tiles, fewer GPUs in all (a group counts every node's), fewer nodes; among equals, the cheaper, then the roomier.
fn quality(a: &Plan, b: &Plan) -> Ordering {
    let layers = |p: &Plan| {
        p.llama_cpp.map_or(1.0, |l| {
            f64::from(l.gpu_layers) / f64::from(l.total_layers.max(1))
        })
    };
    let method = |p: &Plan| p.tuning.as_ref().map(|t| t.method);
    method(a)
        .cmp(&method(b))
        .then(a.quantization.cmp(&b.quantization))
        .then(layers(b).total_cmp(&layers(a)))
        .then(
            a.llama_cpp
                .map(|l| l.kv_cache_type)
                .cmp(&b.llama_cpp.map(|l| l.kv_cache_type)),
        )
        .then((b.dtype == Dtype::Bfloat16).cmp(&(a.dtype == Dtype::Bfloat16)))
        .then(b.flash_attention.cmp(&a.flash_attention))
        .then(b.max_tiles.cmp(&a.max_tiles))
        .then(a.total_gpus().cmp(&b.total_gpus()))
        .then(a.nodes().cmp(&b.nodes()))
}

/// Cheaper first; an unknown price (0) sorts after every known one.
fn price(a: &Plan, b: &Plan) -> Ordering {
    let key = |p: &Plan| {
        if p.hourly_price_cents == 0 {
            u32::MAX
        } else {
            p.hourly_price_cents
        }
    };
    key(a).cmp(&key(b))
}

/// More memory left over per GPU first.
fn headroom(a: &Plan, b: &Plan) -> Ordering {
    let free = |p: &Plan| {
        p.memory
            .usable_per_gpu_mib
            .saturating_sub(p.memory.needed_per_gpu_mib)
    };
    free(b).cmp(&free(a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_input::{JobInput, resolve_job};
    use crate::{builtin_classes, plan_for_class};
    use std::cell::Cell;
    use vramfit_api::labels::ComputeCapability;
    use vramfit_api::{Fallback, InferenceJobSpec};

    const MISTRAL_VLLM: &str =
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x}";

    fn job(yaml: &str) -> JobInput {
        let spec: InferenceJobSpec = serde_yaml::from_str(yaml).unwrap();
        resolve_job(&spec).unwrap()
    }

    fn planned<'c>(
        job: &JobInput,
        classes: &'c [NodeClass],
    ) -> Vec<(&'c NodeClass, Result<Plan, PlanError>)> {
        classes
            .iter()
            .map(|c| (c, plan_for_class(job, c, &Fallback::default())))
            .collect()
    }

    /// Each class's name and verdict, in order.
    fn verdicts<'a>(choice: &'a Choice) -> Vec<(&'a str, &'static str)> {
        choice
            .classes
            .iter()
            .map(|c| {
                let kind = match c.verdict {
                    Verdict::Chosen(_) => "chosen",
                    Verdict::RankedLower(_) => "ranked lower",
                    Verdict::NoRoom(_) => "no room",
                    Verdict::CannotRun(_) => "cannot run",
                };
                (c.class.name.as_str(), kind)
            })
            .collect()
    }

    fn chosen_name(choice: &Choice) -> Option<String> {
        choice.chosen().map(|(class, _)| class.name.clone())
    }

    #[test]
    fn the_best_class_wins_while_it_has_room_then_the_next_best() {
        let classes = builtin_classes();
        let j = job(MISTRAL_VLLM);
        let full = |names: &'static [&'static str]| {
            move |class: &NodeClass, plan: &Plan| {
                assert_eq!(
                    plan.node_class, class.name,
                    "room is asked about the class's own plan"
                );
                !names.contains(&class.name.as_str())
            }
        };

        // Room everywhere: a10g-x1 and a10g-x4 tie on quality, price and headroom; the name
        // breaks the tie.
        let choice = choose_class(Preference::Quality, planned(&j, &classes), full(&[]));
        assert_eq!(chosen_name(&choice).as_deref(), Some("a10g-x1"));
        let v = verdicts(&choice);
        assert_eq!(v.len(), classes.len());
        assert_eq!(v.iter().filter(|(_, k)| *k == "chosen").count(), 1);
        assert!(
            v.iter()
                .all(|(_, k)| *k == "chosen" || *k == "ranked lower"),
            "{v:?}"
        );

        // a10g-x1 is full: the next best by name.
        let choice = choose_class(
            Preference::Quality,
            planned(&j, &classes),
            full(&["a10g-x1"]),
        );
        assert_eq!(chosen_name(&choice).as_deref(), Some("a10g-x4"));
        let a10g_x1 = &choice.classes[2];
        assert_eq!(a10g_x1.class.name, "a10g-x1");
        assert!(
            matches!(&a10g_x1.verdict, Verdict::NoRoom(plan) if plan.gpu_count == 1),
            "{:?}",
            a10g_x1.verdict
        );

        // Both A10G classes are full: among the equal plans left, the cheapest (the A100 MIG
        // slice at 1.71/h, before the L40S at 1.80/h).
        let choice = choose_class(
            Preference::Quality,
            planned(&j, &classes),
            full(&["a10g-x1", "a10g-x4"]),
        );
        assert_eq!(
            chosen_name(&choice).as_deref(),
            Some("a100-80gb-mig-3g-40gb-x2")
        );
        let no_room: Vec<&str> = verdicts(&choice)
            .into_iter()
            .filter(|(_, k)| *k == "no room")
            .map(|(name, _)| name)
            .collect();
        assert_eq!(no_room, ["a10g-x1", "a10g-x4"]);
        assert_eq!(choice.passed_over().count(), classes.len() - 1);
    }

    #[test]
    fn when_no_class_fits_every_class_says_why() {
        let classes = builtin_classes();
        let j = job(
            "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, dtype: bfloat16, \
             nodeClasses: {allowed: [t4-x1, v100-16gb-x4, a10g-x1]}}",
        );
        let asked = Cell::new(0);
        let choice = choose_class(Preference::Quality, planned(&j, &classes), |class, _| {
            asked.set(asked.get() + 1);
            class.name != "a10g-x1"
        });
        assert_eq!(
            asked.get(),
            1,
            "room is asked only about classes with a plan"
        );
        assert!(choice.chosen().is_none());
        assert_eq!(choice.passed_over().count(), classes.len());
        let why = |name: &str| {
            &choice
                .classes
                .iter()
                .find(|c| c.class.name == name)
                .unwrap()
                .verdict
        };
        assert_eq!(
            why("t4-x1"),
            &Verdict::CannotRun(PlanError::Bfloat16Unsupported {
                capability: ComputeCapability::new(7, 5)
            })
        );
        assert_eq!(
            why("v100-16gb-x4"),
            &Verdict::CannotRun(PlanError::Bfloat16Unsupported {
                capability: ComputeCapability::new(7, 0)
            })
        );
        assert!(matches!(why("a10g-x1"), Verdict::NoRoom(plan) if plan.node_class == "a10g-x1"));
        assert_eq!(
            why("h100-80gb-x8"),
            &Verdict::CannotRun(PlanError::NotAllowedByJob)
        );
        let names: Vec<&str> = choice
            .classes
            .iter()
            .map(|c| c.class.name.as_str())
            .collect();
        let given: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, given, "verdicts keep the order given");
    }

    #[test]
    fn the_choice_is_the_best_plan_among_the_classes_with_room() {
        let classes = builtin_classes();
        assert!(classes.len() < 16);
        for yaml in [
            MISTRAL_VLLM,
            "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, preference: economy}",
            "{model: {preset: llama-3.2-11b-vision-instruct}, runtime: transformers, image: x}",
        ] {
            let j = job(yaml);
            let plans = planned(&j, &classes);
            for mask in 0u32..(1 << classes.len()) {
                let room = |i: usize| mask & (1 << i) != 0;
                let with_room: Vec<Plan> = plans
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| room(i))
                    .filter_map(|(_, (_, p))| p.as_ref().ok().cloned())
                    .collect();
                let expected = best(j.preference, &with_room).map(|p| p.node_class.clone());
                let choice = choose_class(j.preference, plans.iter().cloned(), |class, _| {
                    room(classes.iter().position(|c| c.name == class.name).unwrap())
                });
                assert_eq!(chosen_name(&choice), expected, "{yaml}, mask {mask:b}");
                for (i, c) in choice.classes.iter().enumerate() {
                    let kind = match (&plans[i].1, room(i)) {
                        (Err(_), _) => "cannot run",
                        (Ok(_), false) => "no room",
                        (Ok(p), true) if Some(&p.node_class) == expected.as_ref() => "chosen",
                        (Ok(_), true) => "ranked lower",
                    };
                    assert_eq!(
                        verdicts(&choice)[i].1,
                        kind,
                        "{yaml}, mask {mask:b}, {}",
                        c.class.name
                    );
                    assert_eq!(c.verdict.plan(), plans[i].1.as_ref().ok());
                }
            }
        }
    }
}
