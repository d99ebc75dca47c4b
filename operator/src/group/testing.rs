//! Test builders of groups: a job that may span nodes and a plan on two nodes (the planner
//! decides when a job needs them; these tests take the plan as given).
use vramfit_api::group::{GroupEngine, GroupPlan};
use vramfit_api::{Fallback, InferenceJob, Plan};
use vramfit_planner::{JobInput, NodeClass, plan_for_class};

use crate::fixtures;

/// Mistral on vLLM, `name`, allowed `max_nodes` nodes.
pub fn group_job(name: &str, max_nodes: u32) -> InferenceJob {
    let mut spec = fixtures::vllm_mistral_spec();
    spec.gpus.max_nodes = max_nodes;
    fixtures::job(name, spec)
}

/// The job's plan on `class`, spread over two nodes.
pub fn two_node_plan(input: &JobInput, class: &NodeClass) -> Plan {
    let mut plan = match plan_for_class(input, class, &Fallback::default()) {
        Ok(plan) => plan,
        Err(error) => panic!("{error}"),
    };
    plan.group = Some(GroupPlan {
        nodes: 2,
        engine: GroupEngine::VllmRay,
        tensor_parallel_size: Some(plan.gpu_count),
        pipeline_parallel_size: Some(2),
        tensor_split: Vec::new(),
        layers_per_node: Vec::new(),
        port: 6379,
        why: "two nodes in the tests".to_string(),
    });
    plan
}
