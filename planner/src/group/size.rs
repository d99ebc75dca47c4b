//! How many nodes a job takes on a class (docs/planning.md, "Plans that span nodes"). With
//! `gpus.maxNodes` 1 (the default) a plan is the one-node plan, unchanged. Above 1, a class
//! no node of which holds the job gets a group: N whole nodes of the class, each pod with the
//! GPUs of its node (capped by `gpus.max`), N the smallest that holds it: per quantization
//! level (fine-tuning: per method) best first under `quality`, so full precision on two nodes
//! beats 8-bit on one; the fewest nodes at all under `economy`, which quantizes first.
use vramfit_api::group::{GroupEngine, GroupPlan, MAX_GROUP_NODES};
use vramfit_api::tuning::TuningMethod;
use vramfit_api::{Fallback, Plan, Preference, Quantization, Runtime};

use crate::error::PlanError;
use crate::job_input::JobInput;
use crate::node_class::{GpuUnit, NodeClass};
use crate::plan::plan_one_node;
use crate::plan_common::{admission, gib};

/// Why transformers inference never spans nodes.
pub const NO_TRANSFORMERS_ENGINE: &str = "gpus.maxNodes does not apply: Hugging Face transformers has no engine that spans nodes (vLLM does, and llama.cpp; a custom runtime runs its own torch.distributed program)";
/// Why a partitioned class never forms a group.
pub const NO_PARTITION_GROUPS: &str =
    "gpus.maxNodes does not apply on MIG slices or shared GPUs: a group takes whole GPUs";

/// The engine that joins a group of `job`'s pods, or `None` where its runtime has none.
pub fn engine(job: &JobInput) -> Option<GroupEngine> {
    if job.tuning.is_some() {
        return Some(GroupEngine::Torchrun);
    }
    match job.runtime {
        Runtime::Vllm => Some(GroupEngine::VllmRay),
        Runtime::Llamacpp => Some(GroupEngine::LlamaCppRpc),
        Runtime::Custom => Some(GroupEngine::Torchrun),
        Runtime::Transformers => None,
    }
}

/// The GPUs of each pod of a group on `class`: the node's, capped by `gpus.max`.
pub fn gpus_per_node(job: &JobInput, class: &NodeClass) -> u32 {
    job.max_gpus.min(class.max_gpus_per_pod()).max(1)
}

/// The step-downs for the one-node plan among a group's candidates.
fn one_node_fallback(fallback: &Fallback) -> Fallback {
    Fallback {
        min_nodes: None,
        ..fallback.clone()
    }
}

/// Plans `job` on `class`: one node, or a group of nodes (see the module's doc).
pub fn plan(job: &JobInput, class: &NodeClass, fallback: &Fallback) -> Result<Plan, PlanError> {
    let min_nodes = fallback.min_nodes.unwrap_or(1).max(1);
    let max_nodes = job.max_nodes.clamp(1, MAX_GROUP_NODES);
    if max_nodes <= 1 && min_nodes <= 1 {
        return plan_one_node(job, class, fallback);
    }
    admission(job, class)?;
    let Some(engine) = engine(job) else {
        return one_node_only(job, class, fallback, NO_TRANSFORMERS_ENGINE);
    };
    if class.unit != GpuUnit::Whole {
        return one_node_only(job, class, fallback, NO_PARTITION_GROUPS);
    }
    if min_nodes > max_nodes {
        return Err(PlanError::NodesAfterStepDowns {
            needed: min_nodes,
            max_nodes,
        });
    }
    let nodes = Nodes {
        job,
        class,
        fallback,
        engine,
        min: min_nodes,
        max: max_nodes,
    };
    match engine {
        GroupEngine::LlamaCppRpc => crate::group::llamacpp::plan(&nodes),
        GroupEngine::VllmRay | GroupEngine::Torchrun => sharded(&nodes),
    }
}

/// The one-node plan of a job no group can help; a class that cannot run it says why
/// `maxNodes` does not apply.
fn one_node_only(
    job: &JobInput,
    class: &NodeClass,
    fallback: &Fallback,
    why: &'static str,
) -> Result<Plan, PlanError> {
    plan_one_node(job, class, &one_node_fallback(fallback)).map_err(|e| PlanError::NoGroupEngine {
        one_node: Box::new(e),
        why,
    })
}

/// A job, a class and the node counts a group search may try.
pub struct Nodes<'a> {
    /// The job.
    pub job: &'a JobInput,
    /// The class.
    pub class: &'a NodeClass,
    /// The step-downs.
    pub fallback: &'a Fallback,
    /// The engine that joins the pods.
    pub engine: GroupEngine,
    /// Fewest nodes (after a step-down to more nodes).
    pub min: u32,
    /// Most nodes (`gpus.maxNodes`).
    pub max: u32,
}

impl Nodes<'_> {
    /// GPUs per pod.
    pub fn gpus(&self) -> u32 {
        gpus_per_node(self.job, self.class)
    }

    /// The plan on `n` nodes: the one-node plan for 1; for more, the one-node planner on a
    /// class whose node had every GPU of the group (weights, KV cache, gradients and
    /// optimizer states split over them all; overhead and activations on each), turned into
    /// a group of `n` pods of the class's GPUs.
    pub fn on(&self, n: u32) -> Result<Plan, PlanError> {
        if n <= 1 {
            return plan_one_node(self.job, self.class, &one_node_fallback(self.fallback));
        }
        let g = self.gpus();
        let total = g.saturating_mul(n);
        let class = NodeClass {
            gpus_per_node: total,
            ..self.class.clone()
        };
        let job = JobInput {
            min_gpus: total,
            max_gpus: total,
            max_nodes: 1,
            group_node_gpus: Some(g),
            ..self.job.clone()
        };
        // Every pod takes its node's GPUs: the GPU step-down has no say within a group.
        let fallback = Fallback {
            min_gpus: None,
            min_nodes: None,
            ..self.fallback.clone()
        };
        let mut plan = plan_one_node(&job, &class, &fallback)?;
        plan.gpu_count = g;
        plan.reasons = plan
            .reasons
            .into_iter()
            .map(|r| per_node_wording(r, n, g))
            .collect();
        plan.group = Some(GroupPlan {
            nodes: n,
            engine: self.engine,
            tensor_parallel_size: None,
            pipeline_parallel_size: None,
            tensor_split: Vec::new(),
            layers_per_node: Vec::new(),
            port: port(self.engine),
            why: String::new(),
        });
        Ok(plan)
    }
}

/// The port the ranks of a group meet on: Ray's GCS, `rpc-server`'s default, or the torchrun
/// (c10d) rendezvous.
pub fn port(engine: GroupEngine) -> u32 {
    match engine {
        GroupEngine::VllmRay => 6379,
        GroupEngine::LlamaCppRpc => 50052,
        GroupEngine::Torchrun => 29500,
    }
}

/// A reason written for the group's GPUs as one node's (`16 GPUs: fewest that fit`, `16 GPUs
/// (the job's minimum), FSDP: …`, `… on 16×H100 …`) in nodes × GPUs.
fn per_node_wording(reason: String, n: u32, g: u32) -> String {
    let total = n.saturating_mul(g);
    let head = format!("{total} GPUs");
    let reason = reason.replace(&format!("on {total}×"), &format!("on {n}×{g}×"));
    match reason.strip_prefix(&head) {
        Some(rest) => {
            let rest = rest.replace(" (the job's minimum)", "");
            let rest = match rest.as_str() {
                ": fewest that fit" | ": the job's minimum" => {
                    ": every GPU of each node of the group".to_string()
                }
                _ => rest,
            };
            format!("{n} nodes × {g} GPUs{rest}")
        }
        None => reason,
    }
}

/// What a group trades against more nodes under `quality`: the fine-tuning method, then the
/// quantization (smaller is better).
fn quality_key(plan: &Plan) -> (Option<TuningMethod>, Quantization) {
    (plan.tuning.as_ref().map(|t| t.method), plan.quantization)
}

/// vLLM (tensor parallel in a node, pipeline parallel across nodes) and torchrun (FSDP, or the
/// job's own program): the smallest N per quality level (quality), or at all (economy).
fn sharded(nodes: &Nodes) -> Result<Plan, PlanError> {
    let mut tried: Vec<(u32, Result<Plan, PlanError>)> = Vec::new();
    for n in nodes.min..=nodes.max {
        let planned = if n > 1 && !crate::group::vllm::admits(nodes, n) {
            Err(crate::group::vllm::why_not(nodes, n))
        } else {
            nodes.on(n)
        };
        let fits = planned.is_ok();
        tried.push((n, planned));
        if fits && nodes.job.preference == Preference::Economy {
            break;
        }
    }
    let best = tried
        .iter()
        .filter_map(|(n, p)| Some((*n, p.as_ref().ok()?)))
        .min_by(|(na, a), (nb, b)| quality_key(a).cmp(&quality_key(b)).then(na.cmp(nb)))
        .map(|(n, _)| n);
    let Some(n) = best else {
        let (nodes_tried, largest) = tried
            .pop()
            .unwrap_or((nodes.max, Err(PlanError::NoQuantizationLeft)));
        let largest = largest.err().unwrap_or(PlanError::NoQuantizationLeft);
        return Err(if nodes_tried <= 1 {
            largest
        } else {
            PlanError::GroupDoesNotFit {
                nodes: nodes_tried,
                largest: Box::new(largest),
            }
        });
    };
    let before = tried
        .iter()
        .find(|(m, _)| m.saturating_add(1) == n)
        .map(|(_, p)| p.clone());
    let Some((_, Ok(mut plan))) = tried.into_iter().find(|(m, _)| *m == n) else {
        return Err(PlanError::NoQuantizationLeft);
    };
    let reason = why(nodes, n, &plan, before.as_ref());
    let gpus = plan.gpu_count;
    if let Some(group) = plan.group.as_mut() {
        if nodes.engine == GroupEngine::VllmRay {
            group.tensor_parallel_size = Some(gpus);
            group.pipeline_parallel_size = Some(n);
        }
        group.why = reason;
        let line = group_line(nodes, group);
        plan.reasons.push(line);
        plan.reasons.push(format!("why {n} nodes: {}", group.why));
    }
    Ok(plan)
}

/// One line: the group's shape and engine.
pub fn group_line(nodes: &Nodes, group: &GroupPlan) -> String {
    let gpu = nodes.class.describe_gpu();
    let shape = format!("{}×{}×{gpu}", group.nodes, nodes.gpus());
    match group.engine {
        GroupEngine::VllmRay => format!(
            "group of {} nodes ({shape}): vLLM on Ray, tensor parallel {} inside each node, pipeline parallel {} across the nodes; the ranks meet on port {}",
            group.nodes,
            group.tensor_parallel_size.unwrap_or(1),
            group.pipeline_parallel_size.unwrap_or(1),
            group.port
        ),
        GroupEngine::Torchrun if nodes.job.tuning.is_some() => format!(
            "group of {} nodes ({shape}): torchrun with FSDP over all {} GPUs, rendezvous at the leader on port {}",
            group.nodes,
            nodes.gpus().saturating_mul(group.nodes),
            group.port
        ),
        GroupEngine::Torchrun => format!(
            "group of {} nodes ({shape}): torchrun runs the job's torch.distributed program on each, rendezvous at the leader on port {}; the memory is planned split over all {} GPUs",
            group.nodes,
            group.port,
            nodes.gpus().saturating_mul(group.nodes)
        ),
        GroupEngine::LlamaCppRpc => format!(
            "group of {} nodes ({shape}): llama-server --rpc on the leader over rpc-server on each worker (port {}), layers per node {}",
            group.nodes,
            group.port,
            group
                .layers_per_node
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join("/")
        ),
    }
}

/// Why `n` nodes: what `n - 1` would need (or could only hold at a lower level) against what
/// `n` need, per GPU.
fn why(nodes: &Nodes, n: u32, plan: &Plan, before: Option<&Result<Plan, PlanError>>) -> String {
    let need = format!(
        "{n} need {} per GPU of {} usable",
        gib(plan.memory.needed_per_gpu_mib),
        gib(plan.memory.usable_per_gpu_mib)
    );
    let fewer = n.saturating_sub(1);
    let word = |k: u32| if k == 1 { "node" } else { "nodes" };
    match before {
        _ if nodes.fallback.min_nodes == Some(n) => {
            format!("no fewer than after the last out-of-memory failure; {need}")
        }
        Some(Err(e)) => format!("{fewer} {} cannot hold it ({e}); {need}", word(fewer)),
        Some(Ok(p)) => format!(
            "{fewer} {} hold it only {}; quality takes more nodes first; {need}",
            word(fewer),
            match &p.tuning {
                Some(t) => format!("as {}", t.method.as_str()),
                None => format!("with quantization {}", p.quantization.as_str()),
            }
        ),
        None => need,
    }
}
