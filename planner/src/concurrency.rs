//! A served replica's concurrency on a class: the sequences it serves at once
//! (`--max-num-seqs` for vLLM, `--parallel` for llama.cpp), and the unit the autoscaler
//! measures each replica's load in.
//!
//! vLLM gives the KV cache whatever its memory budget leaves after weights and activations,
//! so a replica on a larger GPU holds more sequences of the job's context at once: its
//! concurrency is the most sequences whose KV cache, at the plan's quantization and GPUs,
//! still fits the class's usable memory, from the job's `batchSize` (which the plan already
//! fits) up to [`VLLM_MAX_NUM_SEQS`]. llama.cpp allocates its KV cache for `--parallel` slots
//! up front (more slots would take GPU layers), and transformers and custom servers batch as
//! their code does: their concurrency is the job's `batchSize`.
use vramfit_api::{Quantization, Runtime};

use crate::job_input::JobInput;
use crate::memory;

/// vLLM's own `--max-num-seqs` default on GPUs (docs/runtime-contracts.md): the most a
/// replica is planned for.
pub const VLLM_MAX_NUM_SEQS: u32 = 256;

/// The concurrency of a served replica of `job` planned at `quantization` on `gpus` GPUs
/// with `usable_per_gpu_mib` usable per GPU.
pub fn served(
    job: &JobInput,
    quantization: Quantization,
    gpus: u32,
    usable_per_gpu_mib: u64,
) -> u32 {
    let floor = job.batch_size.max(1);
    if job.runtime != Runtime::Vllm || floor >= VLLM_MAX_NUM_SEQS {
        return floor;
    }
    let fits = |sequences: u32| {
        let tokens = memory::tokens(sequences, job.context_length);
        let prefill = tokens.min(crate::job_input::VLLM_PREFILL_CHUNK_TOKENS);
        memory::transformer_need(&job.model, quantization, tokens, prefill, gpus)
            .is_ok_and(|need| need.per_gpu_mib() <= usable_per_gpu_mib)
    };
    // The need grows with the sequences: the largest that fits, by bisection.
    // Both stay within 1..=VLLM_MAX_NUM_SEQS + 1, so the arithmetic cannot overflow.
    let (mut fitting, mut too_many) = (floor, VLLM_MAX_NUM_SEQS.saturating_add(1));
    while too_many.saturating_sub(fitting) > 1 {
        let middle = fitting.saturating_add(too_many.saturating_sub(fitting) / 2);
        if fits(middle) {
            fitting = middle;
        } else {
            too_many = middle;
        }
    }
    fitting
}

/// The plan's line for a served replica's concurrency `n`.
pub fn reason(job: &JobInput, n: u32) -> String {
    match job.runtime {
        Runtime::Vllm if n > job.batch_size => format!(
            "concurrency: {n} sequences of {} tokens at once per replica (--max-num-seqs): the most whose KV cache fits the usable memory, at most {VLLM_MAX_NUM_SEQS}",
            job.context_length
        ),
        Runtime::Vllm => format!(
            "concurrency: {n} sequences at once per replica (--max-num-seqs), the job's batch: no more fit"
        ),
        Runtime::Llamacpp => format!(
            "concurrency: {n} sequences at once per replica (--parallel), the job's batch: llama.cpp allocates their KV cache up front"
        ),
        Runtime::Transformers | Runtime::Custom => {
            format!("concurrency: {n} sequences at once per replica, the job's batch")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_input::resolve_job;

    fn job(yaml: &str) -> JobInput {
        resolve_job(&serde_yaml::from_str(yaml).unwrap()).unwrap()
    }

    #[test]
    fn a_larger_gpu_holds_more_sequences_and_never_fewer_than_the_batch() {
        let j = job(
            "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, contextLength: 8192, batchSize: 4, serve: {}}",
        );
        let small = served(&j, Quantization::None, 1, 18 * 1024);
        let large = served(&j, Quantization::None, 1, 68 * 1024);
        assert!(small >= 4 && large > small * 2, "{small} {large}");
        // What fits: the need at the found count is within the memory, one more is not.
        let need = |n| {
            memory::transformer_need(
                &j.model,
                Quantization::None,
                memory::tokens(n, 8192),
                8192,
                1,
            )
            .unwrap()
            .per_gpu_mib()
        };
        assert!(need(large) <= 68 * 1024 && need(large + 1) > 68 * 1024);
        // Too little memory for more than the batch: the batch.
        assert_eq!(served(&j, Quantization::None, 1, need(4)), 4);
    }

    #[test]
    fn vllm_is_capped_at_its_default_and_llama_cpp_keeps_its_batch() {
        let j = job(
            "{model: {preset: mistral-7b-instruct-v0.3}, runtime: vllm, image: x, contextLength: 512, serve: {}}",
        );
        assert_eq!(
            served(&j, Quantization::None, 1, 140 * 1024),
            VLLM_MAX_NUM_SEQS
        );
        let l = job(
            "{model: {preset: mistral-7b-instruct-v0.3-q4_k_m}, runtime: llamacpp, image: x, batchSize: 3, serve: {}}",
        );
        assert_eq!(served(&l, Quantization::None, 1, 140 * 1024), 3);
    }
}
