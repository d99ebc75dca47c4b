//! `vramfit plan` on a file that holds a served job with `serve.adapters` and the fine-tuning
//! jobs that write them: each adapter planned from its job's spec, its share shown per class;
//! an adapter the file cannot resolve is bad input (one line, exit code 2).
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
mod support;
use support::vramfit;

fn tuning(name: &str, lora: &str, volume: &str) -> String {
    format!(
        "apiVersion: vramfit.io/v1alpha1
kind: InferenceJob
metadata: {{name: {name}}}
spec:
  model: {{preset: mistral-7b-instruct-v0.3}}
  runtime: transformers
  image: x
  tuning: {{method: lora, outputVolume: out, lora: {lora}}}
  pod:
    volumes:
    - {{name: out, {volume}}}
"
    )
}

const PVC: &str = "persistentVolumeClaim: {claimName: out}";

fn served(runtime: &str, preset: &str) -> String {
    format!(
        "apiVersion: vramfit.io/v1alpha1
kind: InferenceJob
metadata: {{name: chat}}
spec:
  model: {{preset: {preset}}}
  runtime: {runtime}
  image: x
  serve:
    adapters:
    - {{name: sql, tuningJob: {{name: sql-tune}}}}
    - {{name: docs, tuningJob: {{name: docs-tune}}}}
"
    )
}

fn file(parts: &[String]) -> String {
    parts.join("---\n")
}

#[test]
fn each_class_shows_the_adapters_share_and_vllm_gets_its_lora_flags() {
    let manifest = file(&[
        tuning("sql-tune", "{rank: 8}", PVC),
        served("vllm", "mistral-7b-instruct-v0.3"),
        tuning(
            "docs-tune",
            "{rank: 24, targetModules: [q_proj, v_proj]}",
            PVC,
        ),
    ]);
    let out = vramfit(&["plan", "-"], Some(&manifest));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("InferenceJob default/chat"), "{stdout}");
    assert!(
        stdout.contains(
            "LoRA adapters: sql (tuningJob/sql-tune, rank 8), docs (tuningJob/docs-tune, rank 24)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("LORA/GPU"), "{stdout}");
    assert!(
        stdout.contains(
            "LoRA: 2 adapters (sql, docs), buffers for 2 per batch at rank 32 (--max-loras 2, --max-lora-rank 32)"
        ),
        "{stdout}"
    );

    let json = vramfit(
        &["plan", "-", "--class", "a10g-x1", "-o", "json"],
        Some(&manifest),
    );
    assert_eq!(json.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let class = &report["classes"][0];
    let adapters = &class["plan"]["adapters"];
    assert_eq!(adapters["count"], 2);
    assert_eq!(adapters["maxPerBatch"], 2);
    assert_eq!(adapters["maxRank"], 32);
    let share = adapters["memoryMib"].as_u64().unwrap();
    assert!(share > 0);
    assert_eq!(class["plan"]["memory"]["adaptersMib"].as_u64(), Some(share));
    let args: Vec<&str> = class["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let at = args.iter().position(|a| *a == "--lora-modules").unwrap();
    assert_eq!(
        &args[at..at + 3],
        [
            "--lora-modules",
            "sql=/vramfit/adapters/sql",
            "docs=/vramfit/adapters/docs"
        ]
    );
    assert_eq!(report["serve"]["adapters"][1]["rank"], 24);
    let env = class["env"].as_array().unwrap();
    assert!(env.iter().any(|e| e["name"] == "VRAMFIT_ADAPTERS"
        && e["value"] == "sql=/vramfit/adapters/sql,docs=/vramfit/adapters/docs"));
}

#[test]
fn llama_cpp_loads_the_gguf_conversions() {
    let manifest = file(&[
        served("llamacpp", "mistral-7b-instruct-v0.3-q4_k_m"),
        tuning("sql-tune", "{}", PVC),
        tuning("docs-tune", "{}", PVC),
    ]);
    let json = vramfit(
        &["plan", "-", "--class", "a10g-x1", "-o", "json"],
        Some(&manifest),
    );
    assert_eq!(
        json.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let args: Vec<&str> = report["classes"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let at = args.iter().position(|a| *a == "--lora").unwrap();
    assert_eq!(
        &args[at..at + 4],
        [
            "--lora",
            "/vramfit/adapters/sql/adapter_model.gguf",
            "--lora",
            "/vramfit/adapters/docs/adapter_model.gguf"
        ]
    );
}

fn assert_refused(manifest: &str, expected: &str) {
    let out = vramfit(&["plan", "-"], Some(manifest));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("vramfit: error: "), "{stderr}");
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in {stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn an_adapter_the_file_cannot_resolve_is_bad_input() {
    // The second tuning job is not in the file.
    assert_refused(
        &file(&[
            served("vllm", "mistral-7b-instruct-v0.3"),
            tuning("sql-tune", "{}", PVC),
        ]),
        "invalid spec: adapter docs: no InferenceJob docs-tune in this namespace",
    );
    // A tuning output that is gone with its pod.
    assert_refused(
        &file(&[
            served("vllm", "mistral-7b-instruct-v0.3"),
            tuning("sql-tune", "{}", "emptyDir: {}"),
            tuning("docs-tune", "{}", PVC),
        ]),
        "adapter sql: fine-tuning job sql-tune writes to output volume out, an emptyDir",
    );
    // Trained on another model.
    assert_refused(
        &file(&[
            served("vllm", "qwen3-8b"),
            tuning("sql-tune", "{}", PVC),
            tuning("docs-tune", "{}", PVC),
        ]),
        "adapter sql: fine-tuning job sql-tune trained it on mistralai/Mistral-7B-Instruct-v0.3, and this job serves Qwen/Qwen3-8B",
    );
    // Above vLLM's largest rank.
    assert_refused(
        &file(&[
            served("vllm", "mistral-7b-instruct-v0.3"),
            tuning("sql-tune", "{rank: 1024}", PVC),
            tuning("docs-tune", "{}", PVC),
        ]),
        "adapter sql: rank 1024 of fine-tuning job sql-tune is above vLLM's largest --max-lora-rank (512)",
    );
    // Two jobs to plan: which one?
    assert_refused(
        &file(&[
            served("vllm", "mistral-7b-instruct-v0.3"),
            served("vllm", "mistral-7b-instruct-v0.3"),
        ]),
        "expected one InferenceJob, found 2",
    );
}
