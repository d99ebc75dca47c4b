//! The runtime versions vramfit supports and every flag it emits for them, with the version
//! that introduced each one (docs/runtime-contracts.md renders this table; a test keeps the
//! two equal and checks every emitted argument list against it).
use vramfit_api::Runtime;

/// A runtime version: how it is written, and a number that orders versions of one runtime
/// (llama.cpp: year × 100 + month of the change, as its builds are dated commits; vLLM:
/// major × 10000 + minor × 100 + patch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    /// As the runtime's project writes it.
    pub label: &'static str,
    /// Orders versions of one runtime.
    pub order: u32,
}

/// The oldest version vramfit supports for a runtime, and the versions whose source the
/// flag table was checked against.
#[derive(Clone, Copy, Debug)]
pub struct Pin {
    /// Runtime.
    pub runtime: Runtime,
    /// Oldest supported version.
    pub oldest: Version,
    /// Versions whose argument definitions were read.
    pub verified: &'static str,
}

/// What values vramfit passes with a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Values {
    /// A whole number (at least the given minimum).
    Count(u32),
    /// A fraction in (0, 1] with two decimals.
    Fraction,
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// A JSON object with only these keys.
    JsonObject(&'static [&'static str]),
    /// A comma-separated list of `host:port` endpoints.
    Endpoints,
    /// A comma-separated list of at most this many whole numbers.
    Shares(usize),
    /// This word followed by a device index (`CUDA0`).
    Indexed(&'static str),
    /// `host:port`.
    Endpoint,
    /// A switch: the flag alone, no value after it.
    Switch,
    /// One or more `name=path` words after the flag (argparse `nargs='+'`): a served LoRA
    /// adapter's name and its folder in the pod.
    NamedPaths,
    /// An absolute path in the pod; the flag is repeated, once per path.
    RepeatedPath,
}

impl Values {
    /// Whether vramfit may pass `value`.
    pub fn accepts(&self, value: &str) -> bool {
        match self {
            Values::Count(min) => value.parse::<u32>().is_ok_and(|n| n >= *min),
            Values::Fraction => {
                value.len() == 4 && value.parse::<f64>().is_ok_and(|f| f > 0.0 && f <= 1.0)
            }
            Values::OneOf(words) => words.contains(&value),
            // Keys are checked by the tests, which parse the object.
            Values::JsonObject(_) => value.starts_with('{') && value.ends_with('}'),
            Values::Endpoints => !value.is_empty() && value.split(',').all(is_endpoint),
            Values::Shares(most) => {
                let shares: Vec<&str> = value.split(',').collect();
                shares.len() <= *most && shares.iter().all(|s| s.parse::<u32>().is_ok())
            }
            Values::Indexed(word) => value
                .strip_prefix(word)
                .is_some_and(|i| i.parse::<u32>().is_ok()),
            Values::Endpoint => is_endpoint(value),
            Values::Switch => value.is_empty(),
            Values::NamedPaths => !value.is_empty() && value.split(' ').all(is_named_path),
            Values::RepeatedPath => is_pod_path(value),
        }
    }

    /// Whether the flag may come more than once.
    pub fn repeats(&self) -> bool {
        matches!(self, Values::RepeatedPath)
    }

    /// How the values read in a table.
    pub fn describe(&self) -> String {
        match self {
            Values::Count(min) => format!("integer ≥ {min}"),
            Values::Fraction => "fraction, 2 decimals".to_string(),
            Values::OneOf(words) => words.join(" \\| "),
            Values::JsonObject(keys) => format!("JSON object: {}", keys.join(", ")),
            Values::Endpoints => "host:port,host:port,…".to_string(),
            Values::Shares(most) => format!("at most {most} integers, comma-separated"),
            Values::Indexed(word) => format!("{word}0, {word}1, …"),
            Values::Endpoint => "host:port".to_string(),
            Values::Switch => "(a switch, no value)".to_string(),
            Values::NamedPaths => "name=path name=path …, one word each".to_string(),
            Values::RepeatedPath => "a path; the flag once per path".to_string(),
        }
    }
}

/// An absolute path without spaces, commas, `=` or `..` parts (joined from an adapter's
/// name and the file its run reported).
fn is_pod_path(value: &str) -> bool {
    value.starts_with('/')
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c == ',' || c == '=' || c.is_control())
        && value
            .split('/')
            .skip(1)
            .all(|part| !part.is_empty() && part != "." && part != "..")
}

/// `name=path` as vLLM's `--lora-modules` reads the old format: one `=`, no `,` (else it
/// parses the word as JSON), a name of lower-case letters, digits and `-`.
fn is_named_path(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, path)| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && is_pod_path(path)
    })
}

/// `host:port`, the host a DNS name or an address.
fn is_endpoint(value: &str) -> bool {
    value.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
            && port.parse::<u16>().is_ok_and(|p| p > 0)
    })
}

/// One flag vramfit emits.
#[derive(Clone, Copy, Debug)]
pub struct FlagContract {
    /// Runtime that reads it.
    pub runtime: Runtime,
    /// The flag, in the spelling vramfit emits.
    pub flag: &'static str,
    /// Values vramfit passes.
    pub values: Values,
    /// Always emitted (for a plan of this runtime), or only for some plans.
    pub always: bool,
    /// Where the plan's value comes from.
    pub from_plan: &'static str,
    /// The version that introduced the flag in this form.
    pub introduced: Version,
    /// Where that is seen.
    pub evidence: &'static str,
}

/// Oldest supported version of each runtime that takes flags.
pub const PINS: &[Pin] = &[
    Pin {
        runtime: Runtime::Llamacpp,
        oldest: LLAMACPP_B6327,
        verified: "`common/arg.cpp` of the flash_attn_type era (`-fa, --flash-attn` takes on, off or auto; `set_env` names) and the b6327 sync notes of bindings (flash_attn_type introduced); `src/llama-model.cpp` `load_tensors` before and after PR 18148",
    },
    Pin {
        runtime: Runtime::Vllm,
        oldest: Version {
            label: "0.10.2",
            order: 1002,
        },
        verified: "0.10.2 and 0.11.0 (`vllm/engine/arg_utils.py`, `vllm/config`)",
    },
];

const LLAMACPP_B6327: Version = Version {
    label: "b6327 (Aug 2025; a bare switch before)",
    order: 202508,
};

const fn vllm(label: &'static str, order: u32) -> Version {
    Version { label, order }
}

/// Every flag vramfit appends to a job's arguments.
pub const FLAGS: &[FlagContract] = &[
    FlagContract {
        runtime: Runtime::Llamacpp,
        flag: "--n-gpu-layers",
        values: Values::Count(0),
        always: true,
        from_plan: "`llamaCpp.gpuLayers` (blocks + 1 = all, output layer included)",
        introduced: Version {
            label: "commit 905d87b (May 2023)",
            order: 202305,
        },
        evidence: "`src/llama-model.cpp` `load_tensors`: at most `n_layer + 1` layers offload, the output layer included; a partial count offloads the output layer first from PR 18148 (Dec 2025)",
    },
    FlagContract {
        runtime: Runtime::Llamacpp,
        flag: "--ctx-size",
        values: Values::Count(1),
        always: true,
        from_plan: "context × batchSize (the server splits it across its slots)",
        introduced: Version {
            label: "2023 (`-c`; present at b6327)",
            order: 202303,
        },
        evidence: "`common/arg.cpp` `-c, --ctx-size N`",
    },
    FlagContract {
        runtime: Runtime::Llamacpp,
        flag: "--parallel",
        values: Values::Count(1),
        always: true,
        from_plan: "batchSize",
        introduced: Version {
            label: "Dec 2023 or earlier",
            order: 202312,
        },
        evidence: "`common/arg.cpp` `-np, --parallel N`; issue 4666 (Dec 2023) quotes the server's `-np N, --parallel N`",
    },
    FlagContract {
        runtime: Runtime::Llamacpp,
        flag: "--cache-type-k",
        values: Values::OneOf(&["f16", "q8_0", "q4_0"]),
        always: true,
        from_plan: "`llamaCpp.kvCacheType`",
        introduced: Version {
            label: "PR 4312 (Dec 2023)",
            order: 202312,
        },
        evidence: "PR 4312 adds `-ctk/--cache-type-k`; `common/arg.cpp` allowed values include f16, q8_0, q4_0",
    },
    FlagContract {
        runtime: Runtime::Llamacpp,
        flag: "--cache-type-v",
        values: Values::OneOf(&["f16", "q8_0", "q4_0"]),
        always: true,
        from_plan: "`llamaCpp.kvCacheType` (quantized only with flash attention)",
        introduced: Version {
            label: "PR 4312 (Dec 2023)",
            order: 202312,
        },
        evidence: "PR 4312 adds `-ctv/--cache-type-v`; a quantized V cache needs flash attention (PR 5021, Apr 2024)",
    },
    FlagContract {
        runtime: Runtime::Llamacpp,
        flag: "--flash-attn",
        values: Values::OneOf(&["on", "off"]),
        always: true,
        from_plan: "`flashAttention` (llama.cpp kernels from compute capability 6.0)",
        introduced: LLAMACPP_B6327,
        evidence: "`common/arg.cpp` `-fa, --flash-attn` takes on, off or auto (a bare switch from PR 5021 until then; `flash_attn_type` from b6327)",
    },
    FlagContract {
        runtime: Runtime::Llamacpp,
        flag: "--host",
        values: Values::OneOf(&["0.0.0.0"]),
        always: false,
        from_plan: "served jobs: every address of the pod, where probes and the Service reach it",
        introduced: Version {
            label: "2023 (the server's own option; `common/arg.cpp` at b6327)",
            order: 202307,
        },
        evidence: "`common/arg.cpp` `--host HOST` (env `LLAMA_ARG_HOST`; a name ending in `.sock` binds a Unix socket), server only",
    },
    FlagContract {
        runtime: Runtime::Llamacpp,
        flag: "--port",
        values: Values::Count(1),
        always: false,
        from_plan: "served jobs: `serve.port`",
        introduced: Version {
            label: "2023 (the server's own option; `common/arg.cpp` at b6327)",
            order: 202307,
        },
        evidence: "`common/arg.cpp` `--port PORT` (env `LLAMA_ARG_PORT`, default 8080), server only",
    },
    FlagContract {
        runtime: Runtime::Llamacpp,
        flag: "--metrics",
        values: Values::Switch,
        always: false,
        from_plan: "served jobs: the Prometheus `/metrics` endpoint the autoscaler reads (`llamacpp:requests_processing`, `llamacpp:requests_deferred`)",
        introduced: Version {
            label: "2023 (the server's own option; `common/arg.cpp` at b6327)",
            order: 202307,
        },
        evidence: "`common/arg.cpp` `--metrics` (env `LLAMA_ARG_ENDPOINT_METRICS`, off by default; lines 2950-2956 at b6301 and 2970-2976 at b6431, identical either side of b6327; lines 3591-3597 at 0c1e5709, b11312); without it `/metrics` answers 501",
    },
    FlagContract {
        runtime: Runtime::Llamacpp,
        flag: "--rpc",
        values: Values::Endpoints,
        always: false,
        from_plan: "groups (`llamaCppRpc`), leader only: every worker GPU's `rpc-server`, worker by worker (`<pod>.<group>.<namespace>:<group.port + GPU>`)",
        introduced: Version {
            label: "PR 6829 (May 2024; builds with `GGML_RPC`)",
            order: 202405,
        },
        evidence: "`common/arg.cpp` `--rpc SERVERS`, comma-separated, only where `llama_supports_rpc()` (line 2321 at 4227c9be, before b6327; line 2680 at 0c1e5709, b11312); `src/llama.cpp` puts RPC devices first in the model's devices (line 195 at 4227c9be, line 276 at 0c1e5709)",
    },
    FlagContract {
        runtime: Runtime::Llamacpp,
        flag: "--tensor-split",
        values: Values::Shares(15),
        always: false,
        from_plan: "groups, leader only: `group.tensorSplit`, one share per device in llama.cpp's order (the workers' RPC devices, then the leader's GPUs)",
        introduced: Version {
            label: "2023 (`-ts`; present at b6327)",
            order: 202306,
        },
        evidence: "`common/arg.cpp` `-ts, --tensor-split N0,N1,...`: fewer values than `llama_max_devices()`, 16 (line 2485 at 4227c9be, line 2831 at 0c1e5709; `src/llama.cpp` `llama_max_devices` returns 16)",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--dtype",
        values: Values::OneOf(&["bfloat16", "float16"]),
        always: true,
        from_plan: "`dtype`",
        introduced: vllm("0.2.0 or earlier (its oldest wheel)", 200),
        evidence: "`vllm/engine/arg_utils.py` `--dtype`",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--quantization",
        values: Values::OneOf(&["fp8", "bitsandbytes"]),
        always: false,
        from_plan: "`quantization`: int8 → fp8 (compute capability ≥ 8.0), nf4 → bitsandbytes",
        introduced: vllm("0.5.0 (fp8 from 0.4.1, bitsandbytes from 0.5.0)", 500),
        evidence: "`vllm/model_executor/layers/quantization/fp8.py` `get_min_capability` 80, Marlin below 8.9; `bitsandbytes_loader.py` quantizes in flight with `quantize_4bit` only; `arg_utils.py` sets the bitsandbytes load format",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--tensor-parallel-size",
        values: Values::Count(1),
        always: true,
        from_plan: "`gpuCount`",
        introduced: vllm("0.2.0 or earlier (its oldest wheel)", 200),
        evidence: "`vllm/engine/arg_utils.py` `--tensor-parallel-size, -tp`",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--gpu-memory-utilization",
        values: Values::Fraction,
        always: true,
        from_plan: "`memoryFractionPercent`: the share of VRAM the plan budgets (VRAM less the buffer)",
        introduced: vllm("0.2.0 or earlier (its oldest wheel)", 200),
        evidence: "`vllm/config/cache.py` `gpu_memory_utilization`",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--max-model-len",
        values: Values::Count(1),
        always: true,
        from_plan: "`contextLength`",
        introduced: vllm("0.2.0 or earlier (its oldest wheel)", 200),
        evidence: "`vllm/engine/arg_utils.py` `--max-model-len`",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--max-num-seqs",
        values: Values::Count(1),
        always: true,
        from_plan: "`batchSize`",
        introduced: vllm("0.2.0 or earlier (its oldest wheel)", 200),
        evidence: "`vllm/engine/arg_utils.py` `--max-num-seqs`",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--mm-processor-kwargs",
        values: Values::JsonObject(&["max_dynamic_patch"]),
        always: false,
        from_plan: "`maxTiles` (InternVL: `max_dynamic_patch`)",
        introduced: vllm("0.6.2", 602),
        evidence: "`vllm/config` `mm_processor_kwargs`; `vllm/model_executor/models/internvl.py` processor `max_dynamic_patch`",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--limit-mm-per-prompt",
        values: Values::JsonObject(&["image"]),
        always: false,
        from_plan: "one image per prompt (InternVL), as the memory estimate holds",
        introduced: vllm("0.8.5 (JSON form; key=value from 0.5.5)", 805),
        evidence: "`vllm/config` `limit_per_prompt` (JSON; default 999 per modality under V1)",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--host",
        values: Values::OneOf(&["0.0.0.0"]),
        always: false,
        from_plan: "served jobs: every address of the pod, where probes and the Service reach it",
        introduced: vllm("0.2.0 or earlier (its oldest wheel)", 200),
        evidence: "`vllm/entrypoints/openai/cli_args.py` `FrontendArgs.host` (unset: uvicorn's default)",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--port",
        values: Values::Count(1),
        always: false,
        from_plan: "served jobs: `serve.port`",
        introduced: vllm("0.2.0 or earlier (its oldest wheel)", 200),
        evidence: "`vllm/entrypoints/openai/cli_args.py` `FrontendArgs.port` (default 8000; `--uds` would make it ignore host and port)",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--pipeline-parallel-size",
        values: Values::Count(2),
        always: false,
        from_plan: "groups (`vllmRay`), leader only: `group.pipelineParallelSize`, the group's nodes",
        introduced: vllm(
            "0.5.1 (pipeline parallel in the server; the flag is older)",
            501,
        ),
        evidence: "`vllm/engine/arg_utils.py` `--pipeline-parallel-size, -pp` (0.10.2 line 642, 0.11.0 line 653)",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--distributed-executor-backend",
        values: Values::OneOf(&["ray"]),
        always: false,
        from_plan: "groups, leader only: the workers' GPUs join through the leader's Ray head",
        introduced: vllm("0.4.3 (`--worker-use-ray` before)", 403),
        evidence: "`vllm/engine/arg_utils.py` `--distributed-executor-backend` (0.10.2 line 639, 0.11.0 line 650); `vllm/config/parallel.py`: Ray is also the default where the world size exceeds the node's GPUs (0.10.2 lines 375-406); no `--nnodes`/`--node-rank`/`--master-addr` in either version",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--enable-lora",
        values: Values::Switch,
        always: false,
        from_plan: "served jobs with `serve.adapters`",
        introduced: vllm("0.10.2 or earlier (read at 0.10.2 and 0.11.0)", 1002),
        evidence: "`vllm/engine/arg_utils.py` argument group LoRAConfig, `--enable-lora` (`BooleanOptionalAction`, default off; 0.10.2 lines 799-802, 0.11.0 lines 830-833): the LoRA config is built only when it is on",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--max-loras",
        values: Values::Count(1),
        always: false,
        from_plan: "`adapters.maxPerBatch`: `serve.maxAdaptersPerBatch`, else the adapters served up to 4",
        introduced: vllm("0.10.2 or earlier (read at 0.10.2 and 0.11.0)", 1002),
        evidence: "`vllm/config/lora.py` `max_loras: int = 1` (lines 35-36; at least 1, lines 114-115), the same file in 0.10.2 and 0.11.0; flags from `get_kwargs(LoRAConfig)` in `arg_utils.py`",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--max-lora-rank",
        values: Values::OneOf(&["8", "16", "32", "64", "128", "256", "320", "512"]),
        always: false,
        from_plan: "`adapters.maxRank`: the smallest rank vLLM takes that holds every adapter's",
        introduced: vllm("0.10.2 or earlier (read at 0.10.2 and 0.11.0)", 1002),
        evidence: "`vllm/config/lora.py` `max_lora_rank: int = 16` (line 33); `__post_init__` takes only `possible_max_ranks = (8, 16, 32, 64, 128, 256, 320, 512)` (lines 102-109)",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--max-cpu-loras",
        values: Values::Count(1),
        always: false,
        from_plan: "every adapter served (at least `--max-loras`, which vLLM requires)",
        introduced: vllm("0.10.2 or earlier (read at 0.10.2 and 0.11.0)", 1002),
        evidence: "`vllm/config/lora.py` `max_cpu_loras: Optional[int] = None` (lines 42-44), `None` means `max_loras`, fewer is refused (lines 116-121)",
    },
    FlagContract {
        runtime: Runtime::Vllm,
        flag: "--lora-modules",
        values: Values::NamedPaths,
        always: false,
        from_plan: "`serve.adapters` in order: `name=/vramfit/adapters/<name>`, the name a request's `model` field asks for",
        introduced: vllm("0.10.2 or earlier (read at 0.10.2 and 0.11.0)", 1002),
        evidence: "`vllm/entrypoints/openai/cli_args.py` `LoRAParserAction` (lines 33-66: a word with `=` and no `,` is `name=path`, else JSON) and `FrontendArgs.lora_modules`, `nargs='+'` (lines 95-99; parser set up at 0.10.2 lines 201-204, 0.11.0 lines 205-208)",
    },
    FlagContract {
        runtime: Runtime::Llamacpp,
        flag: "--lora",
        values: Values::RepeatedPath,
        always: false,
        from_plan: "`serve.adapters` in order, one `--lora` each: `/vramfit/adapters/<name>/<its .gguf file>` (the adapter's id is its index); never `--lora-scaled`, whose syntax changed at b7448",
        introduced: Version {
            label: "b6327 or earlier (read at b6327 and b10470)",
            order: 202508,
        },
        evidence: "`common/arg.cpp` `--lora FNAME`, repeated for several adapters (b6327 lines 2562-2569; b10470 lines 2909-2918, which also split a comma-separated list: paths here have no comma)",
    },
];

/// The flag table of one runtime, as Markdown (docs/runtime-contracts.md holds it verbatim).
pub fn render_flag_table(runtime: Runtime) -> String {
    let mut out = String::from(
        "| flag | values vramfit passes | from the plan | always | introduced in | evidence |\n|---|---|---|---|---|---|\n",
    );
    for f in FLAGS.iter().filter(|f| f.runtime == runtime) {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            f.flag,
            f.values.describe(),
            f.from_plan,
            if f.always { "yes" } else { "when planned" },
            f.introduced.label,
            f.evidence
        ));
    }
    out
}

/// The flag contract for `runtime` and `flag`, if vramfit emits it.
pub fn contract(runtime: Runtime, flag: &str) -> Option<&'static FlagContract> {
    FLAGS
        .iter()
        .find(|f| f.runtime == runtime && f.flag == flag)
}

/// `args` read as the table reads them: each flag with the value after it, alone where it
/// is a switch, or with every word up to the next flag where it takes several (its value
/// then those words joined by a space); `Err` names the first argument that is not a flag of
/// `runtime`'s table.
pub fn flags_in(runtime: Runtime, args: &[String]) -> Result<Vec<(&str, String)>, String> {
    let mut flags = Vec::new();
    let mut rest = args.iter().peekable();
    while let Some(name) = rest.next() {
        let c = contract(runtime, name)
            .ok_or_else(|| format!("{name} is not in the {runtime:?} flag table"))?;
        let value = match c.values {
            Values::Switch => String::new(),
            Values::NamedPaths => {
                let mut words = Vec::new();
                while let Some(word) = rest.next_if(|w| !w.starts_with('-')) {
                    words.push(word.as_str());
                }
                if words.is_empty() {
                    return Err(format!("{name} without its values"));
                }
                words.join(" ")
            }
            _ => rest
                .next()
                .cloned()
                .ok_or_else(|| format!("{name} without its value"))?,
        };
        flags.push((name.as_str(), value));
    }
    Ok(flags)
}

/// The pin of `runtime`, if it takes flags.
pub fn pin(runtime: Runtime) -> Option<&'static Pin> {
    PINS.iter().find(|p| p.runtime == runtime)
}
