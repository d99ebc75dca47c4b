//! GGUF files written by the test writer (`common/`, from the format's specification) read
//! back into the model's numbers and the bytes of each block.
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use vramfit_models::ModelFileError;
use vramfit_models::gguf;

use vramfit_models::test_support::{F32, Q4_K, T, V, q4k, q6k, small_llama, write};

#[test]
fn a_gguf_file_gives_the_model_and_the_bytes_of_each_block() {
    let (file, blocks) = small_llama();
    let len = file.len() as u64;
    let c = gguf::read(&file[..], "small.gguf", Some(len)).unwrap();
    assert_eq!(c.architecture.value, "llama");
    assert_eq!(
        c.architecture.from.to_string(),
        "small.gguf general.architecture"
    );
    assert_eq!(
        (
            c.layers.value,
            c.hidden_size.value,
            c.attention_heads.value,
            c.kv_heads.value
        ),
        (2, 256, 4, 2)
    );
    assert_eq!(c.layers.from.to_string(), "small.gguf llama.block_count");
    assert_eq!(c.head_dim.value, 64, "embedding length / heads");
    assert_eq!(c.context_limit.as_ref().unwrap().value, 8192);
    let vocab = c.vocab_size.as_ref().unwrap();
    assert_eq!(vocab.value, 16);
    assert_eq!(
        vocab.from.to_string(),
        "small.gguf tokenizer.ggml.tokens (length)"
    );
    let layout = c.gguf.as_ref().unwrap();
    assert_eq!(layout.block_bytes, blocks);
    assert_eq!(layout.output_bytes, 1024 + q6k(4096));
    assert_eq!(layout.token_embd_bytes, q4k(4096));
    assert_eq!(layout.other_bytes, 0);
    assert_eq!(layout.file_bytes.value, len);
    assert_eq!(layout.file_type.as_deref(), Some("Q4_K_M"));
    let weights = c.weights.as_ref().unwrap();
    assert_eq!(
        weights.bytes.value,
        blocks.iter().sum::<u64>() + layout.output_bytes + layout.token_embd_bytes
    );
    assert_eq!(
        weights.by_dtype["Q6_K"],
        2 * (q6k(32_768) + q6k(131_072)) + q6k(4096)
    );
    let elements = 4096 * 2 + 256 + 2 * (256 + 65_536 * 2 + 32_768 * 2 + 131_072);
    assert_eq!(c.parameters.as_ref().unwrap().value, elements);
    assert!(c.experts.is_none() && c.active_parameters.is_none());
}

#[test]
fn a_moe_gguf_counts_the_experts_a_token_runs_through() {
    let experts = 4u64;
    let tensors = [
        T {
            name: "token_embd.weight",
            dims: vec![256, 16],
            ggml_type: F32,
            bytes: 4096 * 4,
        },
        T {
            name: "blk.0.ffn_gate_inp.weight",
            dims: vec![256, experts],
            ggml_type: F32,
            bytes: 256 * experts * 4,
        },
        T {
            name: "blk.0.ffn_up_exps.weight",
            dims: vec![256, 512, experts],
            ggml_type: Q4_K,
            bytes: q4k(256 * 512 * experts),
        },
        T {
            name: "output.weight",
            dims: vec![256, 16],
            ggml_type: F32,
            bytes: 4096 * 4,
        },
    ];
    let file = write(
        &[
            ("general.architecture", V::Str("qwen3moe")),
            ("qwen3moe.block_count", V::U32(1)),
            ("qwen3moe.embedding_length", V::U32(256)),
            ("qwen3moe.attention.head_count", V::U32(4)),
            ("qwen3moe.attention.head_count_kv", V::I32s(vec![2])),
            ("qwen3moe.attention.key_length", V::U32(128)),
            ("qwen3moe.expert_count", V::U64(experts)),
            ("qwen3moe.expert_used_count", V::U32(1)),
        ],
        &tensors,
    );
    let c = gguf::read(&file[..], "moe.gguf", None).unwrap();
    let e = c.experts.as_ref().unwrap();
    assert_eq!((e.routed.value, e.per_token.value), (4, 1));
    assert_eq!(
        c.head_dim.value, 128,
        "key_length wins over embedding / heads"
    );
    assert_eq!(
        c.kv_heads.value, 2,
        "a per-layer array gives its largest value"
    );
    let all = 4096 * 2 + 256 * 4 + 256 * 512 * 4;
    assert_eq!(c.parameters.as_ref().unwrap().value, all);
    assert_eq!(
        c.active_parameters.as_ref().unwrap().value,
        all - 3 * 256 * 512
    );
    // No file size given: the data's end stands for it.
    assert_eq!(c.gguf.as_ref().unwrap().file_bytes.value, file.len() as u64);
}

fn err(bytes: &[u8]) -> String {
    gguf::read(bytes, "bad.gguf", Some(bytes.len() as u64))
        .unwrap_err()
        .to_string()
}

#[test]
fn malformed_files_give_one_clear_line() {
    assert_eq!(
        err(b"GGML\x03\0\0\0"),
        "bad.gguf: not a GGUF file: it starts with [47, 47, 4d, 4c], not \"GGUF\""
    );
    assert_eq!(
        err(b"GGUF\0\0\0\x03"),
        "bad.gguf: not a GGUF file: a big-endian GGUF file is not read"
    );
    let mut huge = b"GGUF".to_vec();
    huge.extend(3u32.to_le_bytes());
    huge.extend(u64::MAX.to_le_bytes());
    assert_eq!(
        err(&huge),
        format!(
            "bad.gguf: the tensor count is {}, more than the 65536 tensors vramfit reads",
            u64::MAX
        )
    );
    let mut long_key = b"GGUF".to_vec();
    long_key.extend(3u32.to_le_bytes());
    long_key.extend(0u64.to_le_bytes());
    long_key.extend(1u64.to_le_bytes());
    long_key.extend(u64::MAX.to_le_bytes());
    assert!(err(&long_key).contains("a string is 18446744073709551615, more than the 16 MiB"));
    let (file, _) = small_llama();
    assert!(
        err(&file[..file.len() - 1]).starts_with("bad.gguf: truncated: tensor "),
        "{}",
        err(&file[..file.len() - 1])
    );
    assert_eq!(
        err(&file[..10]),
        "bad.gguf: truncated: the tensor count ends past the end of the file"
    );
    // A model file without its architecture.
    let no_arch = write(&[("llama.block_count", V::U32(2))], &[]);
    assert_eq!(
        err(&no_arch),
        "bad.gguf: no metadata key (looked for general.architecture)"
    );
    let mmproj = write(&[("general.architecture", V::Str("clip"))], &[]);
    assert!(err(&mmproj).contains("multimodal projector (mmproj)"));
}

#[test]
fn hostile_arrays_and_tensors_are_refused_without_allocating() {
    // An array announcing 2^60 strings.
    let mut file = b"GGUF".to_vec();
    file.extend(3u32.to_le_bytes());
    file.extend(0u64.to_le_bytes());
    file.extend(1u64.to_le_bytes());
    file.extend(4u64.to_le_bytes());
    file.extend(b"toks");
    file.extend(9u32.to_le_bytes());
    file.extend(8u32.to_le_bytes());
    file.extend((1u64 << 60).to_le_bytes());
    assert!(
        err(&file).contains("an array is 1152921504606846976, more than the 16777216 elements")
    );
    // A tensor of 2^64 elements, and one of an unknown type.
    let overflow = write(
        &[("general.architecture", V::Str("llama"))],
        &[T {
            name: "x",
            dims: vec![1 << 32, 1 << 32],
            ggml_type: F32,
            bytes: 0,
        }],
    );
    assert!(
        err(&overflow).contains("inconsistent: tensor x: shape"),
        "{}",
        err(&overflow)
    );
    let unknown = write(
        &[("general.architecture", V::Str("llama"))],
        &[T {
            name: "x",
            dims: vec![32],
            ggml_type: 4,
            bytes: 0,
        }],
    );
    assert!(err(&unknown).contains("tensor x has unknown type 4"));
    let ragged = write(
        &[("general.architecture", V::Str("llama"))],
        &[T {
            name: "x",
            dims: vec![100],
            ggml_type: Q4_K,
            bytes: 0,
        }],
    );
    assert!(err(&ragged).contains("rows of 100 elements are not whole Q4_K blocks of 256"));
    assert!(matches!(
        gguf::read(&ragged[..], "bad.gguf", None),
        Err(ModelFileError::Inconsistent { .. })
    ));
}

#[test]
fn a_key_or_a_tensor_name_given_twice_is_refused_as_ggml_does() {
    // `block_count` 32, then 1: neither may be read as the model's.
    let keys = write(
        &[
            ("general.architecture", V::Str("llama")),
            ("llama.embedding_length", V::U32(256)),
            ("llama.attention.head_count", V::U32(4)),
            ("llama.block_count", V::U32(32)),
            ("llama.block_count", V::U32(1)),
        ],
        &[],
    );
    assert_eq!(
        err(&keys),
        "bad.gguf: inconsistent: the metadata key \"llama.block_count\" is given twice"
    );
    let tensor = |name| T {
        name,
        dims: vec![256],
        ggml_type: F32,
        bytes: 1024,
    };
    let tensors = write(
        &[("general.architecture", V::Str("llama"))],
        &[
            tensor("output_norm.weight"),
            tensor("token_embd.weight"),
            tensor("output_norm.weight"),
        ],
    );
    assert_eq!(
        err(&tensors),
        "bad.gguf: inconsistent: the tensor name \"output_norm.weight\" is given twice"
    );
}
