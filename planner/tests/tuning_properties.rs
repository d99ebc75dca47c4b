//! Properties of fine-tuning plans over random models, jobs and GPUs: a plan never needs more
//! than the class's usable memory, a larger GPU never gets a smaller micro-batch (same method,
//! optimizer, GPUs and parallelism), and the effective batch is never below what the job asked for.
use proptest::prelude::*;
use vramfit_api::tuning::{TuningMethodRequest, TuningSpec};
use vramfit_api::{Fallback, GpuBounds, InferenceJobSpec, ModelSpec, Preference};
use vramfit_planner::{JobInput, NodeClass, builtin_classes, plan_for_class, resolve_job};

fn model() -> impl Strategy<Value = ModelSpec> {
    (
        100u64..30_000,
        4u32..96,
        prop_oneof![Just(16u32), Just(32), Just(64)],
        prop_oneof![Just(1u32), Just(4), Just(8)],
        proptest::option::of(16_000u32..260_000),
    )
        .prop_map(|(params_m, layers, heads, kv_div, vocab)| ModelSpec {
            parameters: Some(params_m * 1_000_000),
            layers: Some(layers),
            hidden_size: Some(heads * 128),
            attention_heads: Some(heads),
            kv_heads: Some(heads / kv_div),
            head_dim: Some(128),
            vocab_size: vocab,
            ..Default::default()
        })
}

fn method() -> impl Strategy<Value = TuningMethodRequest> {
    prop_oneof![
        Just(TuningMethodRequest::Auto),
        Just(TuningMethodRequest::Full),
        Just(TuningMethodRequest::Lora),
        Just(TuningMethodRequest::Qlora),
    ]
}

fn job() -> impl Strategy<Value = JobInput> {
    (
        model(),
        method(),
        64u32..4096,
        1u32..512,
        1u32..4,
        0u32..4,
        any::<bool>(),
    )
        .prop_map(|(model, method, seq, batch, min, extra, economy)| {
            let mut spec: InferenceJobSpec =
                serde_yaml::from_str("{model: {preset: x}, runtime: transformers, image: x}")
                    .expect("a spec");
            spec.model = model;
            spec.gpus = GpuBounds {
                min,
                max: min + extra,
                ..GpuBounds::default()
            };
            if economy {
                spec.preference = Preference::Economy;
            }
            spec.tuning = Some(TuningSpec {
                method,
                sequence_length: Some(seq),
                effective_batch: Some(batch),
                ..Default::default()
            });
            resolve_job(&spec).expect("generated tuning jobs are valid")
        })
}

/// An A100-like class with `memory_mib` per GPU.
fn gpu(memory_mib: u64, count: u32) -> NodeClass {
    NodeClass::new("test", "NVIDIA A100-SXM4-80GB", count, memory_mib, None)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_plan_never_needs_more_than_the_usable_memory(job in job(), class in 0usize..11) {
        let classes = builtin_classes();
        let class = &classes[class % classes.len()];
        if let Ok(plan) = plan_for_class(&job, class, &Fallback::default()) {
            let t = plan.tuning.as_ref().expect("a tuning job's plan has a tuning part");
            prop_assert!(t.memory.needed_mib <= class.usable_per_gpu_mib(), "{:?}", t.memory);
            prop_assert_eq!(plan.memory.needed_per_gpu_mib, t.memory.needed_mib);
            let parts = t.memory.weights_mib + t.memory.trainable_mib + t.memory.optimizer_mib
                + t.memory.activations_mib + t.memory.logits_mib + t.memory.runtime_mib;
            prop_assert_eq!(parts, t.memory.needed_mib);
        }
    }

    #[test]
    fn a_larger_gpu_never_gets_a_smaller_micro_batch(
        job in job(),
        small in 8_000u64..100_000,
        more in 1u64..100_000,
    ) {
        let (a, b) = (
            plan_for_class(&job, &gpu(small, 8), &Fallback::default()),
            plan_for_class(&job, &gpu(small + more, 8), &Fallback::default()),
        );
        if let Ok(a) = a {
            let b = b.expect("what fits a GPU fits a larger one");
            let (ta, tb) = (a.tuning.unwrap(), b.tuning.unwrap());
            if ta.method == tb.method
                && ta.optimizer == tb.optimizer
                && ta.parallelism == tb.parallelism
                && a.gpu_count == b.gpu_count
            {
                prop_assert!(tb.micro_batch >= ta.micro_batch, "{} then {}", ta.micro_batch, tb.micro_batch);
            }
            // Never a worse method; for the same method, never more GPUs.
            prop_assert!(tb.method <= ta.method || job.preference == Preference::Economy);
            prop_assert!(ta.method != tb.method || b.gpu_count <= a.gpu_count);
        }
    }

    #[test]
    fn the_effective_batch_is_never_below_what_was_asked(job in job(), class in 0usize..11) {
        let classes = builtin_classes();
        let class = &classes[class % classes.len()];
        let asked = job.tuning.as_ref().unwrap().effective_batch;
        if let Ok(plan) = plan_for_class(&job, class, &Fallback::default()) {
            let t = plan.tuning.unwrap();
            let per_step = t.micro_batch * plan.gpu_count;
            prop_assert_eq!(t.effective_batch, per_step * t.gradient_accumulation);
            prop_assert!(t.effective_batch >= asked);
            // Rounded up by less than one step's worth.
            prop_assert!(t.effective_batch < asked + per_step);
            prop_assert!(t.micro_batch <= asked.div_ceil(plan.gpu_count).max(1));
            prop_assert_eq!(t.batch, format!("{}×{}", t.micro_batch, t.gradient_accumulation));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The schema's extremes (10^13 parameters, 1024 layers, 2^20 hidden, 2^24 vocabulary,
    /// 2^22 intermediate, sequences of 131,072, an effective batch of 65,536, rank 1024, 64
    /// GPUs) give a plan or a refusal, never a panic or a wrapped size.
    #[test]
    fn the_extremes_of_every_tuning_bound_are_planned_or_refused(
        parameters in prop_oneof![Just(1_000_000u64), Just(10_000_000_000_000)],
        layers in prop_oneof![Just(1u32), Just(1024)],
        hidden in prop_oneof![Just(64u32), Just(1_048_576)],
        vocab in prop_oneof![Just(1u32), Just(16_777_216)],
        intermediate in prop_oneof![Just(1u32), Just(4_194_304)],
        seq in prop_oneof![Just(64u32), Just(131_072)],
        batch in prop_oneof![Just(1u32), Just(65_536)],
        rank in prop_oneof![Just(1u32), Just(1024)],
        method in method(),
        gpus in prop_oneof![Just(1u32), Just(64)],
    ) {
        let spec = InferenceJobSpec {
            model: ModelSpec {
                parameters: Some(parameters),
                layers: Some(layers),
                hidden_size: Some(hidden),
                attention_heads: Some(1),
                head_dim: Some(hidden),
                vocab_size: Some(vocab),
                intermediate_size: Some(intermediate),
                context_limit: Some(10_485_760),
                ..Default::default()
            },
            gpus: GpuBounds { min: 1, max: gpus, ..GpuBounds::default() },
            ..serde_yaml::from_str("{model: {preset: x}, runtime: custom, image: x}").expect("a spec")
        };
        let mut spec = spec;
        spec.tuning = Some(TuningSpec {
            method,
            sequence_length: Some(seq),
            effective_batch: Some(batch),
            lora: (method != TuningMethodRequest::Full).then(|| vramfit_api::tuning::LoraSpec {
                rank: Some(rank),
                ..Default::default()
            }),
            ..Default::default()
        });
        let job = resolve_job(&spec).expect("in-bounds numbers are a valid spec");
        let big = NodeClass::new("big", "NVIDIA H200", 64, 1 << 40, None);
        for class in builtin_classes().iter().chain([&big]) {
            if let Ok(plan) = plan_for_class(&job, class, &Fallback::default()) {
                let t = plan.tuning.expect("a tuning plan");
                prop_assert!(t.memory.needed_mib <= class.usable_per_gpu_mib());
                prop_assert!(t.effective_batch >= batch);
            }
        }
    }
}
