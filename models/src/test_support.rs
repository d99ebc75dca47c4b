//! Test support (feature `test-support`, for this workspace's tests): a GGUF v3 writer from
//! the format's specification (`ggml-org/ggml/docs/gguf.md`: little-endian magic `GGUF`, version
//! 3, tensor and key/value counts, typed metadata, tensor infos, tensor data aligned to 32
//! bytes), and a small Llama-style model written with it.

/// A metadata value to write.
pub enum V<'a> {
    /// A u32.
    U32(u32),
    U64(u64),
    F32(f32),
    Str(&'a str),
    Strings(Vec<String>),
    F32s(usize),
    I32s(Vec<i32>),
}

/// A tensor to write: name, dims (innermost first), ggml type id, bytes of its data.
pub struct T<'a> {
    pub name: &'a str,
    pub dims: Vec<u64>,
    pub ggml_type: u32,
    pub bytes: u64,
}

/// A GGUF v3 writer following the specification (`ggml-org/ggml/docs/gguf.md`).
pub fn write(metadata: &[(&str, V<'_>)], tensors: &[T<'_>]) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        string(&mut out, key);
        match value {
            V::U32(v) => {
                out.extend(4u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            V::U64(v) => {
                out.extend(10u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            V::F32(v) => {
                out.extend(6u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            V::Str(s) => {
                out.extend(8u32.to_le_bytes());
                string(&mut out, s);
            }
            V::Strings(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(8u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for item in items {
                    string(&mut out, item);
                }
            }
            V::F32s(n) => {
                out.extend(9u32.to_le_bytes());
                out.extend(6u32.to_le_bytes());
                out.extend((*n as u64).to_le_bytes());
                for i in 0..*n {
                    out.extend((i as f32).to_le_bytes());
                }
            }
            V::I32s(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(5u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for item in items {
                    out.extend(item.to_le_bytes());
                }
            }
        }
    }
    let mut offset = 0u64;
    let mut offsets = Vec::new();
    for t in tensors {
        string(&mut out, t.name);
        out.extend((t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(t.ggml_type.to_le_bytes());
        out.extend(offset.to_le_bytes());
        offsets.push(offset);
        offset = (offset + t.bytes).div_ceil(32) * 32;
    }
    out.resize(out.len().div_ceil(32) * 32, 0);
    let data_start = out.len();
    for (t, at) in tensors.iter().zip(offsets) {
        out.resize(data_start + (at + t.bytes) as usize, 0x5a);
    }
    out
}

pub const F32: u32 = 0;
pub const Q4_K: u32 = 12;
pub const Q6_K: u32 = 14;

/// Bytes of a Q4_K / Q6_K tensor of `elements` (blocks of 256: 144 and 210 bytes).
pub fn q4k(elements: u64) -> u64 {
    elements / 256 * 144
}
pub fn q6k(elements: u64) -> u64 {
    elements / 256 * 210
}

/// A two-block Llama-style model, hidden 256, as llama.cpp names its tensors.
pub fn small_llama() -> (Vec<u8>, Vec<u64>) {
    let block = |i: usize| {
        vec![
            (format!("blk.{i}.attn_norm.weight"), vec![256], F32, 256 * 4),
            (
                format!("blk.{i}.attn_q.weight"),
                vec![256, 256],
                Q4_K,
                q4k(65_536),
            ),
            (
                format!("blk.{i}.attn_k.weight"),
                vec![256, 128],
                Q4_K,
                q4k(32_768),
            ),
            (
                format!("blk.{i}.attn_v.weight"),
                vec![256, 128],
                Q6_K,
                q6k(32_768),
            ),
            (
                format!("blk.{i}.attn_output.weight"),
                vec![256, 256],
                Q4_K,
                q4k(65_536),
            ),
            (
                format!("blk.{i}.ffn_down.weight"),
                vec![512, 256],
                Q6_K,
                q6k(131_072),
            ),
        ]
    };
    let names: Vec<_> = block(0).into_iter().chain(block(1)).collect();
    let mut tensors: Vec<T<'_>> = vec![
        T {
            name: "token_embd.weight",
            dims: vec![256, 16],
            ggml_type: Q4_K,
            bytes: q4k(4096),
        },
        T {
            name: "output_norm.weight",
            dims: vec![256],
            ggml_type: F32,
            bytes: 1024,
        },
        T {
            name: "output.weight",
            dims: vec![256, 16],
            ggml_type: Q6_K,
            bytes: q6k(4096),
        },
    ];
    for (name, dims, ggml_type, bytes) in &names {
        tensors.push(T {
            name,
            dims: dims.clone(),
            ggml_type: *ggml_type,
            bytes: *bytes,
        });
    }
    let per_block = 1024 + q4k(65_536) * 2 + q4k(32_768) + q6k(32_768) + q6k(131_072);
    let tokens: Vec<String> = (0..16).map(|i| format!("tok{i}")).collect();
    let file = write(
        &[
            ("general.architecture", V::Str("llama")),
            ("general.name", V::Str("small llama")),
            ("general.file_type", V::U32(15)),
            ("llama.block_count", V::U32(2)),
            ("llama.context_length", V::U32(8192)),
            ("llama.embedding_length", V::U32(256)),
            ("llama.feed_forward_length", V::U32(512)),
            ("llama.attention.head_count", V::U32(4)),
            ("llama.attention.head_count_kv", V::U32(2)),
            ("llama.rope.freq_base", V::F32(500_000.0)),
            ("tokenizer.ggml.tokens", V::Strings(tokens)),
            ("tokenizer.ggml.scores", V::F32s(16)),
            ("tokenizer.chat_template", V::Str("{{ messages }}")),
        ],
        &tensors,
    );
    (file, vec![per_block, per_block])
}
