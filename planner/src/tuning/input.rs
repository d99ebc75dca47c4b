//! A job's `tuning` section, checked and resolved with its defaults. Errors are the user's to
//! fix (the operator's `InvalidSpec`); the CRD refuses most of them already.
use thiserror::Error;
use vramfit_api::checkpoint::PreQuantizationMethod;
use vramfit_api::tuning::{
    ALL_LINEAR, DEFAULT_EFFECTIVE_BATCH, DEFAULT_LORA_DROPOUT_PERCENT, DEFAULT_LORA_RANK,
    DEFAULT_SEQUENCE_LENGTH, TuningMethodRequest,
};
use vramfit_api::{InferenceJobSpec, Runtime};

use crate::model_catalog::ModelShape;
use crate::tuning::reserved_mount::is_reserved;
use crate::tuning::shape::TrainingShape;

/// A tuning section ready to plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TuningInput {
    /// The method asked for.
    pub method: TuningMethodRequest,
    /// Tokens per sequence (capped at the model's limit).
    pub sequence_length: u32,
    /// Sequences per optimizer step over all GPUs.
    pub effective_batch: u32,
    /// LoRA settings with their defaults.
    pub lora: LoraSettings,
    /// The model's training numbers.
    pub shape: TrainingShape,
    /// The data volume's name, when set.
    pub data_volume: Option<String>,
    /// The output volume's name, when set.
    pub output_volume: Option<String>,
}

/// LoRA settings with their defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoraSettings {
    /// Rank.
    pub rank: u32,
    /// Alpha.
    pub alpha: u32,
    /// Dropout, percent.
    pub dropout_percent: u32,
    /// Target modules.
    pub target_modules: Vec<String>,
}

/// Why a tuning section cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TuningSpecError {
    /// A serving runtime.
    #[error("a tuning job runs a training program: runtime transformers or custom, not {runtime}")]
    NotATrainingRuntime {
        /// The job's runtime.
        runtime: &'static str,
    },
    /// `serve` beside `tuning`: a tuning job trains and ends, a served job never ends.
    #[error(
        "a job is either served (spec.serve) or fine-tuned (spec.tuning), not both: a tuning job trains and ends; serve its adapter or weights from a separate InferenceJob"
    )]
    Served,
    /// `allowedQuantizations` beside `tuning`.
    #[error(
        "a tuning job chooses its method with tuning.method (qlora trains on a 4-bit base), not allowedQuantizations"
    )]
    AllowedQuantizations,
    /// `contextLength` beside `tuning`.
    #[error("a tuning job sets tuning.sequenceLength, not contextLength")]
    ContextLength,
    /// A GGUF model.
    #[error(
        "a tuning job trains a Hugging Face checkpoint, not a GGUF file: choose a model that is not a GGUF preset, without ggufFileBytes"
    )]
    GgufModel,
    /// A checkpoint published quantized, for a method that trains a 16-bit base (or quantizes
    /// one itself).
    #[error(
        "model is a pre-quantized {scheme} checkpoint ({bits}-bit weights): {why}; fine-tune the unquantized checkpoint it was made from"
    )]
    PreQuantized {
        /// The scheme (`awq`, `gptq`, …).
        scheme: &'static str,
        /// Its weight bits.
        bits: u32,
        /// Why the method cannot train it.
        why: &'static str,
    },
    /// `tuning.lora` with method full.
    #[error("tuning.lora is for methods lora, qlora and auto, not full")]
    LoraOnFull,
    /// A volume name that `pod.volumes` does not define.
    #[error("tuning.{field} names volume {name:?}, which spec.pod.volumes does not define")]
    UnknownVolume {
        /// `dataVolume` or `outputVolume`.
        field: &'static str,
        /// The name.
        name: String,
    },
    /// A pod mount where vramfit mounts the tuning volumes.
    #[error(
        "pod.volumeMounts may not mount at {path}: /vramfit and everything under it are vramfit's, which mounts the tuning volumes there"
    )]
    ReservedMountPath {
        /// The mount path.
        path: String,
    },
    /// The same volume for data and output.
    #[error("tuning.dataVolume and tuning.outputVolume must differ: the data is mounted read-only")]
    SameVolume,
}

/// The tuning section of `spec`, resolved for `model`; `None` for an inference job. `notes`
/// gets a line when the sequence length is capped.
pub fn resolve(
    spec: &InferenceJobSpec,
    model: &ModelShape,
    notes: &mut Vec<String>,
) -> Result<Option<TuningInput>, TuningSpecError> {
    let Some(tuning) = &spec.tuning else {
        return Ok(None);
    };
    if spec.serve.is_some() {
        return Err(TuningSpecError::Served);
    }
    match spec.runtime {
        Runtime::Transformers | Runtime::Custom => {}
        Runtime::Vllm => return Err(TuningSpecError::NotATrainingRuntime { runtime: "vllm" }),
        Runtime::Llamacpp => {
            return Err(TuningSpecError::NotATrainingRuntime {
                runtime: "llamacpp",
            });
        }
    }
    if spec.allowed_quantizations.is_some() {
        return Err(TuningSpecError::AllowedQuantizations);
    }
    if spec.context_length.is_some() {
        return Err(TuningSpecError::ContextLength);
    }
    if model.gguf_file_bytes.is_some() {
        return Err(TuningSpecError::GgufModel);
    }
    if tuning.method == TuningMethodRequest::Full && tuning.lora.is_some() {
        return Err(TuningSpecError::LoraOnFull);
    }
    let method = method_for_checkpoint(tuning.method, model, notes)?;
    check_volumes(
        spec,
        tuning.data_volume.as_deref(),
        tuning.output_volume.as_deref(),
    )?;
    let requested = tuning.sequence_length.unwrap_or(DEFAULT_SEQUENCE_LENGTH);
    let sequence_length = requested.min(model.context_limit);
    if sequence_length < requested {
        notes.push(format!(
            "sequence length {sequence_length}: capped at the model's limit (asked {requested})"
        ));
    }
    let lora = tuning.lora.clone().unwrap_or_default();
    let rank = lora.rank.unwrap_or(DEFAULT_LORA_RANK);
    Ok(Some(TuningInput {
        method,
        sequence_length,
        effective_batch: tuning
            .effective_batch
            .unwrap_or(DEFAULT_EFFECTIVE_BATCH)
            .max(1),
        lora: LoraSettings {
            rank,
            alpha: lora.alpha.unwrap_or(rank.saturating_mul(2)),
            dropout_percent: lora.dropout_percent.unwrap_or(DEFAULT_LORA_DROPOUT_PERCENT),
            target_modules: lora
                .target_modules
                .unwrap_or_else(|| vec![ALL_LINEAR.to_string()]),
        },
        shape: TrainingShape::of(model, spec.model.intermediate_size),
        data_volume: tuning.data_volume.clone(),
        output_volume: tuning.output_volume.clone(),
    }))
}

/// The method for a pre-quantized checkpoint: full and LoRA train (or keep frozen) a 16-bit
/// base, and QLoRA quantizes a 16-bit base to NF4 itself; only a checkpoint already stored in
/// bitsandbytes 4-bit is a QLoRA base as it is (`auto` takes QLoRA then). Any other method of
/// any other scheme is refused: the weights to train are not in the checkpoint.
fn method_for_checkpoint(
    asked: TuningMethodRequest,
    model: &ModelShape,
    notes: &mut Vec<String>,
) -> Result<TuningMethodRequest, TuningSpecError> {
    let Some(q) = model.pre_quantized else {
        return Ok(asked);
    };
    let refuse = |why| TuningSpecError::PreQuantized {
        scheme: q.method.as_str(),
        bits: q.weight_bits,
        why,
    };
    let nf4_base = q.method == PreQuantizationMethod::Bitsandbytes && q.weight_bits == 4;
    match asked {
        TuningMethodRequest::Full => Err(refuse(
            "full fine-tuning updates 16-bit weights, which the checkpoint does not hold",
        )),
        TuningMethodRequest::Lora => Err(refuse(
            "LoRA trains adapters on a 16-bit base; on a 4-bit bitsandbytes checkpoint use method qlora",
        )),
        _ if !nf4_base => Err(refuse(
            "QLoRA quantizes a 16-bit base to NF4 itself and cannot re-quantize another scheme",
        )),
        TuningMethodRequest::Auto => {
            notes.push(
                "method qlora: the checkpoint is stored in bitsandbytes 4-bit, the base QLoRA trains on"
                    .to_string(),
            );
            Ok(TuningMethodRequest::Qlora)
        }
        TuningMethodRequest::Qlora => Ok(asked),
    }
}

fn check_volumes(
    spec: &InferenceJobSpec,
    data: Option<&str>,
    output: Option<&str>,
) -> Result<(), TuningSpecError> {
    let pod = spec.pod.as_ref();
    let defined = |name: &str| pod.is_some_and(|p| p.volumes.iter().any(|v| v.name == name));
    for (field, name) in [("dataVolume", data), ("outputVolume", output)] {
        if let Some(name) = name.filter(|n| !defined(n)) {
            return Err(TuningSpecError::UnknownVolume {
                field,
                name: name.to_string(),
            });
        }
    }
    if data.is_some() && data == output {
        return Err(TuningSpecError::SameVolume);
    }
    if let Some(mount) = pod
        .into_iter()
        .flat_map(|p| &p.volume_mounts)
        .find(|m| is_reserved(&m.mount_path))
    {
        return Err(TuningSpecError::ReservedMountPath {
            path: mount.mount_path.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::error::SpecError;
    use crate::job_input::resolve_job;
    use vramfit_api::InferenceJobSpec;

    fn resolve(yaml: &str) -> Result<crate::JobInput, SpecError> {
        let spec: InferenceJobSpec = serde_yaml::from_str(yaml).unwrap();
        resolve_job(&spec)
    }

    const BASE: &str = "
model: {preset: mistral-7b-instruct-v0.3}
runtime: transformers
image: x
";

    #[test]
    fn defaults_are_filled_and_the_sequence_is_capped_at_the_models_limit() {
        let job = resolve(&format!("{BASE}tuning: {{sequenceLength: 65536}}")).unwrap();
        let t = job.tuning.unwrap();
        assert_eq!((t.sequence_length, t.effective_batch), (32_768, 16));
        assert_eq!(
            (t.lora.rank, t.lora.alpha, t.lora.dropout_percent),
            (16, 32, 5)
        );
        assert_eq!(t.lora.target_modules, ["all-linear"]);
        assert_eq!(job.context_length, 32_768);
        assert!(
            job.notes
                .iter()
                .any(|n| n.contains("sequence length 32768: capped"))
        );
    }

    #[test]
    fn volumes_must_be_the_pods_and_mount_paths_under_vramfit_are_taken() {
        let err = resolve(&format!("{BASE}tuning: {{dataVolume: train}}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tuning.dataVolume names volume \"train\", which spec.pod.volumes does not define"
        );
        let pod = "pod: {volumes: [{name: train, emptyDir: {}}, {name: out, emptyDir: {}}]}";
        let ok = resolve(&format!(
            "{BASE}{pod}\ntuning: {{dataVolume: train, outputVolume: out}}"
        ));
        assert!(ok.is_ok(), "{ok:?}");
        let taken = "pod: {volumes: [{name: train, emptyDir: {}}], volumeMounts: [{name: train, mountPath: /vramfit/data}]}";
        let err = resolve(&format!("{BASE}{taken}\ntuning: {{dataVolume: train}}")).unwrap_err();
        assert!(
            err.to_string().contains("may not mount at /vramfit/data"),
            "{err}"
        );
    }

    #[test]
    fn a_mount_under_vramfit_is_refused_however_it_is_spelled() {
        for path in ["/vramfit/./data", "//vramfit/output", "/vramfit/models"] {
            let pod = format!(
                "pod: {{volumes: [{{name: train, emptyDir: {{}}}}], volumeMounts: [{{name: train, mountPath: '{path}'}}]}}"
            );
            let err =
                resolve(&format!("{BASE}{pod}\ntuning: {{dataVolume: train}}")).expect_err(path);
            assert!(
                err.to_string()
                    .contains(&format!("may not mount at {path}: /vramfit and everything")),
                "{path}: {err}"
            );
        }
    }

    #[test]
    fn serving_runtimes_served_jobs_gguf_models_and_inference_fields_are_refused() {
        for (yaml, message) in [
            (
                "model: {preset: mistral-7b-instruct-v0.3}\nruntime: vllm\nimage: x\ntuning: {}",
                "runtime transformers or custom, not vllm",
            ),
            (
                "model: {preset: mistral-7b-instruct-v0.3-q4_k_m}\nruntime: custom\nimage: x\ntuning: {}",
                "not a GGUF file",
            ),
            (
                &format!("{BASE}contextLength: 1024\ntuning: {{}}"),
                "not contextLength",
            ),
            (
                &format!("{BASE}allowedQuantizations: [nf4]\ntuning: {{}}"),
                "not allowedQuantizations",
            ),
            (
                &format!("{BASE}tuning: {{method: full, lora: {{rank: 4}}}}"),
                "not full",
            ),
            (
                &format!("{BASE}serve: {{healthPath: /health}}\ntuning: {{}}"),
                "either served (spec.serve) or fine-tuned (spec.tuning), not both",
            ),
        ] {
            let err = resolve(yaml).unwrap_err().to_string();
            assert!(err.contains(message), "{yaml}: {err}");
        }
    }

    /// A checkpoint published quantized holds no 16-bit weights to train: full and LoRA are
    /// refused with the reason, QLoRA only on a checkpoint stored in bitsandbytes 4-bit.
    #[test]
    fn a_pre_quantized_checkpoint_is_refused_unless_it_is_a_bitsandbytes_4_bit_qlora_base() {
        let gptq =
            "model: {preset: qwen2.5-7b-instruct-gptq-int4}\nruntime: transformers\nimage: x\n";
        for (method, why) in [
            ("full", "full fine-tuning updates 16-bit weights"),
            (
                "lora",
                "on a 4-bit bitsandbytes checkpoint use method qlora",
            ),
            ("qlora", "cannot re-quantize another scheme"),
            ("auto", "cannot re-quantize another scheme"),
        ] {
            let err = resolve(&format!("{gptq}tuning: {{method: {method}}}"))
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("model is a pre-quantized gptq checkpoint (4-bit weights): ")
                    && err.contains(why)
                    && err.ends_with("fine-tune the unquantized checkpoint it was made from"),
                "{method}: {err}"
            );
        }
        let nf4 = "model: {preset: mistral-7b-instruct-v0.3, preQuantized: {method: bitsandbytes, weightBits: 4}}\nruntime: transformers\nimage: x\n";
        let job = resolve(&format!("{nf4}tuning: {{method: auto}}")).unwrap();
        assert_eq!(
            job.tuning.map(|t| t.method),
            Some(vramfit_api::tuning::TuningMethodRequest::Qlora)
        );
        assert!(
            job.notes
                .iter()
                .any(|n| n.contains("stored in bitsandbytes 4-bit"))
        );
        let err = resolve(&format!("{nf4}tuning: {{method: lora}}")).unwrap_err();
        assert!(err.to_string().contains("use method qlora"), "{err}");
        let eight = nf4.replace("weightBits: 4", "weightBits: 8");
        assert!(resolve(&format!("{eight}tuning: {{method: qlora}}")).is_err());
    }
}
