//! One adapter of `serve.adapters` from the fine-tuning job that wrote it (docs/serving.md):
//! accepted as a [`ResolvedAdapter`] with the numbers every replica is planned with, or
//! refused with the reason the `AdaptersReady` condition carries and one line saying what to
//! do. Pure: the operator passes the jobs of its store, `vramfit plan` those of the file.
use vramfit_api::adapters::{
    AdapterSpec, PEFT_CONFIG_FILE, PEFT_WEIGHTS_BIN_FILE, PEFT_WEIGHTS_FILE, ResolvedAdapter,
    TrainedAdapter, adapter_mount_path,
};
use vramfit_api::conditions::Reason;
use vramfit_api::tuning::{ALL_LINEAR, DEFAULT_LORA_RANK, TuningMethod, TuningMethodRequest};
use vramfit_api::{InferenceJob, ModelSpec, Phase, Runtime};

use super::memory::{VLLM_LORA_RANKS, vllm_max_lora_rank};
use crate::model_catalog;

/// The GGUF conversion of an adapter a training run writes at its output's root for
/// llama.cpp (docs/workload-contract.md).
pub const GGUF_ADAPTER_FILE: &str = "adapter_model.gguf";

/// What the tuning job is known by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The operator: the tuning job must have succeeded and reported its adapter
    /// (`status.result.adapter`), whose numbers are used.
    Cluster,
    /// `vramfit plan`, without a cluster: the adapter is planned from the tuning job's spec
    /// (`tuning.lora`, rank 16, alpha 2 × rank and `all-linear` by default) and assumed to be
    /// written as the workload contract says (`adapter_config.json`,
    /// `adapter_model.safetensors`, `adapter_model.gguf`).
    Planned,
}

/// Why an adapter is not served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterRefusal {
    /// The `AdaptersReady=False` reason (`AdapterJobNotFound`, …).
    pub reason: &'static str,
    /// One line naming the adapter and the tuning job, and what to do.
    pub message: String,
}

impl std::fmt::Display for AdapterRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AdapterRefusal {}

/// Resolves `adapter` of the served job `served` from its tuning job `tuning` (the
/// InferenceJob of that name in the served job's namespace, `None` if there is none).
pub fn from_tuning_job(
    adapter: &AdapterSpec,
    served: &InferenceJob,
    tuning: Option<&InferenceJob>,
    mode: Mode,
) -> Result<ResolvedAdapter, AdapterRefusal> {
    let name = &adapter.name;
    let job = &adapter.tuning_job.name;
    let refuse = |reason: Reason, what: String| AdapterRefusal {
        reason: reason.as_str(),
        message: format!("adapter {name}: {what}"),
    };
    let Some(tuning) = tuning else {
        return Err(refuse(
            Reason::AdapterJobNotFound,
            format!(
                "no InferenceJob {job} in this namespace; create the fine-tuning job or name another in serve.adapters[].tuningJob.name"
            ),
        ));
    };
    let Some(section) = &tuning.spec.tuning else {
        return Err(refuse(
            Reason::AdapterNotTuning,
            format!(
                "InferenceJob {job} is not a fine-tuning job (no spec.tuning); name a job that trains a lora or qlora adapter"
            ),
        ));
    };
    let planned_method = tuning
        .status
        .as_ref()
        .and_then(|s| s.plan.as_ref())
        .and_then(|p| p.tuning.as_ref())
        .map(|t| t.method);
    if section.method == TuningMethodRequest::Full
        || (mode == Mode::Cluster && planned_method == Some(TuningMethod::Full))
    {
        return Err(refuse(
            Reason::AdapterNotLora,
            format!(
                "fine-tuning job {job} trains every parameter (method full): it writes a model, not an adapter; train with method lora or qlora, or serve its output as a model"
            ),
        ));
    }
    let trained_on = identity(&tuning.spec.model);
    let serving = identity(&served.spec.model);
    if !same_model(&tuning.spec.model, &served.spec.model, served.spec.runtime) {
        return Err(refuse(
            Reason::AdapterBaseMismatch,
            format!(
                "fine-tuning job {job} trained it on {trained_on}, and this job serves {serving}; serve the adapter on the model it was trained on"
            ),
        ));
    }
    let trained = match mode {
        Mode::Planned => planned(tuning),
        Mode::Cluster => {
            let status = tuning.status.as_ref();
            let phase = status.and_then(|s| s.phase);
            if phase != Some(Phase::Succeeded) {
                let phase = phase.map_or("not started".to_string(), |p| format!("{p:?}"));
                return Err(refuse(
                    Reason::AdapterJobNotSucceeded,
                    format!(
                        "fine-tuning job {job} has not succeeded (phase {phase}); the adapter is served once it has"
                    ),
                ));
            }
            let reported = status
                .and_then(|s| s.result.as_ref())
                .and_then(|r| r.adapter.as_ref());
            match reported {
                Some(adapter) if adapter.is_valid() => adapter.clone(),
                Some(_) => {
                    return Err(refuse(
                        Reason::AdapterNotReported,
                        format!(
                            "fine-tuning job {job} reported a malformed adapter (status.result.adapter); its training run must report the files it wrote, relative to its output, and a rank of at least 1"
                        ),
                    ));
                }
                None => {
                    return Err(refuse(
                        Reason::AdapterNotReported,
                        format!(
                            "fine-tuning job {job} reported no adapter (status.result.adapter); its training run must report the adapter it wrote in its TrainingResult line (docs/workload-contract.md)"
                        ),
                    ));
                }
            }
        }
    };
    let runtime = served.spec.runtime;
    let gguf = trained.file_ending(".gguf");
    let has = |file: &str| trained.files.iter().any(|f| f == file);
    match runtime {
        Runtime::Llamacpp if gguf.is_none() => {
            return Err(refuse(
                Reason::AdapterFileMissing,
                format!(
                    "fine-tuning job {job} wrote no GGUF adapter (files: {}); llama.cpp loads a .gguf adapter: convert it with llama.cpp's convert_lora_to_gguf.py to {GGUF_ADAPTER_FILE} at its output's root",
                    trained.files.join(", ")
                ),
            ));
        }
        Runtime::Vllm
            if !has(PEFT_CONFIG_FILE)
                || !(has(PEFT_WEIGHTS_FILE) || has(PEFT_WEIGHTS_BIN_FILE)) =>
        {
            return Err(refuse(
                Reason::AdapterFileMissing,
                format!(
                    "fine-tuning job {job} wrote no PEFT adapter at its output's root (files: {}); vLLM loads {PEFT_CONFIG_FILE} with {PEFT_WEIGHTS_FILE} (PEFT save_pretrained)",
                    trained.files.join(", ")
                ),
            ));
        }
        _ => {}
    }
    if runtime == Runtime::Vllm && vllm_max_lora_rank(trained.rank).is_none() {
        let largest = VLLM_LORA_RANKS.last().copied().unwrap_or(u32::MAX);
        return Err(refuse(
            Reason::AdapterRankTooHigh,
            format!(
                "rank {} of fine-tuning job {job} is above vLLM's largest --max-lora-rank ({largest}); train it at rank {largest} or less",
                trained.rank
            ),
        ));
    }
    if let Some(why) = output_volume_problem(tuning) {
        return Err(refuse(
            Reason::AdapterNoOutputVolume,
            format!(
                "fine-tuning job {job} {why}; the adapter must stay on a volume that outlives its pod: set tuning.outputVolume to a PersistentVolumeClaim's volume"
            ),
        ));
    }
    let mount = adapter_mount_path(name);
    let path = match (runtime, gguf) {
        (Runtime::Llamacpp, Some(file)) => format!("{mount}/{file}"),
        _ => mount,
    };
    Ok(ResolvedAdapter {
        name: name.clone(),
        source: format!("tuningJob/{job}"),
        path,
        rank: trained.rank,
        alpha: trained.alpha,
        target_modules: trained.target_modules,
        bytes: trained.bytes,
    })
}

/// The adapter a tuning job's spec will write, as the workload contract says it is written.
fn planned(tuning: &InferenceJob) -> TrainedAdapter {
    let lora = tuning
        .spec
        .tuning
        .as_ref()
        .and_then(|t| t.lora.clone())
        .unwrap_or_default();
    let rank = lora.rank.unwrap_or(DEFAULT_LORA_RANK);
    TrainedAdapter {
        files: [PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE, GGUF_ADAPTER_FILE]
            .map(String::from)
            .to_vec(),
        rank,
        alpha: Some(f64::from(lora.alpha.unwrap_or(rank.saturating_mul(2)))),
        target_modules: lora
            .target_modules
            .unwrap_or_else(|| vec![ALL_LINEAR.to_string()]),
        base_model: None,
        bytes: None,
    }
}

/// Why the tuning job's output does not outlive its pod, if it does not: no
/// `tuning.outputVolume`, a name of no volume of `spec.pod.volumes`, or a volume that is gone
/// with the pod (`emptyDir`, a generic or CSI ephemeral volume).
fn output_volume_problem(tuning: &InferenceJob) -> Option<String> {
    let Some(name) = tuning
        .spec
        .tuning
        .as_ref()
        .and_then(|t| t.output_volume.as_deref())
    else {
        return Some("has no tuning.outputVolume: its output is gone with its pod".to_string());
    };
    let volume = tuning
        .spec
        .pod
        .iter()
        .flat_map(|pod| &pod.volumes)
        .find(|v| v.name == name);
    let Some(volume) = volume else {
        return Some(format!(
            "names output volume {name}, which is not in its spec.pod.volumes"
        ));
    };
    let kind = if volume.empty_dir.is_some() {
        "an emptyDir"
    } else if volume.ephemeral.is_some() {
        "an ephemeral volume"
    } else if volume.csi.is_some() {
        "a CSI ephemeral volume"
    } else {
        return None;
    };
    Some(format!(
        "writes to output volume {name}, {kind}: gone with its pod"
    ))
}

/// Whether the model a tuning job trained on is the one a job serves under `runtime`: their
/// Hugging Face repositories where both name one (except under llama.cpp, whose repository
/// holds a GGUF conversion), else whether any name of one is a name of the other
/// ([`names`]); letters' case aside.
fn same_model(trained: &ModelSpec, served: &ModelSpec, runtime: Runtime) -> bool {
    if let (Some(a), Some(b)) = (&trained.hugging_face, &served.hugging_face)
        && runtime != Runtime::Llamacpp
    {
        return a.repo.eq_ignore_ascii_case(&b.repo);
    }
    let served = names(served);
    names(trained)
        .iter()
        .any(|a| served.iter().any(|b| a.eq_ignore_ascii_case(b)))
}

/// The names a job's model goes by, the first the one a message uses: its preset's model (a
/// GGUF preset counts as the model it quantizes), the name it gives, its Hugging Face
/// repository; the resolved name (`custom-model`) where it has none of them.
fn names(model: &ModelSpec) -> Vec<String> {
    let preset = model.preset.as_deref().and_then(|key| {
        model_catalog::gguf_base(key).or_else(|| model_catalog::preset(key).map(|p| p.shape.name))
    });
    let names: Vec<String> = preset
        .map(str::to_string)
        .into_iter()
        .chain(model.name.clone())
        .chain(model.hugging_face.as_ref().map(|hf| hf.repo.clone()))
        .collect();
    if names.is_empty() {
        let resolved = model_catalog::resolve(model)
            .map_or_else(|_| "custom-model".to_string(), |shape| shape.name);
        return vec![resolved];
    }
    names
}

/// The name a message gives a job's model.
fn identity(model: &ModelSpec) -> String {
    names(model).into_iter().next().unwrap_or_default()
}
