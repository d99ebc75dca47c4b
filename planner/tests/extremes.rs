//! The whole planner on the extremes of every bound the CRDs set (and on the extremes of the
//! Rust types beyond them): a job or a class whose numbers overflow is "cannot run" with a
//! reason, never a panic (release builds check overflow, and a panic in the operator would
//! stop reconciling every job). The bounds are read from the generated schemas, so a new
//! integer field is covered without a change here.
use proptest::prelude::*;
use serde_json::{Value, json};
use vramfit_api::schema_check::{IntegerBound, integer_fields, openapi_schema};
use vramfit_api::{
    Fallback, GpuNodeClass, GpuNodeClassSpec, InferenceJob, InferenceJobSpec, KvCacheType,
    Quantization,
};
use vramfit_planner::model_catalog::PRESETS;
use vramfit_planner::{
    NodeClass, PlanError, builtin_classes, fallback, plan_for_class, ranking, resolve_job, workload,
};

/// The integer fields under `spec` of a CRD, outside lists and maps.
fn spec_integers(schema: &Value) -> Vec<IntegerBound> {
    integer_fields(schema)
        .into_iter()
        .filter(|b| b.path.starts_with("spec.") && !b.path.contains(['[', '*']))
        .collect()
}

/// A value for a bounded field: one of its bounds, next to one, inside, or the extremes of the
/// Rust types (beyond the schema: the planner must survive what no schema guards).
fn extreme(bound: &IntegerBound) -> impl Strategy<Value = Option<Value>> + use<> {
    let min = bound.minimum.unwrap_or(0.0) as i64;
    let max = bound.maximum.unwrap_or(u32::MAX as f64) as i64;
    prop_oneof![
        1 => Just(None),
        3 => Just(Some(json!(min))),
        3 => Just(Some(json!(max))),
        1 => Just(Some(json!(min.saturating_add(1)))),
        1 => Just(Some(json!(max.saturating_sub(1)))),
        2 => (min..=max).prop_map(|n| Some(json!(n))),
        1 => prop_oneof![
            Just(json!(0)),
            Just(json!(u32::MAX)),
            Just(json!(i64::MAX)),
            Just(json!(u64::MAX)),
        ]
        .prop_map(Some),
    ]
}

/// Sets `value` at a dotted path under `object`, creating objects on the way.
fn set(object: &mut Value, path: &str, value: Value) {
    let mut at = object;
    let mut keys = path.split('.').peekable();
    while let Some(key) = keys.next() {
        if keys.peek().is_none() {
            at[key] = value;
            return;
        }
        if !at[key].is_object() {
            at[key] = json!({});
        }
        at = &mut at[key];
    }
}

/// The spec of an object whose bounded integers take extreme values.
fn extreme_spec(base: Value, schema: &Value) -> impl Strategy<Value = Value> + use<> {
    let fields = spec_integers(schema);
    let values: Vec<_> = fields.iter().map(extreme).collect();
    (Just(fields), values).prop_map(move |(fields, values)| {
        let mut object = json!({ "spec": base.clone() });
        for (field, value) in fields.iter().zip(values) {
            // A struct nested in an optional struct with required fields (`model.preQuantized`,
            // `model.ggufLayout`) is varied only where the base has it.
            let parent = field.path.rsplit_once('.').map_or("", |(parent, _)| parent);
            let nested = parent.matches('.').count() >= 2;
            if nested
                && object
                    .pointer(&format!("/{}", parent.replace('.', "/")))
                    .is_none()
            {
                continue;
            }
            if let Some(value) = value {
                set(&mut object, &field.path, value);
            }
        }
        object["spec"].take()
    })
}

fn job_spec() -> impl Strategy<Value = InferenceJobSpec> {
    let schema = openapi_schema::<InferenceJob>();
    let runtime = prop_oneof![
        Just("transformers"),
        Just("vllm"),
        Just("llamacpp"),
        Just("custom")
    ];
    let preset = prop_oneof![
        2 => Just(None),
        1 => proptest::sample::select(PRESETS.iter().map(|p| p.key).collect::<Vec<_>>()).prop_map(Some),
    ];
    let layers = prop_oneof![Just(json!("auto")), any::<u32>().prop_map(|n| json!(n))];
    (
        runtime,
        preset,
        layers,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_flat_map(
            move |(runtime, preset, layers, economy, vision, checkpoint)| {
                let mut base = json!({
                    "runtime": runtime, "image": "x",
                    "model": {"vision": vision},
                    "llamaCpp": {"gpuLayers": layers},
                    "preference": if economy { "economy" } else { "quality" },
                });
                if let Some(key) = preset {
                    base["model"]["preset"] = json!(key);
                }
                if checkpoint {
                    base["model"]["preQuantized"] = json!({"method": "awq", "weightBits": 4});
                    base["model"]["ggufLayout"] =
                        json!({"blockBytes": [1], "outputBytes": 0, "tokenEmbeddingBytes": 0});
                }
                extreme_spec(base, &schema)
            },
        )
        .prop_filter_map("a spec the Rust types cannot hold", |spec| {
            serde_json::from_value(spec).ok()
        })
}

fn class_spec() -> impl Strategy<Value = GpuNodeClassSpec> {
    let schema = openapi_schema::<GpuNodeClass>();
    let product = proptest::sample::select(vec![
        "NVIDIA A10G",
        "Tesla T4",
        "NVIDIA H100 80GB HBM3",
        "Tesla V100-SXM2-16GB",
        "Mystery GPU",
    ]);
    let capability = proptest::sample::select(vec!["6.0", "7.0", "8.0", "9.0", "99.99"]);
    (product, capability, any::<bool>())
        .prop_flat_map(move |(product, cc, allow)| {
            let base = json!({
                "nodeSelector": {"pool": "x"},
                "allowJobs": allow,
                "gpu": {"product": product, "computeCapability": cc, "count": 1, "memoryMib": 1024},
            });
            extreme_spec(base, &schema)
        })
        .prop_filter_map("a spec the Rust types cannot hold", |spec| {
            serde_json::from_value(spec).ok()
        })
}

fn any_fallback() -> impl Strategy<Value = Fallback> {
    let quantization =
        proptest::option::of(proptest::sample::select(Quantization::LADDER.to_vec()));
    let kv = proptest::option::of(proptest::sample::select(KvCacheType::LADDER.to_vec()));
    let steps = prop_oneof![0u32..8, Just(u32::MAX), any::<u32>()];
    // Nodes a group stepped down to: within maxNodes' 1 to 16, past it, and past any bound.
    let min_nodes = proptest::option::of(prop_oneof![1u32..=17, Just(u32::MAX)]);
    (
        steps.clone(),
        quantization,
        proptest::option::of(prop_oneof![1u32..65, Just(u32::MAX)]),
        any::<(bool, bool)>(),
        kv,
        (steps, min_nodes),
    )
        .prop_map(
            |(tile_steps, q, min_gpus, (fa_off, fp16), kv, (offload, min_nodes))| Fallback {
                tile_steps,
                min_quantization: q,
                min_gpus,
                min_nodes,
                flash_attention_off: fa_off,
                float16: fp16,
                min_kv_cache_type: kv,
                offload_steps: offload,
                tuning: None,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_whole_planner_survives_the_extremes_of_every_crd_bound(
        spec in job_spec(),
        class in class_spec(),
        fallback in any_fallback(),
    ) {
        let Ok(job) = resolve_job(&spec) else { return Ok(()) };
        let mut classes = builtin_classes();
        if let Ok(defined) = NodeClass::from_definition("defined", &class) {
            classes.push(defined);
        }
        if let Some(first) = classes.first_mut() {
            first.apply_overrides(&class);
        }
        for steps in [Fallback::default(), fallback] {
            let planned: Vec<(&NodeClass, Result<_, PlanError>)> = classes
                .iter()
                .map(|c| (c, plan_for_class(&job, c, &steps)))
                .collect();
            for (class, planned) in &planned {
                match planned {
                    Ok(plan) => {
                        workload::plan_env(&job, plan);
                        workload::runtime_args(&job, plan);
                        workload::host_memory_mib(&job, plan);
                        fallback::next_step(&job, plan, &steps, class.max_gpus_per_pod(), Some(class.capability));
                        fallback::next_after_bad_output(&job, plan, &steps);
                    }
                    Err(why) => prop_assert!(!why.to_string().is_empty()),
                }
            }
            ranking::choose_class(job.preference, planned, |_, _| true);
        }
    }
}

/// The two jobs the review found panicking `vramfit plan` ("attempt to multiply with
/// overflow"): every class now says it cannot size them.
#[test]
fn jobs_whose_sizes_overflow_cannot_run_anywhere_and_say_why() {
    let huge_kv: InferenceJobSpec = serde_json::from_value(json!({
        "runtime": "llamacpp", "image": "x", "contextLength": 1048576, "batchSize": 1024,
        "model": {"parameters": 1000000, "layers": 1024, "hiddenSize": 1048576,
                  "attentionHeads": 4096, "kvHeads": 4096, "headDim": 4096,
                  "ggufFileBytes": 1, "contextLimit": 10485760},
    }))
    .unwrap();
    let huge_file: InferenceJobSpec = serde_json::from_value(json!({
        "runtime": "llamacpp", "image": "x",
        "model": {"parameters": 1000000, "layers": 1, "hiddenSize": 64, "attentionHeads": 1,
                  "ggufFileBytes": 9223372036854775000u64},
    }))
    .unwrap();
    let huge_transformer: InferenceJobSpec = serde_json::from_value(json!({
        "runtime": "vllm", "image": "x", "contextLength": 1048576, "batchSize": 1024,
        "model": {"parameters": 10000000000000u64, "layers": 1024, "hiddenSize": 1048576,
                  "attentionHeads": 4096, "kvHeads": 4096, "headDim": 4096, "contextLimit": 10485760},
    }))
    .unwrap();
    // At the schema's largest numbers one layer's q4_0 KV cache (2 × 2^30 tokens × 2^24 ×
    // 0.5625 bytes) still has a size: llama.cpp classes say it does not fit.
    let job = resolve_job(&huge_kv).unwrap();
    for class in builtin_classes() {
        let why = plan_for_class(&job, &class, &Fallback::default()).unwrap_err();
        assert!(
            matches!(why, PlanError::NoLayerFits { .. }),
            "{}: {why}",
            class.name
        );
        assert!(
            why.to_string()
                .starts_with("not one layer fits: 18874368.5 GiB for one layer"),
            "{why}"
        );
    }
    let job = resolve_job(&huge_transformer).unwrap();
    for class in builtin_classes() {
        let why = plan_for_class(&job, &class, &Fallback::default()).unwrap_err();
        assert!(
            matches!(why, PlanError::SizeOverflow(_)),
            "{}: {why}",
            class.name
        );
        assert!(
            why.to_string()
                .starts_with("cannot size the job: the KV cache"),
            "{why}"
        );
    }
    let job = resolve_job(&huge_file).unwrap();
    for class in builtin_classes() {
        assert!(
            plan_for_class(&job, &class, &Fallback::default()).is_err(),
            "{}",
            class.name
        );
    }
}

/// Every preset under every runtime with `gpus.maxNodes` at its bounds (1, 2, 16) and past
/// them, on every built-in class, with the out-of-memory ladder walked to its end: groups of
/// up to 16 nodes of 8 GPUs plan, step down and rank without a panic.
#[test]
fn groups_at_the_max_nodes_bounds_plan_and_step_down_without_panic() {
    let classes = builtin_classes();
    for preset in PRESETS {
        for runtime in ["vllm", "llamacpp", "custom", "transformers"] {
            for max_nodes in [1u32, 2, 16, u32::MAX] {
                let spec: InferenceJobSpec = serde_json::from_value(json!({
                    "runtime": runtime, "image": "x",
                    "model": {"preset": preset.key},
                    "gpus": {"min": 1, "max": 64, "maxNodes": max_nodes},
                }))
                .expect("spec");
                let Ok(job) = resolve_job(&spec) else {
                    continue;
                };
                let planned: Vec<_> = classes
                    .iter()
                    .map(|c| (c, plan_for_class(&job, c, &Fallback::default())))
                    .collect();
                for (class, planned) in &planned {
                    let Ok(plan) = planned else { continue };
                    assert!(plan.nodes() <= max_nodes.min(16));
                    let (mut plan, mut steps) = (plan.clone(), Fallback::default());
                    for _ in 0..40 {
                        let Some((next, _)) = fallback::next_step(
                            &job,
                            &plan,
                            &steps,
                            class.max_gpus_per_pod(),
                            Some(class.capability),
                        ) else {
                            break;
                        };
                        steps = next;
                        match plan_for_class(&job, class, &steps) {
                            Ok(p) => plan = p,
                            Err(why) => {
                                assert!(!why.to_string().is_empty());
                                break;
                            }
                        }
                    }
                }
                ranking::choose_class(job.preference, planned, |_, _| true);
            }
        }
    }
}
