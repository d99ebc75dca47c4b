//! `vramfit plan` for a fine-tuning job: per class the method, micro-batch × accumulation,
//! checkpointing, optimizer and GPUs, and the training memory per GPU part by part (weights,
//! adapters or gradients, optimizer, activations, logits, runtime) against what is usable and
//! the buffer kept free.
use std::fmt::Write;

use vramfit_api::Plan;
use vramfit_api::tuning::TuningMethodRequest;
use vramfit_planner::tuning::TuningInput;

use crate::render::columns;

/// The header line and the table; `classes` gives each class's name, node description and
/// plan (none when it cannot run the job).
pub fn table<'a>(
    tuning: &TuningInput,
    job: &str,
    model: &str,
    preference: &str,
    classes: impl Iterator<Item = (&'a str, &'a str, Option<&'a Plan>)>,
) -> String {
    let method = match tuning.method {
        TuningMethodRequest::Auto => "auto",
        TuningMethodRequest::Full => "full",
        TuningMethodRequest::Lora => "lora",
        TuningMethodRequest::Qlora => "qlora",
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "InferenceJob {job}: fine-tuning {model}, method {method}, sequence {} × effective batch {}, preference {preference}",
        tuning.sequence_length, tuning.effective_batch
    );
    let _ = writeln!(out, "Memory per GPU in GiB.\n");
    let header = [
        "CLASS",
        "NODE",
        "GPUS",
        "METHOD",
        "DTYPE",
        "MB×ACC",
        "EFF",
        "CKPT",
        "OPTIMIZER",
        "PARALLEL",
        "WEIGHTS",
        "ADAPT/GRAD",
        "OPTIM",
        "ACTIV",
        "LOGITS",
        "RUNTIME",
        "NEED",
        "USABLE",
        "BUFFER",
        "$/H",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for (class, node, plan) in classes {
        let row = match plan.and_then(|p| Some((p, p.tuning.as_ref()?))) {
            Some((p, t)) => {
                let m = &t.memory;
                let mut row = vec![
                    class.to_string(),
                    node.to_string(),
                    crate::render_group::gpus_cell(p),
                    t.method.as_str().into(),
                    p.dtype.as_str().into(),
                    t.batch.clone(),
                    t.effective_batch.to_string(),
                    if t.gradient_checkpointing {
                        "on"
                    } else {
                        "off"
                    }
                    .into(),
                    t.optimizer.as_str().into(),
                    t.parallelism.as_str().into(),
                ];
                row.extend(
                    [
                        m.weights_mib,
                        m.trainable_mib,
                        m.optimizer_mib,
                        m.activations_mib,
                        m.logits_mib,
                        m.runtime_mib,
                        m.needed_mib,
                        m.usable_mib,
                        m.buffer_mib,
                    ]
                    .map(gib),
                );
                row.push(if p.hourly_price_cents == 0 {
                    "-".into()
                } else {
                    format!("{:.2}", f64::from(p.hourly_price_cents) / 100.0)
                });
                row
            }
            None => {
                let mut row = vec![class.to_string(), node.to_string(), "cannot run".into()];
                row.resize(header.len(), String::new());
                row
            }
        };
        rows.push(row);
    }
    out.push_str(&columns(&rows));
    out
}

/// MiB as GiB with one decimal, no unit (the table says it).
fn gib(mib: u64) -> String {
    format!("{:.1}", mib as f64 / 1024.0)
}
