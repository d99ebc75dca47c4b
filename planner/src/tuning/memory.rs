//! Memory a training step needs per GPU (docs/planning.md, "Fine-tuning"): the base weights at
//! the method's precision, what is trained (LoRA adapters, or every parameter's gradient and
//! master weight), the optimizer states, the activations kept for the backward pass, the
//! logits at the loss, and the runtime. Every figure rounds up: an attempt that runs out of
//! memory costs a pod and a retry.
use vramfit_api::tuning::{Optimizer, Parallelism, TrainingMemory, TuningMethod};

use crate::error::SizeOverflow;
use crate::memory::{MIB, RUNTIME_FLOOR_MIB, VISION_ALLOWANCE_MIB, div_ceil, mib};
use crate::model_catalog::ModelShape;
use crate::tuning::shape::{BlockDims, TrainingShape};

/// QLoRA's base: NF4 (half a byte) with double-quantized constants (an 8-bit constant per
/// 64-weight block and an fp32 one per 256 blocks: 0.016 bytes), in thousandths of a byte.
pub const QLORA_MILLIBYTES_PER_PARAMETER: u64 = 520;
/// Bytes of an fp32 value (an adapter's gradient in a DDP bucket).
pub const FP32_BYTES: u64 = 4;
/// Bytes of a 16-bit parameter, gradient or activation.
pub const HALF_BYTES: u64 = 2;
/// peft's `prepare_model_for_kbit_training` casts what bitsandbytes leaves unquantized (the
/// token embeddings and the output layer) to fp32.
pub const KBIT_UNQUANTIZED_BYTES: u64 = 4;
/// A LoRA adapter parameter: fp32 weight and fp32 gradient (peft casts 16-bit adapters to
/// fp32, `autocast_adapter_dtype`).
pub const ADAPTER_BYTES: u64 = 8;
/// A fully trained parameter beside its 16-bit weight: its 16-bit gradient and its fp32
/// master weight (mixed precision; fp16 gradients cannot be unscaled without it).
pub const FULL_TRAINABLE_BYTES: u64 = 6;
/// AdamW's two fp32 states.
pub const ADAMW_BYTES: u64 = 8;
/// bitsandbytes' 8-bit AdamW: two 8-bit states (and block constants, rounded into them).
pub const PAGED_8BIT_BYTES: u64 = 2;
/// Activations one decoder layer keeps for the backward pass, in bytes per token per unit
/// of each width (16-bit tensors, memory-efficient attention: no sequence² matrix): the
/// hidden size (the block input, the two norms' fp32 copies and outputs, the MLP input), the
/// query width (queries, their rotary copies, the attention output), the key/value width (keys,
/// values, rotary copies) and the intermediate size (gate, up, activation and their product).
pub const LAYER_BYTES_PER_HIDDEN: u64 = 16;
/// See [`LAYER_BYTES_PER_HIDDEN`].
pub const LAYER_BYTES_PER_QUERY: u64 = 6;
/// See [`LAYER_BYTES_PER_HIDDEN`].
pub const LAYER_BYTES_PER_KEY_VALUE: u64 = 6;
/// See [`LAYER_BYTES_PER_HIDDEN`].
pub const LAYER_BYTES_PER_INTERMEDIATE: u64 = 8;
/// LoRA dropout keeps its output (16-bit) and mask (1 byte) for each adapted layer's input.
pub const LORA_DROPOUT_BYTES_PER_INPUT: u64 = 3;
/// bitsandbytes' 4-bit layers keep a 16-bit copy of their input (cast to the compute dtype).
pub const QLORA_CAST_BYTES_PER_INPUT: u64 = 2;
/// Gradient checkpointing keeps each layer's input: 16-bit, or fp32 under QLoRA (the fp32
/// embeddings make the residual stream fp32).
pub const CHECKPOINT_BYTES_PER_HIDDEN: u64 = 2;
/// See [`CHECKPOINT_BYTES_PER_HIDDEN`].
pub const CHECKPOINT_BYTES_PER_HIDDEN_KBIT: u64 = 4;
/// The logits per token and vocabulary entry at their peak in the backward pass: the 16-bit
/// output, its fp32 copy for the loss, the log-softmax and the two gradients.
pub const LOGIT_BYTES: u64 = 16;
/// What the tensors above add up to is counted this many percent: the backward pass holds
/// the gradients of the layer it works on beside its saved tensors, and PyTorch's caching
/// allocator keeps the freed blocks of tensors whose sizes change step to step. Calibrated on
/// the teams' Mistral-7B QLoRA run on an A10 (docs/planning.md).
pub const TOKEN_MEMORY_PERCENT: u64 = 240;
/// FSDP gathers the layer it computes and prefetches the next, and reduces the layer's
/// gradients unsharded: three 16-bit copies of one layer's parameters.
pub const FSDP_UNSHARDED_LAYER_COPIES: u64 = 3;

/// One configuration to size: everything but the model and the class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepShape {
    /// Method.
    pub method: TuningMethod,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// GPUs.
    pub gpus: u32,
    /// How they share the work.
    pub parallelism: Parallelism,
    /// Gradient checkpointing.
    pub gradient_checkpointing: bool,
    /// Sequences per GPU per pass.
    pub micro_batch: u32,
    /// Tokens per sequence.
    pub sequence_length: u32,
}

/// The adapters of a LoRA plan: their parameters and the input widths of the adapted layers
/// of one block (for the dropout's activations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adapters {
    /// Adapter parameters over all blocks.
    pub parameters: u64,
    /// Sum of the adapted layers' input widths in one block.
    pub inputs_per_block: u64,
    /// Dropout is on.
    pub dropout: bool,
}

/// Memory per GPU of one training configuration, MiB, part by part.
pub fn training_need(
    model: &ModelShape,
    shape: &TrainingShape,
    adapters: Option<&Adapters>,
    step: &StepShape,
) -> Result<TrainingMemory, SizeOverflow> {
    let sharded = if step.parallelism == Parallelism::Fsdp {
        u64::from(step.gpus.max(1))
    } else {
        1
    };
    let trained = trained_parameters(model, step.method, adapters);
    let weights = div_ceil(mib(weights_bytes(model, shape, step.method)?), sharded);
    let trainable = div_ceil(
        mib(match step.method {
            TuningMethod::Full => times(WEIGHTS, trained, FULL_TRAINABLE_BYTES)?,
            _ => times(WEIGHTS, trained, ADAPTER_BYTES)?,
        }),
        sharded,
    );
    let optimizer = div_ceil(
        mib(times(OPTIMIZER, trained, optimizer_bytes(step.optimizer))?),
        sharded,
    );
    let tokens = crate::memory::tokens(step.micro_batch, step.sequence_length);
    let activations = mib(scaled(
        ACTIVATIONS,
        times(
            ACTIVATIONS,
            tokens,
            activation_bytes_per_token(model, &shape.dims, step, adapters)?,
        )?,
    )?);
    let logits = mib(scaled(
        LOGITS,
        times(
            LOGITS,
            tokens,
            u64::from(shape.vocab_size).saturating_mul(LOGIT_BYTES),
        )?,
    )?);
    let runtime = runtime_mib(model, shape, step, trained)?;
    let parts = [weights, trainable, optimizer, activations, logits, runtime];
    let needed = parts
        .iter()
        .try_fold(0u64, |acc, part| acc.checked_add(*part))
        .ok_or(SizeOverflow { what: ACTIVATIONS })?;
    Ok(TrainingMemory {
        weights_mib: weights,
        trainable_mib: trainable,
        optimizer_mib: optimizer,
        activations_mib: activations,
        logits_mib: logits,
        runtime_mib: runtime,
        needed_mib: needed,
        ..TrainingMemory::default()
    })
}

const WEIGHTS: &str = "the training weights (parameters × bytes per parameter)";
const OPTIMIZER: &str = "the optimizer states (trained parameters × bytes per state)";
const ACTIVATIONS: &str =
    "the training activations (micro-batch × sequenceLength × layers × widths)";
const LOGITS: &str = "the logits (micro-batch × sequenceLength × vocabulary × 16 bytes)";

/// Parameters the optimizer updates.
pub fn trained_parameters(
    model: &ModelShape,
    method: TuningMethod,
    adapters: Option<&Adapters>,
) -> u64 {
    match method {
        TuningMethod::Full => model.parameters,
        _ => adapters.map_or(0, |a| a.parameters),
    }
}

/// Bytes per trained parameter of an optimizer's states.
pub fn optimizer_bytes(optimizer: Optimizer) -> u64 {
    match optimizer {
        Optimizer::AdamW => ADAMW_BYTES,
        Optimizer::PagedAdamW8bit => PAGED_8BIT_BYTES,
    }
}

/// The base weights: 16-bit for LoRA and full; for QLoRA, NF4 with double quantization for
/// the blocks and fp32 for the embeddings and output layer.
pub fn weights_bytes(
    model: &ModelShape,
    shape: &TrainingShape,
    method: TuningMethod,
) -> Result<u64, SizeOverflow> {
    match method {
        TuningMethod::Full | TuningMethod::Lora => times(WEIGHTS, model.parameters, HALF_BYTES),
        TuningMethod::Qlora => {
            let kept = shape.embedding_parameters;
            let quantized = model.parameters.saturating_sub(kept);
            let nf4 = div_ceil(
                times(WEIGHTS, quantized, QLORA_MILLIBYTES_PER_PARAMETER)?,
                1000,
            );
            nf4.checked_add(times(WEIGHTS, kept, KBIT_UNQUANTIZED_BYTES)?)
                .ok_or(SizeOverflow { what: WEIGHTS })
        }
    }
}

/// Bytes of activations per token of the micro-batch: every layer's saved tensors without
/// checkpointing; with it, each layer's input and one layer's tensors (recomputed in turn).
fn activation_bytes_per_token(
    model: &ModelShape,
    d: &BlockDims,
    step: &StepShape,
    adapters: Option<&Adapters>,
) -> Result<u64, SizeOverflow> {
    let weighted = |pairs: &[(u64, u64)]| {
        pairs
            .iter()
            .try_fold(0u64, |acc, (width, bytes)| {
                width.checked_mul(*bytes).and_then(|b| acc.checked_add(b))
            })
            .ok_or(SizeOverflow { what: ACTIVATIONS })
    };
    let mut layer = weighted(&[
        (d.hidden, LAYER_BYTES_PER_HIDDEN),
        (d.query, LAYER_BYTES_PER_QUERY),
        (d.key_value, LAYER_BYTES_PER_KEY_VALUE),
        (d.active_intermediate, LAYER_BYTES_PER_INTERMEDIATE),
    ])?;
    if let Some(a) = adapters.filter(|a| a.dropout) {
        layer = layer.saturating_add(
            a.inputs_per_block
                .saturating_mul(LORA_DROPOUT_BYTES_PER_INPUT),
        );
    }
    if step.method == TuningMethod::Qlora {
        let inputs = d
            .hidden
            .saturating_mul(5)
            .saturating_add(d.query)
            .saturating_add(d.active_intermediate);
        layer = layer.saturating_add(inputs.saturating_mul(QLORA_CAST_BYTES_PER_INPUT));
    }
    let layers = u64::from(model.layers);
    if step.gradient_checkpointing {
        let kept = match step.method {
            TuningMethod::Qlora => CHECKPOINT_BYTES_PER_HIDDEN_KBIT,
            _ => CHECKPOINT_BYTES_PER_HIDDEN,
        };
        weighted(&[(d.hidden.saturating_mul(layers), kept), (layer, 1)])
    } else {
        layer
            .checked_mul(layers)
            .ok_or(SizeOverflow { what: ACTIVATIONS })
    }
}

/// CUDA context and workspaces, FSDP's unsharded layers, DDP's gradient buckets and a vision
/// tower's allowance.
fn runtime_mib(
    model: &ModelShape,
    shape: &TrainingShape,
    step: &StepShape,
    trained: u64,
) -> Result<u64, SizeOverflow> {
    let mut bytes = RUNTIME_FLOOR_MIB.saturating_mul(MIB);
    if model.vision {
        bytes = bytes.saturating_add(VISION_ALLOWANCE_MIB.saturating_mul(MIB));
    }
    match step.parallelism {
        Parallelism::Fsdp => {
            let per_layer = model
                .parameters
                .saturating_sub(shape.embedding_parameters)
                .checked_div(u64::from(model.layers))
                .unwrap_or(model.parameters);
            bytes = bytes.saturating_add(times(
                WEIGHTS,
                per_layer,
                HALF_BYTES.saturating_mul(FSDP_UNSHARDED_LAYER_COPIES),
            )?);
        }
        // DDP reduces the gradients through buckets of their own (fp32 for adapters,
        // 16-bit for full weights).
        Parallelism::Ddp => {
            let per_gradient = match step.method {
                TuningMethod::Full => HALF_BYTES,
                _ => FP32_BYTES,
            };
            bytes = bytes.saturating_add(times(WEIGHTS, trained, per_gradient)?);
        }
        Parallelism::Single => {}
    }
    Ok(mib(bytes))
}

fn times(what: &'static str, count: u64, bytes: u64) -> Result<u64, SizeOverflow> {
    count.checked_mul(bytes).ok_or(SizeOverflow { what })
}

fn scaled(what: &'static str, bytes: u64) -> Result<u64, SizeOverflow> {
    times(what, bytes, TOKEN_MEMORY_PERCENT).map(|b| div_ceil(b, 100))
}
