//! Controller tests of fine-tuning jobs (docs/tuning.md): the pod carries the training env and
//! the tuning volumes; an out-of-memory failure halves the micro-batch (the accumulation
//! doubles); a NaN loss retries in the other dtype; a training result lands in status.
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use serde_json::Value;
use vramfit_api::{InferenceJob, InferenceJobSpec, Phase};

use crate::batch::tests::{
    assert_bfloat16_bad_output_stepped_down, assert_metrics, condition, created_pod,
    first_reconcile, run, with_status,
};
use crate::context::Context;
use crate::fixtures;
use crate::stores::StoreWriters;
use crate::verifier::{ApiServerVerifier, test_context};

const QLORA: &str = r#"{
    "model": {"preset": "mistral-7b-instruct-v0.3"},
    "runtime": "transformers",
    "image": "ghcr.io/example/trainer:1",
    "maxAttempts": 5,
    "pod": {"volumes": [{"name": "train", "persistentVolumeClaim": {"claimName": "train"}},
                        {"name": "adapters", "persistentVolumeClaim": {"claimName": "adapters"}}]},
    "tuning": {"method": "qlora", "sequenceLength": 512, "effectiveBatch": 32,
               "dataVolume": "train", "outputVolume": "adapters"}
}"#;
const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
const NAN_BF16: &str = r#"vramfit.io/v1 {"kind":"LossCheckFailed","check":"non-finite-loss","loss":"nan","step":12,"dtype":"bfloat16"}"#;
const NAN_FP16: &str = r#"vramfit.io/v1 {"kind":"LossCheckFailed","check":"non-finite-loss","loss":"inf","step":3,"dtype":"float16"}"#;
const TRAINED: &str = r#"vramfit.io/v1 {"kind":"TrainingResult","steps":100,"tokens":1638400,"seconds":3600,"tokensPerSecond":455.1,"finalLoss":1.25,"peakGpuMemoryMib":[17000]}"#;

fn qlora_spec() -> InferenceJobSpec {
    fixtures::spec_from_json(QLORA)
}

/// The QLoRA job's first attempt on `node` (and the GpuNodeClasses `setup` adds), whose pod
/// then ended with `exit_code` and `message`: the context, the verifier, the job with the
/// first status, the first pod.
async fn first_attempt_ended(
    node: Node,
    setup: impl FnOnce(&mut StoreWriters),
    exit_code: i32,
    message: &str,
) -> (Arc<Context>, ApiServerVerifier, InferenceJob, Value) {
    let (ctx, mut api, mut writers) = test_context();
    let node_name = node.metadata.name.clone().unwrap_or_default();
    writers.apply_node(node);
    setup(&mut writers);
    writers.mark_ready();
    let job = fixtures::job("chat", qlora_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    let reason = if exit_code == 0 { "Completed" } else { "Error" };
    let ended = if exit_code == 0 {
        fixtures::as_succeeded_with_message(created_pod(&pod), &node_name, message)
    } else {
        fixtures::as_failed(created_pod(&pod), &node_name, reason, exit_code, message)
    };
    writers.apply_pod(ended);
    (ctx, api, with_status(&job, &status), pod)
}

fn a10g() -> Node {
    fixtures::gpu_node("a-1", "a10g", 4, 4)
}

fn env(pod: &Value, name: &str) -> String {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == name))
        .and_then(|e| e["value"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_tuning_pod_gets_the_training_env_and_its_volumes_and_status_the_plan() {
    let (ctx, mut api, mut writers) = test_context();
    writers.apply_node(a10g());
    writers.mark_ready();
    let job = fixtures::job("chat", qlora_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    for (name, value) in [
        ("VRAMFIT_TUNING_METHOD", "qlora"),
        ("VRAMFIT_MICRO_BATCH", "4"),
        ("VRAMFIT_GRADIENT_ACCUMULATION", "8"),
        ("VRAMFIT_EFFECTIVE_BATCH", "32"),
        ("VRAMFIT_GRADIENT_CHECKPOINTING", "true"),
        ("VRAMFIT_OPTIMIZER", "paged_adamw_8bit"),
        ("VRAMFIT_SEQUENCE_LENGTH", "512"),
        ("VRAMFIT_QUANTIZATION", "nf4"),
        ("VRAMFIT_DATA_DIR", "/vramfit/data"),
        ("VRAMFIT_OUTPUT_DIR", "/vramfit/output"),
        ("TORCH_DTYPE", "bfloat16"),
    ] {
        assert_eq!(env(&pod, name), value, "{name}");
    }
    let mounts = &pod["spec"]["containers"][0]["volumeMounts"];
    assert_eq!(mounts[0]["mountPath"], "/vramfit/data");
    assert_eq!(mounts[0]["readOnly"], true);
    assert_eq!(mounts[1]["name"], "adapters");
    let t = &status["status"]["plan"]["tuning"];
    assert_eq!(t["method"], "qlora");
    assert_eq!(t["batch"], "4×8");
    assert_eq!(t["gradientCheckpointing"], true);
    assert!(t["memory"]["logitsMib"].as_u64().unwrap() > 0);
    assert_metrics(
        &ctx,
        &["vramfit_tuning_pods_total{node_class=\"a10g-x4\",method=\"qlora\"} 1"],
    );
}

#[tokio::test]
async fn out_of_memory_halves_the_micro_batch_and_doubles_the_accumulation() {
    let (ctx, mut api, job, _) = first_attempt_ended(a10g(), |_| {}, 1, OOM).await;
    run(&ctx, &job, &mut api, async |api| {
        let next = api.pod_create("chat-2").await;
        assert_eq!(env(&next, "VRAMFIT_MICRO_BATCH"), "2");
        assert_eq!(env(&next, "VRAMFIT_GRADIENT_ACCUMULATION"), "16");
        assert_eq!(env(&next, "VRAMFIT_EFFECTIVE_BATCH"), "32");
        let body = api.status_apply(&job).await;
        let s = &body["status"];
        assert_eq!(s["attempts"][0]["outcome"], "OutOfMemory");
        assert_eq!(
            s["attempts"][1]["step"],
            "micro-batch 4 → 2, gradient accumulation 8 → 16 (the effective batch is kept)"
        );
        assert_eq!(s["fallback"]["tuning"]["maxMicroBatch"], 2);
        assert_eq!(s["plan"]["tuning"]["batch"], "2×16");
        api.events("chat", &["OutOfMemory", "SteppedDown", "PodCreated"])
            .await;
    })
    .await;
    assert_metrics(&ctx, &["vramfit_fallbacks_total{reason=\"micro_batch\"} 1"]);
}

#[tokio::test]
async fn a_nan_loss_in_bfloat16_retries_in_float16() {
    let (ctx, mut api, job, _) = first_attempt_ended(a10g(), |_| {}, 3, NAN_BF16).await;
    run(&ctx, &job, &mut api, async |api| {
        let next = api.pod_create("chat-2").await;
        assert_eq!(env(&next, "TORCH_DTYPE"), "float16");
        assert_eq!(
            env(&next, "VRAMFIT_MICRO_BATCH"),
            "4",
            "one change at a time"
        );
        let body = api.status_apply(&job).await;
        let s = &body["status"];
        assert_eq!(s["attempts"][0]["outcome"], "BadOutput");
        assert_eq!(
            s["attempts"][0]["message"],
            "loss check non-finite-loss failed: the loss became nan at step 12 in bfloat16"
        );
        assert_eq!(
            s["attempts"][1]["step"],
            "float16 with loss scaling instead of bfloat16"
        );
        api.events("chat", &["BadOutput", "SteppedDown", "PodCreated"])
            .await;
    })
    .await;
    assert_bfloat16_bad_output_stepped_down(&ctx);
}

#[tokio::test]
async fn a_nan_loss_in_float16_with_no_bfloat16_class_fails_with_the_report() {
    let v100 = fixtures::gpu_node("v-1", "v100", 4, 4);
    let (ctx, mut api, job, pod) = first_attempt_ended(v100, |_| {}, 3, NAN_FP16).await;
    assert_eq!(env(&pod, "TORCH_DTYPE"), "float16");
    run(&ctx, &job, &mut api, async |api| {
        let body = api.status_apply(&job).await;
        assert_eq!(body["status"]["phase"], Phase::Failed.as_str());
        let ready = condition(&body, "Ready");
        assert_eq!(ready["reason"], "BadOutput");
        let message = ready["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("diverged in float16 and no other dtype is left")
                && message.contains("the loss became inf at step 3"),
            "{message}"
        );
        api.events("chat", &["BadOutput", "Failed"]).await;
    })
    .await;
}

#[tokio::test]
async fn a_training_result_lands_in_status_with_tokens_per_second() {
    let price = |w: &mut StoreWriters| {
        w.apply_node_class((*fixtures::gpu_node_class_override("a10g-x4", 60)).clone());
    };
    let (ctx, mut api, job, _) = first_attempt_ended(a10g(), price, 0, TRAINED).await;
    run(&ctx, &job, &mut api, async |api| {
        let body = api.status_apply(&job).await;
        let r = &body["status"]["result"];
        assert_eq!(r["items"], 1_638_400);
        assert_eq!(r["steps"], 100);
        assert_eq!(r["tokensPerSecond"], 455.1);
        assert_eq!(r["finalLoss"], 1.25);
        // 60 cents an hour (one GPU) for an hour over 1.6384 M tokens.
        assert_eq!(r["costPerMillionTokensCents"], 36.62);
        api.event("chat", "Succeeded").await;
    })
    .await;
    let metrics = ctx.metrics.encode().unwrap();
    assert!(
        metrics.contains("vramfit_training_tokens_total{node_class=\"a10g-x4\"} 1638400"),
        "{metrics}"
    );
    assert!(!metrics.contains("vramfit_items_total{node_class=\"a10g-x4\"} 1638400"));
}
