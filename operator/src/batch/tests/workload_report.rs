//! Controller tests for what the workload reports in its termination message
//! (docs/workload-contract.md): garbage output steps to float16, then flash attention off,
//! then fails with the check's numbers; a result summary lands in the status and metrics.
use vramfit_api::Phase;

use crate::batch::tests::{
    a10g_cluster, assert_bfloat16_bad_output_stepped_down, assert_metrics, created_pod,
    first_reconcile, run, with_status,
};
use crate::fixtures;
use crate::verifier::test_context;

const GARBAGE_BF16: &str = r#"vramfit.io/v1 {"kind":"OutputCheckFailed","check":"degenerate-output","pattern":"exclamation","ratio":0.97,"threshold":0.3,"dtype":"bfloat16","samples":8}"#;
const GARBAGE_FP16: &str = r#"vramfit.io/v1 {"kind":"OutputCheckFailed","check":"degenerate-output","pattern":"repeated-token","ratio":0.62,"threshold":0.3,"dtype":"float16","samples":1}"#;
const RESULT: &str = r#"vramfit.io/v1 {"kind":"Result","items":120,"seconds":300,"itemsPerSecond":0.4,"peakGpuMemoryMib":[15000]}"#;

fn env(pod: &serde_json::Value, name: &str) -> serde_json::Value {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == name))
        .map(|e| e["value"].clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn garbage_in_bfloat16_starts_the_next_attempt_in_float16() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    let job = fixtures::job("chat", fixtures::internvl_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    assert_eq!(env(&pod, "TORCH_DTYPE"), "bfloat16");
    writers.apply_pod(fixtures::as_failed(
        created_pod(&pod),
        "a-1",
        "Error",
        3,
        GARBAGE_BF16,
    ));
    let job = with_status(&job, &status);
    run(&ctx, &job, &mut api, async |api| {
        let next = api.pod_create("chat-2").await;
        assert_eq!(env(&next, "TORCH_DTYPE"), "float16");
        assert_eq!(env(&next, "USE_FLASH_ATTN"), "true", "one change at a time");
        let body = api.status_apply(&job).await;
        let s = &body["status"];
        assert_eq!(s["attempts"][0]["outcome"], "BadOutput");
        assert_eq!(
            s["attempts"][0]["message"],
            "output check degenerate-output failed: exclamation at 97% (garbage above 30%) over 8 output(s) in bfloat16"
        );
        assert_eq!(s["attempts"][1]["step"], "float16 instead of bfloat16");
        assert_eq!(s["fallback"]["float16"], true);
        assert_eq!(s["plan"]["dtype"], "float16");
        api.events("chat", &["BadOutput", "SteppedDown", "PodCreated"])
            .await;
    })
    .await;
    assert_bfloat16_bad_output_stepped_down(&ctx);
}

#[tokio::test]
async fn garbage_in_float16_without_flash_attention_fails_with_the_numbers() {
    let (ctx, mut api, mut writers) = test_context();
    writers.apply_node(fixtures::gpu_node("v-1", "v100", 4, 4));
    writers.mark_ready();
    let job = fixtures::job("chat", fixtures::internvl_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    assert_eq!(env(&pod, "TORCH_DTYPE"), "float16");
    assert_eq!(env(&pod, "USE_FLASH_ATTN"), "false");
    writers.apply_pod(fixtures::as_failed(
        created_pod(&pod),
        "v-1",
        "Error",
        3,
        GARBAGE_FP16,
    ));
    let job = with_status(&job, &status);
    run(&ctx, &job, &mut api, async |api| {
        let body = api.status_apply(&job).await;
        let s = &body["status"];
        assert_eq!(s["phase"], Phase::Failed.as_str());
        let ready = s["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(ready["reason"], "BadOutput");
        let message = ready["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("answered garbage in float16 without flash attention")
                && message.contains("repeated-token at 62%"),
            "{message}"
        );
        api.events("chat", &["BadOutput", "Failed"]).await;
    })
    .await;
}

#[tokio::test]
async fn a_result_summary_lands_in_status_with_the_cost_per_item() {
    let (ctx, mut api, mut writers) = test_context();
    a10g_cluster(&mut writers);
    writers.apply_node_class((*fixtures::gpu_node_class_override("a10g-x4", 60)).clone());
    let job = fixtures::job("chat", fixtures::internvl_spec());
    let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
    writers.apply_pod(fixtures::as_succeeded_with_message(
        created_pod(&pod),
        "a-1",
        RESULT,
    ));
    let job = with_status(&job, &status);
    run(&ctx, &job, &mut api, async |api| {
        let body = api.status_apply(&job).await;
        let s = &body["status"];
        assert_eq!(s["phase"], "Succeeded");
        let gpus = s["plan"]["gpuCount"].as_u64().unwrap();
        assert_eq!(s["result"]["items"], 120);
        assert_eq!(s["result"]["itemsPerHour"], 1440.0);
        assert_eq!(s["result"]["peakGpuMemoryMib"], serde_json::json!([15000]));
        // 60 cents per GPU-hour × GPUs, for 300 s, over 120 items.
        let cents = (60 * gpus) as f64 * 300.0 / 3600.0 / 120.0;
        assert_eq!(
            s["result"]["costPerItemCents"].as_f64(),
            Some((cents * 1e4).round() / 1e4)
        );
        api.event("chat", "Succeeded").await;
    })
    .await;
    assert_metrics(
        &ctx,
        &[
            "vramfit_items_total{node_class=\"a10g-x4\"} 120",
            "vramfit_work_seconds_total{node_class=\"a10g-x4\"} 300.0",
            "vramfit_work_cost_cents_total{node_class=\"a10g-x4\"}",
        ],
    );
}

/// Regression: `seconds: 1e306`, or `items` at u64's maximum over a tiny `seconds`, became
/// `null` in required status fields; the API server refused every status write and the job
/// never finished. The figures are bounded by the container's own run time and kept finite.
#[tokio::test]
async fn an_outlandish_report_still_finishes_the_job_with_bounded_figures() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    for (report, seconds, per_hour) in [
        (
            format!(
                r#"vramfit.io/v1 {{"kind":"Result","items":{},"seconds":1e306}}"#,
                u64::MAX
            ),
            301.0,
            // 2^53 items over the container's 301 s.
            ((1u64 << 53) as f64 * 3600.0 / 301.0 * 10.0).round() / 10.0,
        ),
        (
            format!(
                r#"vramfit.io/v1 {{"kind":"Result","items":{},"seconds":1e-300}}"#,
                u64::MAX
            ),
            0.0,
            0.0,
        ),
    ] {
        let (ctx, mut api, mut writers) = test_context();
        a10g_cluster(&mut writers);
        let job = fixtures::job("chat", fixtures::internvl_spec());
        let (pod, status) = first_reconcile(&ctx, &mut api, &job).await;
        let mut ended = fixtures::as_succeeded_with_message(created_pod(&pod), "a-1", &report);
        // The container ran 300 s.
        let finished = Timestamp::now();
        let terminated = ended
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
            .and_then(|c| c[0].state.as_mut())
            .and_then(|s| s.terminated.as_mut())
            .unwrap();
        terminated.started_at = Some(Time(finished - SignedDuration::from_secs(300)));
        terminated.finished_at = Some(Time(finished));
        writers.apply_pod(ended);
        let job = with_status(&job, &status);
        run(&ctx, &job, &mut api, async |api| {
            let body = api.status_apply(&job).await;
            let s = &body["status"];
            assert_eq!(s["phase"], "Succeeded");
            let result = &s["result"];
            assert_eq!(result["items"], 1u64 << 53, "{result}");
            assert_eq!(result["seconds"], seconds, "{result}");
            assert_eq!(result["itemsPerHour"], per_hour, "{result}");
            for field in ["items", "seconds", "itemsPerHour"] {
                assert!(result[field].is_number(), "{field}: {result}");
            }
            api.event("chat", "Succeeded").await;
        })
        .await;
        let metrics = ctx.metrics.encode().unwrap();
        assert!(
            metrics.contains(&format!(
                "vramfit_items_total{{node_class=\"a10g-x4\"}} {}",
                1u64 << 53
            )),
            "{metrics}"
        );
    }
}
