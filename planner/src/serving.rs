//! Served jobs (docs/serving.md): what a job with `spec.serve` adds to its plan's pod — where
//! the server listens (`--host 0.0.0.0 --port N` for vLLM and llama.cpp, `VRAMFIT_PORT` for
//! every runtime) — and the checks of its spec: a health route, and no command word or env
//! var that moves the listening socket away from the one the probes and the Service use.
use vramfit_api::{InferenceJobSpec, Runtime};

use crate::error::SpecError;
use crate::user_args::{first_refusal, spells};

/// The address a served runtime listens on: every address of the pod, so that the kubelet's
/// probes and the Service reach it.
pub const LISTEN_HOST: &str = "0.0.0.0";

/// What the planner needs of a served job.
#[derive(Clone, Debug, PartialEq)]
pub struct ServeInput {
    /// The port the server listens on.
    pub port: u16,
    /// The LoRA adapters it serves, as resolved (`crate::adapters::attach`); empty until
    /// then, and for a job without `serve.adapters`.
    pub adapters: Vec<vramfit_api::adapters::ResolvedAdapter>,
    /// `serve.maxAdaptersPerBatch` (vLLM's `--max-loras`).
    pub max_adapters_per_batch: Option<u32>,
    /// The adapters `serve.adapters` lists: a plan whose [`ServeInput::adapters`] are not
    /// those says so in a warning.
    pub listed_adapters: Vec<String>,
}

impl ServeInput {
    /// A served job's input on `port`, with no adapters.
    pub fn on_port(port: u16) -> Self {
        Self {
            port,
            adapters: Vec::new(),
            max_adapters_per_batch: None,
            listed_adapters: Vec::new(),
        }
    }

    /// Why the adapters planned are not the ones `serve.adapters` lists, if they are not
    /// (the caller did not resolve them with `crate::adapters::attach`).
    pub fn unresolved_adapters(&self) -> Option<String> {
        let planned: Vec<&str> = self.adapters.iter().map(|a| a.name.as_str()).collect();
        (planned != self.listed_adapters).then(|| {
            format!(
                "serve.adapters lists {} but the plan holds {}: adapters not resolved are not planned",
                words(self.listed_adapters.iter().map(String::as_str)),
                words(planned.into_iter())
            )
        })
    }
}

/// `a, b` or `none`.
fn words<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// vLLM's listening flags (`vllm/entrypoints/openai/cli_args.py` `FrontendArgs`: `host`,
/// `port`, and `uds`, a Unix socket that makes it ignore both).
const VLLM_LISTEN: &[&str] = &["--host", "--port", "--uds"];
/// `llama-server`'s listening flags (`common/arg.cpp`: `--host`, which binds a Unix socket
/// when it ends in `.sock`, and `--port`).
const LLAMACPP_LISTEN: &[&str] = &["--host", "--port"];
/// Their env spellings in `llama-server` (`set_env` of the same options).
const LLAMACPP_LISTEN_ENV: &[&str] = &["LLAMA_ARG_HOST", "LLAMA_ARG_PORT"];

/// Checks the `serve` section of `spec` against its runtime, command, args and env; `None` for
/// a batch job.
pub fn check(spec: &InferenceJobSpec) -> Result<Option<ServeInput>, SpecError> {
    let Some(serve) = &spec.serve else {
        return Ok(None);
    };
    if serve.port == 0 {
        return Err(SpecError::ZeroPort);
    }
    match &serve.health_path {
        Some(path) if !path.starts_with('/') => {
            return Err(SpecError::BadHealthPath { path: path.clone() });
        }
        Some(_) => {}
        None => {
            if let Some(runtime) = no_health_route(spec.runtime) {
                return Err(SpecError::NoHealthPath { runtime });
            }
        }
    }
    let listening: &[&str] = match spec.runtime {
        Runtime::Vllm => VLLM_LISTEN,
        Runtime::Llamacpp => LLAMACPP_LISTEN,
        Runtime::Transformers | Runtime::Custom => &[],
    };
    let refuse = |word: &str| {
        listening
            .iter()
            .find(|flag| spells(spec.runtime, word, flag))
            .map(|flag| {
                format!(
                    "{word} sets {flag}, where the server listens, which vramfit sets for a served job ({LISTEN_HOST}, serve.port); use serve.port instead"
                )
            })
    };
    if let Some(why) = first_refusal(&spec.command, &spec.args, refuse) {
        return Err(SpecError::CommandArgs { contradiction: why });
    }
    if !serve.adapters.is_empty() {
        if spec.gpus.max_nodes > 1 {
            return Err(SpecError::AdaptersInGroup);
        }
        let lora = |word: &str| crate::adapters::flags::refuse_user_flag(spec.runtime, word);
        if let Some(why) = first_refusal(&spec.command, &spec.args, lora) {
            return Err(SpecError::CommandArgs { contradiction: why });
        }
    }
    if spec.runtime == Runtime::Llamacpp {
        let env = spec.pod.iter().flat_map(|pod| &pod.env);
        if let Some(var) = env
            .into_iter()
            .find(|var| LLAMACPP_LISTEN_ENV.contains(&var.name.as_str()))
        {
            return Err(SpecError::ReservedEnv {
                name: var.name.clone(),
                why: "it moves where llama-server listens, which vramfit sets for a served job (serve.port)",
            });
        }
    }
    Ok(Some(ServeInput {
        port: serve.port,
        adapters: Vec::new(),
        max_adapters_per_batch: serve.max_adapters_per_batch,
        listed_adapters: serve.adapters.iter().map(|a| a.name.clone()).collect(),
    }))
}

/// The runtime's name when it has no health route of its own.
fn no_health_route(runtime: Runtime) -> Option<&'static str> {
    match runtime {
        Runtime::Vllm | Runtime::Llamacpp => None,
        Runtime::Transformers => Some("transformers"),
        Runtime::Custom => Some("custom"),
    }
}

/// The flags that make a served vLLM or llama.cpp server listen where vramfit probes it, and
/// a llama.cpp server serve the metrics the autoscaler reads (vLLM serves its own always).
pub fn listen_args(runtime: Runtime, serve: &ServeInput) -> Vec<String> {
    let mut args = match runtime {
        Runtime::Vllm | Runtime::Llamacpp => vec![
            "--host".to_string(),
            LISTEN_HOST.to_string(),
            "--port".to_string(),
            serve.port.to_string(),
        ],
        Runtime::Transformers | Runtime::Custom => Vec::new(),
    };
    if runtime == Runtime::Llamacpp {
        args.push("--metrics".to_string());
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_api::ServeSpec;

    fn spec(yaml: &str) -> InferenceJobSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn a_batch_job_has_no_serve_input_and_keeps_its_own_port_flags() {
        let batch = spec(
            "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, args: [--port, '9000']}",
        );
        assert_eq!(check(&batch), Ok(None));
    }

    #[test]
    fn a_served_job_gets_its_port_and_refuses_listening_flags_in_every_spelling() {
        let served = spec(
            "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, serve: {port: 9000}}",
        );
        assert_eq!(check(&served), Ok(Some(ServeInput::on_port(9000))));
        for word in [
            "--port",
            "--port=8000",
            "--host",
            "--uds=/tmp/s",
            "--host=127.0.0.1",
        ] {
            let mut bad = served.clone();
            bad.args = vec![word.to_string()];
            let Err(SpecError::CommandArgs { contradiction }) = check(&bad) else {
                panic!("{word} accepted")
            };
            assert!(contradiction.contains("serve.port"), "{contradiction}");
        }
        let mut script = served.clone();
        script.command = vec![
            "sh".into(),
            "-c".into(),
            "exec vllm serve m --port 80".into(),
        ];
        assert!(matches!(check(&script), Err(SpecError::CommandArgs { .. })));
        let mut fine = served.clone();
        fine.args = vec!["--served-model-name".into(), "chat".into()];
        assert!(check(&fine).is_ok());
    }

    #[test]
    fn llama_server_may_not_move_its_socket_by_env_either() {
        let served = spec(
            "{model: {preset: mistral-7b-instruct-v0.3-q4_k_m}, runtime: llamacpp, image: x, serve: {}, pod: {env: [{name: LLAMA_ARG_PORT, value: '80'}]}}",
        );
        assert!(matches!(
            check(&served),
            Err(SpecError::ReservedEnv { name, .. }) if name == "LLAMA_ARG_PORT"
        ));
        let mut args = served.clone();
        args.pod = None;
        args.args = vec!["--host".into(), "/tmp/llama.sock".into()];
        assert!(matches!(check(&args), Err(SpecError::CommandArgs { .. })));
    }

    #[test]
    fn transformers_and_custom_servers_name_their_health_route() {
        for runtime in ["transformers", "custom"] {
            let served = spec(&format!(
                "{{model: {{preset: internvl3-8b}}, runtime: {runtime}, image: x, serve: {{}}}}"
            ));
            assert_eq!(
                check(&served),
                Err(SpecError::NoHealthPath {
                    runtime: if runtime == "custom" {
                        "custom"
                    } else {
                        "transformers"
                    }
                })
            );
            let mut named = served.clone();
            named.serve = Some(ServeSpec {
                health_path: Some("/healthz".into()),
                ..ServeSpec::default()
            });
            assert_eq!(check(&named), Ok(Some(ServeInput::on_port(8000))));
            // No flag of theirs is read: a --port in their args is theirs to use.
            named.args = vec!["--port".into(), "8000".into()];
            assert!(check(&named).is_ok());
        }
        let mut relative = spec(
            "{model: {preset: internvl3-8b}, runtime: custom, image: x, serve: {healthPath: health}}",
        );
        assert!(matches!(
            check(&relative),
            Err(SpecError::BadHealthPath { .. })
        ));
        relative.serve = None;
        assert_eq!(check(&relative), Ok(None));
    }

    #[test]
    fn listening_flags_are_vllm_and_llamacpp_spellings() {
        let serve = ServeInput::on_port(8080);
        assert_eq!(
            listen_args(Runtime::Vllm, &serve),
            ["--host", "0.0.0.0", "--port", "8080"]
        );
        // llama-server serves /metrics (what the autoscaler reads) only when asked.
        assert_eq!(
            listen_args(Runtime::Llamacpp, &serve),
            ["--host", "0.0.0.0", "--port", "8080", "--metrics"]
        );
        assert!(listen_args(Runtime::Custom, &serve).is_empty());
    }
}
