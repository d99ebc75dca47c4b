"""The plan as `from_pretrained` arguments, and a load that checks it got what was planned.

The mapping is kept in plain names and values (`planned_kwargs`), so it can be read and
tested without torch; `from_pretrained_kwargs` turns those names into torch dtypes and a
`BitsAndBytesConfig`. torch and transformers are imported inside the functions that need
them: the plan, the output check and the termination message work without them.
"""

from __future__ import annotations

from typing import Any

from .plan import Plan


class PlanMismatch(RuntimeError):
    """The loaded model differs from the plan (a dtype or quantization the code overrode)."""


def planned_kwargs(plan: Plan) -> dict[str, Any]:
    """The `from_pretrained` arguments by name: dtypes as strings, the quantization config
    as the keyword arguments of `BitsAndBytesConfig` (absent when not quantized)."""
    kwargs: dict[str, Any] = {"dtype": plan.dtype}
    if plan.quantization == "int8":
        kwargs["quantization_config"] = {"load_in_8bit": True}
    elif plan.quantization == "nf4":
        # bitsandbytes' default 4-bit type is fp4, so nf4 must be named; the compute dtype
        # is the planned one (float16 below compute capability 8.0).
        kwargs["quantization_config"] = {
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_compute_dtype": plan.dtype,
        }
    kwargs["attn_implementation"] = "flash_attention_2" if plan.flash_attention else "sdpa"
    # The budget the plan was sized for on each GPU, which leaves the class's buffer free.
    kwargs["device_map"] = "auto"
    kwargs["max_memory"] = {i: f"{plan.usable_memory_mib}MiB" for i in range(plan.gpu_count)}
    return kwargs


def from_pretrained_kwargs(plan: Plan) -> dict[str, Any]:
    """The exact `from_pretrained` arguments (transformers >= 4.56 takes `dtype=`)."""
    import torch

    kwargs = planned_kwargs(plan)
    kwargs["dtype"] = getattr(torch, plan.dtype)
    quantization = kwargs.get("quantization_config")
    if quantization is not None:
        from transformers import BitsAndBytesConfig

        if "bnb_4bit_compute_dtype" in quantization:
            quantization["bnb_4bit_compute_dtype"] = getattr(torch, plan.dtype)
        kwargs["quantization_config"] = BitsAndBytesConfig(**quantization)
    return kwargs


def apply_memory_fraction(plan: Plan) -> None:
    """Cap each visible GPU at the plan's memory fraction (a no-op without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return
    # The container sees exactly the planned GPUs.
    for device in range(torch.cuda.device_count()):
        torch.cuda.set_per_process_memory_fraction(plan.memory_fraction, device)


def tile_kwargs(plan: Plan, key: str = "max_dynamic_patch") -> dict[str, int]:
    """The planned image-tile limit under the name the vision code reads it: InternVL's
    processor takes `max_dynamic_patch`, its image loader `max_num`. Empty without a limit."""
    return {} if plan.max_tiles is None else {key: plan.max_tiles}


def loaded_settings(model: Any) -> tuple[str, str]:
    """The dtype and quantization (none, int8, nf4, or the 4-bit type) a model loaded with."""
    dtype = str(model.dtype).removeprefix("torch.")
    config = getattr(getattr(model, "config", None), "quantization_config", None)
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    config = config or {}
    if getattr(model, "is_loaded_in_8bit", False) or config.get("load_in_8bit"):
        return dtype, "int8"
    if getattr(model, "is_loaded_in_4bit", False) or config.get("load_in_4bit"):
        return dtype, str(config.get("bnb_4bit_quant_type", "fp4"))
    return dtype, "none"


def check_loaded(plan: Plan, model: Any) -> None:
    """Raise PlanMismatch unless the model has the planned dtype and quantization: a wrong
    dtype (bfloat16 on a V100) loads fine and then answers garbage."""
    dtype, quantization = loaded_settings(model)
    if dtype != plan.dtype:
        raise PlanMismatch(f"model loaded in {dtype}, the plan says {plan.dtype}")
    if quantization != plan.quantization:
        raise PlanMismatch(
            f"model loaded with quantization {quantization}, the plan says {plan.quantization}"
        )


def load_model_and_processor(
    plan: Plan,
    model_cls: Any = None,
    processor_cls: Any = None,
    trust_remote_code: bool = False,
    **overrides: Any,
) -> tuple[Any, Any]:
    """Load `plan.model` with the planned arguments and check the result.

    `model_cls` defaults to `AutoModel` and `processor_cls` to `AutoProcessor`;
    `overrides` replace planned arguments (e.g. `device_map=None` on a CPU-only test).
    """
    import transformers

    model_cls = model_cls or transformers.AutoModel
    processor_cls = processor_cls or transformers.AutoProcessor
    apply_memory_fraction(plan)
    kwargs = from_pretrained_kwargs(plan) | overrides
    model = model_cls.from_pretrained(plan.model, trust_remote_code=trust_remote_code, **kwargs)
    check_loaded(plan, model)
    processor = processor_cls.from_pretrained(plan.model, trust_remote_code=trust_remote_code)
    return model, processor
