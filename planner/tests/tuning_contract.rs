//! The fine-tuning env contract: every name a tuning plan sets is in the list the docs
//! render, and docs/runtime-contracts.md documents each one.
mod common;

use common::{class, job};
use vramfit_api::Fallback;
use vramfit_planner::tuning::env::TUNING_ENV;
use vramfit_planner::{plan_for_class, workload};

const DOC: &str = include_str!("../../docs/runtime-contracts.md");

#[test]
fn every_training_env_name_is_listed_and_documented() {
    let job = job(include_str!("../../examples/mistral-qlora.yaml")
        .split("spec:\n")
        .nth(1)
        .map(|spec| {
            spec.lines()
                .map(|l| l.strip_prefix("  ").unwrap_or(l))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .expect("the example has a spec")
        .as_str());
    let plan = plan_for_class(&job, &class("a10g-x1"), &Fallback::default()).unwrap();
    let env = workload::plan_env(&job, &plan);
    let training: Vec<&str> = env
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| TUNING_ENV.contains(k))
        .collect();
    assert_eq!(
        training.len(),
        TUNING_ENV.len(),
        "a QLoRA plan with volumes sets every name"
    );
    let section = DOC
        .split("## Fine-tuning")
        .nth(1)
        .expect("docs/runtime-contracts.md has a Fine-tuning section");
    for name in TUNING_ENV {
        assert!(
            section.contains(&format!("`{name}`")),
            "{name} is not documented"
        );
    }
}
