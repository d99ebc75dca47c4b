//! Bad input gets one clear line on stderr and exit code 2: no panic, no backtrace.
// Test and benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::process::Output;

mod support;
use support::vramfit;

fn assert_clean_error(out: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.starts_with("vramfit: error: "), "{stderr}");
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in {stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.stdout.is_empty());
}

const HEAD: &str = "apiVersion: vramfit.io/v1alpha1\nkind: InferenceJob\nmetadata: {name: j}\n";

#[test]
fn missing_file() {
    assert_clean_error(
        &vramfit(&["plan", "/nonexistent/job.yaml"], None),
        "cannot read /nonexistent/job.yaml",
    );
}

#[test]
fn malformed_yaml() {
    assert_clean_error(
        &vramfit(&["plan", "-"], Some("spec: [unclosed")),
        "not a valid InferenceJob manifest",
    );
}

#[test]
fn wrong_kind() {
    let out = vramfit(
        &["plan", "-"],
        Some("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"),
    );
    assert_clean_error(
        &out,
        "expected apiVersion vramfit.io/v1alpha1 and kind InferenceJob, found v1 Pod",
    );
}

#[test]
fn unknown_preset() {
    let out = vramfit(
        &["plan", "-"],
        Some(&format!(
            "{HEAD}spec: {{model: {{preset: gpt-9}}, runtime: vllm, image: x}}"
        )),
    );
    assert_clean_error(&out, "invalid spec: unknown model preset \"gpt-9\"");
}

#[test]
fn mistyped_preset_gets_the_nearest_one() {
    // As a mistyped field gets "did you mean", by the same nearness.
    let out = vramfit(
        &["plan", "-"],
        Some(&format!(
            "{HEAD}spec: {{model: {{preset: mistral-7b-instruct-v03}}, runtime: vllm, image: x}}"
        )),
    );
    assert_clean_error(
        &out,
        "invalid spec: unknown model preset \"mistral-7b-instruct-v03\"; did you mean mistral-7b-instruct-v0.3? known presets: ",
    );
}

#[test]
fn invalid_enum_value() {
    let out = vramfit(
        &["plan", "-"],
        Some(&format!(
            "{HEAD}spec: {{model: {{preset: internvl3-8b}}, runtime: tensorrt, image: x}}"
        )),
    );
    assert_clean_error(
        &out,
        "spec.runtime: \"tensorrt\" is not one of transformers, vllm, llamacpp, custom",
    );
}

#[test]
fn impossible_gpu_count() {
    let out = vramfit(
        &["plan", "-"],
        Some(&format!(
            "{HEAD}spec: {{model: {{preset: internvl3-8b}}, runtime: vllm, image: x, gpus: {{min: 4, max: 2}}}}"
        )),
    );
    assert_clean_error(&out, "spec: gpus.min must not exceed gpus.max");
}

#[test]
fn unknown_class() {
    let out = vramfit(
        &["plan", "-", "--class", "tpu-v5"],
        Some(&format!(
            "{HEAD}spec: {{model: {{preset: internvl3-8b}}, runtime: vllm, image: x}}"
        )),
    );
    assert_clean_error(&out, "unknown node class \"tpu-v5\"; known classes: t4-x1");
}

#[test]
fn bad_gpu_layers() {
    let out = vramfit(
        &["plan", "-"],
        Some(&format!(
            "{HEAD}spec: {{model: {{preset: mistral-7b-instruct-v0.3-q4_k_m}}, runtime: llamacpp, image: x, llamaCpp: {{gpuLayers: many}}}}"
        )),
    );
    assert_clean_error(
        &out,
        "spec.llamaCpp.gpuLayers: gpuLayers must be `auto` or a number of layers from 0 to 1025",
    );
}
