//! What served LoRA adapters take on a GPU (docs/planning.md, "Served LoRA adapters").
//!
//! vLLM allocates, when it starts, LoRA buffers for every LoRA-capable module of the model
//! whatever an adapter targets, each sized for `--max-loras` adapters of `--max-lora-rank`
//! (`vllm/lora/layers/base_linear.py` `create_lora_weights`, 0.10.2 and 0.11.0). llama.cpp
//! holds each adapter's own tensors, on the device of the layer they modify
//! (`src/llama-adapter.cpp` `llama_adapter_lora_init`). Every figure here is an upper bound:
//! products saturate at `u64::MAX` (a size no GPU holds) rather than wrap.
use vramfit_api::adapters::ResolvedAdapter;
use vramfit_api::tuning::ALL_LINEAR;

use crate::model_catalog::ModelShape;

/// The ranks vLLM takes for `--max-lora-rank` (`vllm/config/lora.py` `possible_max_ranks`,
/// 0.10.2 and 0.11.0).
pub const VLLM_LORA_RANKS: [u32; 8] = [8, 16, 32, 64, 128, 256, 320, 512];
/// vLLM's extra vocabulary per adapter (`lora_extra_vocab_size`, default 256).
pub const VLLM_EXTRA_VOCAB: u64 = 256;
/// vLLM pads the LoRA logits to a multiple of this on CUDA (`lora_vocab_padding_size`).
pub const VLLM_VOCAB_PADDING: u64 = 256;
/// Bytes per element of a 16-bit model dtype (bfloat16, float16): vLLM's `--lora-dtype auto`.
pub const LORA_DTYPE_BYTES: u64 = 2;

/// The smallest `--max-lora-rank` vLLM takes that holds an adapter of rank `rank`; `None`
/// above its largest (512).
pub fn vllm_max_lora_rank(rank: u32) -> Option<u32> {
    VLLM_LORA_RANKS.iter().copied().find(|&r| r >= rank)
}

/// The numbers the LoRA buffers are sized by: a dense decoder's widths per layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoraDims {
    /// Decoder layers.
    pub layers: u64,
    /// Hidden size `H`.
    pub hidden: u64,
    /// The MLP's intermediate size `I`.
    pub intermediate: u64,
    /// Attention heads `nH`.
    pub heads: u64,
    /// KV heads `nKV`.
    pub kv_heads: u64,
    /// Head dimension `d`.
    pub head_dim: u64,
    /// Vocabulary `V`, where known (the embeddings' and output layer's buffers).
    pub vocab: Option<u64>,
}

impl LoraDims {
    /// The dims of `shape`, its intermediate size derived by [`intermediate_upper_bound`].
    pub fn of(shape: &ModelShape) -> Self {
        Self {
            layers: shape.layers.into(),
            hidden: shape.hidden_size.into(),
            intermediate: intermediate_upper_bound(shape),
            heads: shape.attention_heads.into(),
            kv_heads: shape.kv_heads.into(),
            head_dim: shape.head_dim.into(),
            vocab: shape.vocab_size.map(u64::from),
        }
    }

    /// Attention parameters of one layer: q, k, v and o (`H·d·(2·nH + 2·nKV)`).
    fn attention_parameters(&self) -> u64 {
        let heads = self
            .heads
            .saturating_mul(2)
            .saturating_add(self.kv_heads.saturating_mul(2));
        self.hidden
            .saturating_mul(self.head_dim)
            .saturating_mul(heads)
    }

    /// `(input, output)` of each module of a Llama-like layer, by its PEFT name.
    fn modules(&self) -> [(&'static str, u64, u64); 7] {
        let q = self.heads.saturating_mul(self.head_dim);
        let kv = self.kv_heads.saturating_mul(self.head_dim);
        let (h, i) = (self.hidden, self.intermediate);
        [
            ("q_proj", h, q),
            ("k_proj", h, kv),
            ("v_proj", h, kv),
            ("o_proj", q, h),
            ("gate_proj", h, i),
            ("up_proj", h, i),
            ("down_proj", i, h),
        ]
    }
}

/// The MLP's intermediate size, never below the real one: what the parameters leave after
/// the least the rest of the model can hold (the vocabulary's embeddings once, tied or not;
/// each layer's q, k, v and o), spread over three `H × I` matrices per layer (gate, up,
/// down). Norms, biases, an untied output layer or a vision tower only leave more to the MLP,
/// so the figure only grows; a two-matrix MLP (`2·H·I`) reads as a three-matrix one of
/// two-thirds the width, whose LoRA buffers are the same size (`3·I'` = `2·I`). At least
/// `H`, should the numbers leave less.
pub fn intermediate_upper_bound(shape: &ModelShape) -> u64 {
    let layers = u64::from(shape.layers.max(1));
    let hidden = u64::from(shape.hidden_size.max(1));
    let dims = LoraDims {
        layers,
        hidden,
        intermediate: 0,
        heads: shape.attention_heads.into(),
        kv_heads: shape.kv_heads.into(),
        head_dim: shape.head_dim.into(),
        vocab: None,
    };
    let embeddings = shape
        .vocab_size
        .map_or(0, |v| u64::from(v).saturating_mul(hidden));
    let mlp = shape
        .parameters
        .saturating_sub(embeddings)
        .saturating_sub(dims.attention_parameters().saturating_mul(layers));
    mlp.div_ceil(layers.saturating_mul(hidden).saturating_mul(3).max(1))
        .max(hidden)
}

/// `numerator / t`, rounded up (`t` at least 1).
fn per_rank(numerator: u64, t: u64) -> u64 {
    numerator.div_ceil(t.max(1))
}

/// vLLM's LoRA buffers on each GPU, in bytes, for `max_loras` adapters of `max_rank` at
/// `dtype_bytes` per element with `tensor_parallel` GPUs (docs/planning.md):
///
/// per decoder layer `Lm·R·b·(7H + 2·Q_t + 2·KV_t + 3·I_t)` with `Q_t = nH·d/t`,
/// `KV_t = max(1, nKV/t)·d`, `I_t = I/t` (each rounded up); with the vocabulary known, the
/// embeddings' `Lm·R·b·(V+E) + Lm·R·b·H + Lm·E·H·b` and the output layer's
/// `Lm·R·b·H + Lm·R·b·ceil256(V+E) + Lm·E·H·b` (`E` = 256), on every GPU.
pub fn vllm_buffer_bytes_for(
    dims: &LoraDims,
    max_rank: u32,
    max_loras: u32,
    tensor_parallel: u32,
    dtype_bytes: u64,
) -> u64 {
    let t = u64::from(tensor_parallel.max(1));
    let (h, d) = (dims.hidden, dims.head_dim);
    let q_t = per_rank(dims.heads.saturating_mul(d), t);
    let kv_t = per_rank(dims.kv_heads, t).max(1).saturating_mul(d);
    let i_t = per_rank(dims.intermediate, t);
    let slot = u64::from(max_loras)
        .saturating_mul(max_rank.into())
        .saturating_mul(dtype_bytes);
    let per_layer_elements = h
        .saturating_mul(7)
        .saturating_add(q_t.saturating_mul(2))
        .saturating_add(kv_t.saturating_mul(2))
        .saturating_add(i_t.saturating_mul(3));
    let decoder = slot
        .saturating_mul(per_layer_elements)
        .saturating_mul(dims.layers);
    let Some(vocab) = dims.vocab else {
        return decoder;
    };
    let lm = u64::from(max_loras);
    let extra = lm
        .saturating_mul(VLLM_EXTRA_VOCAB)
        .saturating_mul(h)
        .saturating_mul(dtype_bytes);
    let with_extra = vocab.saturating_add(VLLM_EXTRA_VOCAB);
    let embeddings = slot
        .saturating_mul(with_extra)
        .saturating_add(slot.saturating_mul(h))
        .saturating_add(extra);
    let padded = with_extra
        .div_ceil(VLLM_VOCAB_PADDING)
        .saturating_mul(VLLM_VOCAB_PADDING);
    let lm_head = slot
        .saturating_mul(h)
        .saturating_add(slot.saturating_mul(padded))
        .saturating_add(extra);
    decoder.saturating_add(embeddings).saturating_add(lm_head)
}

/// vLLM's LoRA buffers on each GPU for `shape` ([`vllm_buffer_bytes_for`] with its
/// intermediate size derived by [`intermediate_upper_bound`]).
pub fn vllm_buffer_bytes(
    shape: &ModelShape,
    max_rank: u32,
    max_loras: u32,
    tensor_parallel: u32,
    dtype_bytes: u64,
) -> u64 {
    vllm_buffer_bytes_for(
        &LoraDims::of(shape),
        max_rank,
        max_loras,
        tensor_parallel,
        dtype_bytes,
    )
}

/// Bytes of one adapter's tensors under llama.cpp: what its training run reported, else
/// `r·Σ(in + out)·layers·2` over the modules it adapts (16-bit tensors). `all-linear`, no
/// list, or a module this table does not know counts all seven (q, k, v, o, gate, up, down).
pub fn llamacpp_adapter_bytes(adapter: &ResolvedAdapter, shape: &ModelShape) -> u64 {
    if let Some(bytes) = adapter.bytes {
        return bytes;
    }
    let dims = LoraDims::of(shape);
    let modules = dims.modules();
    let known = |name: &str| modules.iter().any(|(m, _, _)| *m == name);
    let every = adapter.target_modules.is_empty()
        || adapter
            .target_modules
            .iter()
            .any(|t| t == ALL_LINEAR || !known(t));
    let widths = modules
        .iter()
        .filter(|(m, _, _)| every || adapter.target_modules.iter().any(|t| t == m))
        .fold(0u64, |sum, (_, input, output)| {
            sum.saturating_add(input.saturating_add(*output))
        });
    u64::from(adapter.rank)
        .saturating_mul(widths)
        .saturating_mul(dims.layers)
        .saturating_mul(LORA_DTYPE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MIB;
    use crate::model_catalog::preset_shape;

    /// Llama-3.1-8B as its config.json has it (intermediate_size 14336).
    fn llama_8b() -> LoraDims {
        LoraDims {
            layers: 32,
            hidden: 4096,
            intermediate: 14_336,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            vocab: Some(128_256),
        }
    }

    #[test]
    fn the_worked_example_llama_8b_one_adapter_of_rank_16() {
        let dims = llama_8b();
        let decoder = vllm_buffer_bytes_for(
            &LoraDims {
                vocab: None,
                ..dims
            },
            16,
            1,
            1,
            2,
        );
        assert_eq!(decoder, 80 * MIB, "80.0 MiB of decoder buffers");
        let all = vllm_buffer_bytes_for(&dims, 16, 1, 1, 2);
        let vocab_part = (all - decoder) as f64 / MIB as f64;
        assert!((vocab_part - 12.09).abs() < 0.01, "{vocab_part}");
        // Lm = 4: four times as much (368 MiB in the research's table).
        let four = vllm_buffer_bytes_for(&dims, 16, 4, 1, 2) as f64 / MIB as f64;
        assert!((four - 368.4).abs() < 0.1, "{four}");
        // Lm = 8, R = 64 on 4 GPUs: 1312 MiB of decoder buffers per GPU, the vocabulary's
        // 291 MiB on each.
        let tp4 = vllm_buffer_bytes_for(
            &LoraDims {
                vocab: None,
                ..dims
            },
            64,
            8,
            4,
            2,
        );
        assert_eq!(tp4, 1312 * MIB);
    }

    #[test]
    fn the_derived_intermediate_size_is_never_below_the_real_one() {
        for (preset, real) in [
            ("llama-3.1-8b-instruct", 14_336),
            ("mistral-7b-instruct-v0.3", 14_336),
            ("qwen3-8b", 12_288),
            ("llama-3.1-70b-instruct", 28_672),
            ("llama-3.2-1b-instruct", 8_192),
            ("qwen2.5-7b-instruct", 18_944),
            ("phi-4", 17_920),
        ] {
            let derived = intermediate_upper_bound(&preset_shape(preset));
            assert!(derived >= real, "{preset}: {derived} < {real}");
            // And not wildly above: within the untied output layer and the norms.
            assert!(derived < real * 13 / 10, "{preset}: {derived}");
        }
        let planned = vllm_buffer_bytes(&preset_shape("llama-3.1-8b-instruct"), 16, 1, 1, 2);
        assert!(planned >= vllm_buffer_bytes_for(&llama_8b(), 16, 1, 1, 2));
    }

    #[test]
    fn ranks_round_up_to_what_vllm_takes() {
        assert_eq!(vllm_max_lora_rank(1), Some(8));
        assert_eq!(vllm_max_lora_rank(16), Some(16));
        assert_eq!(vllm_max_lora_rank(17), Some(32));
        assert_eq!(vllm_max_lora_rank(300), Some(320));
        assert_eq!(vllm_max_lora_rank(512), Some(512));
        assert_eq!(vllm_max_lora_rank(513), None);
    }

    #[test]
    fn llamacpp_counts_the_reported_bytes_else_the_targets() {
        let shape = preset_shape("llama-3.1-8b-instruct");
        let mut adapter = ResolvedAdapter {
            name: "a".into(),
            source: "tuningJob/t".into(),
            path: "/vramfit/adapters/a/adapter_model.gguf".into(),
            rank: 16,
            alpha: None,
            target_modules: vec!["q_proj".into(), "v_proj".into()],
            bytes: None,
        };
        // r · (H + nH·d + H + nKV·d) · layers · 2.
        assert_eq!(
            llamacpp_adapter_bytes(&adapter, &shape),
            16 * (4096 + 4096 + 4096 + 1024) * 32 * 2
        );
        adapter.target_modules = vec![ALL_LINEAR.into()];
        let all = llamacpp_adapter_bytes(&adapter, &shape);
        adapter.target_modules = vec!["q_proj".into(), "qkv_proj".into()];
        assert_eq!(
            llamacpp_adapter_bytes(&adapter, &shape),
            all,
            "unknown: all"
        );
        // All seven at r 16 on the real widths: 41.9 M parameters; the derived width is more.
        assert!(all >= 41_943_040 * 2, "{all}");
        adapter.bytes = Some(12_345);
        assert_eq!(llamacpp_adapter_bytes(&adapter, &shape), 12_345);
    }

    #[test]
    fn huge_numbers_saturate_rather_than_wrap() {
        let dims = LoraDims {
            layers: u64::MAX,
            ..llama_8b()
        };
        assert_eq!(vllm_buffer_bytes_for(&dims, 512, 16, 1, 2), u64::MAX);
    }
}
