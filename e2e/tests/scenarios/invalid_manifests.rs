//! Invalid InferenceJobs are rejected by the API server with the CRD's own messages.
use anyhow::{Result, ensure};
use serde_json::{Value, json};
use vramfit_e2e::Suite;

/// The API server rejects invalid jobs with the CRD's own messages, and stores nothing.
pub async fn invalid_manifests(s: &mut Suite) -> Result<()> {
    let base = s.own_job("placeholder", 3);
    let case = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        v["metadata"]["name"] = json!(name);
        edit(&mut v);
        v
    };
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            case("bad-gpus", &|v| {
                v["spec"]["gpus"] = json!({"min": 4, "max": 2})
            }),
            vec!["gpus.min must not exceed gpus.max"],
        ),
        (
            case("bad-llamacpp", &|v| {
                v["spec"]["runtime"] = json!("llamacpp");
                v["spec"]["model"] = json!({"parameters": 7000000000u64, "layers": 32, "hiddenSize": 4096, "attentionHeads": 32});
            }),
            vec!["a llamacpp job needs a GGUF model: a GGUF preset or model.ggufFileBytes"],
        ),
        (
            case("bad-runtime", &|v| v["spec"]["runtime"] = json!("tensorrt")),
            vec!["Unsupported value", "tensorrt"],
        ),
        (
            case("bad-model", &|v| {
                v["spec"]["model"] = json!({"name": "something"})
            }),
            vec![
                "model needs a preset, huggingFace, or parameters, layers, hiddenSize and attentionHeads",
            ],
        ),
        (
            case("bad-gpu-layers", &|v| {
                v["spec"]["runtime"] = json!("llamacpp");
                v["spec"]["model"] = json!({"preset": "llama-3.1-70b-instruct-q4_k_m"});
                v["spec"]["llamaCpp"] = json!({"gpuLayers": "lots"});
            }),
            vec!["gpuLayers must be `auto` or a number of layers from 0 to 1025"],
        ),
        // Reserved env names: refused by the CRD's own rule, with the operator's reason.
        (
            case("gpu-selecting-env", &|v| {
                v["spec"]["pod"] = json!({"env": [{"name": "HF_HOME", "value": "/c"},
                                                  {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]});
            }),
            vec![
                "spec.pod.env",
                "pod.env may not set NVIDIA_*, CUDA_VISIBLE_DEVICES: it selects GPUs, which only the device plugin assigns",
            ],
        ),
        (
            case("planned-env", &|v| {
                v["spec"]["pod"] = json!({"env": [{"name": "TORCH_DTYPE", "value": "float32"}]});
            }),
            vec![
                "pod.env may not set VRAMFIT_*, TORCH_DTYPE",
                "vramfit plans it from the node class",
            ],
        ),
        (
            case("huge-gguf", &|v| {
                v["spec"]["runtime"] = json!("llamacpp");
                v["spec"]["model"] = json!({"preset": "llama-3.1-70b-instruct-q4_k_m",
                                            "ggufFileBytes": 9223372036854775000u64});
            }),
            vec![
                "spec.model.ggufFileBytes",
                "should be less than or equal to 40000000000000",
            ],
        ),
        // Pod keys that are vramfit's, or that would change the pod's security: from 1.30 the
        // API server turns the AppArmor annotation into the container's appArmorProfile.
        (
            case("unconfined-apparmor", &|v| {
                v["spec"]["pod"] = json!({"annotations": {
                    "container.apparmor.security.beta.kubernetes.io/inference": "unconfined"}});
            }),
            vec![
                "spec.pod.annotations may not set container.apparmor.security.beta.kubernetes.io/inference",
                "it would change the pod's security",
            ],
        ),
        (
            case("vramfit-label", &|v| {
                v["spec"]["pod"] =
                    json!({"labels": {"team": "a", "vramfit.io/node-class": "h100-x8"}});
            }),
            vec!["spec.pod.labels may not set vramfit.io/node-class: vramfit sets it on every pod"],
        ),
        // A tuning job trains and ends: it is never a served job, and never a serving runtime's.
        (
            case("served-tuning", &|v| {
                strip_inference_fields(v);
                v["spec"]["tuning"] = json!({"method": "lora"});
                v["spec"]["serve"] = json!({"replicas": 2, "healthPath": "/health"});
            }),
            vec!["a job is either served (spec.serve) or fine-tuned (spec.tuning), not both"],
        ),
        (
            case("vllm-tuning", &|v| {
                strip_inference_fields(v);
                v["spec"]["runtime"] = json!("vllm");
                v["spec"]["tuning"] = json!({});
            }),
            vec!["a tuning job runs a training program: runtime transformers or custom"],
        ),
        // A served job's Service is named after it: a name that is no Service name (a dot,
        // a leading digit) would run replicas whose Service is refused forever.
        (
            case("7b-chat.v2", &|v| {
                v["spec"]["serve"] = json!({"healthPath": "/health"});
            }),
            vec!["metadata.name of a served job must be a DNS-1035 label"],
        ),
        // The spec's bounds (no job makes the operator's cache grow without limit).
        (
            case("too-many-env", &|v| {
                let env: Vec<Value> = (0..129)
                    .map(|i| json!({"name": format!("V{i}"), "value": "x"}))
                    .collect();
                v["spec"]["pod"] = json!({ "env": env });
            }),
            vec!["spec.pod.env", "must have at most 128 items"],
        ),
        (
            case("huge-env-value", &|v| {
                v["spec"]["pod"] = json!({"env": [{"name": "BLOB", "value": "x".repeat(40_000)}]});
            }),
            vec!["spec.pod.env[0].value", "may not be more than 32768"],
        ),
        (
            case("huge-arg", &|v| {
                v["spec"]["args"] = json!(["y".repeat(5_000)])
            }),
            vec!["spec.args[0]", "may not be more than 4096"],
        ),
    ];
    let mut problems = vec![];
    for (manifest, expected) in cases {
        let name = manifest["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match s.apply_job(manifest).await {
            Ok(_) => problems.push(format!(
                "{name}: the API server accepted it, expected a rejection with {expected:?}"
            )),
            Err(e) => {
                let api = e
                    .chain()
                    .find_map(|c| c.downcast_ref::<kube::Error>())
                    .and_then(|k| match k {
                        kube::Error::Api(status) => Some((status.code, status.message.clone())),
                        _ => None,
                    });
                match api {
                    Some((code, message))
                        if code == 422 && expected.iter().all(|m| message.contains(m)) =>
                    {
                        println!("     {name}: rejected: {message}");
                    }
                    Some((code, message)) => problems.push(format!(
                        "{name}: expected 422 with {expected:?}, saw {code}: {message}"
                    )),
                    None => problems.push(format!("{name}: expected an API rejection, saw {e:#}")),
                }
            }
        }
        if s.jobs().get_opt(&name).await?.is_some() {
            problems.push(format!("{name}: an invalid job was stored"));
        }
    }
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

/// Drops the inference-only fields of the base job, so that a tuning case shows one rule.
fn strip_inference_fields(job: &mut Value) {
    if let Some(spec) = job["spec"].as_object_mut() {
        spec.remove("contextLength");
        spec.remove("allowedQuantizations");
    }
}
