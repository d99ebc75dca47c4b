//! Plans that span nodes (docs/planning.md, "Plans that span nodes"): the node count per class
//! and runtime, the quality/economy order, the step-down to one more node, the ranking by all
//! the group's GPUs.
use vramfit_api::group::GroupEngine;
use vramfit_api::{Fallback, InferenceJobSpec, Plan, Quantization};
use vramfit_planner::{
    GpuUnit, JobInput, NodeClass, PlanError, builtin_classes, fallback, plan_for_class, ranking,
    resolve_job,
};

fn job(yaml: &str) -> JobInput {
    let spec: InferenceJobSpec = serde_yaml::from_str(yaml).expect("spec");
    resolve_job(&spec).expect("valid spec")
}

fn class(name: &str) -> NodeClass {
    builtin_classes()
        .into_iter()
        .find(|c| c.name == name)
        .expect("built-in class")
}

fn plan(job: &JobInput, class_name: &str) -> Result<Plan, PlanError> {
    plan_for_class(job, &class(class_name), &Fallback::default())
}

const LLAMA_70B_VLLM: &str = "{model: {preset: llama-3.1-70b-instruct}, runtime: vllm, image: x, contextLength: 8192, batchSize: 4, gpus: {max: 4, maxNodes: 8}";

#[test]
fn quality_takes_full_precision_on_more_nodes_before_quantizing() {
    let quality = job(&format!("{LLAMA_70B_VLLM}}}"));
    let p = plan(&quality, "a10g-x4").unwrap();
    let group = p.group.as_ref().expect("a group");
    assert_eq!(p.quantization, Quantization::None);
    assert_eq!(group.engine, GroupEngine::VllmRay);
    assert_eq!(
        (group.tensor_parallel_size, group.pipeline_parallel_size),
        (Some(4), Some(group.nodes))
    );
    assert_eq!(group.port, 6379);
    assert_eq!(p.gpu_count, 4);
    // Priced for every node.
    assert_eq!(p.hourly_price_cents, 60 * 4 * group.nodes);
    // Two nodes hold it only in 8-bit: quality adds a third before quantizing.
    assert!(
        group
            .why
            .contains("hold it only with quantization int8; quality takes more nodes first"),
        "{}",
        group.why
    );

    // The same job with one node: 8-bit or 4-bit on one node, never a group.
    let one_node = job(&format!("{LLAMA_70B_VLLM}}}").replace("maxNodes: 8", "maxNodes: 1"));
    let p1 = plan(&one_node, "a10g-x4").unwrap();
    assert!(p1.group.is_none());
    assert!(p1.quantization > Quantization::None);
}

#[test]
fn economy_quantizes_on_one_node_before_adding_nodes() {
    let economy = job(&format!("{LLAMA_70B_VLLM}, preference: economy}}"));
    let p = plan(&economy, "a10g-x4").unwrap();
    assert!(p.group.is_none(), "{:?}", p.group);
    assert!(p.quantization > Quantization::None);
    // 16-bit only: economy too must add nodes.
    let sixteen = job(&format!(
        "{LLAMA_70B_VLLM}, preference: economy, allowedQuantizations: [none]}}"
    ));
    assert!(plan(&sixteen, "a10g-x4").unwrap().group.is_some());
}

#[test]
fn a_job_one_node_holds_at_full_precision_is_planned_as_without_max_nodes() {
    let small = "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x";
    let one = job(&format!("{small}}}"));
    let many = job(&format!("{small}, gpus: {{maxNodes: 16}}}}"));
    let mut compared = 0;
    for c in builtin_classes() {
        let a = plan_for_class(&one, &c, &Fallback::default()).map_err(|e| e.to_string());
        let b = plan_for_class(&many, &c, &Fallback::default()).map_err(|e| e.to_string());
        match &a {
            // MIG slices and shared GPUs never form a group.
            Ok(p) if p.quantization == Quantization::None || c.unit != GpuUnit::Whole => {
                assert_eq!(a, b, "{}", c.name);
                compared += 1;
            }
            // Quantized on one node: quality takes full precision on more nodes.
            Ok(_) => assert!(b.unwrap().group.is_some(), "{}", c.name),
            Err(_) => {}
        }
    }
    assert!(compared >= 5);
}

#[test]
fn transformers_inference_never_spans_nodes_and_says_why() {
    let j = job(
        "{model: {preset: llama-3.1-70b-instruct}, runtime: transformers, image: x, allowedQuantizations: [none], gpus: {max: 4, maxNodes: 8}}",
    );
    let why = plan(&j, "a10g-x4").unwrap_err().to_string();
    assert!(why.contains("no engine that spans nodes"), "{why}");
}

#[test]
fn mig_slices_never_form_a_group() {
    let j =
        job(&format!("{LLAMA_70B_VLLM}, allowedQuantizations: [none]}}")
            .replace("max: 4", "max: 1"));
    let why = plan(&j, "a100-80gb-mig-3g-40gb-x2")
        .unwrap_err()
        .to_string();
    assert!(why.contains("a group takes whole GPUs"), "{why}");
}

/// The spec of an example manifest, with `gpus.maxNodes` set.
fn example(name: &str, max_nodes: u32) -> JobInput {
    let path = format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("example");
    let mut manifest: vramfit_api::InferenceJob = serde_yaml::from_str(&text).expect("manifest");
    manifest.spec.gpus.max_nodes = max_nodes;
    resolve_job(&manifest.spec).expect("valid spec")
}

#[test]
fn a_full_fine_tune_no_node_holds_is_sharded_with_fsdp_over_nodes() {
    let j = example("llama70b-full-finetune-nodes.yaml", 8);
    let p = plan(&j, "h100-80gb-x8").unwrap();
    let group = p.group.as_ref().expect("a group");
    assert_eq!(group.engine, GroupEngine::Torchrun);
    assert_eq!(group.port, 29500);
    let tuning = p.tuning.as_ref().unwrap();
    assert_eq!(
        tuning.parallelism,
        vramfit_api::tuning::Parallelism::Fsdp,
        "{:?}",
        p.reasons
    );
    // Micro-batch × accumulation × every GPU of the group.
    assert_eq!(
        tuning.effective_batch,
        tuning.micro_batch * tuning.gradient_accumulation * p.total_gpus()
    );
    assert!(p.memory.needed_per_gpu_mib <= p.memory.usable_per_gpu_mib);
    // One node fewer does not hold it; one node alone never does.
    let fewer = example("llama70b-full-finetune-nodes.yaml", group.nodes - 1);
    assert!(plan(&fewer, "h100-80gb-x8").is_err());
    let one = example("llama70b-full-finetune-nodes.yaml", 1);
    assert!(plan(&one, "h100-80gb-x8").is_err());
}

#[test]
fn vllm_pipeline_stages_never_outnumber_the_layers() {
    // Two layers: at most two pipeline stages, whatever maxNodes allows.
    let j = job(
        "{model: {parameters: 1500000000000, layers: 2, hiddenSize: 8192, attentionHeads: 64, kvHeads: 8}, runtime: vllm, image: x, allowedQuantizations: [none], gpus: {max: 8, maxNodes: 16}}",
    );
    let why = plan(&j, "h100-80gb-x8").unwrap_err().to_string();
    assert!(why.contains("not even on 16 nodes"), "{why}");
    assert!(why.contains("pipeline stages"), "{why}");
}

#[test]
fn an_out_of_memory_group_steps_to_one_more_node_within_max_nodes() {
    let j = job(&format!("{LLAMA_70B_VLLM}, allowedQuantizations: [none]}}"));
    let c = class("a10g-x4");
    let p = plan_for_class(&j, &c, &Fallback::default()).unwrap();
    let n = p.nodes();
    let (next, why) = fallback::next_step(&j, &p, &Fallback::default(), 4, None).expect("a step");
    // Flash attention goes first when nothing was resized yet; then one more node.
    let (next, why) = if next.flash_attention_off && next.min_nodes == Some(n) {
        fallback::next_step(&j, &plan_for_class(&j, &c, &next).unwrap(), &next, 4, None)
            .expect("a step")
    } else {
        (next, why)
    };
    assert_eq!(next.min_nodes, Some(n + 1), "{why}");
    assert_eq!(why, format!("one more node: {n} → {}", n + 1));
    let stepped = plan_for_class(&j, &c, &next).unwrap();
    assert_eq!(stepped.nodes(), n + 1);
    assert!(stepped.memory.needed_per_gpu_mib <= p.memory.needed_per_gpu_mib);
    assert!(
        stepped
            .group
            .as_ref()
            .unwrap()
            .why
            .contains("no fewer than")
    );

    // At maxNodes there is no node left to add: the ladder goes on without one.
    let at_max = Fallback {
        min_nodes: Some(8),
        flash_attention_off: true,
        ..Fallback::default()
    };
    let full = plan_for_class(&j, &c, &at_max).unwrap();
    assert_eq!(full.nodes(), 8);
    let last = fallback::next_step(&j, &full, &at_max, 4, None);
    assert!(
        last.as_ref().is_none_or(|(f, _)| f.min_nodes == Some(8)),
        "{last:?}"
    );
    // More nodes than maxNodes allows: the class says so.
    let beyond = Fallback {
        min_nodes: Some(9),
        ..Fallback::default()
    };
    let why = plan_for_class(&j, &c, &beyond).unwrap_err().to_string();
    assert!(why.contains("gpus.maxNodes is 8"), "{why}");
}

#[test]
fn a_one_node_plan_at_its_last_gpu_steps_to_a_group() {
    let j = job(&format!("{LLAMA_70B_VLLM}, allowedQuantizations: [none]}}")
        .replace("maxNodes: 8", "maxNodes: 2"));
    let c = class("h100-80gb-x8");
    let at_last_gpu = Fallback {
        min_gpus: Some(4),
        flash_attention_off: true,
        ..Fallback::default()
    };
    let p = plan_for_class(&j, &c, &at_last_gpu).unwrap();
    assert!(p.group.is_none());
    assert_eq!(p.gpu_count, 4);
    let (next, why) = fallback::next_step(&j, &p, &at_last_gpu, 8, None).expect("a step");
    assert_eq!(
        (next.min_nodes, why.as_str()),
        (Some(2), "one more node: 1 → 2")
    );
    assert_eq!(plan_for_class(&j, &c, &next).unwrap().nodes(), 2);
}

#[test]
fn ranking_counts_every_gpu_of_a_group() {
    // Llama-3.1-405B fits one H200 node but two H100 nodes: the fewer GPUs win on quality.
    let j = job(
        "{model: {parameters: 405853388800, layers: 126, hiddenSize: 16384, attentionHeads: 128, kvHeads: 8, headDim: 128, vocabSize: 128256}, runtime: vllm, image: x, contextLength: 16384, batchSize: 8, allowedQuantizations: [none], gpus: {min: 8, max: 8, maxNodes: 4}}",
    );
    let h100 = plan(&j, "h100-80gb-x8").unwrap();
    let h200 = plan(&j, "h200-x8").unwrap();
    assert_eq!((h100.nodes(), h200.nodes()), (2, 1));
    assert_eq!(h100.hourly_price_cents, 650 * 16);
    assert_eq!(
        ranking::compare(vramfit_api::Preference::Quality, &h200, &h100),
        std::cmp::Ordering::Less
    );
}

#[test]
fn llama_cpp_rpc_only_where_faster_than_partial_offload() {
    let p4000 = NodeClass::new(
        "p4000-x1",
        "Quadro P4000",
        1,
        8119,
        Some(vramfit_api::labels::ComputeCapability::new(6, 1)),
    );
    let spec = "{model: {preset: mistral-7b-instruct-v0.3-q8_0}, runtime: llamacpp, image: x, contextLength: 32768, gpus: {maxNodes: M}}";
    let one = job(&spec.replace('M', "1"));
    let partial = plan_for_class(&one, &p4000, &Fallback::default()).unwrap();
    let l = partial.llama_cpp.unwrap();
    assert!(l.gpu_layers < l.total_layers);
    let many = job(&spec.replace('M', "4"));
    let grouped = plan_for_class(&many, &p4000, &Fallback::default()).unwrap();
    let group = grouped.group.as_ref().expect("a group");
    assert_eq!(group.engine, GroupEngine::LlamaCppRpc);
    assert_eq!(group.port, 50052);
    assert_eq!(grouped.llama_cpp.unwrap().gpu_layers, l.total_layers);
    assert_eq!(group.tensor_split.iter().sum::<u32>(), l.total_layers);
    assert_eq!(group.layers_per_node.len() as u32, group.nodes);
    // Both figures, and the one-node partial offload's.
    assert!(group.why.contains("tokens/s"), "{}", group.why);
    assert!(
        group
            .why
            .contains(&format!("{}/{}", l.gpu_layers, l.total_layers))
    );

    // Where one block of the file runs on the CPU, it costs less than a network hop:
    // the one node stays, and its reasons give both figures.
    let small = "{model: {preset: qwen3-4b-q4_k_m}, runtime: llamacpp, image: x, contextLength: 4096, llamaCpp: {kvCacheTypes: [f16]}, gpus: {maxNodes: M}}";
    let (one, many) = (job(&small.replace('M', "1")), job(&small.replace('M', "4")));
    let almost = (2_000u64..8_000)
        .map(|mib| NodeClass::new("c", "Quadro P4000", 1, mib, p4000.capability.into()))
        .find(|c| {
            plan_for_class(&one, c, &Fallback::default()).is_ok_and(|p| {
                p.llama_cpp
                    .is_some_and(|l| l.gpu_layers + 2 == l.total_layers)
            })
        })
        .expect("a card one block short");
    let kept = plan_for_class(&many, &almost, &Fallback::default()).unwrap();
    assert!(kept.group.is_none());
    let last = kept.reasons.last().unwrap();
    assert!(last.contains("not a group of 2"), "{last}");
    assert!(last.contains("tokens/s"), "{last}");
}

#[test]
fn a_vllm_group_budgets_its_largest_pipeline_stage() {
    // Llama-3.1-70B (80 layers) in 16-bit on single A100 40 GB nodes: an even share over 5
    // fits, but vLLM's 5 stages of 16 layers put the token embeddings on the first and the
    // output layer on the last, which then do not: 6 nodes.
    let j = job(
        "{model: {preset: llama-3.1-70b-instruct}, runtime: vllm, image: x, contextLength: 8192, batchSize: 4, allowedQuantizations: [none], gpus: {max: 4, maxNodes: 8}}",
    );
    let c = class("a100-40gb-x1");
    let even = vramfit_planner::memory::transformer_need(
        &j.model,
        Quantization::None,
        j.tokens(),
        j.prefill_tokens(),
        5,
    )
    .unwrap();
    let usable = vramfit_planner::memory::percent_of(c.memory_mib, c.usable_percent());
    assert!(even.per_gpu_mib() <= usable);
    let p = plan_for_class(&j, &c, &Fallback::default()).unwrap();
    assert_eq!(p.nodes(), 6, "{:?}", p.reasons);
    assert!(
        p.reasons
            .iter()
            .any(|r| r.contains("pipeline stages of 13/13/13/14/14/13 layers")),
        "{:?}",
        p.reasons
    );
    assert!(p.memory.needed_per_gpu_mib <= p.memory.usable_per_gpu_mib);
}

/// MiB on each device of a llama.cpp plan, in llama.cpp's device order: the layers the split
/// gives it, each a share of the GGUF file (file ÷ blocks, the most a layer may weigh without
/// the file's layout) with a block's KV cache, and llama.cpp's own buffers.
fn llama_cpp_device_mib(job: &JobInput, p: &Plan) -> Vec<u64> {
    use vramfit_planner::memory::{LLAMACPP_OVERHEAD_MIB, kv_cache_bytes_per_layer, mib};
    let l = p.llama_cpp.expect("a llama.cpp plan");
    let split = match &p.group {
        Some(g) if !g.tensor_split.is_empty() => g.tensor_split.clone(),
        _ => vramfit_planner::group::rpc_or_offload::even_split(l.gpu_layers, p.total_gpus()),
    };
    let file = job.model.gguf_file_bytes.expect("a GGUF file");
    let unit = file.div_ceil(u64::from(job.model.layers));
    let kv = kv_cache_bytes_per_layer(&job.model, job.tokens(), l.kv_cache_type).expect("kv");
    split
        .iter()
        .map(|&layers| {
            let weights = (unit * u64::from(layers)).min(file);
            let cache = kv * u64::from(layers.min(job.model.layers));
            mib(weights) + mib(cache) + LLAMACPP_OVERHEAD_MIB
        })
        .collect()
}

#[test]
fn a_llama_cpp_group_is_budgeted_by_its_fullest_device() {
    // Llama-3.1-70B Q4_K_M (80 blocks and the output layer) with a q8_0 KV cache on single
    // 8 GB Pascal nodes. 81 layers over 7 devices average 11.6, which fits; but llama.cpp
    // splits whole layers, and the four devices that hold 12 do not: 8 nodes.
    let p4000 = NodeClass::new(
        "p4000-x1",
        "Quadro P4000",
        1,
        8119,
        Some(vramfit_api::labels::ComputeCapability::new(6, 1)),
    );
    let j = job(
        "{model: {preset: llama-3.1-70b-instruct-q4_k_m}, runtime: llamacpp, image: x, contextLength: 4096, llamaCpp: {kvCacheTypes: [q8_0]}, gpus: {maxNodes: 10}}",
    );
    let p = plan_for_class(&j, &p4000, &Fallback::default()).unwrap();
    let group = p.group.as_ref().expect("a group");
    assert_eq!(group.engine, GroupEngine::LlamaCppRpc);
    assert_eq!(p.nodes(), 8, "{:?}", p.reasons);
    assert_eq!(group.tensor_split.iter().max(), Some(&11));
    let budget = p.memory.usable_per_gpu_mib;
    for (device, need) in llama_cpp_device_mib(&j, &p).iter().enumerate() {
        assert!(*need <= budget, "device {device}: {need} of {budget} MiB");
    }
    assert!(p.memory.needed_per_gpu_mib <= budget);

    // On 7 nodes the average fits, the fullest device does not.
    let seven = vramfit_planner::group::rpc_or_offload::even_split(81, 7);
    assert_eq!(seven, vec![12, 12, 12, 12, 11, 11, 11]);
    let on_seven = Plan {
        group: Some(vramfit_api::group::GroupPlan {
            tensor_split: seven,
            ..group.clone()
        }),
        ..p.clone()
    };
    let needs = llama_cpp_device_mib(&j, &on_seven);
    assert!(
        needs.iter().max().unwrap() > &budget,
        "{needs:?} of {budget}"
    );
    let average = needs.iter().sum::<u64>() / 7;
    assert!(average <= budget, "{average} of {budget}");
}
