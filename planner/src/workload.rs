//! What the workload container receives (docs/planning.md): the env contract every runtime reads,
//! and the flags vLLM and llama.cpp need.
use vramfit_api::{Plan, Quantization, Runtime};

use crate::job_input::JobInput;
use crate::runtime_vllm;

// The reserved names live with the API types, whose CEL rule refuses them too.
pub use vramfit_api::reserved_env::{LLAMACPP_FLAG_ENV, PLANNED_ENV, reserved_env};

/// Whether `runtime` is PyTorch underneath and reads the plan's dtype, quantization,
/// allocator settings and process memory fraction. A llama.cpp server reads none of them: its
/// weights keep the GGUF file's formats and its budget is a share of VRAM (`llamaCpp`).
pub fn reads_pytorch_settings(runtime: Runtime) -> bool {
    runtime != Runtime::Llamacpp
}

/// The env vars of a plan, in a stable order. Both vramfit's own names and the names the
/// teams' scripts already read (`TORCH_DTYPE`, `USE_QUANTIZATION`, `QUANTIZATION_BITS`,
/// `USE_FLASH_ATTN`, `MAX_TILES`). A llama.cpp pod gets only what describes its own plan: no
/// dtype, quantization or memory fraction that its server would not read.
pub fn plan_env(job: &JobInput, plan: &Plan) -> Vec<(String, String)> {
    let pytorch = reads_pytorch_settings(job.runtime);
    let mut env: Vec<(&str, String)> = vec![
        ("VRAMFIT_NODE_CLASS", plan.node_class.clone()),
        ("VRAMFIT_MODEL", job.model.name.clone()),
        ("VRAMFIT_GPU_COUNT", plan.gpu_count.to_string()),
    ];
    if pytorch {
        env.extend([
            ("VRAMFIT_DTYPE", plan.dtype.as_str().to_string()),
            (
                "VRAMFIT_QUANTIZATION",
                plan.quantization.as_str().to_string(),
            ),
        ]);
    }
    env.push(("VRAMFIT_FLASH_ATTENTION", plan.flash_attention.to_string()));
    if pytorch {
        env.push((
            "VRAMFIT_MEMORY_FRACTION",
            fraction(plan.memory_fraction_percent),
        ));
    }
    env.extend([
        ("VRAMFIT_CONTEXT_LENGTH", plan.context_length.to_string()),
        // The budget per GPU the plan was sized for: a transformers workload's `max_memory`,
        // a llama.cpp plan's share of VRAM.
        (
            "VRAMFIT_USABLE_MEMORY_MIB",
            plan.memory.usable_per_gpu_mib.to_string(),
        ),
    ]);
    if let Some(serve) = &job.serve {
        // Where a served workload listens (vLLM and llama.cpp also get it as flags).
        env.push(("VRAMFIT_PORT", serve.port.to_string()));
    }
    if let Some(adapters) = crate::adapters::flags::env_value(job) {
        // Every runtime: where each adapter is mounted (vLLM and llama.cpp also get flags).
        env.push((crate::adapters::flags::ADAPTERS_ENV, adapters));
    }
    if matches!(job.runtime, Runtime::Vllm | Runtime::Llamacpp) {
        // The same flags as one shell-quoted string, for a `command` that is a shell script.
        env.push((
            "VRAMFIT_RUNTIME_ARGS",
            shell_words(&runtime_args(job, plan)),
        ));
    }
    if let Some(l) = plan.llama_cpp {
        // A llama.cpp server reads none of PyTorch's or the teams' script names: it gets its
        // flags and the plan's description only.
        env.push(("VRAMFIT_LLAMACPP_GPU_LAYERS", l.gpu_layers.to_string()));
        env.push((
            "VRAMFIT_KV_CACHE_TYPE",
            l.kv_cache_type.as_str().to_string(),
        ));
        return owned(env);
    }
    env.extend([
        ("TORCH_DTYPE", plan.dtype.as_str().to_string()),
        (
            "USE_QUANTIZATION",
            (plan.quantization != Quantization::None).to_string(),
        ),
        ("USE_FLASH_ATTN", plan.flash_attention.to_string()),
        (
            "PYTORCH_CUDA_ALLOC_CONF",
            plan.pytorch_cuda_alloc_conf.clone(),
        ),
        // PyTorch 2.9's name; it reads it first and the old one only when it is unset.
        ("PYTORCH_ALLOC_CONF", plan.pytorch_cuda_alloc_conf.clone()),
        // PyTorch reads this to allow TF32 in cuBLAS matmuls.
        (
            "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
            if plan.tf32 { "1" } else { "0" }.to_string(),
        ),
    ]);
    if let Some(bits) = plan.quantization.bits() {
        env.push(("QUANTIZATION_BITS", bits.to_string()));
    }
    if let Some(tiles) = plan.max_tiles {
        env.push(("MAX_TILES", tiles.to_string()));
        env.push(("VRAMFIT_MAX_TILES", tiles.to_string()));
    }
    let mut env = owned(env);
    if let (Some(input), Some(tuning)) = (&job.tuning, &plan.tuning) {
        env.extend(crate::tuning::env::tuning_env(input, plan, tuning));
    }
    env
}

/// Words joined for a POSIX shell: each one that is not plain is single-quoted.
pub fn shell_words(words: &[String]) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.,:/=+@%".contains(c);
    words
        .iter()
        .map(|w| {
            if !w.is_empty() && w.chars().all(plain) {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn owned(env: Vec<(&str, String)>) -> Vec<(String, String)> {
    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Flags appended to the job's own arguments for runtimes that take them.
pub fn runtime_args(job: &JobInput, plan: &Plan) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    let mut flag = |name: &str, value: String| {
        args.push(name.to_string());
        args.push(value);
    };
    match job.runtime {
        Runtime::Vllm => {
            flag("--dtype", plan.dtype.as_str().to_string());
            if let Some(method) = runtime_vllm::quantization_method(plan.quantization) {
                flag("--quantization", method.to_string());
            }
            flag("--tensor-parallel-size", plan.gpu_count.to_string());
            // The plan's budgeted share of VRAM (planned that way for vLLM).
            flag(
                "--gpu-memory-utilization",
                fraction(plan.memory_fraction_percent),
            );
            flag("--max-model-len", plan.context_length.to_string());
            flag("--max-num-seqs", concurrency(job, plan).to_string());
            if let Some(tiles) = plan
                .max_tiles
                .filter(|_| runtime_vllm::takes_max_dynamic_patch(&job.model))
            {
                // One image per prompt, of at most the planned tiles: what the memory
                // estimate holds, and what vLLM profiles its memory with.
                flag(
                    "--mm-processor-kwargs",
                    format!("{{\"max_dynamic_patch\":{tiles}}}"),
                );
                flag("--limit-mm-per-prompt", r#"{"image":1}"#.to_string());
            }
        }
        Runtime::Llamacpp => {
            if let Some(l) = plan.llama_cpp {
                flag("--n-gpu-layers", l.gpu_layers.to_string());
                flag(
                    "--ctx-size",
                    crate::memory::tokens(job.batch_size, plan.context_length).to_string(),
                );
                flag("--parallel", concurrency(job, plan).to_string());
                flag("--cache-type-k", l.kv_cache_type.as_str().to_string());
                flag("--cache-type-v", l.kv_cache_type.as_str().to_string());
                // A value, not a bare switch: the form of llama.cpp b6327 and later
                // (docs/runtime-contracts.md).
                flag(
                    "--flash-attn",
                    if plan.flash_attention { "on" } else { "off" }.to_string(),
                );
            }
        }
        Runtime::Transformers | Runtime::Custom => {}
    }
    // Served LoRA adapters: before the listening flags, so that `--lora-modules`' words end
    // at the next flag.
    args.extend(crate::adapters::flags::runtime_args(job, plan));
    if let Some(serve) = &job.serve {
        args.extend(crate::serving::listen_args(job.runtime, serve));
    }
    args
}

/// Host memory, MiB, that a llama.cpp plan with layers left on the CPU needs the pod to
/// request and be allowed (docs/runtime-contracts.md); `None` otherwise.
pub fn host_memory_mib(job: &JobInput, plan: &Plan) -> Option<u64> {
    // A plan is refused when its host memory overflows, so a plan given here never does;
    // should one still, the most memory there is (a pod no node admits) rather than none.
    plan.llama_cpp
        .and_then(|l| crate::plan_llamacpp::host_memory_mib(job, &l).unwrap_or(Some(u64::MAX)))
}

/// Sequences at once: a served replica's planned concurrency, else the job's batch.
fn concurrency(job: &JobInput, plan: &Plan) -> u32 {
    plan.concurrency.unwrap_or(job.batch_size)
}

fn fraction(percent: u32) -> String {
    format!("{:.2}", f64::from(percent) / 100.0)
}
