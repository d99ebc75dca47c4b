//! What a newcomer reads besides the plan tables of every example (golden_plans.rs): one
//! llama.cpp class with its pod's env, the same as JSON, a served llama.cpp job's class, the
//! classes with a fleet's admin settings, and a dry-run comparison written to a folder. Reviewed by hand and committed in
//! `tests/golden/views/`; after an intended change:
//! `UPDATE_GOLDEN=1 cargo test -p vramfit-cli --test golden_views`, then review the diff.
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
mod common;

use std::path::{Path, PathBuf};

use common::vramfit;
use serde_json::Value;

const LLAMA_70B: &str = "examples/llama70b-gguf-long-context.yaml";
const FLEET: &str = "examples/node-classes/fleet.yaml";
const CHATBOT: &str = "examples/chatbot-gguf-pascal.yaml";
const PASCAL: &str = "examples/node-classes/pascal.yaml";

fn stdout_of(args: &[&str]) -> String {
    let out = vramfit(args);
    assert!(
        out.status.success(),
        "vramfit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Compares `actual` with the committed `tests/golden/views/<name>` (or rewrites it).
fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/views")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "{name} changed (UPDATE_GOLDEN=1 to accept):\n--- expected\n{expected}\n--- actual\n{actual}"
    );
}

/// A fresh folder under the system's temporary directory.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramfit-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_llamacpp_class_shows_what_llamacpp_uses_and_one_budget() {
    let table = stdout_of(&["plan", LLAMA_70B, "--class", "t4-x1"]);
    golden("llama70b-t4-x1.txt", &table);
    // The row: no dtype, quantization, allocator conf or memory fraction for llama.cpp.
    let row = table
        .lines()
        .find(|l| l.starts_with("t4-x1 "))
        .expect("a row for t4-x1");
    for setting in ["float16", "none", "max_split_size_mb", "0.90", "0.80"] {
        assert!(!row.contains(setting), "{setting} in {row}");
    }
    // NEED/GPU, USABLE/GPU and the reasons' budget are one set of figures.
    assert!(row.contains("11.6 GiB  12.0 GiB"), "{row}");
    assert!(
        table.contains("budget 12.0 GiB per GPU (80% of 15.0 GiB)"),
        "{table}"
    );
    // The pod's env: only what describes a llama.cpp plan.
    for absent in [
        "VRAMFIT_MEMORY_FRACTION",
        "VRAMFIT_DTYPE",
        "VRAMFIT_QUANTIZATION",
        "TORCH_DTYPE",
        "PYTORCH_CUDA_ALLOC_CONF",
    ] {
        assert!(
            !table.contains(&format!("{absent}=")),
            "{absent} in\n{table}"
        );
    }
    assert!(table.contains("VRAMFIT_USABLE_MEMORY_MIB=12288"), "{table}");
}

#[test]
fn json_gives_the_env_as_a_pod_does() {
    let text = stdout_of(&["plan", LLAMA_70B, "--class", "t4-x1", "-o", "json"]);
    golden("llama70b-t4-x1.json", &text);
    let report: Value = serde_json::from_str(&text).unwrap();
    let class = &report["classes"][0];
    let env = class["env"].as_array().unwrap();
    assert!(!env.is_empty());
    for var in env {
        let entry = var.as_object().unwrap();
        let keys: Vec<&str> = entry.keys().map(String::as_str).collect();
        assert_eq!(keys, ["name", "value"], "{var}");
        assert!(var["name"].is_string() && var["value"].is_string(), "{var}");
    }
    let value = |name: &str| {
        env.iter()
            .find(|v| v["name"] == name)
            .map(|v| v["value"].as_str().unwrap().to_string())
    };
    assert_eq!(value("VRAMFIT_LLAMACPP_GPU_LAYERS").as_deref(), Some("21"));
    assert_eq!(value("VRAMFIT_MEMORY_FRACTION"), None);
    // The plan in status agrees with its budget: 80 % of VRAM, not the class's 0.90.
    let plan = &class["plan"];
    assert_eq!(plan["memoryFractionPercent"], 80);
    let memory = &plan["memory"];
    assert_eq!(
        memory["usablePerGpuMib"].as_u64().unwrap(),
        memory["vramPerGpuMib"].as_u64().unwrap() * 80 / 100
    );
    assert!(memory["neededPerGpuMib"].as_u64() <= memory["usablePerGpuMib"].as_u64());
}

#[test]
fn a_served_llamacpp_class_shows_where_it_listens_and_one_budget() {
    let args = [
        "plan",
        CHATBOT,
        "--node-classes",
        PASCAL,
        "--class",
        "p4000-x1",
    ];
    let table = stdout_of(&args);
    golden("chatbot-p4000-x1.txt", &table);
    assert!(
        table.contains("Served: 2 replica(s) behind Service chatbot (ClusterIP, port 8080)"),
        "{table}"
    );
    let row = table
        .lines()
        .find(|l| l.starts_with("p4000-x1 "))
        .expect("a row for p4000-x1");
    let cells: Vec<&str> = row.split_whitespace().collect();
    // GPUS, then DTYPE, QUANT, FLASH, ALLOC_CONF, FRAC, TILES: what llama.cpp does not use is '-'.
    let gpus = cells.iter().position(|c| *c == "GiB").unwrap() + 1;
    assert_eq!(
        cells[gpus + 1..gpus + 7],
        ["-", "-", "on", "-", "-", "-"],
        "{row}"
    );
    assert!(row.contains("5.7 GiB   6.3 GiB"), "{row}");
    assert!(
        table.contains("budget 6.3 GiB per GPU (80% of 7.9 GiB), 500 MiB of it"),
        "{table}"
    );
    assert!(table.contains("    VRAMFIT_PORT=8080\n"), "{table}");
    assert!(!table.contains("VRAMFIT_MEMORY_FRACTION="), "{table}");
    assert!(
        table.contains("runtime args: --n-gpu-layers 33 ")
            && table.contains(" --host 0.0.0.0 --port 8080 --metrics\n"),
        "{table}"
    );

    let json: Value =
        serde_json::from_str(&stdout_of(&[&args[..], &["-o", "json"]].concat())).unwrap();
    assert_eq!(json["serve"]["port"], 8080);
    assert_eq!(
        json["serve"]["listenArgs"],
        serde_json::json!(["--host", "0.0.0.0", "--port", "8080", "--metrics"])
    );
    let env = json["classes"][0]["env"].as_array().unwrap();
    assert!(
        env.contains(&serde_json::json!({"name": "VRAMFIT_PORT", "value": "8080"})),
        "{env:?}"
    );
    assert!(env.iter().all(|v| v["name"] != "VRAMFIT_MEMORY_FRACTION"));
}

#[test]
fn classes_show_what_an_admin_set() {
    let table = stdout_of(&["classes", "--node-classes", FLEET]);
    golden("classes-fleet.txt", &table);
    let t4 = table.lines().find(|l| l.starts_with("t4-x1 ")).unwrap();
    assert!(t4.contains(" closed "), "{t4}");
    assert!(
        table.contains("t4-x1: allowJobs: false (vramfit places no job here)"),
        "{table}"
    );
    assert!(
        table.contains(
            "onprem-a6000-x2: runtimeClassName: nvidia; allowedPriorityClasses: [batch-low, batch-high]"
        ),
        "{table}"
    );
    // Without the fleet's manifests every class is open and nothing is listed as set.
    let builtin = stdout_of(&["classes"]);
    assert!(!builtin.contains("closed") && !builtin.contains("Set by GpuNodeClass"));
    let json: Value = serde_json::from_str(&stdout_of(&[
        "classes",
        "--node-classes",
        FLEET,
        "-o",
        "json",
    ]))
    .unwrap();
    let class = |name: &str| {
        json.as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(class("t4-x1")["allowJobs"], false);
    assert_eq!(class("onprem-a6000-x2")["runtimeClassName"], "nvidia");
}

#[test]
fn a_dry_run_writes_the_planned_comparison_into_the_output_dir() {
    let dir = scratch("dry-run");
    let dir_arg = dir.to_string_lossy().to_string();
    let args = [
        "compare",
        LLAMA_70B,
        "--classes",
        "a10g-x4,h100-80gb-x8",
        "--dry-run",
    ];
    let printed = stdout_of(&args);
    let out = vramfit(&[&args[..], &["--output-dir", &dir_arg]].concat());
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for file in ["plan.txt", "jobs.yaml"] {
        assert!(
            stderr.contains(&format!("wrote {}", dir.join(file).display())),
            "{stderr}"
        );
    }
    let plan = std::fs::read_to_string(dir.join("plan.txt")).unwrap();
    assert_eq!(plan, printed, "plan.txt is what the dry run prints");
    golden("compare-llama70b-dry-run.txt", &plan);
    let jobs = std::fs::read_to_string(dir.join("jobs.yaml")).unwrap();
    assert_eq!(jobs.matches("kind: InferenceJob").count(), 4, "{jobs}");
    assert!(!dir.join("report.json").exists(), "no figures to report");
    let _ = std::fs::remove_dir_all(&dir);

    // A folder that cannot be made: one line that says which and why, exit code 2.
    let blocker = scratch("dry-run-blocked");
    std::fs::write(&blocker, "a file").unwrap();
    let inside = blocker.join("report").to_string_lossy().to_string();
    let out = vramfit(&[&args[..], &["--output-dir", &inside]].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("vramfit: error: ") && stderr.contains(&inside),
        "{stderr}"
    );
    let _ = std::fs::remove_file(&blocker);
}

const LLAMA_405B: &str = "examples/llama-3.1-405b-vllm-nodes.yaml";
const CHATBOT_RPC: &str = "examples/chatbot-gguf-rpc-nodes.yaml";

#[test]
fn a_vllm_group_shows_what_each_rank_runs() {
    let table = stdout_of(&["plan", LLAMA_405B, "--class", "h100-80gb-x8"]);
    golden("llama405b-h100-x8.txt", &table);
    let ranks = &table[table.find("  ranks (").expect("the ranks")..];
    // The leader: vLLM's multi-node script, then vllm serve with every flag of the plan and
    // the group's pipeline parallel on Ray.
    for line in [
        "    rank 0 (leader), pod llama-405b-1-0:",
        "multi-node-serving.sh leader --ray_port=6379 --ray_cluster_size=2 --ray_init_timeout=1800 && exec vllm serve \"$@\"'",
        "      RAY_ADDRESS=auto",
    ] {
        assert!(ranks.contains(line), "{line:?} in {ranks}");
    }
    let leader_args = ranks
        .lines()
        .find(|l| l.starts_with("      args: "))
        .expect("the leader's args");
    for flag in [
        "--model meta-llama/Llama-3.1-405B-Instruct",
        "--tensor-parallel-size 8",
        "--pipeline-parallel-size 2",
        "--distributed-executor-backend ray",
    ] {
        assert!(leader_args.contains(flag), "{flag} in {leader_args}");
    }
    // The worker joins the leader's Ray head.
    for line in [
        "    rank 1 (worker), pod llama-405b-1-1:",
        "until ray start --address=llama-405b-1-0.llama-405b-1.default:6379 --block",
        "      LWS_WORKER_INDEX=1",
    ] {
        assert!(ranks.contains(line), "{line:?} in {ranks}");
    }
}

#[test]
fn a_llamacpp_group_shows_the_leaders_rpc_and_split_as_json_too() {
    let args = [
        "plan",
        CHATBOT_RPC,
        "--node-classes",
        PASCAL,
        "--class",
        "p4000-x1",
        "-o",
        "json",
    ];
    let report: Value = serde_json::from_str(&stdout_of(&args)).unwrap();
    let class = &report["classes"][0];
    let ranks = class["ranks"].as_array().expect("a group's ranks");
    let nodes = class["plan"]["group"]["nodes"].as_u64().unwrap();
    assert_eq!(ranks.len() as u64, nodes);
    let leader = &ranks[0];
    assert_eq!(leader["rank"], 0);
    assert_eq!(leader["pod"], "chatbot-rpc-1-0");
    assert!(leader.get("command").is_none(), "the image's entrypoint");
    let words: Vec<&str> = leader["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    // The job's args, the plan's flags, then the group's.
    assert_eq!(
        words[..2],
        ["--model", "/models/Mistral-7B-Instruct-v0.3-Q8_0.gguf"]
    );
    let rpc = words.iter().position(|w| *w == "--rpc").expect("--rpc");
    assert_eq!(
        words[rpc + 1].split(',').count() as u64,
        nodes - 1,
        "one rpc-server per worker GPU"
    );
    assert!(words.contains(&"--tensor-split"), "{words:?}");
    assert!(words.contains(&"--n-gpu-layers"), "{words:?}");
    for worker in &ranks[1..] {
        let command = worker["command"].as_array().unwrap();
        assert_eq!(command[0], "rpc-server");
        assert!(worker["args"].as_array().unwrap().is_empty());
    }
    // A plan of one pod has no ranks.
    let one = ["plan", LLAMA_70B, "--class", "t4-x1", "-o", "json"];
    let report: Value = serde_json::from_str(&stdout_of(&one)).unwrap();
    assert!(report["classes"][0].get("ranks").is_none());
}
