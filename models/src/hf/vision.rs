//! Vision towers and their projectors, counted from `vision_config` as transformers builds
//! them. A tower vramfit does not know is not counted: its parameters then come from the
//! safetensors headers or index.
use crate::error::ModelFileError;
use crate::hf::keys::Section;
use crate::hf::shape::{Role, Shape, x};

/// The tower's parts, when vramfit knows the tower. `kind` is the tower's model type (or the
/// root's, for Qwen2.5-VL configs that give none); `text_hidden` is the language model's
/// hidden size, which the projector maps to.
pub(crate) fn tower(
    kind: &str,
    v: &Section<'_>,
    root: &Section<'_>,
    text_hidden: u64,
) -> Result<Option<Shape>, ModelFileError> {
    let mut s = Shape::default();
    match kind {
        "siglip_vision_model" => siglip(&mut s, v, root, text_hidden)?,
        "qwen2_5_vl" => qwen2_5_vl(&mut s, v)?,
        "mllama_vision_model" => mllama(&mut s, v, text_hidden)?,
        _ => return Ok(None),
    }
    Ok(Some(s))
}

fn need(v: &Section<'_>, what: &'static str, key: &str) -> Result<u64, ModelFileError> {
    Ok(u64::from(v.required(what, &[key])?.value))
}

fn or(v: &Section<'_>, keys: &[&str], default: u64) -> Result<u64, ModelFileError> {
    Ok(v.count(keys)?.map_or(default, |f| u64::from(f.value)))
}

/// SigLIP (Gemma 3): patch embedding, learned positions, encoder layers with LayerNorms; the
/// Gemma 3 projector (one matrix and an RMSNorm).
fn siglip(
    s: &mut Shape,
    v: &Section<'_>,
    root: &Section<'_>,
    text_hidden: u64,
) -> Result<(), ModelFileError> {
    let h = need(v, "vision hidden size", "hidden_size")?;
    let inter = need(v, "vision intermediate size", "intermediate_size")?;
    let layers = need(v, "vision layers", "num_hidden_layers")?;
    let image = need(v, "vision image size", "image_size")?;
    let patch = need(v, "vision patch size", "patch_size")?;
    let channels = or(v, &["num_channels"], 3)?;
    if v.flag("vision_use_head")?.unwrap_or(true) {
        return Err(v.bad(
            "vision_use_head",
            &serde_json::Value::Bool(true),
            "false (the pooling head is not counted)",
        ));
    }
    let patches = x(image / patch.max(1), image / patch.max(1));
    s.linear(Role::Vision, h, x(channels, x(patch, patch)), 1, true);
    s.push(Role::Vision, patches, h, 1);
    s.push(Role::Vision, h, 1, x(4, layers)); // two LayerNorms, weight and bias
    s.linear(Role::Vision, h, h, x(4, layers), true);
    s.linear(Role::Vision, inter, h, layers, true);
    s.linear(Role::Vision, h, inter, layers, true);
    s.push(Role::Vision, h, 2, 1); // post-LayerNorm
    if root.string("model_type")? == Some("gemma3") {
        s.push(Role::Vision, text_hidden, h, 1);
        s.push(Role::Vision, h, 1, 1);
    }
    Ok(())
}

/// Qwen2.5-VL's window-attention ViT with RMSNorms, SwiGLU MLPs and the patch merger.
fn qwen2_5_vl(s: &mut Shape, v: &Section<'_>) -> Result<(), ModelFileError> {
    let depth = need(v, "vision depth", "depth")?;
    let h = need(v, "vision hidden size", "hidden_size")?;
    let inter = need(v, "vision intermediate size", "intermediate_size")?;
    let out = need(v, "vision output size", "out_hidden_size")?;
    let patch = or(v, &["patch_size", "spatial_patch_size"], 14)?;
    let temporal = or(v, &["temporal_patch_size"], 2)?;
    let channels = or(v, &["in_channels", "in_chans"], 3)?;
    let merge = or(v, &["spatial_merge_size"], 2)?;
    s.push(
        Role::Vision,
        h,
        x(x(channels, temporal), x(patch, patch)),
        1,
    );
    s.push(Role::Vision, h, 1, x(2, depth));
    s.linear(Role::Vision, x(3, h), h, depth, true);
    s.linear(Role::Vision, h, h, depth, true);
    s.linear(Role::Vision, inter, h, x(2, depth), true);
    s.linear(Role::Vision, h, inter, depth, true);
    let merged = x(h, x(merge, merge));
    s.push(Role::Vision, h, 1, 1);
    s.linear(Role::Vision, merged, merged, 1, true);
    s.linear(Role::Vision, out, merged, 1, true);
    Ok(())
}

/// Llama-3.2-Vision's tiled ViT: gated tile and position embeddings, local and gated global
/// encoder layers, and the projector into the text model.
fn mllama(s: &mut Shape, v: &Section<'_>, text_hidden: u64) -> Result<(), ModelFileError> {
    let h = need(v, "vision hidden size", "hidden_size")?;
    let inter = need(v, "vision intermediate size", "intermediate_size")?;
    let local = need(v, "vision layers", "num_hidden_layers")?;
    let global = need(v, "vision global layers", "num_global_layers")?;
    let image = need(v, "vision image size", "image_size")?;
    let patch = need(v, "vision patch size", "patch_size")?;
    let tiles = need(v, "vision tiles", "max_num_tiles")?;
    let output = need(v, "vision output size", "vision_output_dim")?;
    let channels = or(v, &["num_channels"], 3)?;
    let ratios = v.array_len("supported_aspect_ratios")?.ok_or_else(|| {
        crate::error::ModelFileError::Missing {
            file: v.file.to_string(),
            what: "vision aspect ratios",
            keys: v.dotted("supported_aspect_ratios"),
        }
    })? as u64;
    let positions = x(image / patch.max(1), image / patch.max(1)).saturating_add(1);
    s.push(Role::Vision, h, x(channels, x(patch, patch)), 1);
    s.push(Role::Vision, h, 1, 1); // class embedding
    s.push(Role::Vision, positions, h, 1);
    s.push(Role::Vision, ratios + 1, x(tiles, x(positions, h)), 1); // tile position embedding
    s.push(Role::Vision, ratios + 1, x(tiles, h), 2); // pre- and post-tile embeddings
    s.push(Role::Vision, 1, 1, 3); // their gates
    s.push(Role::Vision, h, 2, 2); // pre- and post-LayerNorm
    let layers = local.saturating_add(global);
    s.push(Role::Vision, h, h, x(4, layers));
    s.linear(Role::Vision, inter, h, layers, true);
    s.linear(Role::Vision, h, inter, layers, true);
    s.push(Role::Vision, h, 2, x(2, layers));
    s.push(Role::Vision, 1, 1, x(2, global));
    s.linear(Role::Vision, text_hidden, output, 1, true);
    Ok(())
}
