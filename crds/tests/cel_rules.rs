//! The CRDs' CEL rules, evaluated client-side with kube's CEL engine against the generated
//! schema: every rule compiles, every example passes, and each kind of bad manifest is
//! rejected with the message a person will see from the API server.
mod support;

use std::path::Path;

use kube::core::cel::{ValidationErrors, Validator, compile_schema};
use serde_json::{Value, json};
use vramfit_api::{GpuNodeClass, InferenceJob};

use support::crd_schema as schema;

fn validate(schema: &Value, object: &Value, old: Option<&Value>) -> Result<(), ValidationErrors> {
    Validator::new().validate(schema, object, old)
}

fn job(spec: Value) -> Value {
    json!({"apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob", "metadata": {"name": "j"}, "spec": spec})
}

fn rejection(object: &Value) -> String {
    match validate(&schema::<InferenceJob>(), object, None) {
        Ok(()) => panic!("expected a CEL rejection for {object}"),
        Err(errors) => errors.to_string(),
    }
}

fn compile_errors(schema: &Value) -> Vec<String> {
    fn walk(node: &kube::core::cel::CompiledSchema, out: &mut Vec<String>) {
        out.extend(node.compilation_errors().iter().map(|e| e.to_string()));
        node.properties.values().for_each(|child| walk(child, out));
        if let Some(items) = &node.items {
            walk(items, out);
        }
    }
    let mut out = Vec::new();
    walk(&compile_schema(schema), &mut out);
    out
}

#[test]
fn every_rule_compiles() {
    assert_eq!(
        compile_errors(&schema::<InferenceJob>()),
        Vec::<String>::new()
    );
    assert_eq!(
        compile_errors(&schema::<GpuNodeClass>()),
        Vec::<String>::new()
    );
    assert_eq!(
        compile_errors(&schema::<vramfit_api::ModelCache>()),
        Vec::<String>::new()
    );
}

#[test]
fn every_example_passes_the_rules() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let schema = schema::<InferenceJob>();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue; // examples/node-classes/ holds GpuNodeClass manifests
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let object = <Value as serde::Deserialize>::deserialize(document).unwrap();
            if let Err(errors) = validate(&schema, &object, None) {
                panic!("{}: {errors}", path.display());
            }
        }
    }
}

#[test]
fn example_node_classes_pass_the_rules() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/node-classes");
    let schema = schema::<GpuNodeClass>();
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let object = <Value as serde::Deserialize>::deserialize(document).unwrap();
            let typed: GpuNodeClass = serde_json::from_value(object.clone())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(typed.metadata.name.is_some());
            if let Err(errors) = validate(&schema, &object, None) {
                panic!("{}: {errors}", path.display());
            }
            count += 1;
        }
    }
    assert!(
        count >= 3,
        "expected the example node classes, found {count}"
    );
}

#[test]
fn gpu_bounds_must_be_ordered() {
    let bad = job(
        json!({"model": {"preset": "internvl3-8b"}, "runtime": "vllm", "image": "x", "gpus": {"min": 4, "max": 2}}),
    );
    assert!(rejection(&bad).contains("gpus.min must not exceed gpus.max"));
}

#[test]
fn llamacpp_needs_a_gguf_model() {
    let bad = job(
        json!({"model": {"parameters": 7000000000u64, "layers": 32, "hiddenSize": 4096, "attentionHeads": 32}, "runtime": "llamacpp", "image": "x"}),
    );
    assert!(rejection(&bad).contains("a llamacpp job needs a GGUF model"));
}

#[test]
fn a_tuning_job_is_a_training_program_sized_by_its_own_fields() {
    let tuning = |extra: Value| {
        let mut spec = json!({"model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "transformers", "image": "x", "tuning": {"method": "qlora"}});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        job(spec)
    };
    assert!(validate(&schema::<InferenceJob>(), &tuning(json!({})), None).is_ok());
    assert!(
        rejection(&tuning(json!({"runtime": "vllm"}))).contains("runtime transformers or custom")
    );
    assert!(
        rejection(&tuning(json!({"allowedQuantizations": ["nf4"]})))
            .contains("not allowedQuantizations")
    );
    assert!(
        rejection(&tuning(json!({"contextLength": 1024})))
            .contains("tuning.sequenceLength, not contextLength")
    );
    assert!(
        rejection(&tuning(
            json!({"tuning": {"method": "full", "lora": {"rank": 8}}})
        ))
        .contains("tuning.lora is for methods lora, qlora and auto")
    );
    assert!(
        rejection(&tuning(
            json!({"tuning": {"dataVolume": "d", "outputVolume": "d"}})
        ))
        .contains("must differ")
    );
}

#[test]
fn a_model_needs_a_preset_or_its_numbers() {
    let bad = job(json!({"model": {"parameters": 7000000000u64}, "runtime": "vllm", "image": "x"}));
    assert!(rejection(&bad).contains(
        "model needs a preset, huggingFace, or parameters, layers, hiddenSize and attentionHeads"
    ));
}

#[test]
fn a_hugging_face_repository_stands_for_the_numbers_and_must_be_owner_slash_name() {
    let read = job(
        json!({"model": {"huggingFace": {"repo": "Qwen/Qwen3-8B", "revision": "main"}}, "runtime": "vllm", "image": "x"}),
    );
    assert!(validate(&schema::<InferenceJob>(), &read, None).is_ok());
    let bad = job(
        json!({"model": {"huggingFace": {"repo": "../etc/passwd"}}, "runtime": "vllm", "image": "x"}),
    );
    assert!(rejection(&bad).contains("huggingFace.repo must be owner/name"));
}

#[test]
fn gpu_layers_is_auto_or_a_count() {
    let with_layers = |layers: Value| {
        job(
            json!({"model": {"preset": "mistral-7b-instruct-v0.3-q4_k_m"}, "runtime": "llamacpp", "image": "x", "llamaCpp": {"gpuLayers": layers}}),
        )
    };
    assert!(validate(&schema::<InferenceJob>(), &with_layers(json!("auto")), None).is_ok());
    assert!(validate(&schema::<InferenceJob>(), &with_layers(json!(33)), None).is_ok());
    assert!(validate(&schema::<InferenceJob>(), &with_layers(json!(1025)), None).is_ok());
    assert!(validate(&schema::<InferenceJob>(), &with_layers(json!("1025")), None).is_ok());
    for bad in [
        json!("many"),
        json!(1026),
        json!("99999999999999999999"),
        json!(-1),
    ] {
        assert!(
            rejection(&with_layers(bad.clone()))
                .contains("gpuLayers must be `auto` or a number of layers from 0 to 1025"),
            "{bad}"
        );
    }
}

fn job_with_env(names: &[&str]) -> Value {
    let env: Vec<Value> = names
        .iter()
        .map(|name| json!({"name": name, "value": "1"}))
        .collect();
    job(
        json!({"model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "vllm", "image": "x",
               "pod": {"env": env}}),
    )
}

/// The CRD's rule on `pod.env` refuses exactly the names the operator refuses (one table makes
/// both), with the operator's reason and the offending names.
#[test]
fn reserved_env_names_are_refused_by_the_crd_as_by_the_operator() {
    use vramfit_api::reserved_env::{LLAMACPP_FLAG_ENV, PLANNED_ENV, reserved_env};
    let mut names: Vec<String> = PLANNED_ENV
        .iter()
        .chain(&LLAMACPP_FLAG_ENV)
        .map(|n| n.to_string())
        .collect();
    names.extend(
        [
            "VRAMFIT_",
            "VRAMFIT_MODEL",
            "NVIDIA_",
            "NVIDIA_VISIBLE_DEVICES",
            "NVIDIA_DRIVER_CAPABILITIES",
            "CUDA_VISIBLE_DEVICES",
            "HF_HOME",
            "NVIDIA",
            "VRAMFIT",
            "cuda_visible_devices",
            "nvidia_visible_devices",
            "XVRAMFIT_A",
            "CUDA_VISIBLE_DEVICES_X",
            "TORCH_DTYPE2",
            "MY_TORCH_DTYPE",
            "",
            "LLAMA_ARG_HOST",
        ]
        .map(String::from),
    );
    let schema = schema::<InferenceJob>();
    for name in &names {
        let verdict = validate(&schema, &job_with_env(&["HF_HOME", name]), None);
        match reserved_env(name) {
            Some(why) => {
                let message = verdict
                    .expect_err(&format!("{name} is reserved but the CRD admits it"))
                    .to_string();
                assert!(
                    message.contains("pod.env may not set ") && message.contains(why),
                    "{name}: {message}"
                );
            }
            None => assert!(verdict.is_ok(), "{name} is the job's, but: {verdict:?}"),
        }
    }
    let message = rejection(&job_with_env(&[
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
    ]));
    assert!(
        message.contains(
            "spec.pod.env: pod.env may not set NVIDIA_*, CUDA_VISIBLE_DEVICES: it selects GPUs, which only the device plugin assigns"
        ),
        "{message}"
    );
    // An item without a name (the API server refuses it when it builds the pod) is no error here.
    let nameless = job(
        json!({"model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "vllm",
                             "image": "x", "pod": {"env": [{"value": "1"}]}}),
    );
    assert!(validate(&schema, &nameless, None).is_ok());
}

#[test]
fn node_class_capability_must_be_major_dot_minor() {
    let class = |cc: &str| {
        json!({"apiVersion": "vramfit.io/v1alpha1", "kind": "GpuNodeClass", "metadata": {"name": "c"},
               "spec": {"gpu": {"product": "NVIDIA A10G", "count": 1, "memoryMib": 23028, "computeCapability": cc}}})
    };
    assert!(validate(&schema::<GpuNodeClass>(), &class("8.6"), None).is_ok());
    let err = validate(&schema::<GpuNodeClass>(), &class("ampere"), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("computeCapability must look like 8.6"),
        "{err}"
    );
}

#[test]
fn a_served_transformers_or_custom_job_names_its_health_route() {
    let served = |runtime: &str, serve: Value| {
        job(
            json!({"model": {"preset": "internvl3-8b"}, "runtime": runtime, "image": "x", "serve": serve}),
        )
    };
    let schema = schema::<InferenceJob>();
    assert!(validate(&schema, &served("vllm", json!({})), None).is_ok());
    for runtime in ["transformers", "custom"] {
        assert!(
            rejection(&served(runtime, json!({"port": 8080})))
                .contains("serve.healthPath is required for runtime transformers and custom"),
            "{runtime}"
        );
        assert!(
            validate(
                &schema,
                &served(runtime, json!({"healthPath": "/ready"})),
                None
            )
            .is_ok()
        );
    }
}

/// `kubectl scale` writes `spec.serve.replicas` through the scale subresource: on a batch job
/// that would turn it into a server, which the API server refuses (a transition rule).
#[test]
fn a_batch_job_never_becomes_a_served_job_nor_the_reverse() {
    let batch = job(
        json!({"model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "vllm", "image": "x"}),
    );
    let mut scaled = batch.clone();
    scaled["spec"]["serve"] = json!({"replicas": 3});
    let schema = schema::<InferenceJob>();
    let refused = validate(&schema, &scaled, Some(&batch))
        .expect_err("a batch job turned server")
        .to_string();
    assert!(
        refused.contains("a batch job cannot become a served job"),
        "{refused}"
    );
    let served_back = validate(&schema, &batch, Some(&scaled))
        .expect_err("a server turned batch job")
        .to_string();
    assert!(served_back.contains("nor a served job a batch job"));
    // Scaling a served job, or changing a batch job, is fine; so is creating either.
    let mut more = scaled.clone();
    more["spec"]["serve"]["replicas"] = json!(5);
    assert!(validate(&schema, &more, Some(&scaled)).is_ok());
    assert!(validate(&schema, &scaled, None).is_ok());
    let mut bigger = batch.clone();
    bigger["spec"]["batchSize"] = json!(8);
    assert!(validate(&schema, &bigger, Some(&batch)).is_ok());
}

/// A tuning job trains and ends; a served job never ends: a job is one or the other.
#[test]
fn a_job_is_never_both_served_and_a_tuning_job() {
    let schema = schema::<InferenceJob>();
    let with = |extra: Value| {
        let mut spec = json!({"model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "transformers", "image": "x"});
        for (key, value) in extra.as_object().unwrap() {
            spec[key] = value.clone();
        }
        job(spec)
    };
    let both = with(json!({"tuning": {}, "serve": {"healthPath": "/health"}}));
    assert!(
        rejection(&both)
            .contains("a job is either served (spec.serve) or fine-tuned (spec.tuning), not both"),
        "{}",
        rejection(&both)
    );
    assert!(validate(&schema, &with(json!({"tuning": {}})), None).is_ok());
    assert!(
        validate(
            &schema,
            &with(json!({"serve": {"healthPath": "/health"}})),
            None
        )
        .is_ok()
    );
}

/// A job that may span nodes may be served (each replica a group), and its name starts its
/// group's headless Service's name (a DNS-1035 label).
#[test]
fn a_group_job_may_be_served_and_its_name_is_a_service_name() {
    let schema = schema::<InferenceJob>();
    let spec = |extra: Value| {
        let mut spec = json!({"model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "vllm", "image": "x"});
        for (key, value) in extra.as_object().unwrap() {
            spec[key] = value.clone();
        }
        spec
    };
    // A served job's replicas may be groups (each replica a group of pods).
    let served = job(spec(json!({"gpus": {"maxNodes": 2}, "serve": {}})));
    assert!(validate(&schema, &served, None).is_ok());
    let mut dotted = job(spec(json!({"gpus": {"maxNodes": 2}})));
    dotted["metadata"]["name"] = json!("7b-chat.v2");
    assert!(
        rejection(&dotted)
            .contains("metadata.name of a job with gpus.maxNodes above 1 must be a DNS-1035 label"),
        "{}",
        rejection(&dotted)
    );
    // One node: any name, served or not; several: a batch job with a DNS-1035 name.
    let mut one = job(spec(json!({"gpus": {"maxNodes": 1}, "serve": {}})));
    assert!(validate(&schema, &one, None).is_ok());
    one["spec"] = spec(json!({}));
    one["metadata"]["name"] = json!("7b-chat.v2");
    assert!(validate(&schema, &one, None).is_ok());
    assert!(validate(&schema, &job(spec(json!({"gpus": {"maxNodes": 16}}))), None).is_ok());
}
