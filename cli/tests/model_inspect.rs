//! `vramfit model inspect` on the published configs, a model folder with safetensors files
//! and a GGUF file written here; `vramfit plan --model-from`; bad checkpoints give one line
//! and exit code 2.
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vramfit_api::ModelSpec;
use vramfit_models::test_support;

mod support;
use support::vramfit;

fn configs(repo: &str) -> String {
    format!(
        "{}/../models/testdata/configs/{repo}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// A fresh folder under the system's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramfit-inspect-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn one_line_error(out: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("vramfit: error: "), "{stderr}");
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in {stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(out.stdout.is_empty());
}

/// The `model:` block of the YAML output, as a manifest reads it.
fn model_block(yaml: &str) -> ModelSpec {
    let value: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
    serde_yaml::from_value(value["model"].clone()).unwrap()
}

#[test]
fn a_config_gives_a_model_block_with_the_key_of_each_number() {
    let out = ok(&vramfit(
        &["model", "inspect", &configs("Qwen/Qwen3-30B-A3B")],
        None,
    ));
    let model = model_block(&out);
    assert_eq!(
        (
            model.layers,
            model.hidden_size,
            model.attention_heads,
            model.kv_heads,
            model.head_dim
        ),
        (Some(48), Some(2048), Some(32), Some(4), Some(128))
    );
    assert_eq!(model.parameters, Some(30_532_122_624));
    assert!(out.contains("  layers: 48 "), "{out}");
    let layers = out.lines().find(|l| l.starts_with("  layers:")).unwrap();
    assert!(
        layers.ends_with("# config.json num_hidden_layers"),
        "{layers}"
    );
    assert!(
        out.contains("#   experts: 128 routed per MoE layer, 8 per token"),
        "{out}"
    );
    assert!(out.contains("#   active parameters: 3353032704"), "{out}");

    let json: serde_json::Value = serde_json::from_str(&ok(&vramfit(
        &[
            "model",
            "inspect",
            "-o",
            "json",
            &configs("Qwen/Qwen3-30B-A3B"),
        ],
        None,
    )))
    .unwrap();
    assert_eq!(json["model"]["kvHeads"], 4);
    assert_eq!(
        json["readFrom"]["kvHeads"],
        "config.json num_key_value_heads"
    );
    assert_eq!(json["checkpoint"]["experts"]["routed"]["value"], 128);
}

#[test]
fn a_folder_with_safetensors_gives_exact_weight_bytes() {
    let dir = scratch("folder");
    std::fs::copy(
        format!(
            "{}/config.json",
            configs("meta-llama/Llama-3.2-1B-Instruct")
        ),
        dir.join("config.json"),
    )
    .unwrap();
    let header = r#"{"model.embed_tokens.weight":{"dtype":"BF16","shape":[4,8],"data_offsets":[0,64]},"model.norm.weight":{"dtype":"F32","shape":[8],"data_offsets":[64,96]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    file.extend([0u8; 96]);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
    let out = ok(&vramfit(
        &[
            "model",
            "inspect",
            dir.to_str().unwrap(),
            "--name",
            "meta-llama/Llama-3.2-1B-Instruct",
        ],
        None,
    ));
    let model = model_block(&out);
    assert_eq!(
        model.parameters,
        Some(40),
        "elements of the header's tensors"
    );
    assert_eq!(
        model.name.as_deref(),
        Some("meta-llama/Llama-3.2-1B-Instruct")
    );
    assert!(
        out.contains("# tensor elements summed from model.safetensors"),
        "{out}"
    );
    assert!(
        out.contains("#   weights: 0.00 GB: BF16 0.00 GB, F32 0.00 GB in 2 tensors"),
        "{out}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_folder_whose_index_names_no_tensors_reads_like_one_without_shards() {
    // An empty weight_map: the weights are the index's total_size, the parameters are counted
    // from config.json (not summed to 0), and the block plans.
    let dir = scratch("empty-index");
    std::fs::copy(
        format!("{}/config.json", configs("Qwen/Qwen3-8B")),
        dir.join("config.json"),
    )
    .unwrap();
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        r#"{"metadata":{"total_size":16381470720},"weight_map":{}}"#,
    )
    .unwrap();
    let out = ok(&vramfit(
        &[
            "model",
            "inspect",
            dir.to_str().unwrap(),
            "--name",
            "Qwen/Qwen3-8B",
        ],
        None,
    ));
    let model = model_block(&out);
    assert_eq!(model.parameters, Some(8_190_735_360), "{out}");
    assert!(
        out.contains(
            "#   weights: 16.38 GB in 0 tensors (model.safetensors.index.json metadata.total_size)"
        ),
        "{out}"
    );
    let plan = vramfit(
        &["plan", "-", "--model-from", dir.to_str().unwrap()],
        Some(&format!("{JOB}  model: {{name: Qwen/Qwen3-8B}}\n")),
    );
    ok(&plan);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_pre_quantized_config_gives_a_block_a_manifest_reads() {
    // Nested fields stay on their line (flow style), so the output is still a manifest's YAML.
    let out = ok(&vramfit(
        &[
            "model",
            "inspect",
            &configs("Orion-zhen/QwQ-32B-Preview-AWQ"),
            "--name",
            "q",
        ],
        None,
    ));
    let model = model_block(&out);
    let quantized = model.pre_quantized.expect("preQuantized");
    assert_eq!(
        (
            quantized.method.as_str(),
            quantized.weight_bits,
            quantized.group_size
        ),
        ("awq", 4, Some(128))
    );
    assert!(model.weight_bytes.is_some(), "{out}");
}

#[test]
fn a_gguf_file_gives_its_size_and_blocks() {
    let dir = scratch("gguf");
    let (bytes, _) = test_support::small_llama();
    let path = dir.join("small-Q4_K_M.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let out = ok(&vramfit(
        &["model", "inspect", path.to_str().unwrap()],
        None,
    ));
    let model = model_block(&out);
    assert_eq!(model.name.as_deref(), Some("small-Q4_K_M.gguf"));
    assert_eq!(model.gguf_file_bytes, Some(bytes.len() as u64));
    assert_eq!((model.layers, model.kv_heads), (Some(2), Some(2)));
    assert_eq!(
        model.gguf_layout.map(|l| l.block_bytes.len()),
        Some(2),
        "{out}"
    );
    assert!(
        out.contains("# small-Q4_K_M.gguf llama.block_count"),
        "{out}"
    );
    assert!(out.contains("#   GGUF Q4_K_M: 2 blocks of"), "{out}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_checkpoints_give_one_line_and_exit_2() {
    one_line_error(
        &vramfit(&["model", "inspect", "/nonexistent/model"], None),
        "cannot read /nonexistent/model",
    );
    let dir = scratch("bad");
    std::fs::write(dir.join("config.json"), "{\"num_hidden_layers\": -3}").unwrap();
    one_line_error(
        &vramfit(&["model", "inspect", dir.to_str().unwrap()], None),
        &format!(
            "{}: config.json: num_hidden_layers is -3, expected an integer",
            dir.display()
        ),
    );
    let (bytes, _) = test_support::small_llama();
    let cut = dir.join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    one_line_error(
        &vramfit(&["model", "inspect", cut.to_str().unwrap()], None),
        &format!("{}/cut.gguf: truncated", dir.display()),
    );
    let empty = scratch("empty");
    one_line_error(
        &vramfit(&["model", "inspect", empty.to_str().unwrap()], None),
        "no config.json (not a Hugging Face model folder or repository)",
    );
    one_line_error(
        &vramfit(&["model", "inspect", "--hub", "a/b/c"], None),
        "is not a Hugging Face repository id",
    );
    let out = vramfit(&["model", "inspect"], None);
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(empty).unwrap();
}

#[test]
fn a_config_alone_leaves_the_name_to_the_user() {
    let out = ok(&vramfit(
        &[
            "model",
            "inspect",
            &format!("{}/config.json", configs("google/gemma-3-4b-it")),
        ],
        None,
    ));
    assert!(model_block(&out).name.is_none());
    assert!(
        out.contains("  # name: not read: set model.name (or give --name)"),
        "{out}"
    );
}

const JOB: &str = "apiVersion: vramfit.io/v1alpha1\nkind: InferenceJob\nmetadata: {name: j}\nspec:\n  runtime: vllm\n  image: x\n";

#[test]
fn plan_fills_what_the_manifest_leaves_unset_from_the_checkpoint() {
    let from_checkpoint = ok(&vramfit(
        &[
            "plan",
            "-",
            "-o",
            "json",
            "--model-from",
            &configs("Qwen/Qwen3-8B"),
        ],
        Some(&format!("{JOB}  model: {{name: Qwen/Qwen3-8B}}\n")),
    ));
    // The same numbers typed by hand, as `model inspect` prints them.
    let block = ok(&vramfit(
        &[
            "model",
            "inspect",
            &configs("Qwen/Qwen3-8B"),
            "--name",
            "Qwen/Qwen3-8B",
        ],
        None,
    ));
    let typed = block
        .lines()
        .skip_while(|l| *l != "model:")
        .take_while(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n  ");
    let by_hand = ok(&vramfit(
        &["plan", "-", "-o", "json"],
        Some(&format!("{JOB}  {typed}\n")),
    ));
    assert_eq!(from_checkpoint, by_hand);
    // The manifest's own numbers win.
    let pinned = ok(&vramfit(
        &[
            "plan",
            "-",
            "-o",
            "json",
            "--model-from",
            &configs("Qwen/Qwen3-8B"),
        ],
        Some(&format!(
            "{JOB}  model: {{name: Qwen/Qwen3-8B, contextLimit: 2048}}\n  contextLength: 4096\n"
        )),
    ));
    assert!(
        pinned.contains("capped at the model's limit (asked 4096)"),
        "{pinned}"
    );
    one_line_error(
        &vramfit(
            &["plan", "-", "--model-from", "/nonexistent"],
            Some(&format!("{JOB}  model: {{name: x}}\n")),
        ),
        "cannot read /nonexistent",
    );
}

#[test]
fn a_checkpoint_number_past_a_crd_bound_is_refused_as_the_operator_refuses_it() {
    let dir = scratch("deep");
    let config = std::fs::read_to_string(format!("{}/config.json", configs("Qwen/Qwen3-8B")))
        .unwrap()
        .replace("\"num_hidden_layers\": 36", "\"num_hidden_layers\": 5000");
    std::fs::write(dir.join("config.json"), config).unwrap();
    // The one check of `spec.model` the operator applies to numbers read from the Hub.
    let expected = vramfit_api::schema_check::model_violations(&ModelSpec {
        layers: Some(5000),
        ..Default::default()
    })[0]
        .to_string();
    assert_eq!(
        expected,
        "spec.model.layers: 5000 is above the maximum 1024"
    );
    let out = vramfit(
        &["plan", "-", "--model-from", dir.to_str().unwrap()],
        Some(&format!("{JOB}  model: {{name: deep}}\n")),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&expected), "{stderr}");
}

#[test]
fn a_manifest_naming_a_hub_repository_says_how_to_plan_it() {
    let manifest =
        format!("{JOB}  model: {{huggingFace: {{repo: Qwen/Qwen3-8B, revision: v1}}}}\n");
    // Without --hub the Hub is not read: the error names the flag that reads the repository.
    one_line_error(
        &vramfit(&["plan", "-"], Some(&manifest)),
        "model.huggingFace names Qwen/Qwen3-8B@v1, which the operator reads from the Hub; to plan it here, add --hub Qwen/Qwen3-8B@v1 (or --model-from a local copy)",
    );
    // Given a copy, it plans.
    ok(&vramfit(
        &["plan", "-", "--model-from", &configs("Qwen/Qwen3-8B")],
        Some(&manifest),
    ));
}

#[test]
fn the_hub_is_reached_only_when_asked() {
    // No --hub: no network even with HF_ENDPOINT set to an address that would fail.
    let out = Command::new(env!("CARGO_BIN_EXE_vramfit"))
        .args(["model", "inspect", &configs("Qwen/Qwen3-8B")])
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_vramfit"))
        .args([
            "model",
            "inspect",
            "--hub",
            "org/model",
            "--hub-timeout-seconds",
            "2",
        ])
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .output()
        .unwrap();
    one_line_error(
        &out,
        "org/model@main (http://127.0.0.1:9): config.json: client error (Connect)",
    );
    assert!(Path::new(&configs("Qwen/Qwen3-8B")).exists());
}
