//! A job's own `command` and `args` against the flags vramfit plans (docs/runtime-contracts.md):
//! a user flag that sets what the plan decides is refused in any spelling, and a shell
//! `command` (which never sees appended flags) is recognised.
use vramfit_api::Runtime;

/// A flag the plan decides, in every spelling the runtime accepts, and the job field that
/// decides it instead.
struct Planned {
    spellings: &'static [&'static str],
    instead: &'static str,
}

const VLLM: &[Planned] = &[
    Planned {
        spellings: &["--quantization", "-q"],
        instead: "allowedQuantizations",
    },
    Planned {
        spellings: &["--tensor-parallel-size", "-tp"],
        instead: "gpus.min/gpus.max",
    },
    Planned {
        spellings: &["--pipeline-parallel-size", "-pp"],
        instead: "gpus.min/gpus.max (vramfit plans tensor parallelism on one node)",
    },
    Planned {
        spellings: &["--kv-cache-dtype"],
        instead: "nothing: the plan sizes the KV cache in the model's dtype",
    },
    Planned {
        spellings: &["--dtype"],
        instead: "dtype",
    },
    Planned {
        spellings: &["--gpu-memory-utilization"],
        instead: "a GpuNodeClass's memoryBufferMib (the plan's budgeted share)",
    },
    Planned {
        spellings: &["--max-model-len"],
        instead: "contextLength",
    },
    Planned {
        spellings: &["--max-num-seqs"],
        instead: "batchSize",
    },
    Planned {
        spellings: &["--cpu-offload-gb"],
        instead: "gpus or allowedQuantizations (the plan keeps all weights on the GPUs)",
    },
    Planned {
        spellings: &["--mm-processor-kwargs"],
        instead: "overrides.maxTiles",
    },
    Planned {
        spellings: &["--limit-mm-per-prompt"],
        instead: "nothing: the plan holds one image per prompt",
    },
];

const LLAMACPP: &[Planned] = &[
    Planned {
        spellings: &["-ngl", "--gpu-layers", "--n-gpu-layers"],
        instead: "llamaCpp.gpuLayers",
    },
    Planned {
        spellings: &["-c", "--ctx-size"],
        instead: "contextLength",
    },
    Planned {
        spellings: &["-np", "--parallel"],
        instead: "batchSize",
    },
    Planned {
        spellings: &["-ctk", "--cache-type-k", "-ctv", "--cache-type-v"],
        instead: "llamaCpp.kvCacheTypes",
    },
    Planned {
        spellings: &["-fa", "--flash-attn"],
        instead: "overrides.flashAttention",
    },
    Planned {
        spellings: &[
            "-nkvo",
            "--no-kv-offload",
            "--cpu-moe",
            "-cmoe",
            "--n-cpu-moe",
            "-ncmoe",
        ],
        instead: "llamaCpp.gpuLayers (the plan keeps the KV cache of offloaded layers on the GPUs)",
    },
];

/// vLLM's argument parser expands an unambiguous prefix of a long flag (Python argparse's
/// `allow_abbrev`), so a prefix this long or longer counts as the flag.
const SHORTEST_ABBREVIATION: usize = 8;

/// Why `arg` may not be given to `runtime`, if it sets a planned flag.
pub fn contradiction(runtime: Runtime, arg: &str) -> Option<String> {
    let table = match runtime {
        Runtime::Vllm => VLLM,
        Runtime::Llamacpp => LLAMACPP,
        Runtime::Transformers | Runtime::Custom => return None,
    };
    table
        .iter()
        .find_map(|p| {
            p.spellings
                .iter()
                .find(|s| spells(runtime, arg, s))
                .map(|s| (p, *s))
        })
        .map(|(p, s)| {
            format!(
                "{arg} sets {} ({s}), which vramfit plans; use {} instead",
                p.spellings[0], p.instead
            )
        })
}

/// Whether the word `arg` of a command line sets `flag` (one spelling of it) for `runtime`:
/// `--flag`, `--flag=value`, and for vLLM `--flag_name`, a short flag with its value attached
/// (`-tp4`) and an abbreviation of a long flag of 8 characters or more.
pub fn spells(runtime: Runtime, arg: &str, flag: &str) -> bool {
    if !arg.starts_with('-') || arg.parse::<f64>().is_ok() {
        return false;
    }
    let key = arg.split_once('=').map_or(arg, |(k, _)| k);
    match runtime {
        // vLLM reads `--max_model_len` as `--max-model-len`, `-tp4` as `-tp 4`, and
        // abbreviations of long flags.
        Runtime::Vllm if flag.starts_with("--") => {
            let key = format!("--{}", key.trim_start_matches('-').replace('_', "-"));
            key == flag || (key.len() >= SHORTEST_ABBREVIATION && flag.starts_with(&key))
        }
        Runtime::Vllm => key.starts_with(flag) && !key.starts_with("--"),
        _ => key == flag,
    }
}

/// Whether `command` runs a shell script (`sh -c …`, `bash -lc …`): flags appended to the
/// container's args reach the shell, not the runtime.
pub fn is_shell(command: &[String]) -> bool {
    let Some(program) = command.first() else {
        return false;
    };
    let name = program.rsplit('/').next().unwrap_or(program);
    matches!(name, "sh" | "bash" | "dash" | "ash" | "zsh")
        && command[1..]
            .iter()
            .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('c'))
}

/// The first contradiction among a job's command and args: each word of them, and for a
/// shell, each word of its script.
pub fn first_contradiction(
    runtime: Runtime,
    command: &[String],
    args: &[String],
) -> Option<String> {
    first_refusal(command, args, |word| contradiction(runtime, word))
}

/// The first refusal `refuse` gives to a word of a job's command and args (for a shell, the
/// words of its script).
pub fn first_refusal(
    command: &[String],
    args: &[String],
    refuse: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let shell = is_shell(command);
    // A shell's own name and options (`-c`, `-lc`) are not the runtime's.
    let own = |i: usize, a: &String| shell && (i == 0 || (a.starts_with('-') && !a.contains(' ')));
    command
        .iter()
        .enumerate()
        .filter(|&(i, a)| !own(i, a))
        .map(|(_, a)| a)
        .chain(args)
        .flat_map(|a| a.split_whitespace())
        .find_map(|word| refuse(word.trim_matches(|c| c == '"' || c == '\'')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_planned_vllm_flag_is_refused() {
        for arg in [
            "--max-model-len",
            "--max-model-len=4096",
            "--max_model_len=4096",
            "--gpu-memory",
            "-tp",
            "-tp4",
            "-q",
            "--quantization=awq",
            "--kv-cache-dtype",
            "--cpu-offload-gb",
            "--pipeline-parallel-size=2",
        ] {
            assert!(contradiction(Runtime::Vllm, arg).is_some(), "{arg}");
        }
        let why = contradiction(Runtime::Vllm, "--max-model-len=4096").unwrap();
        assert!(why.contains("contextLength"), "{why}");
        for arg in [
            "--port",
            "--served-model-name",
            "--trust-remote-code",
            "-O3",
            "8000",
            "--max",
        ] {
            assert_eq!(contradiction(Runtime::Vllm, arg), None, "{arg}");
        }
    }

    #[test]
    fn every_spelling_of_a_planned_llamacpp_flag_is_refused() {
        for arg in [
            "-ngl",
            "--gpu-layers",
            "--n-gpu-layers=99",
            "-c",
            "-ctv",
            "-fa",
            "-nkvo",
        ] {
            assert!(contradiction(Runtime::Llamacpp, arg).is_some(), "{arg}");
        }
        let why = contradiction(Runtime::Llamacpp, "-ngl").unwrap();
        assert!(why.contains("llamaCpp.gpuLayers"), "{why}");
        for arg in [
            "--host",
            "--port",
            "-m",
            "--model",
            "-1",
            "--ctx-checkpoints",
        ] {
            assert_eq!(contradiction(Runtime::Llamacpp, arg), None, "{arg}");
        }
        assert_eq!(
            contradiction(Runtime::Transformers, "--max-model-len"),
            None
        );
    }

    #[test]
    fn shells_are_recognised_and_their_scripts_read() {
        let words = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(is_shell(&words(&["sh", "-c", "vllm serve x"])));
        assert!(is_shell(&words(&["/bin/bash", "-lc", "vllm serve x"])));
        assert!(!is_shell(&words(&["vllm", "serve", "x"])));
        assert!(!is_shell(&words(&["bash", "script.sh"])));
        let script = words(&["sh", "-c", "exec vllm serve m --max-model-len 4096"]);
        assert!(first_contradiction(Runtime::Vllm, &script, &[]).is_some());
        let fine = words(&["sh", "-c", "exec vllm serve m $VRAMFIT_RUNTIME_ARGS"]);
        assert_eq!(first_contradiction(Runtime::Vllm, &fine, &[]), None);
        // The shell's -c is not llama.cpp's -c; the script's is.
        let server = words(&[
            "sh",
            "-c",
            "exec llama-server -m /m.gguf $VRAMFIT_RUNTIME_ARGS",
        ]);
        assert_eq!(first_contradiction(Runtime::Llamacpp, &server, &[]), None);
        let pinned = words(&["sh", "-c", "exec llama-server -m /m.gguf -c 8192"]);
        assert!(first_contradiction(Runtime::Llamacpp, &pinned, &[]).is_some());
        let direct = words(&["llama-server", "-c", "8192"]);
        assert!(first_contradiction(Runtime::Llamacpp, &direct, &[]).is_some());
    }
}
