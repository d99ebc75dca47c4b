//! Served LoRA adapters (docs/planning.md, "Served LoRA adapters"): each resolved from the
//! fine-tuning job that wrote it or refused with its reason, planned into every GPU of a
//! replica, and handed to vLLM and llama.cpp as flags they take.
mod common;

use common::{class, plan};
use proptest::prelude::*;
use vramfit_api::adapters::{AdapterSpec, ResolvedAdapter, TuningJobRef};
use vramfit_api::{Fallback, InferenceJob, Plan};
use vramfit_planner::adapters::memory::{
    LoraDims, intermediate_upper_bound, vllm_buffer_bytes, vllm_buffer_bytes_for,
};
use vramfit_planner::adapters::{self, Mode, from_tuning_job};
use vramfit_planner::model_catalog::{ModelShape, PRESETS, resolve};
use vramfit_planner::runtime_contract;
use vramfit_planner::{JobInput, PlanError, SpecError, plan_for_class, resolve_job, workload};

fn object(yaml: &str) -> InferenceJob {
    serde_yaml::from_str(yaml).expect("test manifest parses")
}

/// A fine-tuning job `name` of `model` with `extra` in its `tuning` and the status `status`.
fn tuning_job(name: &str, model: &str, tuning: &str, status: &str) -> InferenceJob {
    object(&format!(
        "apiVersion: vramfit.io/v1alpha1
kind: InferenceJob
metadata: {{name: {name}}}
spec:
  model: {model}
  runtime: transformers
  image: x
  tuning: {tuning}
  pod:
    volumes:
    - {{name: out, persistentVolumeClaim: {{claimName: out}}}}
    - {{name: scratch, emptyDir: {{}}}}
    - {{name: eph, ephemeral: {{volumeClaimTemplate: {{spec: {{accessModes: [ReadWriteOnce]}}}}}}}}
{status}"
    ))
}

const SUCCEEDED: &str = "status:
  phase: Succeeded
  result:
    items: 100
    seconds: 60
    itemsPerHour: 6000
    adapter:
      files: [adapter_config.json, adapter_model.safetensors, adapter_model.gguf]
      rank: 16
      alpha: 32
      targetModules: [q_proj, v_proj]
      bytes: 13631488
";

fn served(runtime: &str, model: &str, serve: &str) -> InferenceJob {
    object(&format!(
        "apiVersion: vramfit.io/v1alpha1
kind: InferenceJob
metadata: {{name: chat}}
spec: {{model: {model}, runtime: {runtime}, image: x, serve: {serve}}}"
    ))
}

fn adapter(name: &str, job: &str) -> AdapterSpec {
    AdapterSpec {
        name: name.into(),
        tuning_job: TuningJobRef { name: job.into() },
    }
}

const MISTRAL: &str = "{preset: mistral-7b-instruct-v0.3}";
const MISTRAL_GGUF: &str = "{preset: mistral-7b-instruct-v0.3-q4_k_m}";
const LORA: &str = "{method: lora, outputVolume: out}";

#[test]
fn an_adapter_resolves_from_a_succeeded_job_with_its_reported_numbers() {
    let t = tuning_job("sql-tune", MISTRAL, LORA, SUCCEEDED);
    let vllm = served(
        "vllm",
        MISTRAL,
        "{adapters: [{name: sql, tuningJob: {name: sql-tune}}]}",
    );
    let a = from_tuning_job(&adapter("sql", "sql-tune"), &vllm, Some(&t), Mode::Cluster).unwrap();
    assert_eq!(
        a,
        ResolvedAdapter {
            name: "sql".into(),
            source: "tuningJob/sql-tune".into(),
            path: "/vramfit/adapters/sql".into(),
            rank: 16,
            alpha: Some(32.0),
            target_modules: vec!["q_proj".into(), "v_proj".into()],
            bytes: Some(13_631_488),
        }
    );
    // llama.cpp loads the GGUF file, and a GGUF preset counts as the model it quantizes.
    let llama = served("llamacpp", MISTRAL_GGUF, "{}");
    let a = from_tuning_job(&adapter("sql", "sql-tune"), &llama, Some(&t), Mode::Cluster).unwrap();
    assert_eq!(a.path, "/vramfit/adapters/sql/adapter_model.gguf");
}

#[test]
fn the_cli_plans_an_adapter_from_the_tuning_jobs_spec() {
    let t = tuning_job(
        "t",
        MISTRAL,
        "{method: qlora, outputVolume: out, lora: {rank: 17}}",
        "",
    );
    let vllm = served("vllm", MISTRAL, "{}");
    let a = from_tuning_job(&adapter("a", "t"), &vllm, Some(&t), Mode::Planned).unwrap();
    assert_eq!((a.rank, a.alpha), (17, Some(34.0)));
    assert_eq!(a.target_modules, ["all-linear"]);
    assert_eq!(a.bytes, None);
    // Not succeeded: the operator waits for it.
    let refused = from_tuning_job(&adapter("a", "t"), &vllm, Some(&t), Mode::Cluster).unwrap_err();
    assert_eq!(refused.reason, "AdapterJobNotSucceeded");
    // Defaults: rank 16, alpha 32.
    let d = tuning_job("t", MISTRAL, "{outputVolume: out}", "");
    let a = from_tuning_job(&adapter("a", "t"), &vllm, Some(&d), Mode::Planned).unwrap();
    assert_eq!((a.rank, a.alpha), (16, Some(32.0)));
}

/// Every refusal of the design, with its reason, and a message that names the adapter and
/// the tuning job.
#[test]
fn refusals_name_their_reason_the_adapter_and_the_job() {
    let vllm = served("vllm", MISTRAL, "{}");
    let llama = served("llamacpp", MISTRAL_GGUF, "{}");
    let not_tuning = object(
        "{apiVersion: vramfit.io/v1alpha1, kind: InferenceJob, metadata: {name: t}, spec: {model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x}}",
    );
    let no_gguf = SUCCEEDED.replace(
        "[adapter_config.json, adapter_model.safetensors, adapter_model.gguf]",
        "[adapter_config.json, adapter_model.safetensors]",
    );
    let no_peft = SUCCEEDED.replace(
        "[adapter_config.json, adapter_model.safetensors, adapter_model.gguf]",
        "[adapter_model.gguf]",
    );
    // Method auto, planned full: the run writes a model.
    let mut auto_that_planned_full = tuning_job("t", MISTRAL, "{outputVolume: out}", SUCCEEDED);
    let full = common::job(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, tuning: {method: full}}",
    );
    let full_plan = plan(&full, "h100-80gb-x8").unwrap();
    assert_eq!(
        full_plan.tuning.as_ref().map(|t| t.method),
        Some(vramfit_api::tuning::TuningMethod::Full)
    );
    auto_that_planned_full.status.as_mut().unwrap().plan = Some(full_plan);
    let cases: Vec<(&str, &InferenceJob, Option<InferenceJob>, Mode)> = vec![
        ("AdapterJobNotFound", &vllm, None, Mode::Cluster),
        ("AdapterJobNotFound", &vllm, None, Mode::Planned),
        ("AdapterNotTuning", &vllm, Some(not_tuning), Mode::Planned),
        (
            "AdapterNotLora",
            &vllm,
            Some(tuning_job(
                "t",
                MISTRAL,
                "{method: full, outputVolume: out}",
                SUCCEEDED,
            )),
            Mode::Cluster,
        ),
        (
            "AdapterNotLora",
            &vllm,
            Some(auto_that_planned_full),
            Mode::Cluster,
        ),
        (
            "AdapterBaseMismatch",
            &vllm,
            Some(tuning_job("t", "{preset: qwen3-8b}", LORA, SUCCEEDED)),
            Mode::Planned,
        ),
        (
            "AdapterBaseMismatch",
            &llama,
            Some(tuning_job(
                "t",
                "{preset: llama-3.1-8b-instruct}",
                LORA,
                SUCCEEDED,
            )),
            Mode::Cluster,
        ),
        (
            "AdapterJobNotSucceeded",
            &vllm,
            Some(tuning_job("t", MISTRAL, LORA, "status: {phase: Running}")),
            Mode::Cluster,
        ),
        (
            "AdapterNotReported",
            &vllm,
            Some(tuning_job(
                "t",
                MISTRAL,
                LORA,
                "status: {phase: Succeeded, result: {items: 1, seconds: 1, itemsPerHour: 1}}",
            )),
            Mode::Cluster,
        ),
        (
            "AdapterNotReported",
            &vllm,
            Some(tuning_job(
                "t",
                MISTRAL,
                LORA,
                &SUCCEEDED.replace("adapter_config.json,", "../etc/passwd,"),
            )),
            Mode::Cluster,
        ),
        (
            "AdapterFileMissing",
            &llama,
            Some(tuning_job("t", MISTRAL, LORA, &no_gguf)),
            Mode::Cluster,
        ),
        (
            "AdapterFileMissing",
            &vllm,
            Some(tuning_job("t", MISTRAL, LORA, &no_peft)),
            Mode::Cluster,
        ),
        (
            "AdapterRankTooHigh",
            &vllm,
            Some(tuning_job(
                "t",
                MISTRAL,
                "{method: lora, outputVolume: out, lora: {rank: 513}}",
                "",
            )),
            Mode::Planned,
        ),
        (
            "AdapterNoOutputVolume",
            &vllm,
            Some(tuning_job("t", MISTRAL, "{method: lora}", SUCCEEDED)),
            Mode::Cluster,
        ),
        (
            "AdapterNoOutputVolume",
            &vllm,
            Some(tuning_job(
                "t",
                MISTRAL,
                "{method: lora, outputVolume: scratch}",
                SUCCEEDED,
            )),
            Mode::Cluster,
        ),
        (
            "AdapterNoOutputVolume",
            &vllm,
            Some(tuning_job(
                "t",
                MISTRAL,
                "{method: lora, outputVolume: eph}",
                "",
            )),
            Mode::Planned,
        ),
        (
            "AdapterNoOutputVolume",
            &vllm,
            Some(tuning_job(
                "t",
                MISTRAL,
                "{method: lora, outputVolume: gone}",
                "",
            )),
            Mode::Planned,
        ),
    ];
    for (reason, served, tuning, mode) in &cases {
        let refusal = from_tuning_job(&adapter("sql", "t"), served, tuning.as_ref(), *mode)
            .expect_err(reason);
        assert_eq!(&refusal.reason, reason, "{}", refusal.message);
        assert!(
            refusal.message.starts_with("adapter sql: ") && refusal.message.contains(" t"),
            "{}",
            refusal.message
        );
        assert!(!refusal.message.contains('\n'), "one line");
        // The condition's reason is a word vramfit's status knows.
        assert!(vramfit_api::conditions::Reason::parse(refusal.reason).is_some());
    }
    // Rank 512 is vLLM's largest and accepted; llama.cpp has no such bound.
    let t512 = tuning_job(
        "t",
        MISTRAL,
        "{method: lora, outputVolume: out, lora: {rank: 512}}",
        "",
    );
    assert!(from_tuning_job(&adapter("a", "t"), &vllm, Some(&t512), Mode::Planned).is_ok());
    let t1024 = tuning_job(
        "t",
        MISTRAL,
        "{method: lora, outputVolume: out, lora: {rank: 1024}}",
        "",
    );
    assert!(from_tuning_job(&adapter("a", "t"), &llama, Some(&t1024), Mode::Planned).is_ok());
    // Repositories decide where both jobs name one.
    let hf =
        |repo: &str| format!("{{preset: mistral-7b-instruct-v0.3, huggingFace: {{repo: {repo}}}}}");
    let served_hf = served("vllm", &hf("mistralai/Mistral-7B-Instruct-v0.3"), "{}");
    let other = tuning_job("t", &hf("someone/Other-7B"), LORA, "");
    let refusal =
        from_tuning_job(&adapter("a", "t"), &served_hf, Some(&other), Mode::Planned).unwrap_err();
    assert_eq!(refusal.reason, "AdapterBaseMismatch");
    let same = tuning_job("t", &hf("MistralAI/Mistral-7B-Instruct-v0.3"), LORA, "");
    assert!(from_tuning_job(&adapter("a", "t"), &served_hf, Some(&same), Mode::Planned).is_ok());
    // llama.cpp's repository holds a GGUF conversion: the preset names the model it
    // quantizes; a GGUF path as the runtime's model name changes nothing.
    let gguf_hf = served(
        "llamacpp",
        "{preset: mistral-7b-instruct-v0.3-q4_k_m, name: /models/m.gguf, huggingFace: {repo: someone/Mistral-7B-Instruct-v0.3-GGUF}}",
        "{}",
    );
    let base_hf = tuning_job("t", &hf("mistralai/Mistral-7B-Instruct-v0.3"), LORA, "");
    assert!(from_tuning_job(&adapter("a", "t"), &gguf_hf, Some(&base_hf), Mode::Planned).is_ok());
}

fn served_input(yaml: &str, adapters: &[(&str, u32)]) -> JobInput {
    let mut spec = common::spec(yaml);
    if let Some(serve) = spec.serve.as_mut() {
        serve.adapters = adapters
            .iter()
            .map(|(name, _)| adapter(name, &format!("{name}-tune")))
            .collect();
    }
    let mut input = resolve_job(&spec).expect("valid");
    let llamacpp = yaml.contains("llamacpp");
    adapters::attach(
        &mut input,
        adapters
            .iter()
            .map(|(name, rank)| ResolvedAdapter {
                name: name.to_string(),
                source: format!("tuningJob/{name}-tune"),
                path: if llamacpp {
                    format!("/vramfit/adapters/{name}/adapter_model.gguf")
                } else {
                    format!("/vramfit/adapters/{name}")
                },
                rank: *rank,
                alpha: None,
                target_modules: vec!["all-linear".into()],
                bytes: None,
            })
            .collect(),
    );
    input
}

fn args(job: &JobInput, p: &Plan) -> Vec<String> {
    workload::runtime_args(job, p)
}

fn env(job: &JobInput, p: &Plan, name: &str) -> Option<String> {
    workload::plan_env(job, p)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

#[test]
fn vllm_gets_its_lora_flags_and_the_buffers_shrink_its_kv_cache() {
    let yaml = "{model: {preset: llama-3.1-8b-instruct}, runtime: vllm, image: x, allowedQuantizations: [none], serve: {port: 8000}}";
    let without = served_input(yaml, &[]);
    let with = served_input(yaml, &[("sql", 8), ("chat", 17)]);
    let base = plan(&without, "a100-80gb-x8").unwrap();
    let p = plan(&with, "a100-80gb-x8").unwrap();
    let planned = p.adapters.clone().expect("adapters planned");
    assert_eq!(
        (planned.count, planned.max_per_batch, planned.max_rank),
        (2, Some(2), Some(32)),
        "17 rounds up to 32; two adapters, two per batch"
    );
    let expected = vllm_buffer_bytes(&with.model, 32, 2, 1, 2).div_ceil(1 << 20);
    assert_eq!(planned.memory_mib, expected);
    assert_eq!(p.memory.adapters_mib, expected);
    assert_eq!(
        p.memory.needed_per_gpu_mib,
        base.memory.needed_per_gpu_mib + expected
    );
    assert!(p.concurrency.unwrap() < base.concurrency.unwrap());
    assert!(
        p.reasons
            .iter()
            .any(|r| r
                .starts_with("LoRA: 2 adapters (sql, chat), buffers for 2 per batch at rank 32")),
        "{:?}",
        p.reasons
    );
    let a = args(&with, &p);
    let at = a
        .iter()
        .position(|w| w == "--enable-lora")
        .expect("--enable-lora");
    assert_eq!(
        &a[at..at + 10],
        [
            "--enable-lora",
            "--max-loras",
            "2",
            "--max-lora-rank",
            "32",
            "--max-cpu-loras",
            "2",
            "--lora-modules",
            "sql=/vramfit/adapters/sql",
            "chat=/vramfit/adapters/chat",
        ]
    );
    // The next word is a flag: argparse's nargs '+' ends there.
    assert!(a[at + 10].starts_with("--"), "{a:?}");
    let flags = runtime_contract::flags_in(vramfit_api::Runtime::Vllm, &a).unwrap();
    for (name, value) in &flags {
        let c = runtime_contract::contract(vramfit_api::Runtime::Vllm, name).unwrap();
        assert!(c.values.accepts(value), "{name} {value}");
    }
    assert_eq!(
        env(&with, &p, "VRAMFIT_ADAPTERS").as_deref(),
        Some("sql=/vramfit/adapters/sql,chat=/vramfit/adapters/chat")
    );
    assert_eq!(env(&with, &p, "VRAMFIT_RUNTIME_ARGS"), Some(a.join(" ")));
    assert!(env(&without, &base, "VRAMFIT_ADAPTERS").is_none());
    assert!(!args(&without, &base).iter().any(|w| w.contains("lora")));
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    // A caller that plans before resolving the adapters gets a plan that says so.
    let unresolved = resolve_job(&common::spec(
        "{model: {preset: llama-3.1-8b-instruct}, runtime: vllm, image: x, serve: {adapters: [{name: sql, tuningJob: {name: t}}]}}",
    ))
    .unwrap();
    let p = plan(&unresolved, "a100-80gb-x8").unwrap();
    assert!(p.adapters.is_none());
    assert!(
        p.warnings
            .iter()
            .any(|w| w == "serve.adapters lists sql but the plan holds none: adapters not resolved are not planned"),
        "{:?}",
        p.warnings
    );
}

#[test]
fn max_adapters_per_batch_sizes_the_buffers_and_never_passes_the_adapters() {
    let yaml = |n: u32| {
        format!(
            "{{model: {{preset: mistral-7b-instruct-v0.3}}, runtime: vllm, image: x, serve: {{maxAdaptersPerBatch: {n}}}}}"
        )
    };
    let five: Vec<(&str, u32)> = vec![("a", 16), ("b", 16), ("c", 16), ("d", 16), ("e", 16)];
    let one = served_input(&yaml(1), &five);
    let p1 = plan(&one, "h100-80gb-x8").unwrap();
    let eight = served_input(&yaml(8), &five);
    let p8 = plan(&eight, "h100-80gb-x8").unwrap();
    assert_eq!(p1.adapters.as_ref().unwrap().max_per_batch, Some(1));
    assert_eq!(p8.adapters.as_ref().unwrap().max_per_batch, Some(5));
    assert!(p8.memory.adapters_mib > 4 * p1.memory.adapters_mib);
    let a = args(&eight, &p8);
    let cpu = a.iter().position(|w| w == "--max-cpu-loras").unwrap();
    assert_eq!(a[cpu + 1], "5");
    // Without the field: as many as served, up to 4.
    let default = served_input(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, serve: {}}",
        &five,
    );
    let pd = plan(&default, "h100-80gb-x8").unwrap();
    assert_eq!(pd.adapters.unwrap().max_per_batch, Some(4));
}

#[test]
fn llamacpp_loads_every_adapter_in_order() {
    let yaml = "{model: {preset: mistral-7b-instruct-v0.3-q4_k_m}, runtime: llamacpp, image: x, serve: {port: 8080}}";
    let without = served_input(yaml, &[]);
    let with = served_input(yaml, &[("sql", 16), ("chat", 64)]);
    let base = plan(&without, "a10g-x1").unwrap();
    let p = plan(&with, "a10g-x1").unwrap();
    let a = args(&with, &p);
    assert!(!a.iter().any(|w| w == "--lora-init-without-apply"), "{a:?}");
    let at = a.iter().position(|w| w == "--lora").expect("--lora");
    assert_eq!(
        &a[at..at + 4],
        [
            "--lora",
            "/vramfit/adapters/sql/adapter_model.gguf",
            "--lora",
            "/vramfit/adapters/chat/adapter_model.gguf",
        ]
    );
    assert!(!a.iter().any(|w| w == "--lora-scaled"));
    // r · (in + out) summed over all seven modules · layers · 2 bytes, for each adapter.
    let shape = &with.model;
    let i = intermediate_upper_bound(shape);
    let (h, q, kv) = (4096u64, 4096u64, 1024u64);
    let widths = (h + q) * 2 + (h + kv) * 2 + (h + i) * 2 + (i + h);
    let bytes = (16 + 64) * widths * 32 * 2;
    let planned = p.adapters.clone().unwrap();
    assert_eq!(planned.memory_mib, bytes.div_ceil(1 << 20));
    assert_eq!((planned.max_per_batch, planned.max_rank), (None, None));
    assert_eq!(
        p.memory.needed_per_gpu_mib,
        p.memory.weights_mib + p.memory.kv_cache_mib + p.memory.overhead_mib + planned.memory_mib
    );
    assert!(p.memory.needed_per_gpu_mib > base.memory.needed_per_gpu_mib);
    let flags = runtime_contract::flags_in(vramfit_api::Runtime::Llamacpp, &a).unwrap();
    for (name, value) in &flags {
        let c = runtime_contract::contract(vramfit_api::Runtime::Llamacpp, name).unwrap();
        assert!(c.values.accepts(value), "{name} {value}");
    }
    assert_eq!(
        env(&with, &p, "VRAMFIT_ADAPTERS").as_deref(),
        Some(
            "sql=/vramfit/adapters/sql/adapter_model.gguf,chat=/vramfit/adapters/chat/adapter_model.gguf"
        )
    );
}

#[test]
fn transformers_and_custom_get_the_env_and_no_flags() {
    let custom = served_input(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: custom, image: x, serve: {healthPath: /ready}}",
        &[("sql", 16)],
    );
    let p = plan(&custom, "a10g-x1").unwrap();
    assert!(args(&custom, &p).is_empty());
    assert_eq!(
        env(&custom, &p, "VRAMFIT_ADAPTERS").as_deref(),
        Some("sql=/vramfit/adapters/sql")
    );
    assert!(p.memory.adapters_mib > 0);
}

#[test]
fn a_class_is_rejected_only_because_of_its_adapters_and_says_their_share() {
    let yaml = "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, allowedQuantizations: [none], serve: {maxAdaptersPerBatch: 16}}";
    let names: Vec<String> = (0..16).map(|i| format!("a{i}")).collect();
    let many: Vec<(&str, u32)> = names.iter().map(|n| (n.as_str(), 512)).collect();
    let without = served_input(yaml, &[]);
    let with = served_input(yaml, &many);
    assert!(plan(&without, "a10g-x1").is_ok());
    let err = plan(&with, "a10g-x1").unwrap_err();
    let PlanError::AdaptersDoNotFit {
        count,
        adapters_mib,
        ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(*count, 16);
    assert!(*adapters_mib > 20 * 1024, "{adapters_mib}");
    let message = err.to_string();
    assert!(message.starts_with("does not fit: needs"), "{message}");
    assert!(message.contains("for its 16 LoRA adapters"), "{message}");
    // A larger GPU holds both.
    assert!(plan(&with, "h100-80gb-x8").is_ok());

    // llama.cpp: a budget the adapters leave nothing of.
    let gguf = "{model: {preset: mistral-7b-instruct-v0.3-q4_k_m}, runtime: llamacpp, image: x, serve: {}, llamaCpp: {targetUsagePercent: 10}}";
    let without = served_input(gguf, &[]);
    let with = served_input(gguf, &many);
    let small = class("t4-x1");
    assert!(plan_for_class(&without, &small, &Fallback::default()).is_ok());
    let err = plan_for_class(&with, &small, &Fallback::default()).unwrap_err();
    assert!(
        matches!(err, PlanError::AdaptersDoNotFit { count: 16, .. }),
        "{err}"
    );
}

#[test]
fn adapters_are_refused_across_nodes_on_experts_and_against_user_lora_flags() {
    let group = common::spec(
        "{model: {preset: llama-3.1-70b-instruct}, runtime: vllm, image: x, gpus: {max: 8, maxNodes: 2}, serve: {adapters: [{name: a, tuningJob: {name: t}}]}}",
    );
    assert_eq!(resolve_job(&group).unwrap_err(), SpecError::AdaptersInGroup);
    assert!(
        SpecError::AdaptersInGroup
            .to_string()
            .contains("adapters on replicas that span nodes are not supported yet")
    );
    let moe = common::spec(
        "{model: {preset: mixtral-8x7b-instruct-v0.1}, runtime: vllm, image: x, serve: {adapters: [{name: a, tuningJob: {name: t}}]}}",
    );
    assert_eq!(
        resolve_job(&moe).unwrap_err(),
        SpecError::AdaptersOnExperts { experts: 8 }
    );
    for (runtime, model, words) in [
        (
            "vllm",
            MISTRAL,
            &[
                "--enable-lora",
                "--no-enable-lora",
                "--max-loras=2",
                "--max_lora_rank",
                "--max-cpu-loras",
                "--lora-modules",
                "--max-lora",
            ][..],
        ),
        ("llamacpp", MISTRAL_GGUF, &["--lora", "--lora-scaled"][..]),
    ] {
        for word in words {
            let yaml = format!(
                "{{model: {model}, runtime: {runtime}, image: x, args: ['{word}', x], serve: {{adapters: [{{name: a, tuningJob: {{name: t}}}}]}}}}"
            );
            let err = resolve_job(&common::spec(&yaml)).unwrap_err();
            let SpecError::CommandArgs { contradiction } = &err else {
                panic!("{runtime} {word}: {err}")
            };
            assert!(contradiction.contains("serve.adapters"), "{contradiction}");
            // Without adapters the flag is the job's own.
            let own = yaml.replace(", serve: {adapters: [{name: a, tuningJob: {name: t}}]}", "");
            assert!(resolve_job(&common::spec(&own)).is_ok(), "{own}");
        }
    }
    // vLLM's own --enable-lora-bias is not --enable-lora.
    let bias = common::spec(
        "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, args: [--enable-lora-bias], serve: {adapters: [{name: a, tuningJob: {name: t}}]}}",
    );
    assert!(resolve_job(&bias).is_ok());
}

#[test]
fn vramfit_adapters_is_a_reserved_env_name() {
    assert!(vramfit_api::reserved_env::reserved_env("VRAMFIT_ADAPTERS").is_some());
    let rules = vramfit_api::reserved_env::cel_rules();
    assert!(rules[0].rule.contains("e.name.startsWith('VRAMFIT_')"));
}

/// The configs' intermediate size, where the preset's model has a committed config.json.
fn real_intermediate(repo: &str) -> Option<u64> {
    let path = format!(
        "{}/../models/testdata/configs/{repo}/config.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let text = config.get("text_config").unwrap_or(&config);
    text.get("intermediate_size")?.as_u64()
}

fn true_dims(shape: &ModelShape, intermediate: u64) -> LoraDims {
    LoraDims {
        intermediate,
        ..LoraDims::of(shape)
    }
}

/// For every dense preset with a committed config, at every rank vLLM takes, slots and
/// tensor parallel: the planned buffers are never below the runtime's with the real
/// intermediate size.
#[test]
fn the_planned_buffers_hold_the_runtimes_for_every_dense_preset_with_a_config() {
    let mut checked = 0;
    for preset in PRESETS.iter().filter(|p| p.shape.experts.is_none()) {
        let shape = resolve(&vramfit_api::ModelSpec {
            preset: Some(preset.key.into()),
            ..Default::default()
        })
        .unwrap();
        let repo =
            vramfit_planner::model_catalog::gguf_base(preset.key).unwrap_or(preset.shape.name);
        let Some(real) = real_intermediate(repo) else {
            continue;
        };
        for r in [8, 16, 64, 320, 512] {
            for lm in [1, 4, 16] {
                for t in [1, 2, 4, 8] {
                    let planned = vllm_buffer_bytes(&shape, r, lm, t, 2);
                    let runtime = vllm_buffer_bytes_for(&true_dims(&shape, real), r, lm, t, 2);
                    assert!(planned >= runtime, "{}: r {r} lm {lm} t {t}", preset.key);
                }
            }
        }
        checked += 1;
    }
    assert!(checked >= 20, "{checked} presets checked");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// A dense model of random widths, its parameter count as transformers counts it (tied
    /// or untied embeddings, norms, optional q/k/v biases): the planner's buffers, from the
    /// parameters alone, are never below the runtime's with the real intermediate size.
    #[test]
    fn the_planned_buffers_never_fall_below_the_runtimes(
        layers in 1u64..128,
        heads_log in 2u32..7,
        kv_div_log in 0u32..4,
        head_dim in prop_oneof![Just(64u64), Just(128), Just(256)],
        mlp_ratio_permille in 1000u64..6000,
        vocab in 1000u64..262_144,
        tied in any::<bool>(),
        biases in any::<bool>(),
        rank in prop_oneof![Just(8u32), Just(16), Just(32), Just(64), Just(128), Just(256), Just(320), Just(512)],
        lm in 1u32..17,
        t in prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
    ) {
        let heads = 1u64 << heads_log;
        let kv_heads = (heads >> kv_div_log).max(1);
        let hidden = heads * head_dim;
        let intermediate = hidden * mlp_ratio_permille / 1000;
        let attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
            + if biases { head_dim * (heads + 2 * kv_heads) } else { 0 };
        let per_layer = attention + 3 * hidden * intermediate + 2 * hidden;
        let embeddings = vocab * hidden * if tied { 1 } else { 2 };
        let parameters = embeddings + layers * per_layer + hidden;
        let shape = resolve(&vramfit_api::ModelSpec {
            parameters: Some(parameters),
            layers: Some(u32::try_from(layers).unwrap()),
            hidden_size: Some(u32::try_from(hidden).unwrap()),
            attention_heads: Some(u32::try_from(heads).unwrap()),
            kv_heads: Some(u32::try_from(kv_heads).unwrap()),
            head_dim: Some(u32::try_from(head_dim).unwrap()),
            vocab_size: Some(u32::try_from(vocab).unwrap()),
            ..Default::default()
        })
        .unwrap();
        prop_assert!(intermediate_upper_bound(&shape) >= intermediate);
        let planned = vllm_buffer_bytes(&shape, rank, lm, t, 2);
        let runtime = vllm_buffer_bytes_for(&true_dims(&shape, intermediate), rank, lm, t, 2);
        prop_assert!(planned >= runtime, "{planned} < {runtime}");
    }
}
