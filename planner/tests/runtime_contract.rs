//! Every argument list the planner emits, per runtime and GPU generation, against the flag
//! table of the pinned runtime versions; and the table in docs/runtime-contracts.md is the
//! one in code.
mod common;

use common::{class, job};
use vramfit_api::adapters::ResolvedAdapter;
use vramfit_api::labels::ComputeCapability;
use vramfit_api::{Fallback, Runtime};
use vramfit_planner::runtime_contract::{self, FLAGS, PINS, Values};
use vramfit_planner::{JobInput, NodeClass, plan_for_class, workload};

const DOC: &str = include_str!("../../docs/runtime-contracts.md");

fn runtime_name(runtime: Runtime) -> &'static str {
    match runtime {
        Runtime::Llamacpp => "llamacpp",
        Runtime::Vllm => "vllm",
        Runtime::Transformers => "transformers",
        Runtime::Custom => "custom",
    }
}

#[test]
fn the_docs_hold_the_flag_table_of_the_code() {
    for pin in PINS {
        let name = runtime_name(pin.runtime);
        let start = format!("<!-- flag-table:{name}:start -->\n");
        let end = format!("<!-- flag-table:{name}:end -->");
        let from = DOC
            .find(&start)
            .unwrap_or_else(|| panic!("{start} missing"))
            + start.len();
        let to = from + DOC[from..].find(&end).expect("end marker");
        assert_eq!(
            &DOC[from..to],
            runtime_contract::render_flag_table(pin.runtime),
            "docs/runtime-contracts.md: the {name} table differs from planner/src/runtime_contract.rs"
        );
        assert!(
            DOC.contains(pin.oldest.label),
            "the pinned {name} version is named in the docs"
        );
    }
}

#[test]
fn no_flag_is_newer_than_the_oldest_supported_version() {
    for f in FLAGS {
        let pin = runtime_contract::pin(f.runtime).expect("a pinned runtime");
        assert!(
            f.introduced.order <= pin.oldest.order,
            "{} came in {}, after the oldest supported {}",
            f.flag,
            f.introduced.label,
            pin.oldest.label
        );
    }
}

/// One class per GPU generation.
fn generations(runtime: Runtime) -> Vec<NodeClass> {
    let mut classes = Vec::new();
    if runtime == Runtime::Llamacpp {
        // Pascal: llama.cpp runs there, vLLM does not.
        classes.push(NodeClass::new(
            "p4000-x1",
            "Quadro P4000",
            1,
            8_119,
            Some(ComputeCapability::new(6, 1)),
        ));
    }
    for name in [
        "v100-16gb-x4", // Volta 7.0
        "t4-x1",        // Turing 7.5
        "a100-80gb-x8", // Ampere 8.0
        "a10g-x1",      // Ampere 8.6
        "l40s-x1",      // Ada 8.9
        "h100-80gb-x8", // Hopper 9.0
    ] {
        classes.push(class(name));
    }
    classes
}

fn jobs(runtime: Runtime) -> Vec<JobInput> {
    let specs: &[&str] = match runtime {
        Runtime::Llamacpp => &[
            "{model: {preset: mistral-7b-instruct-v0.3-q4_k_m}, runtime: llamacpp, image: x, contextLength: 32768}",
            "{model: {preset: llama-3.1-70b-instruct-q4_k_m}, runtime: llamacpp, image: x, contextLength: 8192, batchSize: 4}",
            "{model: {preset: llama-3.1-8b-instruct-q4_k_m}, runtime: llamacpp, image: x, overrides: {flashAttention: false}}",
            "{model: {preset: mistral-7b-instruct-v0.3-q4_k_m}, runtime: llamacpp, image: x, contextLength: 16384, serve: {port: 8080, replicas: 2}}",
        ],
        _ => &[
            "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, batchSize: 8}",
            "{model: {preset: internvl3-8b}, runtime: vllm, image: x, contextLength: 8192}",
            "{model: {preset: llama-3.1-8b-instruct}, runtime: vllm, image: x, allowedQuantizations: [int8, nf4]}",
            "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, allowedQuantizations: [nf4]}",
            "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, serve: {replicas: 3}}",
        ],
    };
    let mut jobs: Vec<JobInput> = specs.iter().map(|s| job(s)).collect();
    // A served job with two LoRA adapters: the adapters' flags, one of them repeated.
    let (spec, file) = match runtime {
        Runtime::Llamacpp => (
            "{model: {preset: mistral-7b-instruct-v0.3-q4_k_m}, runtime: llamacpp, image: x, serve: {}}",
            "/adapter_model.gguf",
        ),
        _ => (
            "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, serve: {}}",
            "",
        ),
    };
    let mut listed = common::spec(spec);
    if let Some(serve) = listed.serve.as_mut() {
        serve.adapters = ["sql", "chat"]
            .iter()
            .map(|name| vramfit_api::adapters::AdapterSpec {
                name: name.to_string(),
                tuning_job: vramfit_api::adapters::TuningJobRef {
                    name: format!("{name}-tune"),
                },
            })
            .collect();
    }
    let mut served = vramfit_planner::resolve_job(&listed).expect("valid");
    vramfit_planner::adapters::attach(
        &mut served,
        ["sql", "chat"]
            .iter()
            .map(|name| ResolvedAdapter {
                name: name.to_string(),
                source: format!("tuningJob/{name}"),
                path: format!("/vramfit/adapters/{name}{file}"),
                rank: 24,
                alpha: None,
                target_modules: Vec::new(),
                bytes: None,
            })
            .collect(),
    );
    jobs.push(served);
    jobs
}

/// Checks one argument list: flag/value pairs, each flag in the table once with a value it
/// allows, and every always-emitted flag there.
fn check(runtime: Runtime, args: &[String], context: &str) {
    let flags = runtime_contract::flags_in(runtime, args)
        .unwrap_or_else(|why| panic!("{context}: {why}: {args:?}"));
    let mut seen = Vec::new();
    for (name, value) in flags {
        let c = runtime_contract::contract(runtime, name)
            .unwrap_or_else(|| panic!("{context}: {name} is not in the flag table"));
        assert!(
            c.values.accepts(&value),
            "{context}: {name} {value} is not one of {:?}",
            c.values
        );
        if let Values::JsonObject(keys) = c.values {
            let object: serde_yaml::Mapping = serde_yaml::from_str(&value)
                .unwrap_or_else(|e| panic!("{context}: {name} {value}: {e}"));
            for key in object.keys() {
                let key = key.as_str().expect("string keys");
                assert!(keys.contains(&key), "{context}: {name} key {key}");
            }
        }
        assert!(
            !seen.contains(&name) || c.values.repeats(),
            "{context}: {name} twice"
        );
        seen.push(name);
    }
    for f in FLAGS.iter().filter(|f| f.runtime == runtime && f.always) {
        assert!(
            seen.contains(&f.flag),
            "{context}: {} missing from {args:?}",
            f.flag
        );
    }
}

fn check_runtime(runtime: Runtime) -> usize {
    let mut checked = 0;
    for class in generations(runtime) {
        for j in jobs(runtime) {
            let Ok(plan) = plan_for_class(&j, &class, &Fallback::default()) else {
                continue;
            };
            let context = format!("{} on {}", j.model.name, class.name);
            check(runtime, &workload::runtime_args(&j, &plan), &context);
            checked += 1;
        }
    }
    checked
}

#[test]
fn llamacpp_arguments_on_every_generation_match_the_b6327_flag_table() {
    assert!(check_runtime(Runtime::Llamacpp) >= 18);
}

#[test]
fn vllm_arguments_on_every_generation_match_the_0_10_2_flag_table() {
    assert!(check_runtime(Runtime::Vllm) >= 18);
}

/// A served job's flags end with where it listens; a batch job's have no such flag.
#[test]
fn served_jobs_listen_on_every_address_at_their_port() {
    for (runtime, spec) in [
        (
            Runtime::Vllm,
            "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x",
        ),
        (
            Runtime::Llamacpp,
            "{model: {preset: mistral-7b-instruct-v0.3-q4_k_m}, runtime: llamacpp, image: x",
        ),
    ] {
        let served = job(&format!("{spec}, serve: {{port: 9000}}}}"));
        let batch = job(&format!("{spec}}}"));
        let class = class("a10g-x1");
        let plan = plan_for_class(&served, &class, &Fallback::default()).unwrap();
        let args = workload::runtime_args(&served, &plan);
        // llama-server is also asked for the /metrics the autoscaler reads.
        let listen = args.iter().position(|a| a == "--host").expect("--host");
        assert_eq!(
            &args[listen..listen + 4],
            ["--host", "0.0.0.0", "--port", "9000"]
        );
        assert_eq!(
            args.iter().any(|a| a == "--metrics"),
            runtime == Runtime::Llamacpp,
            "{args:?}"
        );
        let env = workload::plan_env(&served, &plan);
        assert!(env.contains(&("VRAMFIT_PORT".to_string(), "9000".to_string())));
        let runtime_args = env
            .iter()
            .find(|(k, _)| k == "VRAMFIT_RUNTIME_ARGS")
            .unwrap();
        assert_eq!(runtime_args.1, args.join(" "), "{runtime:?}");
        let plain = workload::runtime_args(&batch, &plan);
        assert!(
            !plain
                .iter()
                .any(|a| a == "--port" || a == "--host" || a == "--metrics"),
            "{runtime:?}"
        );
        assert!(
            !workload::plan_env(&batch, &plan)
                .iter()
                .any(|(k, _)| k == "VRAMFIT_PORT")
        );
    }
    // Transformers and custom read the port from the env only.
    let custom = job(
        "{model: {preset: internvl3-8b}, runtime: custom, image: x, serve: {port: 7000, healthPath: /ready}}",
    );
    let plan = plan_for_class(&custom, &class("a10g-x1"), &Fallback::default()).unwrap();
    assert!(workload::runtime_args(&custom, &plan).is_empty());
    assert!(
        workload::plan_env(&custom, &plan)
            .contains(&("VRAMFIT_PORT".to_string(), "7000".to_string()))
    );
}

#[test]
fn transformers_and_custom_get_no_flags() {
    for runtime in ["transformers", "custom"] {
        let j = job(&format!(
            "{{model: {{preset: internvl3-8b}}, runtime: {runtime}, image: x}}"
        ));
        for class in generations(Runtime::Transformers) {
            if let Ok(p) = plan_for_class(&j, &class, &Fallback::default()) {
                assert!(workload::runtime_args(&j, &p).is_empty(), "{runtime}");
            }
        }
    }
}

#[test]
fn the_docs_hold_the_pre_quantized_floor_table_of_the_code() {
    let start = "<!-- prequantized-floors:start -->\n";
    let end = "<!-- prequantized-floors:end -->";
    let from = DOC.find(start).expect("start marker") + start.len();
    let to = from + DOC[from..].find(end).expect("end marker");
    assert_eq!(
        &DOC[from..to],
        vramfit_planner::prequantized::render_floor_table(),
        "docs/runtime-contracts.md: the pre-quantized table differs from planner/src/prequantized.rs"
    );
    assert!(DOC.contains(vramfit_planner::prequantized::NO_FLOOR_UNDER_TRANSFORMERS));
}
