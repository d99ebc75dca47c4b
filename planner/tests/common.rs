//! Builders shared by the planner's integration tests.
#![allow(dead_code)]

use vramfit_api::{Fallback, InferenceJobSpec, Plan};
use vramfit_planner::{
    JobInput, NodeClass, PlanError, builtin_classes, plan_for_class, resolve_job,
};

/// A job spec from YAML (the `spec` part of a manifest).
pub fn spec(yaml: &str) -> InferenceJobSpec {
    serde_yaml::from_str(yaml).expect("test spec parses")
}

/// A resolved job from YAML.
pub fn job(yaml: &str) -> JobInput {
    resolve_job(&spec(yaml)).expect("test spec is valid")
}

/// A built-in class by name.
pub fn class(name: &str) -> NodeClass {
    builtin_classes()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no built-in class {name}"))
}

/// Plans a job on a built-in class with no step-downs.
pub fn plan(job: &JobInput, class_name: &str) -> Result<Plan, PlanError> {
    plan_for_class(job, &class(class_name), &Fallback::default())
}
