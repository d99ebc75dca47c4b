//! `vramfit plan` admits what the API server admits and refuses what it refuses: the CRD's
//! bounds and rules, read from the generated schema, applied to the CLI's input; golden
//! messages and exit codes (2 bad input, 3 no class can run the job, never a panic's 101).
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use vramfit_api::schema_check::openapi_schema;
use vramfit_api::{GpuNodeClass, InferenceJob};
use vramfit_cli::validate::{admit, cel_rules};

fn vramfit(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vramfit"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The CLI may stop reading early (a file past the size limit): a broken pipe is fine.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim_end().to_string()
}

const HEAD: &str = "apiVersion: vramfit.io/v1alpha1\nkind: InferenceJob\nmetadata: {name: j}\n";

fn job(spec: &str) -> String {
    format!("{HEAD}spec: {spec}\n")
}

const MISTRAL: &str = "model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x";

#[test]
fn refusals_name_the_field_as_golden_lines_with_exit_2() {
    let refused = "vramfit: error: -: the API server would refuse this InferenceJob: ";
    let cases = [
        (
            "contextLength: 0",
            "spec.contextLength: 0 is below the minimum 128",
        ),
        ("batchSize: -5", "spec.batchSize: -5 is below the minimum 1"),
        (
            "batchSize: 4000000000",
            "spec.batchSize: 4000000000 is above the maximum 1024",
        ),
        (
            "gpus: {max: 65}",
            "spec.gpus.max: 65 is above the maximum 64",
        ),
        (
            "contxtLength: 8192",
            "spec.contxtLength: unknown field; did you mean contextLength?",
        ),
        (
            "gpus: {max: 65, mni: 1}",
            "spec.gpus.mni: unknown field; did you mean min?",
        ),
        (
            "pod: {securityContext: {runAsUsr: 1000}}",
            "spec.pod.securityContext.runAsUsr: unknown field; did you mean runAsUser?",
        ),
        (
            "args: [\"--port\", 8000]",
            "spec.args[1]: expected a string, found an integer",
        ),
        (
            "pod: {env: [{name: CUDA_VISIBLE_DEVICES, value: '0'}]}",
            "spec.pod.env: pod.env may not set NVIDIA_*, CUDA_VISIBLE_DEVICES: it selects GPUs, which only the device plugin assigns",
        ),
        (
            "gpus: {min: 4, max: 2}",
            "spec: gpus.min must not exceed gpus.max",
        ),
    ];
    for (extra, message) in cases {
        let out = vramfit(&["plan", "-"], &job(&format!("{{{MISTRAL}, {extra}}}")));
        assert_eq!(out.status.code(), Some(2), "{extra}: {}", stderr(&out));
        assert_eq!(stderr(&out), format!("{refused}{message}"), "{extra}");
        assert!(out.stdout.is_empty());
    }
    let parameters = job(
        "{model: {parameters: 1e15, layers: 32, hiddenSize: 4096, attentionHeads: 32}, runtime: vllm, image: x}",
    );
    assert_eq!(
        stderr(&vramfit(&["plan", "-"], &parameters)),
        format!(
            "{refused}spec.model.parameters: 1000000000000000 is above the maximum 10000000000000"
        )
    );
    let env: Vec<String> = (0..129)
        .map(|i| format!("{{name: V{i}, value: x}}"))
        .collect();
    let many = job(&format!(
        "{{{MISTRAL}, pod: {{env: [{}]}}}}",
        env.join(", ")
    ));
    assert_eq!(
        stderr(&vramfit(&["plan", "-"], &many)),
        format!("{refused}spec.pod.env: 129 items, more than the maximum 128")
    );
    let classes = "apiVersion: vramfit.io/v1alpha1\nkind: GpuNodeClass\nmetadata: {name: a10g-x1}\nspec: {hourlyPriceCentsPerGpu: 1000001, allowJob: false}\n";
    let path = std::env::temp_dir().join(format!("vramfit-admission-{}.yaml", std::process::id()));
    std::fs::write(&path, classes).unwrap();
    let out = vramfit(
        &["plan", "-", "--node-classes", path.to_str().unwrap()],
        &job(&format!("{{{MISTRAL}}}")),
    );
    std::fs::remove_file(&path).unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "vramfit: error: {}: the API server would refuse this GpuNodeClass: spec.allowJob: unknown field; did you mean allowJobs?",
            path.display()
        )
    );
}

#[test]
fn a_served_job_whose_name_is_no_service_name_is_refused_with_exit_2() {
    let served = |name: &str| {
        format!(
            "apiVersion: vramfit.io/v1alpha1\nkind: InferenceJob\nmetadata: {{name: {name}}}\nspec: {{{MISTRAL}, serve: {{}}}}\n"
        )
    };
    let refusal = "vramfit: error: -: the API server would refuse this InferenceJob: \
        metadata.name of a served job must be a DNS-1035 label (at most 63 lowercase letters, \
        digits and '-', starting with a letter and ending with a letter or digit): its Service \
        is named after it";
    let too_long = format!("a{}", "b".repeat(63));
    for name in ["7b-chat.v2", "7b-chat", too_long.as_str()] {
        let out = vramfit(&["plan", "-"], &served(name));
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stderr(&out));
        assert_eq!(stderr(&out), refusal, "{name}");
        assert!(out.stdout.is_empty());
    }
    // A batch job may keep such a name (no Service is made for it), and a served job's name
    // of 63 characters is a Service name.
    let batch =
        "apiVersion: vramfit.io/v1alpha1\nkind: InferenceJob\nmetadata: {name: 7b-chat.v2}\n";
    let out = vramfit(&["plan", "-"], &format!("{batch}spec: {{{MISTRAL}}}\n"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let longest = format!("a{}", "b".repeat(62));
    let out = vramfit(&["plan", "-"], &served(&longest));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_group_job_whose_name_is_no_service_name_is_refused_with_exit_2_and_a_served_one_is_admitted() {
    let job = |name: &str, extra: &str| {
        format!(
            "apiVersion: vramfit.io/v1alpha1\nkind: InferenceJob\nmetadata: {{name: {name}}}\nspec: {{{MISTRAL}, gpus: {{maxNodes: 2}}{extra}}}\n"
        )
    };
    let out = vramfit(&["plan", "-"], &job("7b-chat.v2", ""));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "vramfit: error: -: the API server would refuse this InferenceJob: metadata.name of a job \
         with gpus.maxNodes above 1 must be a DNS-1035 label (lowercase letters, digits and '-', \
         starting with a letter and ending with a letter or digit): its group's headless Service \
         is named after it"
    );
    // A served job may span nodes: each replica is a group.
    let out = vramfit(&["plan", "-"], &job("chat", ", serve: {}"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Such a name is fine on one node, and a DNS-1035 name on several.
    let one = "apiVersion: vramfit.io/v1alpha1\nkind: InferenceJob\nmetadata: {name: 7b-chat.v2}\n";
    let out = vramfit(&["plan", "-"], &format!("{one}spec: {{{MISTRAL}}}\n"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = vramfit(&["plan", "-"], &job("chat", ""));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn too_large_or_too_deep_input_is_refused_before_it_is_parsed() {
    let deep = job(&format!(
        "{{{MISTRAL}, args: {}{}}}",
        "[".repeat(20_000),
        "]".repeat(20_000)
    ));
    let out = vramfit(&["plan", "-"], &deep);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "vramfit: error: -: nested more than 64 levels deep at line 4; a manifest nests about ten"
    );
    let mut big = job(&format!("{{{MISTRAL}}}"));
    big.push_str(&format!("# {}\n", "x".repeat(3 * 1024 * 1024)));
    let out = vramfit(&["plan", "-"], &big);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "vramfit: error: -: larger than 3 MiB, the API server's limit for one request; not read further"
    );
}

#[test]
fn no_class_can_run_the_job_exits_3_in_every_format() {
    // bfloat16 pinned, and only classes below compute capability 8.0 allowed.
    let bf16 = job(&format!(
        "{{{MISTRAL}, dtype: bfloat16, nodeClasses: {{allowed: [t4-x1, v100-16gb-x4]}}}}"
    ));
    for format in ["table", "json", "yaml"] {
        let out = vramfit(&["plan", "-", "-o", format], &bf16);
        assert_eq!(out.status.code(), Some(3), "{format}: {}", stderr(&out));
        assert_eq!(
            stderr(&out),
            "vramfit: no class can run -: each class says why"
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            stdout.contains("bfloat16 is pinned but compute capability 7.5"),
            "{stdout}"
        );
        if format == "json" {
            let report: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(report.get("chosen"), None, "{report}");
        }
    }
    let out = vramfit(&["plan", "-", "--class", "t4-x1"], &bf16);
    assert_eq!(out.status.code(), Some(3));
    let runs = vramfit(
        &["plan", "-", "-o", "json"],
        &job(&format!("{{{MISTRAL}}}")),
    );
    assert_eq!(runs.status.code(), Some(0), "{}", stderr(&runs));
}

/// The review's jobs panicked `vramfit plan` (exit 101): a schema-valid one whose KV cache
/// passes 2^64 bytes now plans to "cannot run" everywhere (3), one beyond the schema is refused (2).
#[test]
fn jobs_whose_sizes_overflow_never_panic() {
    let huge_kv = job(
        "{runtime: llamacpp, image: x, contextLength: 1048576, batchSize: 1024, model: {parameters: 1000000, layers: 1024, hiddenSize: 1048576, attentionHeads: 4096, kvHeads: 4096, headDim: 4096, ggufFileBytes: 1, contextLimit: 10485760}}",
    );
    let out = vramfit(&["plan", "-", "-o", "json"], &huge_kv);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("not one layer fits: 18874368.5 GiB for one layer"),
        "{stdout}"
    );
    let huge_file = job(
        "{runtime: llamacpp, image: x, model: {parameters: 1000000, layers: 1, hiddenSize: 64, attentionHeads: 1, ggufFileBytes: 9223372036854775000}}",
    );
    let out = vramfit(&["plan", "-"], &huge_file);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// Every integer of both specs at its bounds, one past them and at the types' extremes, through
/// the binary with every built-in and an admin class: 0, 2 or 3, never a panic.
#[test]
fn extreme_numbers_in_jobs_and_classes_exit_0_2_or_3() {
    let class_path =
        std::env::temp_dir().join(format!("vramfit-extreme-class-{}.yaml", std::process::id()));
    for (kind, schema) in [
        ("job", openapi_schema::<InferenceJob>()),
        ("class", openapi_schema::<GpuNodeClass>()),
    ] {
        for bound in vramfit_api::schema_check::integer_fields(&schema) {
            if !bound.path.starts_with("spec.") || bound.path.contains(['[', '*']) {
                continue;
            }
            let min = bound.minimum.unwrap_or(0.0) as i64;
            let max = bound.maximum.unwrap_or(0.0) as i64;
            for value in [json!(min), json!(max), json!(max + 1), json!(u64::MAX)] {
                let mut job_object = base_job();
                job_object["spec"]["runtime"] = json!("llamacpp");
                job_object["spec"]["model"] = json!({"preset": "llama-3.1-70b-instruct-q4_k_m",
                    "kvHeads": 8, "headDim": 4096, "contextLimit": 10485760});
                let mut class_object = json!({
                    "apiVersion": "vramfit.io/v1alpha1", "kind": "GpuNodeClass",
                    "metadata": {"name": "extreme"},
                    "spec": {"nodeSelector": {"pool": "x"},
                             "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 64, "memoryMib": 4194304, "computeCapability": "9.0"}},
                });
                let target = if kind == "job" {
                    &mut job_object
                } else {
                    &mut class_object
                };
                set(target, &bound.path, value.clone());
                std::fs::write(&class_path, class_object.to_string()).unwrap();
                let out = vramfit(
                    &[
                        "plan",
                        "-",
                        "-o",
                        "json",
                        "--node-classes",
                        class_path.to_str().unwrap(),
                    ],
                    &job_object.to_string(),
                );
                let code = out.status.code();
                assert!(
                    matches!(code, Some(0 | 2 | 3)),
                    "{kind} {} = {value}: exit {code:?}: {}",
                    bound.path,
                    stderr(&out)
                );
            }
        }
    }
    let _ = std::fs::remove_file(&class_path);
}

fn base_job() -> Value {
    json!({"apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob", "metadata": {"name": "j"},
           "spec": {"model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "vllm", "image": "x"}})
}

fn base_class() -> Value {
    json!({"apiVersion": "vramfit.io/v1alpha1", "kind": "GpuNodeClass", "metadata": {"name": "c"},
           "spec": {}})
}

/// Sets `value` at a path of the kind `spec.pod.env[].name` or `spec.pod.labels.*`, making the
/// objects, one-item lists and one-entry maps on the way.
fn set(object: &mut Value, path: &str, value: Value) {
    let mut at = object;
    let segments: Vec<&str> = path.split('.').collect();
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        let (key, list) = match segment.strip_suffix("[]") {
            Some(key) => (key, true),
            None => (*segment, false),
        };
        let key = if key == "*" { "k" } else { key };
        if last && !list {
            at[key] = value;
            return;
        }
        if list {
            if !at[key].is_array() {
                at[key] = json!([{}]);
            }
            if last {
                at[key][0] = value;
                return;
            }
            at = &mut at[key][0];
        } else {
            if !at[key].is_object() {
                at[key] = json!({});
            }
            at = &mut at[key];
        }
    }
}

/// A value of `n` for a bound keyword at `schema`: `n` characters, items or entries, or `n`.
fn of_size(keyword: &str, schema: &Value, n: i64) -> Value {
    let count = usize::try_from(n.max(0)).unwrap();
    match keyword {
        "minimum" | "maximum" => json!(n),
        "minLength" | "maxLength" => json!("a".repeat(count)),
        "minItems" | "maxItems" => {
            let item = |i: usize| match &schema["items"] {
                s if s.get("enum").is_some() => s["enum"][0].clone(),
                s if s["type"] == "string" => json!(format!("a{i}")),
                s if s["properties"].get("name").is_some() => json!({"name": format!("N{i}")}),
                _ => json!({}),
            };
            Value::Array((0..count).map(item).collect())
        }
        _ => Value::Object((0..count).map(|i| (format!("k{i}"), json!("v"))).collect()),
    }
}

/// Every bound of `schema` under `spec`: `(path, keyword, limit, schema node)`.
fn bounds(schema: &Value, path: &str, out: &mut Vec<(String, &'static str, i64, Value)>) {
    for keyword in [
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "maxProperties",
    ] {
        if let Some(limit) = schema.get(keyword).and_then(Value::as_f64)
            && path.starts_with("spec.")
        {
            out.push((path.to_string(), keyword, limit as i64, schema.clone()));
        }
    }
    for (key, child) in schema["properties"].as_object().into_iter().flatten() {
        let child_path = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        bounds(child, &child_path, out);
    }
    if schema.get("items").is_some() {
        bounds(&schema["items"], &format!("{path}[]"), out);
    }
    if schema["additionalProperties"].is_object() {
        bounds(&schema["additionalProperties"], &format!("{path}.*"), out);
    }
}

/// The reported path of a field: `spec.args[0]` for `spec.args[]`, `spec.pod.labels.k` for
/// `spec.pod.labels.*`.
fn reported(path: &str) -> String {
    path.replace("[]", "[0]").replace(".*", ".k")
}

/// For every bound of both CRDs (read from the generated schemas), a value at the limit is
/// admitted and one past it refused naming the field: the CLI's bounds are the CRD's.
#[test]
fn the_clis_bounds_are_the_crds_bounds() {
    let mut checked = 0;
    for (schema, base) in [
        (openapi_schema::<InferenceJob>(), base_job()),
        (openapi_schema::<GpuNodeClass>(), base_class()),
    ] {
        let mut found = Vec::new();
        bounds(&schema, "", &mut found);
        for (path, keyword, limit, node) in found {
            let past = if keyword.starts_with("min") {
                limit - 1
            } else {
                limit + 1
            };
            let field = reported(&path);
            for (n, admitted) in [(limit, true), (past, false)] {
                if n < 0 && keyword != "minimum" {
                    continue; // no list or string is shorter than empty
                }
                let mut object = base.clone();
                set(&mut object, &path, of_size(keyword, &node, n));
                let problems = if object["kind"] == "InferenceJob" {
                    admit::<InferenceJob>(&mut object)
                } else {
                    admit::<GpuNodeClass>(&mut object)
                };
                let named = problems
                    .iter()
                    .any(|p| p.starts_with(&format!("{field}: ")));
                assert_eq!(
                    !named, admitted,
                    "{path} {keyword} {limit}: at {n}: {problems:?}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 80, "only {checked} cases");
}

/// Each CEL rule of both CRDs, shown refusing a manifest with its message. A rule added to a
/// CRD without an example here fails this test: the CLI evaluates every rule, and this says so.
#[test]
fn every_cel_rule_of_both_crds_refuses_its_example() {
    let spec = |extra: Value| {
        let mut object = base_job();
        for (key, value) in extra.as_object().unwrap() {
            object["spec"][key] = value.clone();
        }
        object
    };
    let mut job_examples: Vec<(&str, Value, &str)> = vec![
        (
            "spec",
            spec(json!({"gpus": {"min": 4, "max": 2}})),
            "gpus.min must not exceed gpus.max",
        ),
        (
            "spec",
            spec(
                json!({"runtime": "llamacpp", "model": {"parameters": 7000000000u64, "layers": 32,
                        "hiddenSize": 4096, "attentionHeads": 32}}),
            ),
            "a llamacpp job needs a GGUF model",
        ),
        (
            "spec",
            spec(json!({"runtime": "custom", "serve": {"port": 8080}})),
            "serve.healthPath is required for runtime transformers and custom",
        ),
        (
            "spec",
            spec(
                json!({"runtime": "custom", "serve": {"healthPath": "/h", "autoscaling": {"maxReplicas": 3}}}),
            ),
            "serve.autoscaling.metric is required for runtime transformers and custom",
        ),
        (
            "spec.serve.autoscaling",
            spec(
                json!({"runtime": "vllm", "serve": {"autoscaling": {"minReplicas": 4, "maxReplicas": 3}}}),
            ),
            "autoscaling.maxReplicas must be at least minReplicas",
        ),
        (
            "spec.model",
            spec(json!({"model": {"parameters": 7000000000u64}})),
            "model needs a preset, huggingFace, or parameters, layers, hiddenSize and attentionHeads",
        ),
        (
            "spec.model.huggingFace",
            spec(json!({"model": {"huggingFace": {"repo": "a/b/c"}}})),
            "huggingFace.repo must be owner/name",
        ),
        (
            "spec.model.huggingFace",
            spec(json!({"model": {"huggingFace": {"repo": "a/b", "revision": ".."}}})),
            "huggingFace.revision must not be '.' or '..'",
        ),
        (
            "spec.model.huggingFace",
            spec(json!({"model": {"huggingFace": {"repo": "a/b", "file": "gguf/../../etc/x"}}})),
            "huggingFace.file must not have a '.' or '..' part",
        ),
        (
            "spec.llamaCpp.gpuLayers",
            spec(json!({"llamaCpp": {"gpuLayers": 1026}})),
            "gpuLayers must be `auto` or a number of layers from 0 to 1025",
        ),
        (
            "spec.pod.env",
            spec(json!({"pod": {"env": [{"name": "VRAMFIT_MODEL"}]}})),
            "pod.env may not set VRAMFIT_*, TORCH_DTYPE",
        ),
        (
            "spec.pod.env",
            spec(json!({"pod": {"env": [{"name": "LLAMA_ARG_CTX_SIZE"}]}})),
            "pod.env may not set LLAMA_ARG_N_GPU_LAYERS, LLAMA_ARG_CTX_SIZE",
        ),
        (
            "spec.pod.env",
            spec(json!({"pod": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES"}]}})),
            "pod.env may not set NVIDIA_*, CUDA_VISIBLE_DEVICES: it selects GPUs",
        ),
        (
            "spec.pod.annotations",
            spec(json!({"pod": {"annotations": {"vramfit.io/plan": "{}"}}})),
            "vramfit sets it on every pod",
        ),
        (
            "spec.pod.annotations",
            spec(json!({"pod": {"annotations": {
                "container.apparmor.security.beta.kubernetes.io/inference": "unconfined"}}})),
            "it would change the pod's security",
        ),
        (
            "spec.pod.labels",
            spec(json!({"pod": {"labels": {"app.kubernetes.io/instance": "other"}}})),
            "vramfit sets it on every pod",
        ),
        (
            "spec.pod.securityContext",
            spec(json!({"pod": {"securityContext": {"runAsUser": 0, "runAsNonRoot": true}}})),
            "runAsNonRoot true contradicts runAsUser 0",
        ),
        (
            "spec",
            spec(json!({"tuning": {}})),
            "a tuning job runs a training program: runtime transformers or custom",
        ),
        (
            "spec",
            spec(json!({"runtime": "transformers", "tuning": {}, "allowedQuantizations": ["nf4"]})),
            "a tuning job chooses its method with tuning.method",
        ),
        (
            "spec",
            spec(json!({"runtime": "transformers", "tuning": {}, "contextLength": 512})),
            "a tuning job sets tuning.sequenceLength, not contextLength",
        ),
        (
            "spec",
            spec(
                json!({"runtime": "transformers", "tuning": {}, "serve": {"healthPath": "/health"}}),
            ),
            "a job is either served (spec.serve) or fine-tuned (spec.tuning), not both",
        ),
        (
            "spec.tuning",
            spec(json!({"runtime": "custom", "tuning": {"method": "full", "lora": {"rank": 8}}})),
            "tuning.lora is for methods lora, qlora and auto, not full",
        ),
        (
            "spec.tuning",
            spec(json!({"runtime": "custom", "tuning": {"dataVolume": "v", "outputVolume": "v"}})),
            "tuning.dataVolume and tuning.outputVolume must differ",
        ),
    ];
    let mut dotted_served = spec(json!({"serve": {}}));
    dotted_served["metadata"]["name"] = json!("7b-chat.v2");
    job_examples.push((
        "",
        dotted_served,
        "metadata.name of a served job must be a DNS-1035 label",
    ));
    let mut dotted_group = spec(json!({"gpus": {"maxNodes": 2}}));
    dotted_group["metadata"]["name"] = json!("7b-chat.v2");
    job_examples.push((
        "",
        dotted_group,
        "metadata.name of a job with gpus.maxNodes above 1 must be a DNS-1035 label",
    ));
    let class_examples: Vec<(&str, Value, &str)> = vec![(
        "spec.gpu",
        json!({"apiVersion": "vramfit.io/v1alpha1", "kind": "GpuNodeClass", "metadata": {"name": "c"},
               "spec": {"gpu": {"product": "X", "count": 1, "memoryMib": 2048, "computeCapability": "ampere"}}}),
        "computeCapability must look like 8.6",
    )];
    for (rules, examples, is_job) in [
        (cel_rules::<InferenceJob>(), job_examples, true),
        (cel_rules::<GpuNodeClass>(), class_examples, false),
    ] {
        for (path, rule) in &rules {
            let at_path = rules.iter().filter(|(p, _)| p == path).count();
            let shown = examples.iter().filter(|(p, _, _)| p == path).count();
            assert_eq!(
                at_path, shown,
                "the rules at {path} ({rule}) need one example each"
            );
        }
        for (path, mut object, message) in examples {
            let problems = if is_job {
                admit::<InferenceJob>(&mut object)
            } else {
                admit::<GpuNodeClass>(&mut object)
            };
            // A rule at the root (on the whole object) is reported without a field path.
            let prefix = if path.is_empty() {
                String::new()
            } else {
                format!("{path}: ")
            };
            assert!(
                problems
                    .iter()
                    .any(|p| p.starts_with(&prefix) && p.contains(message)),
                "{path}: expected {message:?} in {problems:?}"
            );
        }
    }
}
