//! What a fine-tuning container receives besides the inference env (docs/runtime-contracts.md,
//! "Fine-tuning"): the training plan as `VRAMFIT_*` variables, which the `vramfit_workload`
//! package turns into `BitsAndBytesConfig`, `LoraConfig` and `TrainingArguments` arguments.
use vramfit_api::Plan;
use vramfit_api::tuning::{DATA_MOUNT_PATH, OUTPUT_MOUNT_PATH, TuningPlan};

use crate::tuning::input::TuningInput;

/// Every name this module may set, for the contract's documentation and tests.
pub const TUNING_ENV: [&str; 15] = [
    "VRAMFIT_TUNING_METHOD",
    "VRAMFIT_SEQUENCE_LENGTH",
    "VRAMFIT_MICRO_BATCH",
    "VRAMFIT_GRADIENT_ACCUMULATION",
    "VRAMFIT_EFFECTIVE_BATCH",
    "VRAMFIT_GRADIENT_CHECKPOINTING",
    "VRAMFIT_OPTIMIZER",
    "VRAMFIT_PARALLELISM",
    "VRAMFIT_TF32",
    "VRAMFIT_LORA_RANK",
    "VRAMFIT_LORA_ALPHA",
    "VRAMFIT_LORA_DROPOUT",
    "VRAMFIT_LORA_TARGET_MODULES",
    "VRAMFIT_DATA_DIR",
    "VRAMFIT_OUTPUT_DIR",
];

/// The training plan's env vars, in a stable order.
pub fn tuning_env(input: &TuningInput, plan: &Plan, tuning: &TuningPlan) -> Vec<(String, String)> {
    let mut env: Vec<(&str, String)> = vec![
        ("VRAMFIT_TUNING_METHOD", tuning.method.as_str().to_string()),
        (
            "VRAMFIT_SEQUENCE_LENGTH",
            tuning.sequence_length.to_string(),
        ),
        ("VRAMFIT_MICRO_BATCH", tuning.micro_batch.to_string()),
        (
            "VRAMFIT_GRADIENT_ACCUMULATION",
            tuning.gradient_accumulation.to_string(),
        ),
        (
            "VRAMFIT_EFFECTIVE_BATCH",
            tuning.effective_batch.to_string(),
        ),
        (
            "VRAMFIT_GRADIENT_CHECKPOINTING",
            tuning.gradient_checkpointing.to_string(),
        ),
        ("VRAMFIT_OPTIMIZER", tuning.optimizer.as_str().to_string()),
        (
            "VRAMFIT_PARALLELISM",
            tuning.parallelism.as_str().to_string(),
        ),
        ("VRAMFIT_TF32", plan.tf32.to_string()),
    ];
    if let Some(lora) = &tuning.lora {
        env.extend([
            ("VRAMFIT_LORA_RANK", lora.rank.to_string()),
            ("VRAMFIT_LORA_ALPHA", lora.alpha.to_string()),
            (
                "VRAMFIT_LORA_DROPOUT",
                format!("{:.2}", f64::from(lora.dropout_percent) / 100.0),
            ),
            ("VRAMFIT_LORA_TARGET_MODULES", lora.target_modules.join(",")),
        ]);
    }
    if input.data_volume.is_some() {
        env.push(("VRAMFIT_DATA_DIR", DATA_MOUNT_PATH.to_string()));
    }
    if input.output_volume.is_some() {
        env.push(("VRAMFIT_OUTPUT_DIR", OUTPUT_MOUNT_PATH.to_string()));
    }
    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}
