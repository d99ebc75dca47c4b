//! Pre-quantized checkpoints (AWQ, GPTQ, FP8, compressed-tensors, bitsandbytes): the kernel
//! each runtime runs them with on a GPU, and the compute-capability floor below which it
//! cannot, read from the runtimes' own code at the pinned versions (the table in
//! docs/runtime-contracts.md; [`FLOORS`] is rendered there verbatim).
use vramfit_api::Runtime;
use vramfit_api::checkpoint::{PreQuantizationMethod, PreQuantized, WeightFormat};
use vramfit_api::labels::ComputeCapability;

use crate::error::PreQuantizedBelowFloor;

/// The kind of pre-quantized weights a kernel takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// AWQ, 4-bit integers with zero points.
    Awq,
    /// GPTQ integers.
    Gptq,
    /// `quant_method: fp8` (weights and dynamic activations in FP8).
    Fp8,
    /// compressed-tensors FP8 weights and activations (W8A8-FP8).
    CtW8a8Fp8,
    /// compressed-tensors FP8 weights, 16-bit activations (W8A16-FP8).
    CtW8a16Fp8,
    /// compressed-tensors INT8 weights and activations (W8A8-INT8).
    CtW8a8Int8,
    /// compressed-tensors 4- or 8-bit integer weights, 16-bit activations (W4A16, W8A16).
    CtWna16,
    /// Another compressed-tensors scheme.
    CtOther,
    /// bitsandbytes 8-bit or 4-bit.
    Bitsandbytes,
}

impl Scheme {
    /// The scheme of a checkpoint's quantization.
    pub fn of(q: &PreQuantized) -> Scheme {
        match q.method {
            PreQuantizationMethod::Awq => Scheme::Awq,
            PreQuantizationMethod::Gptq => Scheme::Gptq,
            PreQuantizationMethod::Fp8 => Scheme::Fp8,
            PreQuantizationMethod::Bitsandbytes => Scheme::Bitsandbytes,
            PreQuantizationMethod::CompressedTensors => {
                match (q.weight_format, q.weight_bits, q.activation_bits) {
                    (Some(WeightFormat::Float), 8, Some(8)) => Scheme::CtW8a8Fp8,
                    (Some(WeightFormat::Float), 8, None) => Scheme::CtW8a16Fp8,
                    (Some(WeightFormat::Int), 8, Some(8)) => Scheme::CtW8a8Int8,
                    (Some(WeightFormat::Int), 4 | 8, None) => Scheme::CtWna16,
                    _ => Scheme::CtOther,
                }
            }
        }
    }

    /// How the scheme is written in the table and in a plan's reasons.
    pub fn describe(self) -> &'static str {
        match self {
            Scheme::Awq => "AWQ",
            Scheme::Gptq => "GPTQ",
            Scheme::Fp8 => "FP8 (`quant_method: fp8`)",
            Scheme::CtW8a8Fp8 => "compressed-tensors W8A8 FP8",
            Scheme::CtW8a16Fp8 => "compressed-tensors W8A16 FP8",
            Scheme::CtW8a8Int8 => "compressed-tensors W8A8 INT8",
            Scheme::CtWna16 => "compressed-tensors W4A16 / W8A16 (integer)",
            Scheme::CtOther => "compressed-tensors, another scheme",
            Scheme::Bitsandbytes => "bitsandbytes (8-bit, NF4/FP4)",
        }
    }
}

/// One row of the table: a kernel a runtime runs `scheme` with from compute capability
/// `min`, where the checkpoint fits the kernel's `condition`.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    /// Runtime.
    pub runtime: Runtime,
    /// Scheme.
    pub scheme: Scheme,
    /// The kernel, as the plan names it.
    pub kernel: &'static str,
    /// Lowest compute capability.
    pub min: ComputeCapability,
    /// Which checkpoints it takes beyond the capability (empty: all of the scheme).
    pub condition: &'static str,
    /// The kernel takes float16 activations only (`get_supported_act_dtypes`): the plan's
    /// dtype is float16 on any GPU.
    pub float16_only: bool,
    /// Where the floor is read, at the pinned versions.
    pub evidence: &'static str,
}

const fn cc(major: u32, minor: u32) -> ComputeCapability {
    ComputeCapability::new(major, minor)
}

const fn row(
    runtime: Runtime,
    scheme: Scheme,
    kernel: &'static str,
    min: ComputeCapability,
    condition: &'static str,
    evidence: &'static str,
) -> Kernel {
    Kernel {
        runtime,
        scheme,
        kernel,
        min,
        condition,
        float16_only: false,
        evidence,
    }
}

/// A row whose kernel takes float16 activations only.
const fn float16_only(kernel: Kernel) -> Kernel {
    Kernel {
        float16_only: true,
        ..kernel
    }
}

use Runtime::{Transformers, Vllm};

/// Per runtime and scheme, the kernels best first: the first whose floor and condition the
/// class and checkpoint meet is the one the plan expects; the last row's floor is the
/// scheme's floor. vLLM 0.10.2 and 0.11.0 (`vllm/model_executor/layers/quantization/`),
/// transformers 4.56.0 (`src/transformers/quantizers/`).
pub const FLOORS: &[Kernel] = &[
    row(
        Vllm,
        Scheme::Awq,
        "AWQ Marlin (`awq_marlin`)",
        cc(8, 0),
        "4 or 8 bits, groups of 32, 64 or 128 or per channel",
        "`awq_marlin.py` `get_min_capability` 80 (0.10.2 line 88, 0.11.0 line 90); `override_quantization_method` picks it for a compatible `awq` checkpoint (`is_awq_marlin_compatible`; `utils/marlin_utils.py` line 46: no Marlin type below 80)",
    ),
    float16_only(row(
        Vllm,
        Scheme::Awq,
        "AWQ GEMM (`awq`)",
        cc(7, 5),
        "",
        "`awq.py` `get_min_capability` 75, \"The AWQ kernel only supports Turing or newer GPUs\" (line 60 in both); `get_supported_act_dtypes` float16 only (line 56 in both)",
    )),
    row(
        Vllm,
        Scheme::Gptq,
        "GPTQ Marlin (`gptq_marlin`; Machete on 9.0 where its types allow)",
        cc(8, 0),
        "symmetric, 4 or 8 bits, groups of 32, 64 or 128 or per channel",
        "`gptq_marlin.py` `get_min_capability` 80 (0.10.2 line 141, 0.11.0 line 156); `override_quantization_method` picks it for a compatible `gptq` checkpoint; `kernels/mixed_precision/machete.py` line 25: Machete needs 90",
    ),
    float16_only(row(
        Vllm,
        Scheme::Gptq,
        "GPTQ ExLlama (`gptq`)",
        cc(6, 0),
        "",
        "`gptq.py` `get_min_capability` 60 (0.10.2 line 98, 0.11.0 line 107); `get_supported_act_dtypes` float16 only (0.10.2 line 93, 0.11.0 line 102)",
    )),
    row(
        Vllm,
        Scheme::Fp8,
        "FP8 CUTLASS (native FP8)",
        cc(8, 9),
        "",
        "`fp8.py` `use_marlin = not has_device_capability(89)` (0.10.2 line 228, 0.11.0 line 234)",
    ),
    row(
        Vllm,
        Scheme::Fp8,
        "FP8 Marlin (weight-only)",
        cc(8, 0),
        "",
        "`fp8.py` `get_min_capability` 80 (0.10.2 line 112, 0.11.0 line 114)",
    ),
    row(
        Vllm,
        Scheme::CtW8a8Fp8,
        "W8A8 FP8 CUTLASS (native FP8)",
        cc(8, 9),
        "",
        "`compressed_tensors/schemes/compressed_tensors_w8a8_fp8.py` `get_min_capability` 89 (0.10.2 line 38, 0.11.0 line 55)",
    ),
    row(
        Vllm,
        Scheme::CtW8a8Fp8,
        "W8A16 FP8 Marlin (weight-only)",
        cc(8, 0),
        "",
        "`compressed_tensors/compressed_tensors.py` falls back to `CompressedTensorsW8A16Fp8` below 89 (0.10.2 line 495, 0.11.0 line 497); `compressed_tensors_w8a16_fp8.py` `get_min_capability` 80 (line 33)",
    ),
    row(
        Vllm,
        Scheme::CtW8a16Fp8,
        "W8A16 FP8 Marlin",
        cc(8, 0),
        "",
        "`compressed_tensors/schemes/compressed_tensors_w8a16_fp8.py` `get_min_capability` 80 (line 33 in both)",
    ),
    row(
        Vllm,
        Scheme::CtW8a8Int8,
        "W8A8 INT8 CUTLASS",
        cc(7, 5),
        "",
        "`compressed_tensors/schemes/compressed_tensors_w8a8_int8.py` `get_min_capability` 75 (line 32 in both)",
    ),
    row(
        Vllm,
        Scheme::CtWna16,
        "WNA16 Marlin (Machete on 9.0 where its types allow)",
        cc(8, 0),
        "",
        "`compressed_tensors/schemes/compressed_tensors_wNa16.py` `get_min_capability` 80 (line 69 in both); `kernels/mixed_precision/machete.py` line 25: Machete needs 90",
    ),
    row(
        Vllm,
        Scheme::CtOther,
        "the scheme's own kernel",
        cc(7, 0),
        "",
        "`compressed_tensors/compressed_tensors.py` `get_min_capability` 70 (0.10.2 line 91, 0.11.0 line 90); the scheme's own floor is checked when it loads",
    ),
    row(
        Vllm,
        Scheme::Bitsandbytes,
        "bitsandbytes",
        cc(7, 0),
        "",
        "`bitsandbytes.py` `get_min_capability` 70 (0.10.2 line 74, 0.11.0 line 75); a pre-quantized checkpoint gets the bitsandbytes loader from its config (`engine/arg_utils.py` 0.10.2 line 1391)",
    ),
    row(
        Transformers,
        Scheme::Fp8,
        "FP8 (`FineGrainedFP8HfQuantizer`)",
        cc(8, 9),
        "",
        "`quantizers/quantizer_finegrained_fp8.py` line 53: \"only supported on GPUs with compute capability >= 8.9\"",
    ),
    row(
        Transformers,
        Scheme::Awq,
        "AutoAWQ GEMM",
        cc(7, 5),
        "",
        "`quantizers/quantizer_awq.py` `validate_environment` (line 48) checks no capability; it runs AutoAWQ's GEMM kernels, the llm-awq kernels that vLLM's `awq.py` (line 60) floors at 75",
    ),
];

/// Schemes transformers 4.56 loads without a capability check of its own (the quantizer's
/// `validate_environment` checks libraries and devices only): planned with no floor.
pub const NO_FLOOR_UNDER_TRANSFORMERS: &str = "`quantizers/quantizer_gptq.py` (line 54), `quantizer_compressed_tensors.py`, `quantizer_bnb_4bit.py` and `quantizer_bnb_8bit.py` check no compute capability";

/// Whether `q` fits a kernel's condition beyond the capability.
fn fits_condition(kernel: &Kernel, q: &PreQuantized) -> bool {
    let bits = matches!(q.weight_bits, 4 | 8);
    let groups = q.group_size.is_none_or(|g| matches!(g, 32 | 64 | 128));
    match (kernel.runtime, kernel.scheme, kernel.min) {
        (Vllm, Scheme::Awq, min) if min == cc(8, 0) => bits && groups,
        (Vllm, Scheme::Gptq, min) if min == cc(8, 0) => {
            bits && groups && q.symmetric.unwrap_or(true)
        }
        _ => true,
    }
}

/// The kernel `runtime` runs `q` with on compute capability `capability`: `Ok(None)` where
/// vramfit knows no floor (custom runtimes, the transformers schemes without a check), or
/// why the class is below the scheme's floor.
pub fn kernel(
    runtime: Runtime,
    q: &PreQuantized,
    capability: ComputeCapability,
) -> Result<Option<&'static Kernel>, PreQuantizedBelowFloor> {
    let scheme = Scheme::of(q);
    let rows: Vec<&'static Kernel> = FLOORS
        .iter()
        .filter(|k| k.runtime == runtime && k.scheme == scheme)
        .collect();
    let Some(floor) = rows.last() else {
        return Ok(None);
    };
    match rows
        .iter()
        .find(|k| capability >= k.min && fits_condition(k, q))
    {
        Some(kernel) => Ok(Some(kernel)),
        None => Err(PreQuantizedBelowFloor {
            scheme: scheme.describe(),
            runtime,
            capability,
            floor: floor.min,
            evidence: floor.evidence,
        }),
    }
}

/// The floor table as Markdown (docs/runtime-contracts.md holds it verbatim).
pub fn render_floor_table() -> String {
    let mut out = String::from(
        "| runtime | checkpoint | kernel vramfit expects | from compute capability | when | dtype | evidence |\n|---|---|---|---|---|---|---|\n",
    );
    for k in FLOORS {
        let runtime = match k.runtime {
            Vllm => "vLLM",
            Transformers => "transformers",
            Runtime::Llamacpp => "llama.cpp",
            Runtime::Custom => "custom",
        };
        out.push_str(&format!(
            "| {runtime} | {} | {} | {} | {} | {} | {} |\n",
            k.scheme.describe(),
            k.kernel,
            k.min,
            if k.condition.is_empty() {
                "any"
            } else {
                k.condition
            },
            if k.float16_only {
                "float16 only"
            } else {
                "as planned"
            },
            k.evidence
        ));
    }
    out
}
