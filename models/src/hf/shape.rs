//! A model's tensors as groups of equal shape, from which the parameters, the active
//! parameters of a MoE model and the bytes of a pre-quantized checkpoint follow. The formulas
//! follow the modules transformers builds for each architecture; the tests pin them against
//! published parameter counts.

/// `a × b`, saturating: the formulas take whatever a config says, and a product too large
/// for u64 is a model no GPU holds (never a panic).
pub(crate) fn x(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

/// What a group of tensors is, for quantization (which tensors a method quantizes) and for
/// active parameters (which run per token).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Token embeddings (never quantized by the methods vramfit reads).
    Embedding,
    /// The output layer (`lm_head`).
    LmHead,
    /// A linear layer of the language model's blocks (quantized).
    Linear,
    /// A routed expert's linear layer (quantized; only `per_token` of them run).
    Expert,
    /// Norms, biases, gates, routers: small, never quantized.
    Small,
    /// The vision tower and its projector (left unquantized by the methods vramfit reads).
    Vision,
}

/// `count` tensors of `rows × cols` parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    pub role: Role,
    /// Output features (rows of the weight).
    pub rows: u64,
    /// Input features.
    pub cols: u64,
    pub count: u64,
}

impl Part {
    pub fn params(&self) -> u64 {
        self.rows
            .saturating_mul(self.cols)
            .saturating_mul(self.count)
    }
}

/// The tensors of a model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Shape {
    pub parts: Vec<Part>,
    /// Routed experts and how many run per token, for MoE models.
    pub routing: Option<(u64, u64)>,
}

impl Shape {
    pub fn push(&mut self, role: Role, rows: u64, cols: u64, count: u64) {
        if rows > 0 && cols > 0 && count > 0 {
            self.parts.push(Part {
                role,
                rows,
                cols,
                count,
            });
        }
    }

    /// A linear layer with its bias when `bias`.
    pub fn linear(&mut self, role: Role, out: u64, inp: u64, count: u64, bias: bool) {
        self.push(role, out, inp, count);
        if bias {
            let bias_role = if role == Role::Vision {
                Role::Vision
            } else {
                Role::Small
            };
            self.push(bias_role, out, 1, count);
        }
    }

    /// Every parameter.
    pub fn total(&self) -> u64 {
        self.parts
            .iter()
            .fold(0u64, |sum, p| sum.saturating_add(p.params()))
    }

    /// Parameters of the language model's linear layers (attention, MLP, experts).
    pub fn linear_params(&self) -> u64 {
        self.parts
            .iter()
            .filter(|p| matches!(p.role, Role::Linear | Role::Expert))
            .fold(0u64, |sum, p| sum.saturating_add(p.params()))
    }

    /// Parameters one token runs through: all but the routed experts it skips.
    pub fn active(&self) -> Option<u64> {
        let (routed, per_token) = self.routing?;
        Some(self.parts.iter().fold(0u64, |sum, p| {
            let params = if p.role == Role::Expert {
                p.params() / routed.max(1) * per_token.min(routed)
            } else {
                p.params()
            };
            sum.saturating_add(params)
        }))
    }
}

/// Attention of a decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attention {
    /// q, k, v, o projections; `qkv_bias` (Qwen2), `o_bias` (attention_bias), `qk_norm`
    /// (Qwen3, Gemma 3: one norm of head_dim each for q and k).
    Heads {
        heads: u64,
        kv_heads: u64,
        head_dim: u64,
        qkv_bias: bool,
        o_bias: bool,
        qk_norm: bool,
    },
    /// Multi-head latent attention (DeepSeek-V2/V3).
    Latent {
        heads: u64,
        q_lora_rank: Option<u64>,
        kv_lora_rank: u64,
        nope_head_dim: u64,
        rope_head_dim: u64,
        v_head_dim: u64,
    },
}

/// The MLP of the MoE layers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Moe {
    pub routed: u64,
    pub per_token: u64,
    pub expert_intermediate: u64,
    /// One shared MLP every token runs through (DeepSeek: n_shared × moe size; Qwen2-MoE).
    pub shared_intermediate: u64,
    /// Qwen2-MoE's sigmoid gate on the shared expert (hidden × 1).
    pub shared_gate: bool,
    /// DeepSeek-V3's `noaux_tc` routing keeps a bias per expert.
    pub router_bias: bool,
    /// Which layers are MoE; the others have a dense MLP of `intermediate_size`.
    pub layout: MoeLayout,
}

/// Which layers of a MoE model are MoE layers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum MoeLayout {
    /// Every layer (Mixtral).
    All,
    /// Qwen2-MoE / Qwen3-MoE: `mlp_only_layers` are dense, else every `decoder_sparse_step`-th.
    /// `dense` is sorted (looked up once per layer).
    Qwen { every: u64, dense: Vec<u64> },
    /// DeepSeek: the first `first_k_dense_replace` layers are dense, then every
    /// `moe_layer_freq`-th.
    DeepSeek { first_dense: u64, every: u64 },
}

impl MoeLayout {
    pub fn is_moe(&self, layer: u64) -> bool {
        match self {
            MoeLayout::All => true,
            MoeLayout::Qwen { every, dense } => {
                dense.binary_search(&layer).is_err() && (layer + 1).is_multiple_of((*every).max(1))
            }
            MoeLayout::DeepSeek { first_dense, every } => {
                layer >= *first_dense && layer.is_multiple_of((*every).max(1))
            }
        }
    }
}

/// A decoder-only language model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Decoder {
    pub vocab: u64,
    /// Embedding rows beyond the vocabulary (Llama-3.2-Vision's 8 image tokens).
    pub extra_embedding_rows: u64,
    pub hidden: u64,
    pub layers: u64,
    pub attention: Attention,
    pub intermediate: u64,
    pub mlp_bias: bool,
    pub moe: Option<Moe>,
    pub norms_per_layer: u64,
    pub tie_embeddings: bool,
    /// Layers that are cross-attention layers (Llama-3.2-Vision): the same projections and
    /// MLP, plus q/k norms and two gates.
    pub cross_attention_layers: u64,
}

impl Decoder {
    pub fn shape(&self) -> Shape {
        let mut s = Shape::default();
        let h = self.hidden;
        s.push(
            Role::Embedding,
            self.vocab.saturating_add(self.extra_embedding_rows),
            h,
            1,
        );
        let n = self.layers;
        self.attention_parts(&mut s, n);
        if let Attention::Heads { head_dim, .. } = self.attention {
            // Cross-attention layers: q_norm, k_norm and the attention and MLP gates.
            s.push(Role::Small, head_dim, 1, x(2, self.cross_attention_layers));
            s.push(Role::Small, 1, 1, x(2, self.cross_attention_layers));
        }
        s.push(Role::Small, h, 1, x(self.norms_per_layer, n));
        let moe_layers = self
            .moe
            .as_ref()
            .map_or(0, |m| (0..n).filter(|&i| m.layout.is_moe(i)).count() as u64);
        self.gated_mlp(&mut s, Role::Linear, self.intermediate, n - moe_layers);
        if let Some(moe) = &self.moe {
            self.gated_mlp(
                &mut s,
                Role::Expert,
                moe.expert_intermediate,
                x(moe.routed, moe_layers),
            );
            self.gated_mlp(&mut s, Role::Linear, moe.shared_intermediate, moe_layers);
            s.push(Role::Small, moe.routed, h, moe_layers);
            if moe.shared_gate {
                s.push(Role::Small, 1, h, moe_layers);
            }
            if moe.router_bias {
                s.push(Role::Small, moe.routed, 1, moe_layers);
            }
            s.routing = Some((moe.routed, moe.per_token));
        }
        s.push(Role::Small, h, 1, 1);
        if !self.tie_embeddings {
            s.push(Role::LmHead, self.vocab, h, 1);
        }
        s
    }

    fn attention_parts(&self, s: &mut Shape, n: u64) {
        let h = self.hidden;
        match self.attention {
            Attention::Heads {
                heads,
                kv_heads,
                head_dim,
                qkv_bias,
                o_bias,
                qk_norm,
            } => {
                s.linear(Role::Linear, x(heads, head_dim), h, n, qkv_bias || o_bias);
                s.linear(
                    Role::Linear,
                    x(kv_heads, head_dim),
                    h,
                    x(2, n),
                    qkv_bias || o_bias,
                );
                s.linear(Role::Linear, h, x(heads, head_dim), n, o_bias);
                if qk_norm {
                    s.push(Role::Small, head_dim, 1, x(2, n));
                }
            }
            Attention::Latent {
                heads,
                q_lora_rank,
                kv_lora_rank,
                nope_head_dim,
                rope_head_dim,
                v_head_dim,
            } => {
                let q_head = nope_head_dim.saturating_add(rope_head_dim);
                match q_lora_rank {
                    Some(rank) => {
                        s.push(Role::Linear, rank, h, n);
                        s.push(Role::Small, rank, 1, n);
                        s.push(Role::Linear, x(heads, q_head), rank, n);
                    }
                    None => s.push(Role::Linear, x(heads, q_head), h, n),
                }
                s.push(
                    Role::Linear,
                    kv_lora_rank.saturating_add(rope_head_dim),
                    h,
                    n,
                );
                s.push(Role::Small, kv_lora_rank, 1, n);
                s.push(
                    Role::Linear,
                    x(heads, nope_head_dim.saturating_add(v_head_dim)),
                    kv_lora_rank,
                    n,
                );
                s.push(Role::Linear, h, x(heads, v_head_dim), n);
            }
        }
    }

    /// gate, up and down projections (SwiGLU) for `count` MLPs.
    fn gated_mlp(&self, s: &mut Shape, role: Role, intermediate: u64, count: u64) {
        s.linear(role, intermediate, self.hidden, x(2, count), self.mlp_bias);
        s.linear(role, self.hidden, intermediate, count, self.mlp_bias);
    }
}
