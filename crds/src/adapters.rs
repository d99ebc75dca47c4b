//! LoRA adapters on a served job (`spec.serve.adapters`): the adapters a fine-tuning job wrote,
//! served on the job's base model, what a training run reports of the adapter it wrote, and
//! what the operator resolved of each adapter (`status.adapters`; docs/serving.md).
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most adapters one served job serves.
pub const MAX_ADAPTERS: usize = 16;
/// The most adapters a vLLM replica runs in one batch (`--max-loras`) when the job does not
/// say: as many as it serves, up to this.
pub const DEFAULT_MAX_ADAPTERS_PER_BATCH: u32 = 4;
/// Where a served pod finds its adapters: `<root>/<name>`, one read-only mount each.
pub const ADAPTERS_MOUNT_ROOT: &str = "/vramfit/adapters";
/// The prefix of an adapter's volume in a served pod (`vramfit-adapter-<name>`).
pub const ADAPTER_VOLUME_PREFIX: &str = "vramfit-adapter-";
/// The file PEFT writes an adapter's settings to (`adapter_config.json`).
pub const PEFT_CONFIG_FILE: &str = "adapter_config.json";
/// The weights file PEFT writes by default (`save_pretrained(safe_serialization=True)`).
pub const PEFT_WEIGHTS_FILE: &str = "adapter_model.safetensors";
/// PEFT's older weights file, which vLLM also reads.
pub const PEFT_WEIGHTS_BIN_FILE: &str = "adapter_model.bin";

/// Where adapter `name` is mounted in a served pod.
pub fn adapter_mount_path(name: &str) -> String {
    format!("{ADAPTERS_MOUNT_ROOT}/{name}")
}

/// The name of adapter `name`'s volume in a served pod.
pub fn adapter_volume_name(name: &str) -> String {
    format!("{ADAPTER_VOLUME_PREFIX}{name}")
}

/// One adapter a served job serves: the name clients ask for and where it comes from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AdapterSpec {
    /// The name clients ask for: vLLM's `model` field of a request; llama.cpp's adapter of that
    /// name (pods list their adapters, in llama.cpp's id order, in the `vramfit.io/adapters`
    /// annotation). Lower-case letters, digits and `-`, at most 40 characters.
    #[schemars(
        length(min = 1, max = 40),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// The fine-tuning job of this namespace (an InferenceJob with `spec.tuning`, method `lora`
    /// or `qlora`) whose output is the adapter. It must have succeeded and have been trained on
    /// the served model; its output volume is mounted read-only in every replica.
    pub tuning_job: TuningJobRef,
}

/// A fine-tuning job of the same namespace, by name.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TuningJobRef {
    /// The InferenceJob's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// What a training run reports of the adapter it wrote to its output volume (the `adapter`
/// object of its `TrainingResult` line, docs/workload-contract.md), kept in the job's
/// `status.result.adapter`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TrainedAdapter {
    /// The files written, relative to the output volume's root (`adapter_config.json`,
    /// `adapter_model.safetensors`, a GGUF conversion such as `adapter_model.gguf`).
    pub files: Vec<String>,
    /// The adapter's rank (`r`).
    pub rank: u32,
    /// LoRA alpha (`lora_alpha`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// The modules adapted, as the model's code names them (`q_proj`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_modules: Vec<String>,
    /// The model it was trained on (`base_model_name_or_path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_model: Option<String>,
    /// Bytes of its weights file(s) (what a replica holds per loaded adapter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// The most files an adapter report may name, and the longest name.
pub const MAX_ADAPTER_FILES: usize = 8;
const MAX_FILE_NAME: usize = 255;
/// The most modules an adapter report may name, and the longest name.
const MAX_TARGET_MODULES: usize = 64;
const MAX_MODULE_NAME: usize = 128;
/// The highest rank a report may claim (PEFT's own ceiling is the layer's width).
pub const MAX_REPORTED_RANK: u32 = 65_536;

impl TrainedAdapter {
    /// Whether the report is well formed: a few plain relative file names (no `..`, no
    /// absolute path: they are joined to a mount path in a served pod), a rank, bounded lists.
    pub fn is_valid(&self) -> bool {
        let plain_file = |f: &String| {
            !f.is_empty()
                && f.len() <= MAX_FILE_NAME
                && !f.starts_with('/')
                && f.split('/')
                    .all(|part| !part.is_empty() && part != "." && part != "..")
                && f.chars().all(|c| !c.is_control() && c != '\\')
        };
        let plain_module = |m: &String| {
            !m.is_empty()
                && m.len() <= MAX_MODULE_NAME
                && m.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        };
        !self.files.is_empty()
            && self.files.len() <= MAX_ADAPTER_FILES
            && self.files.iter().all(plain_file)
            && (1..=MAX_REPORTED_RANK).contains(&self.rank)
            && self.alpha.is_none_or(|a| a.is_finite() && a > 0.0)
            && self.target_modules.len() <= MAX_TARGET_MODULES
            && self.target_modules.iter().all(plain_module)
            && self
                .base_model
                .as_ref()
                .is_none_or(|b| !b.is_empty() && b.len() <= 256 && !b.chars().any(char::is_control))
    }

    /// The first file that ends with `suffix` (`.gguf`).
    pub fn file_ending(&self, suffix: &str) -> Option<&str> {
        self.files
            .iter()
            .map(String::as_str)
            .find(|f| f.ends_with(suffix))
    }
}

/// An adapter as the operator resolved it (`status.adapters`): its source and the numbers
/// every replica is planned with.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedAdapter {
    /// The adapter's name (`serve.adapters[].name`).
    pub name: String,
    /// Where it comes from: `tuningJob/<name>`.
    pub source: String,
    /// The file a llama.cpp server loads, or the folder vLLM loads, in a served pod.
    pub path: String,
    /// Its rank.
    pub rank: u32,
    /// LoRA alpha, where reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// The modules it adapts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_modules: Vec<String>,
    /// Bytes of its weights, where reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}
