//! Properties of the planner over random models and classes.
use proptest::prelude::*;
use vramfit_api::labels::ComputeCapability;
use vramfit_api::{
    Dtype, DtypeRequest, Fallback, GpuBounds, InferenceJobSpec, ModelSpec, Preference, Runtime,
};
use vramfit_planner::{JobInput, NodeClass, plan_for_class, resolve_job};

/// A model with `heads × 128` hidden size and `heads / kv_div` KV heads.
fn model(params_m: u64, layers: u32, heads: u32, kv_div: u32) -> ModelSpec {
    let head_dim = 128;
    ModelSpec {
        parameters: Some(params_m * 1_000_000),
        layers: Some(layers),
        hidden_size: Some(heads * head_dim),
        attention_heads: Some(heads),
        kv_heads: Some((heads / kv_div).max(1)),
        head_dim: Some(head_dim),
        gguf_file_bytes: Some(params_m * 600_000),
        ..Default::default()
    }
}

fn runtime() -> impl Strategy<Value = Runtime> {
    prop_oneof![
        Just(Runtime::Transformers),
        Just(Runtime::Vllm),
        Just(Runtime::Custom),
        Just(Runtime::Llamacpp)
    ]
}

fn spec() -> impl Strategy<Value = InferenceJobSpec> {
    (
        (
            100u64..200_000,
            1u32..100,
            1u32..64,
            prop_oneof![Just(1u32), Just(4), Just(8)],
        ),
        (
            128u32..65_536,
            1u32..8,
            1u32..4,
            1u32..9,
            any::<bool>(),
            runtime(),
        ),
    )
        .prop_map(
            |((p, l, h, kv), (ctx, batch, min, max, economy, runtime))| InferenceJobSpec {
                model: model(p, l, h, kv),
                runtime,
                image: "x".into(),
                command: vec![],
                args: vec![],
                context_length: Some(ctx),
                batch_size: batch,
                dtype: DtypeRequest::Auto,
                allowed_quantizations: None,
                gpus: GpuBounds {
                    min,
                    max: min.max(max),
                    ..GpuBounds::default()
                },
                preference: if economy {
                    Preference::Economy
                } else {
                    Preference::Quality
                },
                llama_cpp: None,
                overrides: None,
                node_classes: None,
                max_attempts: 3,
                start_deadline_seconds: None,
                schedule_deadline_seconds: None,
                pod: None,
                tuning: None,
                serve: None,
            },
        )
}

fn class() -> impl Strategy<Value = NodeClass> {
    let products = prop_oneof![
        Just("Tesla V100-SXM2-16GB"),
        Just("Tesla T4"),
        Just("NVIDIA A10G"),
        Just("NVIDIA A100-SXM4-80GB"),
        Just("NVIDIA L40S"),
        Just("NVIDIA H100 80GB HBM3"),
        Just("NVIDIA GeForce RTX 4090"),
        Just("Mystery Accelerator"),
    ];
    (products, 1u32..9, 4_096u64..200_000, 6u32..13, 0u32..10).prop_map(
        |(product, count, mib, major, minor)| {
            NodeClass::new(
                "c",
                product,
                count,
                mib,
                Some(ComputeCapability::new(major, minor)),
            )
        },
    )
}

fn input(spec: &InferenceJobSpec) -> JobInput {
    resolve_job(spec).expect("generated specs are valid")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn a_plan_never_exceeds_the_usable_memory_of_its_gpus(spec in spec(), class in class()) {
        if let Ok(plan) = plan_for_class(&input(&spec), &class, &Fallback::default()) {
            // Only a pinned llama.cpp layer count may exceed the budget (with its warning).
            if !plan.warnings.iter().any(|w| w.contains("is pinned")) {
                prop_assert!(plan.memory.needed_per_gpu_mib <= plan.memory.usable_per_gpu_mib, "{:?}", plan.memory);
            }
            prop_assert!(plan.memory.usable_per_gpu_mib <= class.memory_mib);
        }
    }

    #[test]
    fn bf16_is_never_planned_below_compute_capability_8(spec in spec(), class in class()) {
        if let Ok(plan) = plan_for_class(&input(&spec), &class, &Fallback::default()) {
            if plan.dtype == Dtype::Bfloat16 {
                prop_assert!(class.capability >= ComputeCapability::new(8, 0));
            }
            // flash-attn kernels need Ampere; llama.cpp's own run from Pascal on.
            if plan.flash_attention {
                let floor = if spec.runtime == Runtime::Llamacpp { (6, 0) } else { (8, 0) };
                prop_assert!(class.capability >= ComputeCapability::new(floor.0, floor.1));
            }
        }
    }

    #[test]
    fn gpu_count_stays_within_the_jobs_bounds_and_the_node(spec in spec(), class in class()) {
        if let Ok(plan) = plan_for_class(&input(&spec), &class, &Fallback::default()) {
            prop_assert!(plan.gpu_count >= spec.gpus.min && plan.gpu_count <= spec.gpus.max);
            prop_assert!(plan.gpu_count <= class.gpus_per_node);
        }
    }

    #[test]
    fn more_vram_per_gpu_never_yields_a_worse_plan(spec in spec(), class in class(), extra in 1u64..100_000) {
        let job = input(&spec);
        let mut bigger = class.clone();
        bigger.memory_mib += extra;
        bigger.memory_buffer_mib = class.memory_buffer_mib; // same buffer: only the VRAM grows
        let small = plan_for_class(&job, &class, &Fallback::default());
        let large = plan_for_class(&job, &bigger, &Fallback::default());
        if let Ok(small) = small {
            let large = large.expect("a class with more VRAM per GPU can run what a smaller one can");
            // "Worse" by the job's own preference: quality ranks precision before GPU count,
            // economy ranks GPU count before precision.
            let key = |p: &vramfit_api::Plan| match spec.preference {
                Preference::Quality => (p.quantization as u32, p.gpu_count),
                Preference::Economy => (p.gpu_count, p.quantization as u32),
            };
            match (small.llama_cpp, large.llama_cpp) {
                (Some(s), Some(l)) => {
                    let s_all = s.gpu_layers == s.total_layers;
                    prop_assert!(!s_all || l.gpu_layers == l.total_layers);
                    if !s_all {
                        prop_assert!(l.gpu_layers >= s.gpu_layers || l.kv_cache_type < s.kv_cache_type);
                    }
                }
                _ => prop_assert!(key(&large) <= key(&small), "{:?} vs {:?}", key(&large), key(&small)),
            }
        }
    }

    #[test]
    fn a_longer_context_never_needs_less_memory(spec in spec(), longer in 1u32..65_536, gpus in 1u32..9) {
        use vramfit_api::Quantization;
        use vramfit_planner::memory::transformer_need;
        let short = input(&spec);
        let mut long_spec = spec.clone();
        long_spec.context_length = Some(spec.context_length.unwrap_or(4096) + longer);
        long_spec.model.context_limit = Some(u32::MAX);
        let long = input(&long_spec);
        for q in Quantization::LADDER {
            let a = transformer_need(&short.model, q, short.tokens(), short.prefill_tokens(), gpus).unwrap();
            let b = transformer_need(&long.model, q, long.tokens(), long.prefill_tokens(), gpus).unwrap();
            prop_assert!(b.per_gpu_mib() >= a.per_gpu_mib());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Every step down after an out-of-memory failure asks for no more memory per GPU than
    /// the plan that failed, and the ladder ends.
    #[test]
    fn out_of_memory_steps_never_need_more_memory_per_gpu(spec in spec(), class in class()) {
        let job = input(&spec);
        let mut fallback = Fallback::default();
        let Ok(mut plan) = plan_for_class(&job, &class, &fallback) else { return Ok(()) };
        for _ in 0..20 {
            let Some((next, step)) = vramfit_planner::fallback::next_step(&job, &plan, &fallback, class.gpus_per_node, Some(class.capability)) else {
                return Ok(());
            };
            fallback = next;
            let Ok(next_plan) = plan_for_class(&job, &class, &fallback) else { return Ok(()) };
            if job.runtime != Runtime::Llamacpp {
                prop_assert!(
                    next_plan.memory.needed_per_gpu_mib <= plan.memory.needed_per_gpu_mib,
                    "{step}: {} MiB after {} MiB", next_plan.memory.needed_per_gpu_mib, plan.memory.needed_per_gpu_mib
                );
            }
            prop_assert!(next_plan.gpu_count >= plan.gpu_count, "{step}: fewer GPUs");
            prop_assert!(next_plan.quantization >= plan.quantization, "{step}: less quantization");
            plan = next_plan;
        }
        prop_assert!(false, "the ladder did not end within 20 steps");
    }
}

/// `spec` allowed up to `max_nodes` nodes.
fn with_nodes(spec: &InferenceJobSpec, max_nodes: u32) -> InferenceJobSpec {
    let mut spec = spec.clone();
    spec.gpus.max_nodes = max_nodes;
    spec
}

/// A group plan's rank against fewer nodes: the method and quantization (inference and
/// fine-tuning), or for llama.cpp whether every layer is on a GPU.
fn holds_as_well(smaller: &vramfit_api::Plan, group: &vramfit_api::Plan) -> bool {
    match (smaller.llama_cpp, group.llama_cpp) {
        (Some(s), Some(_)) => s.gpu_layers >= s.total_layers,
        _ => {
            smaller.tuning.as_ref().map(|t| t.method) <= group.tuning.as_ref().map(|t| t.method)
                && smaller.quantization <= group.quantization
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn a_group_is_the_fewest_nodes_of_one_class_within_max_nodes(
        spec in spec(),
        class in class(),
        max_nodes in 1u32..=16,
    ) {
        let job = input(&with_nodes(&spec, max_nodes));
        let Ok(plan) = plan_for_class(&job, &class, &Fallback::default()) else { return Ok(()) };
        // One class: every pod on a node of this class, with at most its GPUs.
        prop_assert_eq!(&plan.node_class, &class.name);
        prop_assert!(plan.gpu_count <= class.gpus_per_node);
        prop_assert!(plan.nodes() <= max_nodes);
        prop_assert_eq!(plan.total_gpus(), plan.gpu_count * plan.nodes());
        let per_gpu = class.hourly_price_cents_per_gpu.unwrap_or(0);
        prop_assert_eq!(plan.hourly_price_cents, per_gpu * plan.total_gpus());
        let Some(group) = &plan.group else { return Ok(()) };
        prop_assert!(group.nodes >= 2);
        prop_assert!(spec.runtime != Runtime::Transformers, "transformers has no group engine");
        // The fewest: with one node fewer allowed, the job does not fit as well.
        let fewer = input(&with_nodes(&spec, group.nodes - 1));
        if let Ok(smaller) = plan_for_class(&fewer, &class, &Fallback::default()) {
            prop_assert!(
                !holds_as_well(&smaller, &plan),
                "{} nodes hold it as well as {}: {:?} vs {:?}",
                group.nodes - 1, group.nodes, smaller.reasons, plan.reasons
            );
        }
        if let Some(layers) = plan.llama_cpp {
            prop_assert_eq!(group.tensor_split.iter().sum::<u32>(), layers.total_layers);
            prop_assert_eq!(group.layers_per_node.len() as u32, group.nodes);
            prop_assert_eq!(group.layers_per_node.iter().sum::<u32>(), layers.total_layers);
            // llama.cpp runs a model on at most 16 devices.
            prop_assert!(plan.total_gpus() <= 16);
        }
        if spec.runtime == Runtime::Vllm {
            prop_assert_eq!(group.tensor_parallel_size, Some(plan.gpu_count));
            prop_assert_eq!(group.pipeline_parallel_size, Some(group.nodes));
        }
    }

    #[test]
    fn one_node_means_no_group_and_a_job_one_node_holds_best_stays_there(
        spec in spec(),
        class in class(),
        max_nodes in 2u32..=16,
    ) {
        let one = plan_for_class(&input(&spec), &class, &Fallback::default());
        if let Ok(plan) = &one {
            prop_assert!(plan.group.is_none());
        }
        let many = plan_for_class(&input(&with_nodes(&spec, max_nodes)), &class, &Fallback::default());
        if let Ok(plan) = &one {
            let best = match plan.llama_cpp {
                Some(l) => l.gpu_layers >= l.total_layers,
                None => spec.preference == Preference::Economy || plan.quantization == vramfit_api::Quantization::None,
            };
            if best {
                prop_assert_eq!(Ok(plan.clone()), many.map_err(|e| e.to_string()));
            }
        }
    }
}

/// A GGUF job under llama.cpp: a file of `file_mb` MB over `layers` blocks, any KV types.
fn gguf_spec() -> impl Strategy<Value = InferenceJobSpec> {
    (
        (
            1u32..128,
            50u64..200_000,
            1u32..64,
            prop_oneof![Just(1u32), Just(4), Just(8)],
        ),
        (128u32..32_768, 1u32..4, 1u32..9, 1u32..9, 0usize..3),
    )
        .prop_map(
            |((layers, file_mb, heads, kv_div), (ctx, batch, max, nodes, kv))| {
                let mut model = model(1_000, layers, heads, kv_div);
                model.gguf_file_bytes = Some(file_mb * 1_000_000);
                let kv_types = [
                    vec![vramfit_api::KvCacheType::F16],
                    vec![
                        vramfit_api::KvCacheType::F16,
                        vramfit_api::KvCacheType::Q8_0,
                    ],
                    vec![
                        vramfit_api::KvCacheType::F16,
                        vramfit_api::KvCacheType::Q8_0,
                        vramfit_api::KvCacheType::Q4_0,
                    ],
                ];
                let spec: InferenceJobSpec =
                    serde_yaml::from_str("{model: {name: m}, runtime: llamacpp, image: x}")
                        .expect("spec");
                InferenceJobSpec {
                    model,
                    context_length: Some(ctx),
                    batch_size: batch,
                    gpus: GpuBounds {
                        min: 1,
                        max,
                        max_nodes: nodes,
                    },
                    llama_cpp: Some(vramfit_api::LlamaCppSpec {
                        kv_cache_types: Some(kv_types[kv].clone()),
                        ..Default::default()
                    }),
                    ..spec
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// llama.cpp splits whole layers over its devices (the GPUs of a node, or of a group in
    /// its `--tensor-split`): every device's layers, each a share of the file with a block's
    /// KV cache, and llama.cpp's own buffers fit its budget, not only the average.
    #[test]
    fn every_llama_cpp_device_holds_its_layers_within_its_budget(spec in gguf_spec(), class in class()) {
        use vramfit_planner::memory::{LLAMACPP_OVERHEAD_MIB, kv_cache_bytes_per_layer, mib};
        let job = input(&spec);
        if let Ok(plan) = plan_for_class(&job, &class, &Fallback::default()) {
            let l = plan.llama_cpp.expect("a llama.cpp plan");
            let split = match &plan.group {
                Some(g) if !g.tensor_split.is_empty() => g.tensor_split.clone(),
                _ => vramfit_planner::group::rpc_or_offload::even_split(l.gpu_layers, plan.total_gpus()),
            };
            prop_assert_eq!(split.len() as u32, plan.total_gpus());
            prop_assert_eq!(split.iter().sum::<u32>(), l.gpu_layers);
            let file = job.model.gguf_file_bytes.expect("a GGUF file");
            let unit = file.div_ceil(u64::from(job.model.layers));
            let kv = kv_cache_bytes_per_layer(&job.model, job.tokens(), l.kv_cache_type).expect("kv");
            for (device, &layers) in split.iter().enumerate() {
                let need = mib((unit * u64::from(layers)).min(file))
                    + mib(kv * u64::from(layers.min(job.model.layers)))
                    + LLAMACPP_OVERHEAD_MIB;
                prop_assert!(
                    need <= plan.memory.usable_per_gpu_mib,
                    "device {} of {:?}: {} of {} MiB",
                    device, split, need, plan.memory.usable_per_gpu_mib
                );
            }
        }
    }
}
