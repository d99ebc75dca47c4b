//! Pre-quantized checkpoints (planned by their own bytes, with the kernel each runtime runs
//! them with and its compute-capability floor), mixture-of-experts models, and llama.cpp
//! offload budgeted by a GGUF file's real tensor bytes.
mod common;

use common::{class, job, plan, spec};
use vramfit_api::labels::ComputeCapability;
use vramfit_api::{Dtype, Fallback, Quantization};
use vramfit_planner::memory::{MIB, mib};
use vramfit_planner::plan_llamacpp::offloaded_bytes;
use vramfit_planner::{NodeClass, PlanError, SpecError, plan_for_class, resolve_job, workload};

/// Qwen2.5-7B's numbers with a pre-quantized block.
fn qwen7b(runtime: &str, quantized: &str) -> String {
    format!(
        "{{model: {{name: q, parameters: 7615616512, layers: 28, hiddenSize: 3584, attentionHeads: 28, \
         kvHeads: 4, vocabSize: 152064, preQuantized: {quantized}}}, runtime: {runtime}, image: x}}"
    )
}

const AWQ: &str =
    "{method: awq, weightBits: 4, groupSize: 128, weightFormat: int, symmetric: false}";

fn rejection(result: Result<vramfit_api::Plan, PlanError>) -> String {
    result.expect_err("the class is refused").to_string()
}

#[test]
fn an_awq_checkpoint_runs_as_stored_with_the_kernel_of_the_gpu() {
    let j = job(&qwen7b("vllm", AWQ));
    // No in-flight quantization on top, and no --quantization flag that could contradict the
    // checkpoint (vLLM reads its quantization_config).
    let a10g = plan(&j, "a10g-x1").expect("fits an A10G");
    assert_eq!(a10g.quantization, Quantization::None);
    let args = workload::runtime_args(&j, &a10g);
    assert!(
        !args.iter().any(|a| a.starts_with("--quantization")),
        "{args:?}"
    );
    assert!(
        a10g.reasons
            .iter()
            .any(|r| r.starts_with("kernel: AWQ Marlin (`awq_marlin`) for the AWQ checkpoint (compute capability 8.6 ≥ 8.0)")),
        "{:#?}",
        a10g.reasons
    );
    assert_eq!(a10g.dtype, Dtype::Bfloat16, "awq_marlin takes bfloat16");
    // Turing: the plain AWQ kernel, float16 only.
    let t4 = plan(&j, "t4-x1").expect("fits a T4");
    assert!(
        t4.reasons
            .iter()
            .any(|r| r.starts_with("kernel: AWQ GEMM (`awq`)")),
        "{:#?}",
        t4.reasons
    );
    assert_eq!(t4.dtype, Dtype::Float16);
    // Volta: below every AWQ kernel.
    let why = rejection(plan(&j, "v100-16gb-x4"));
    assert!(
        why.starts_with(
            "AWQ checkpoint: vLLM has no kernel for it at compute capability 7.0 < 7.5 (`awq.py`"
        ),
        "{why}"
    );
}

#[test]
fn weights_are_the_checkpoints_bytes_and_in_flight_levels_do_not_apply() {
    let read = 5_000 * MIB;
    let j = job(&format!(
        "{{model: {{name: q, parameters: 7615616512, layers: 28, hiddenSize: 3584, attentionHeads: 28, \
         kvHeads: 4, vocabSize: 152064, weightBytes: {read}, preQuantized: {AWQ}}}, runtime: vllm, image: x, \
         allowedQuantizations: [nf4]}}"
    ));
    assert_eq!(j.quantizations, vec![Quantization::None]);
    let p = plan(&j, "a10g-x1").expect("fits");
    assert_eq!(p.memory.weights_mib, mib(read));
    assert_eq!(p.quantization, Quantization::None);
    // The same model unquantized needs its 16-bit weights: about three times as much.
    let dense = job(
        "{model: {preset: qwen2.5-7b-instruct}, runtime: vllm, image: x, allowedQuantizations: [none]}",
    );
    assert!(plan(&dense, "a10g-x1").expect("fits").memory.weights_mib > 2 * p.memory.weights_mib);
}

#[test]
fn a_gptq_checkpoint_without_marlin_runs_in_float16_and_refuses_pinned_bfloat16() {
    let asymmetric =
        "{method: gptq, weightBits: 4, groupSize: 128, weightFormat: int, symmetric: false}";
    let j = job(&qwen7b("vllm", asymmetric));
    let p = plan(&j, "a10g-x1").expect("fits");
    assert_eq!(p.dtype, Dtype::Float16);
    assert!(
        p.reasons
            .iter()
            .any(|r| r == "float16: GPTQ ExLlama (`gptq`) takes float16 activations only"),
        "{:#?}",
        p.reasons
    );
    let mut pinned = spec(&qwen7b("vllm", asymmetric));
    pinned.dtype = vramfit_api::DtypeRequest::Bfloat16;
    let pinned = resolve_job(&pinned).expect("valid");
    assert_eq!(
        rejection(plan(&pinned, "a10g-x1")),
        "the job pins bfloat16 but GPTQ ExLlama (`gptq`) takes float16 activations only at compute capability 8.6"
    );
    // Symmetric: GPTQ Marlin, bfloat16.
    let symmetric = job(&qwen7b(
        "vllm",
        "{method: gptq, weightBits: 4, groupSize: 128, symmetric: true}",
    ));
    assert_eq!(
        plan(&symmetric, "a10g-x1").expect("fits").dtype,
        Dtype::Bfloat16
    );
}

#[test]
fn fp8_runs_natively_from_ada_on_and_weight_only_on_ampere() {
    let j = job("{model: {preset: qwen2.5-7b-fp8-dynamic}, runtime: vllm, image: x}");
    let ampere = plan(&j, "a10g-x1").expect("fits");
    assert!(
        ampere
            .reasons
            .iter()
            .any(|r| r.starts_with("kernel: W8A16 FP8 Marlin (weight-only)")),
        "{:#?}",
        ampere.reasons
    );
    let ada = plan(&j, "l40s-x1").expect("fits");
    assert!(
        ada.reasons
            .iter()
            .any(|r| r.starts_with("kernel: W8A8 FP8 CUTLASS (native FP8)")),
        "{:#?}",
        ada.reasons
    );
    let why = rejection(plan(&j, "t4-x1"));
    assert!(
        why.starts_with("compressed-tensors W8A8 FP8 checkpoint: vLLM has no kernel for it at compute capability 7.5 < 8.0"),
        "{why}"
    );
    // transformers' FP8 quantizer checks 8.9 itself.
    let hf = job(&qwen7b(
        "transformers",
        "{method: fp8, weightBits: 8, activationBits: 8, weightFormat: float}",
    ));
    let why = rejection(plan(&hf, "a10g-x1"));
    assert!(
        why.contains("transformers has no kernel for it at compute capability 8.6 < 8.9 (`quantizers/quantizer_finegrained_fp8.py` line 53"),
        "{why}"
    );
    assert!(plan(&hf, "l40s-x1").is_ok());
}

#[test]
fn a_pre_quantized_checkpoint_is_not_a_gguf_file() {
    let err = resolve_job(&spec(&format!(
        "{{model: {{preset: mistral-7b-instruct-v0.3-q4_k_m, preQuantized: {AWQ}}}, runtime: llamacpp, image: x}}"
    )))
    .expect_err("refused");
    assert_eq!(err, SpecError::PreQuantizedUnderLlamaCpp { method: "awq" });
}

#[test]
fn every_expert_counts_for_memory_and_the_active_ones_are_named() {
    let j = job(
        "{model: {preset: mixtral-8x7b-instruct-v0.1}, runtime: vllm, image: x, gpus: {max: 8}}",
    );
    assert_eq!(j.model.experts, Some(8));
    let p = plan(&j, "h100-80gb-x8").expect("fits");
    assert!(
        p.reasons.iter().any(|r| r
            == "mixture of experts: all 8 experts of each MoE layer in memory (46.7B parameters); 12.9B active per token (speed)"),
        "{:#?}",
        p.reasons
    );
    // All 46.7B parameters at 2 bytes are in the plan's weights, over its GPUs.
    let weights = u64::from(p.gpu_count) * p.memory.weights_mib;
    assert!(weights >= mib(2 * 46_702_792_704), "{weights} MiB");
}

/// A layout the tests compute by hand: four blocks of different sizes and an output layer.
fn layout() -> vramfit_api::checkpoint::GgufLayout {
    vramfit_api::checkpoint::GgufLayout {
        block_bytes: vec![10, 20, 30, 40],
        output_bytes: 25,
        token_embedding_bytes: 1_000,
    }
}

#[test]
fn offloaded_bytes_count_the_last_blocks_and_the_output_layer_as_either_build_offloads_them() {
    let l = layout();
    // n = 1: the last block (40) or, from PR 18148 on, the output layer (25).
    assert_eq!(offloaded_bytes(&l, 0), 0);
    assert_eq!(offloaded_bytes(&l, 1), 40);
    // n = 2: 30 + 40 = 70, or 25 + 40 = 65.
    assert_eq!(offloaded_bytes(&l, 2), 70);
    // n = 3: 20 + 30 + 40 = 90, or 25 + 30 + 40 = 95.
    assert_eq!(offloaded_bytes(&l, 3), 95);
    // n = 4: 100, or 25 + 90 = 115.
    assert_eq!(offloaded_bytes(&l, 4), 115);
    // n = 5, every layer: the blocks and the output layer; never the token embeddings.
    assert_eq!(offloaded_bytes(&l, 5), 125);
    assert_eq!(offloaded_bytes(&l, 99), 125);
}

/// 32 blocks of 100 MiB, a 100 MiB output layer and 100 MiB of token embeddings: a 3,400 MiB
/// file; a context whose f16 KV cache is exactly 1 MiB per layer.
fn gguf_job(with_layout: bool) -> vramfit_planner::JobInput {
    let block = 100 * MIB;
    let layout = if with_layout {
        format!(
            ", ggufLayout: {{blockBytes: [{}], outputBytes: {block}, tokenEmbeddingBytes: {block}}}",
            vec![block.to_string(); 32].join(", ")
        )
    } else {
        String::new()
    };
    job(&format!(
        "{{model: {{name: m.gguf, parameters: 7000000000, layers: 32, hiddenSize: 4096, attentionHeads: 32, \
         kvHeads: 8, headDim: 128, ggufFileBytes: {}{layout}}}, runtime: llamacpp, image: x, contextLength: 256, \
         llamaCpp: {{kvCacheTypes: [f16]}}}}",
        34 * block
    ))
}

#[test]
fn even_shares_of_the_file_offload_as_many_layers_as_its_tensors_here() {
    // 2,000 MiB at the default 80 % less llama.cpp's 500 MiB: a budget of 1,100 MiB.
    let card = NodeClass::new(
        "small-x1",
        "Quadro P4000",
        1,
        2_000,
        Some(ComputeCapability::new(6, 1)),
    );
    let layers = |j| {
        plan_for_class(&j, &card, &Fallback::default())
            .expect("plans")
            .llama_cpp
            .expect("llama.cpp")
            .gpu_layers
    };
    // By the file's tensors: n blocks of 100 MiB (or the output layer and n - 1 blocks) and
    // 1 MiB of KV each: 10 × 101 = 1,010 MiB fits, 11 × 101 = 1,111 does not.
    assert_eq!(layers(gguf_job(true)), 10);
    // By even shares of the file (3,400 / 32 = 106.25 MiB), n of them (llama.cpp puts n of its
    // layers on the GPU, never n blocks and the output layer): 10 × 107.25 = 1,072.5 fits,
    // 11 × 107.25 = 1,179.75 does not: the same 10.
    assert_eq!(layers(gguf_job(false)), 10);
}

#[test]
fn a_layout_needs_one_block_per_layer() {
    let err = resolve_job(&spec(
        "{model: {name: m.gguf, parameters: 7000000000, layers: 3, hiddenSize: 4096, attentionHeads: 32, \
         ggufFileBytes: 1000, ggufLayout: {blockBytes: [1, 2], outputBytes: 1, tokenEmbeddingBytes: 1}}, \
         runtime: llamacpp, image: x}",
    ))
    .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "model.ggufLayout.blockBytes has 2 entries for 3 layers: one per layer"
    );
    let _ = class("t4-x1");
}
