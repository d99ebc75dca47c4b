//! A job's own command and args against the plan (docs/runtime-contracts.md): planned flags
//! in any spelling are refused, and a shell command gets the flags as one env var and a
//! warning.
mod common;

use common::{job, plan, spec};
use vramfit_planner::{resolve_job, workload};

#[test]
fn a_user_flag_that_contradicts_the_plan_is_an_invalid_spec_naming_the_field() {
    for (runtime, args, field) in [
        ("vllm", "['--max-model-len=4096']", "contextLength"),
        ("vllm", "['-tp', '2']", "gpus.min/gpus.max"),
        (
            "vllm",
            "['--gpu_memory_utilization', '0.9']",
            "memoryBufferMib",
        ),
        ("vllm", "['--quantization', 'awq']", "allowedQuantizations"),
        ("llamacpp", "['-ngl', '99']", "llamaCpp.gpuLayers"),
        (
            "llamacpp",
            "['--cache-type-v=q8_0']",
            "llamaCpp.kvCacheTypes",
        ),
    ] {
        let preset = if runtime == "llamacpp" {
            "mistral-7b-instruct-v0.3-q4_k_m"
        } else {
            "mistral-7b-instruct-v0.3"
        };
        let yaml =
            format!("{{model: {{preset: {preset}}}, runtime: {runtime}, image: x, args: {args}}}");
        let err = resolve_job(&spec(&yaml)).expect_err(&yaml).to_string();
        assert!(err.contains(field), "{yaml}: {err}");
    }
    let own = "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, \
               args: ['--port', '8000', '--served-model-name', 'm']}";
    assert!(resolve_job(&spec(own)).is_ok());
    let other = "{model: {preset: mistral-7b-instruct-v0.3}, runtime: transformers, image: x, \
                 args: ['--max-model-len', '4096']}";
    assert!(
        resolve_job(&spec(other)).is_ok(),
        "not a flag of the runtime"
    );
}

/// Splits a POSIX shell string of plain and single-quoted words.
fn unquote(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let (mut word, mut quoted, mut started) = (String::new(), false, false);
    for c in s.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                started = true;
            }
            ' ' if !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

#[test]
fn a_shell_command_gets_the_flags_as_one_env_var_and_a_warning() {
    let j = job("{model: {preset: internvl3-8b}, runtime: vllm, image: x, \
         command: [sh, -c, 'exec vllm serve OpenGVLab/InternVL3-8B $VRAMFIT_RUNTIME_ARGS']}");
    assert!(j.shell_command);
    let p = plan(&j, "a10g-x1").unwrap();
    assert!(
        p.warnings.iter().any(|w| w.contains("shell script")),
        "{:?}",
        p.warnings
    );
    let env: std::collections::BTreeMap<_, _> = workload::plan_env(&j, &p).into_iter().collect();
    assert_eq!(
        unquote(&env["VRAMFIT_RUNTIME_ARGS"]),
        workload::runtime_args(&j, &p),
        "{}",
        env["VRAMFIT_RUNTIME_ARGS"]
    );
    let direct =
        job("{model: {preset: internvl3-8b}, runtime: vllm, image: x, command: [vllm, serve]}");
    assert!(plan(&direct, "a10g-x1").unwrap().warnings.is_empty());
    let script = "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, \
                  command: [bash, -lc, 'vllm serve m --max-model-len 2048']}";
    let err = resolve_job(&spec(script)).unwrap_err().to_string();
    assert!(err.contains("--max-model-len"), "{err}");
}

#[test]
fn llamacpp_env_spellings_of_planned_flags_are_refused() {
    for name in [
        "LLAMA_ARG_N_GPU_LAYERS",
        "LLAMA_ARG_CTX_SIZE",
        "LLAMA_ARG_FLASH_ATTN",
    ] {
        let yaml = format!(
            "{{model: {{preset: mistral-7b-instruct-v0.3-q4_k_m}}, runtime: llamacpp, image: x, \
             pod: {{env: [{{name: {name}, value: '1'}}]}}}}"
        );
        let err = resolve_job(&spec(&yaml)).expect_err(name).to_string();
        assert!(
            err.contains(name) && err.contains("llama.cpp flag"),
            "{err}"
        );
    }
    let own = "{model: {preset: mistral-7b-instruct-v0.3-q4_k_m}, runtime: llamacpp, image: x, \
               pod: {env: [{name: LLAMA_ARG_THREADS, value: '8'}]}}";
    assert!(resolve_job(&spec(own)).is_ok());
}
