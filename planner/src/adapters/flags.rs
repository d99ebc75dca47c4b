//! What a served pod gets for its adapters: the runtime's LoRA flags (docs/runtime-contracts.md),
//! `VRAMFIT_ADAPTERS` for every runtime, and the user flags refused because vramfit sets them.
use vramfit_api::{Plan, Runtime};

use super::budget;
use crate::job_input::JobInput;
use crate::user_args::spells;

/// The env var that lists a served pod's adapters, `name=path,name=path`, in
/// `serve.adapters` order (llama.cpp's adapter ids).
pub const ADAPTERS_ENV: &str = "VRAMFIT_ADAPTERS";

/// vLLM's LoRA flags vramfit sets for a job with adapters (`vllm/engine/arg_utils.py`,
/// `vllm/entrypoints/openai/cli_args.py`; `--no-enable-lora` is `--enable-lora`'s negation).
const VLLM_LORA: &[&str] = &[
    "--enable-lora",
    "--no-enable-lora",
    "--max-loras",
    "--max-lora-rank",
    "--max-cpu-loras",
    "--lora-modules",
];
/// llama.cpp's adapter flags (`common/arg.cpp`).
const LLAMACPP_LORA: &[&str] = &["--lora", "--lora-scaled"];

/// `name=path,name=path` of a served job's adapters; `None` without adapters.
pub fn env_value(job: &JobInput) -> Option<String> {
    let adapters = &job.serve.as_ref()?.adapters;
    (!adapters.is_empty()).then(|| {
        adapters
            .iter()
            .map(|a| format!("{}={}", a.name, a.path))
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// The runtime's flags for the adapters of `job` under `plan`; empty without adapters, and
/// for transformers and custom servers (their code reads `VRAMFIT_ADAPTERS`).
pub fn runtime_args(job: &JobInput, plan: &Plan) -> Vec<String> {
    let Some(adapters) = job
        .serve
        .as_ref()
        .map(|s| &s.adapters)
        .filter(|a| !a.is_empty())
    else {
        return Vec::new();
    };
    match job.runtime {
        Runtime::Vllm => {
            let planned = plan.adapters.as_ref();
            let lm = planned
                .and_then(|p| p.max_per_batch)
                .unwrap_or_else(|| budget::max_per_batch(job));
            let r = planned
                .and_then(|p| p.max_rank)
                .unwrap_or_else(|| budget::max_rank(job));
            let mut args = vec![
                "--enable-lora".to_string(),
                "--max-loras".to_string(),
                lm.to_string(),
                "--max-lora-rank".to_string(),
                r.to_string(),
                // Every adapter stays in host memory (at least --max-loras, as vLLM asks).
                "--max-cpu-loras".to_string(),
                adapters
                    .len()
                    .max(usize::try_from(lm).unwrap_or(usize::MAX))
                    .to_string(),
                // One flag, then each adapter as its own word (argparse nargs '+').
                "--lora-modules".to_string(),
            ];
            args.extend(adapters.iter().map(|a| format!("{}={}", a.name, a.path)));
            args
        }
        Runtime::Llamacpp => {
            // No `--lora-init-without-apply`: it leaves the context unapplied, yet the server
            // applies its adapters' scales (1.0) to every request that names none (b6327 and
            // b11312 alike); a request picks its adapters with `"lora"`.
            let mut args = Vec::new();
            for a in adapters {
                args.push("--lora".to_string());
                args.push(a.path.clone());
            }
            args
        }
        Runtime::Transformers | Runtime::Custom => Vec::new(),
    }
}

/// Why `word` of a job's command or args may not be given to a server with adapters: it sets
/// a LoRA flag vramfit sets from `serve.adapters`.
pub fn refuse_user_flag(runtime: Runtime, word: &str) -> Option<String> {
    let flags = match runtime {
        Runtime::Vllm => VLLM_LORA,
        Runtime::Llamacpp => LLAMACPP_LORA,
        Runtime::Transformers | Runtime::Custom => return None,
    };
    flags.iter().find(|flag| spells(runtime, word, flag)).map(|flag| {
        format!(
            "{word} sets {flag}, which vramfit sets for a job with serve.adapters; list the adapters in serve.adapters (and serve.maxAdaptersPerBatch) instead"
        )
    })
}
