//! `vramfit model inspect`: a checkpoint's `model:` block for a manifest, each number with the
//! file and key it was read from; and `vramfit plan --model-from/--hub`, which fills the
//! numbers a manifest leaves unset.
use std::fmt::Write;
use std::path::Path;

use serde::Serialize;
use vramfit_api::ModelSpec;
use vramfit_models::Checkpoint;
use vramfit_planner::checkpoint::{ReadModel, model_spec};

use crate::args::{HubArgs, InspectArgs, ModelFormat};
use crate::checkpoint_source::{self, ReadCheckpoint};
use crate::error::CliError;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Inspected<'a> {
    model: &'a vramfit_api::ModelSpec,
    read_from: serde_json::Map<String, serde_json::Value>,
    checkpoint: &'a Checkpoint,
}

/// `vramfit model inspect`.
pub fn inspect_command(args: &InspectArgs) -> Result<String, CliError> {
    let read = checkpoint_source::read(args.path.as_deref(), &args.hub)?
        .ok_or_else(|| CliError::Usage("give a checkpoint's path or --hub".into()))?;
    let name = match &args.name {
        Some(name) => Some((name.clone(), "--name".to_string())),
        None => read.name.clone(),
    };
    let model = model_spec(&read.checkpoint, name);
    match args.output {
        ModelFormat::Json => {
            let report = Inspected {
                model: &model.spec,
                read_from: model
                    .read_from
                    .iter()
                    .map(|(field, from)| (field.to_string(), from.clone().into()))
                    .collect(),
                checkpoint: &read.checkpoint,
            };
            serde_json::to_string_pretty(&report)
                .map(|s| s + "\n")
                .map_err(|e| CliError::Serialize(e.to_string()))
        }
        ModelFormat::Yaml => yaml(&read, &model),
    }
}

/// The block as YAML a manifest can take, a comment on each line saying where it came from,
/// and what else was read as comments.
fn yaml(read: &ReadCheckpoint, model: &ReadModel) -> Result<String, CliError> {
    let c = &read.checkpoint;
    let serialize = |e: serde_yaml::Error| CliError::Serialize(e.to_string());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {} read from {}",
        c.architecture.value, read.location
    );
    out.push_str("model:\n");
    let fields = match serde_yaml::to_value(&model.spec).map_err(serialize)? {
        serde_yaml::Value::Mapping(fields) => fields,
        _ => serde_yaml::Mapping::new(),
    };
    let mut lines = Vec::new();
    for (key, value) in &fields {
        let key = key.as_str().unwrap_or_default();
        // A nested value (preQuantized, ggufLayout) in flow style, to stay on its line with
        // its comment: JSON is YAML.
        let value = match value {
            serde_yaml::Value::Mapping(_) | serde_yaml::Value::Sequence(_) => {
                serde_json::to_string(value).map_err(|e| CliError::Serialize(e.to_string()))?
            }
            scalar => serde_yaml::to_string(scalar).map_err(serialize)?,
        };
        let from = model
            .read_from
            .iter()
            .find(|(field, _)| *field == key)
            .map_or("", |(_, from)| from.as_str());
        lines.push((format!("  {key}: {}", value.trim_end()), from));
    }
    if model.spec.name.is_none() {
        lines.insert(
            0,
            (
                "  # name: not read: set model.name (or give --name)".to_string(),
                "",
            ),
        );
    }
    let width = lines
        .iter()
        .filter(|(_, from)| !from.is_empty())
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    for (line, from) in lines {
        match from {
            "" => {
                let _ = writeln!(out, "{line}");
            }
            from => {
                let _ = writeln!(out, "{line:width$}  # {from}");
            }
        }
    }
    let also = also_read(c);
    if !also.is_empty() {
        out.push_str("# Also read:\n");
        for line in also {
            let _ = writeln!(out, "#   {line}");
        }
    }
    Ok(out)
}

fn gb(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / 1e9)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// What the checkpoint says beyond the manifest's fields.
fn also_read(c: &Checkpoint) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(v) = &c.vocab_size {
        lines.push(format!("vocabulary: {} ({})", v.value, v.from));
    }
    if let Some(e) = &c.experts {
        let shared = e
            .shared
            .as_ref()
            .map_or(String::new(), |s| format!(", {} shared", s.value));
        lines.push(format!(
            "experts: {} routed per MoE layer, {} per token{shared} ({}; {})",
            e.routed.value, e.per_token.value, e.routed.from, e.per_token.from
        ));
    }
    if let Some(a) = &c.active_parameters {
        lines.push(format!("active parameters: {} ({})", a.value, a.from));
    }
    if let Some(x) = &c.cross_attention_layers {
        lines.push(format!(
            "cross-attention layers: {} of the {} ({})",
            x.value, c.layers.value, x.from
        ));
    }
    if let Some(l) = &c.latent_attention {
        lines.push(format!(
            "latent attention: a {}-wide KV latent and a {}-wide rotary key per token and layer ({}; {})",
            l.kv_lora_rank.value, l.rope_head_dim.value, l.kv_lora_rank.from, l.rope_head_dim.from
        ));
    }
    if let Some(d) = &c.dtype {
        lines.push(format!("saved as: {} ({})", d.value, d.from));
    }
    if let Some(q) = &c.quantization {
        let mut what = q.method.as_str().to_string();
        if let Some(bits) = q.weight_bits {
            let _ = write!(what, ", {bits}-bit weights");
        }
        if let Some(format) = &q.weight_format {
            let _ = write!(what, " ({format})");
        }
        if let Some(bits) = q.activation_bits {
            let _ = write!(what, ", {bits}-bit activations");
        }
        if let Some(group) = q.group_size {
            let _ = write!(what, ", groups of {group}");
        }
        lines.push(format!("pre-quantized: {what} ({})", q.from));
    }
    if let Some(w) = &c.weights {
        let dtypes = w
            .by_dtype
            .iter()
            .map(|(dtype, bytes)| format!("{dtype} {}", gb(*bytes)))
            .collect::<Vec<_>>()
            .join(", ");
        let dtypes = if dtypes.is_empty() {
            String::new()
        } else {
            format!(": {dtypes}")
        };
        lines.push(format!(
            "weights: {}{dtypes} in {} tensors ({})",
            gb(w.bytes.value),
            w.tensors,
            w.bytes.from
        ));
    }
    if let Some(g) = &c.gguf {
        let smallest = g.block_bytes.iter().min().copied().unwrap_or(0);
        let largest = g.block_bytes.iter().max().copied().unwrap_or(0);
        lines.push(format!(
            "GGUF{}: {} blocks of {} to {}, output layer {}, token embeddings {}",
            g.file_type
                .as_ref()
                .map_or(String::new(), |t| format!(" {t}")),
            g.block_bytes.len(),
            mib(smallest),
            mib(largest),
            mib(g.output_bytes),
            mib(g.token_embd_bytes)
        ));
    }
    for note in &c.notes {
        lines.push(format!("note: {note}"));
    }
    lines
}

/// `vramfit plan --model-from/--hub`: the `model:` fields read from the checkpoint, which fill
/// what the manifest leaves unset (its own numbers win; then the checkpoint's; then its
/// preset's); `None` when neither is given.
pub fn read_model(path: Option<&Path>, hub: &HubArgs) -> Result<Option<ModelSpec>, CliError> {
    Ok(
        checkpoint_source::read(path, hub)?
            .map(|read| model_spec(&read.checkpoint, read.name).spec),
    )
}
