//! A served replica's load read from its runtime's own Prometheus endpoint (pure): which
//! gauges each runtime exposes at the versions docs/runtime-contracts.md names, and the text
//! format parsed for them.
//!
//! | runtime | requests served | requests queued | KV cache fill (0 to 1) |
//! |---|---|---|---|
//! | vLLM 0.10.2, 0.11.0 (`/metrics`, always on) | `vllm:num_requests_running` | `vllm:num_requests_waiting` | `vllm:kv_cache_usage_perc` (a fraction despite its name; `vllm:gpu_cache_usage_perc` where only the deprecated name is shown) |
//! | llama.cpp b6327, b11312 (`llama-server --metrics`) | `llamacpp:requests_processing` | `llamacpp:requests_deferred` | — (removed from the server before b6327) |
//! | transformers, custom | `serve.autoscaling.metric.name` | — | — |
//!
//! Every series of a name is summed (vLLM labels them by model and engine).
use vramfit_api::Runtime;
use vramfit_api::autoscaling::CustomMetric;

use super::load::Reading;

/// The path a runtime serves its metrics on.
pub fn path(runtime: Runtime, custom: Option<&CustomMetric>) -> &str {
    match (runtime, custom) {
        (Runtime::Vllm | Runtime::Llamacpp, _) | (_, None) => "/metrics",
        (_, Some(metric)) => metric.path(),
    }
}

/// The names a runtime's load is read from.
struct Names<'a> {
    running: &'a [&'a str],
    waiting: &'a [&'a str],
    kv_cache: &'a [&'a str],
}

const VLLM: Names<'static> = Names {
    running: &["vllm:num_requests_running"],
    waiting: &["vllm:num_requests_waiting"],
    kv_cache: &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
};

const LLAMA_CPP: Names<'static> = Names {
    running: &["llamacpp:requests_processing"],
    waiting: &["llamacpp:requests_deferred"],
    kv_cache: &[],
};

/// Why a replica's metrics say nothing of its load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnreadableLoad {
    /// The gauge of requests served is not in the text.
    #[error("no {0} in the replica's metrics (is its metrics endpoint on?)")]
    Missing(String),
}

/// The replica's load from its metrics `text`.
pub fn reading(
    runtime: Runtime,
    custom: Option<&CustomMetric>,
    text: &str,
) -> Result<Reading, UnreadableLoad> {
    let names = match (runtime, custom) {
        (Runtime::Vllm, _) => VLLM,
        (Runtime::Llamacpp, _) => LLAMA_CPP,
        (_, Some(metric)) => {
            let running = sum(text, &[metric.name.as_str()])
                .ok_or_else(|| UnreadableLoad::Missing(metric.name.clone()))?;
            return Ok(Reading {
                running,
                waiting: 0.0,
                kv_cache_usage: None,
            });
        }
        (_, None) => return Err(UnreadableLoad::Missing("a metric name".to_string())),
    };
    let running = sum(text, names.running)
        .ok_or_else(|| UnreadableLoad::Missing(names.running[0].to_string()))?;
    Ok(Reading {
        running,
        waiting: sum(text, names.waiting).unwrap_or(0.0),
        kv_cache_usage: sum(text, names.kv_cache),
    })
}

/// The sum of every sample of the first of `names` the text has; `None` when it has none.
fn sum(text: &str, names: &[&str]) -> Option<f64> {
    names.iter().find_map(|name| {
        text.lines()
            .filter_map(|line| sample(line, name))
            .fold(None, |total, value| Some(total.unwrap_or(0.0) + value))
    })
}

/// The value of a sample line of metric `name` (`name value`, `name{labels} value`, either
/// with a timestamp after), or `None`.
fn sample(line: &str, name: &str) -> Option<f64> {
    let rest = line.trim_start().strip_prefix(name)?;
    let rest = match rest.chars().next()? {
        '{' => &rest[rest.find('}')? + 1..],
        ' ' | '\t' => rest,
        _ => return None, // a longer name that starts with this one
    };
    let value: f64 = rest.split_whitespace().next()?.parse().ok()?;
    value.is_finite().then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM_0_11: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="mistral"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="mistral"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="mistral"} 0.25
vllm:num_requests_running_total_bogus 99
"#;

    #[test]
    fn vllm_running_waiting_and_kv_cache_are_read_and_a_longer_name_is_not_taken() {
        let r = reading(Runtime::Vllm, None, VLLM_0_11).unwrap();
        assert_eq!(
            (r.running, r.waiting, r.kv_cache_usage),
            (3.0, 2.0, Some(0.25))
        );
    }

    #[test]
    fn vllm_0_10_s_kv_cache_name_is_read_and_two_engines_are_summed() {
        let text = "vllm:num_requests_running{engine=\"0\"} 1\nvllm:num_requests_running{engine=\"1\"} 4\nvllm:gpu_cache_usage_perc{engine=\"0\"} 0.5\n";
        let r = reading(Runtime::Vllm, None, text).unwrap();
        assert_eq!(
            (r.running, r.waiting, r.kv_cache_usage),
            (5.0, 0.0, Some(0.5))
        );
    }

    #[test]
    fn llama_server_processing_and_deferred_are_read() {
        let text = "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 2\nllamacpp:requests_deferred 7\n";
        let r = reading(Runtime::Llamacpp, None, text).unwrap();
        assert_eq!((r.running, r.waiting, r.kv_cache_usage), (2.0, 7.0, None));
    }

    #[test]
    fn a_server_without_its_metrics_on_is_unreadable_not_idle() {
        // llama-server without `--metrics` answers 501 with a JSON error.
        let off = r#"{"error":{"code":501,"message":"This server does not support metrics endpoint. Start it with `--metrics`","type":"not_supported_error"}}"#;
        let error = reading(Runtime::Llamacpp, None, off).unwrap_err();
        assert!(
            error.to_string().contains("llamacpp:requests_processing"),
            "{error}"
        );
        assert!(reading(Runtime::Vllm, None, "vllm:num_requests_running NaN\n").is_err());
    }

    #[test]
    fn a_custom_runtime_is_read_by_its_named_gauge_on_its_path() {
        let metric = CustomMetric {
            name: "app_inflight".into(),
            path: Some("/stats".into()),
        };
        let text = "app_inflight{route=\"a\"} 2 1700000000\napp_inflight{route=\"b\"} 3\n";
        let r = reading(Runtime::Custom, Some(&metric), text).unwrap();
        assert_eq!(r.running, 5.0);
        assert_eq!(path(Runtime::Custom, Some(&metric)), "/stats");
        assert_eq!(path(Runtime::Vllm, Some(&metric)), "/metrics");
    }
}
