//! `vramfit plan` output for every example on every built-in class, reviewed by hand and
//! committed. After an intended change: `UPDATE_GOLDEN=1 cargo test -p vramfit-cli --test golden_plans`,
//! then review the diff.
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn plan_output(example: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_vramfit"))
        .current_dir(root())
        .args(["plan", "--all"])
        .arg(example.strip_prefix(root()).unwrap_or(example))
        .output()
        .expect("vramfit runs");
    assert!(
        out.status.success(),
        "{}: {}",
        example.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn plans_for_every_example_match_the_reviewed_output() {
    let mut examples: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .expect("examples/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 5);
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut stale = Vec::new();
    for example in examples {
        let name = example.file_stem().unwrap().to_string_lossy().to_string();
        let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(format!("{name}.txt"));
        let actual = plan_output(&example);
        if update {
            std::fs::write(&golden, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if expected != actual {
            stale.push(format!(
                "{name}:\n--- expected\n{expected}\n--- actual\n{actual}"
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "plan output changed (UPDATE_GOLDEN=1 to accept):\n{}",
        stale.join("\n")
    );
}

/// `vramfit plan EXAMPLE --class CLASS -o json`, parsed.
fn plan_json(example: &str, class: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_vramfit"))
        .current_dir(root())
        .args(["plan", example, "--class", class, "-o", "json"])
        .output()
        .expect("vramfit runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

#[test]
fn json_output_of_one_class_carries_env_and_args() {
    let report = plan_json("examples/mistral-vllm.yaml", "a100-80gb-x8");
    assert_eq!(report["chosen"], "a100-80gb-x8");
    let class = &report["classes"][0];
    assert_eq!(class["plan"]["dtype"], "bfloat16");
    assert_eq!(class["plan"]["gpuCount"], 1);
    let args: Vec<&str> = class["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.windows(2).any(|w| w == ["--max-model-len", "8192"]),
        "{args:?}"
    );
    let env = class["env"].as_array().unwrap();
    assert!(
        env.iter()
            .any(|e| e["name"] == "TORCH_DTYPE" && e["value"] == "bfloat16")
    );
}

#[test]
fn node_class_manifests_override_and_add_classes() {
    let out = Command::new(env!("CARGO_BIN_EXE_vramfit"))
        .current_dir(root())
        .args(["plan", "examples/mistral-economy.yaml", "-o", "json"])
        .args(["--node-classes", "examples/node-classes/fleet.yaml"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let class = |name: &str| {
        report["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["nodeClass"] == name)
            .unwrap_or_else(|| panic!("no class {name} in {report}"))
            .clone()
    };
    // allowJobs: false closes a class; a price override changes the plan's price.
    assert!(
        class("t4-x1")["cannotRun"]
            .as_str()
            .unwrap()
            .contains("allowJobs: false")
    );
    assert_eq!(class("a10g-x1")["plan"]["hourlyPriceCents"], 45);
    // A class defined from scratch is planned like the others, and economy picks the cheapest.
    assert_eq!(class("onprem-a6000-x2")["plan"]["dtype"], "bfloat16");
    assert_eq!(report["chosen"], "onprem-a6000-x2");
}

#[test]
fn a_tuning_plan_carries_the_training_env_and_its_memory_part_by_part() {
    let report = plan_json("examples/mistral-qlora.yaml", "a10g-x1");
    let class = &report["classes"][0];
    let tuning = &class["plan"]["tuning"];
    assert_eq!(tuning["method"], "qlora");
    // 7 fits, but 4 × 8 makes the asked effective batch of 32 exactly.
    assert_eq!(tuning["batch"], "4×8");
    assert_eq!(tuning["effectiveBatch"], 32);
    let memory = &tuning["memory"];
    let parts: u64 = [
        "weightsMib",
        "trainableMib",
        "optimizerMib",
        "activationsMib",
        "logitsMib",
        "runtimeMib",
    ]
    .iter()
    .map(|k| memory[k].as_u64().unwrap())
    .sum();
    assert_eq!(memory["neededMib"].as_u64(), Some(parts));
    assert!(memory["bufferMib"].as_u64().unwrap() > 0);
    let env = class["env"].as_array().unwrap();
    let value = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
    };
    assert_eq!(value("VRAMFIT_MICRO_BATCH"), Some("4"));
    assert_eq!(value("VRAMFIT_GRADIENT_ACCUMULATION"), Some("8"));
    assert_eq!(value("VRAMFIT_LORA_TARGET_MODULES"), Some("all-linear"));
    assert_eq!(value("VRAMFIT_TF32"), Some("true"));
    let table = Command::new(env!("CARGO_BIN_EXE_vramfit"))
        .current_dir(root())
        .args(["plan", "examples/mistral-qlora.yaml"])
        .output()
        .unwrap();
    let text = String::from_utf8(table.stdout).unwrap();
    for column in [
        "WEIGHTS",
        "ADAPT/GRAD",
        "OPTIM",
        "ACTIV",
        "LOGITS",
        "BUFFER",
        "MB×ACC",
        "CKPT",
    ] {
        assert!(text.contains(column), "{column} in\n{text}");
    }
}

/// A served GGUF chatbot on an 8 GB Pascal card: every layer on the GPU with a q4_0 KV cache
/// at 32k context, llama.cpp flash attention on Pascal, and where llama-server listens.
#[test]
fn a_served_chatbot_on_a_pascal_card_shows_its_plan_and_its_listening_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_vramfit"))
        .current_dir(root())
        .args(["plan", "examples/chatbot-gguf-pascal.yaml", "-o", "json"])
        .args(["--node-classes", "examples/node-classes/pascal.yaml"])
        .args(["--class", "p4000-x1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["serve"]["replicas"], 2);
    assert_eq!(report["serve"]["port"], 8080);
    assert_eq!(report["serve"]["healthPath"], "/health");
    let plan = &report["classes"][0]["plan"];
    assert_eq!(
        plan["llamaCpp"]["gpuLayers"],
        plan["llamaCpp"]["totalLayers"]
    );
    assert_eq!(plan["llamaCpp"]["kvCacheType"], "q4_0");
    assert_eq!(plan["flashAttention"], true);
    // llama.cpp serves as many sequences at once as the job's batch: its KV cache is
    // allocated for them up front.
    assert_eq!(plan["concurrency"], 1);
    let args: Vec<&str> = report["classes"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.ends_with(&["--host", "0.0.0.0", "--port", "8080", "--metrics"]),
        "{args:?}"
    );
    assert!(
        args.windows(2).any(|w| w == ["--ctx-size", "32768"]),
        "{args:?}"
    );
    assert!(
        args.windows(2).any(|w| w == ["--parallel", "1"]),
        "{args:?}"
    );
}

#[test]
fn json_output_carries_a_group_plan() {
    let report = plan_json("examples/llama-3.1-405b-vllm-nodes.yaml", "h100-80gb-x8");
    let plan = &report["classes"][0]["plan"];
    assert_eq!(plan["gpuCount"], 8);
    let group = &plan["group"];
    assert_eq!(group["nodes"], 2);
    assert_eq!(group["engine"], "vllmRay");
    assert_eq!(group["tensorParallelSize"], 8);
    assert_eq!(group["pipelineParallelSize"], 2);
    assert_eq!(group["port"], 6379);
    assert!(
        group["why"]
            .as_str()
            .unwrap()
            .contains("1 node cannot hold it")
    );
    // Every node's GPUs in the price: $6.50 × 8 GPUs × 2 nodes.
    assert_eq!(plan["hourlyPriceCents"], 650 * 16);
    // A one-node plan carries no group.
    let one = plan_json("examples/llama-3.1-405b-vllm-nodes.yaml", "h200-x8");
    assert!(one["classes"][0]["plan"].get("group").is_none());
}

#[test]
fn a_gguf_chatbot_on_8_gb_cards_runs_over_rpc_on_two_nodes() {
    let out = Command::new(env!("CARGO_BIN_EXE_vramfit"))
        .current_dir(root())
        .args([
            "plan",
            "examples/chatbot-gguf-rpc-nodes.yaml",
            "--node-classes",
            "examples/node-classes/pascal.yaml",
            "--class",
            "p4000-x1",
            "-o",
            "json",
        ])
        .output()
        .expect("vramfit runs");
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let plan = &report["classes"][0]["plan"];
    let group = &plan["group"];
    assert_eq!(group["engine"], "llamaCppRpc");
    assert_eq!(group["nodes"], 2);
    // Leader first; the split in llama.cpp's device order (the worker's RPC device first).
    assert_eq!(group["layersPerNode"], serde_json::json!([16, 17]));
    assert_eq!(group["tensorSplit"], serde_json::json!([17, 16]));
    assert_eq!(plan["llamaCpp"]["gpuLayers"], 33);
    let why = group["why"].as_str().unwrap();
    assert!(why.contains("faster than partial offload"), "{why}");
    assert!(why.contains("tokens/s with 22/33 on one node"), "{why}");
}
