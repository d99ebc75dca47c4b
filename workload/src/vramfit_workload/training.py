"""The training half: a fine-tuning plan read from the env, as the arguments of
`BitsAndBytesConfig`, `LoraConfig`, `from_pretrained` and `TrainingArguments`, a watch on the
loss, and the report of the run.

The arguments are kept in plain names and values (`*_kwargs`), so they can be read and tested
without torch, transformers or peft; the builders (`bits_and_bytes_config`, `lora_config`,
`training_arguments`) make the real objects and refuse any name the installed class does not
take (`checked`), so a name a version lacks fails at once instead of being dropped silently.
docs/runtime-contracts.md ("Fine-tuning") lists every name and the versions they are checked
against.
"""

from __future__ import annotations

import inspect
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .plan import Plan, PlanError, _Env

METHODS = ("qlora", "lora", "full")
OPTIMIZERS = ("adamw_torch", "paged_adamw_8bit")
PARALLELISMS = ("single", "ddp", "fsdp")
ALL_LINEAR = "all-linear"


@dataclass(frozen=True)
class TrainingPlan:
    """One pod's fine-tuning plan: the inference plan's model, dtype and memory, and the
    training choices."""

    plan: Plan
    method: str
    sequence_length: int
    micro_batch: int
    gradient_accumulation: int
    effective_batch: int
    gradient_checkpointing: bool
    optimizer: str
    parallelism: str
    tf32: bool
    lora_rank: int | None = None
    lora_alpha: int | None = None
    lora_dropout: float | None = None
    lora_target_modules: tuple[str, ...] = ()
    data_dir: str | None = None
    output_dir: str | None = None
    group_size: int = 1

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> TrainingPlan:
        """Read the plan; raises PlanError naming the first variable that is wrong."""
        env = _Env(environ)
        method = env.choice("VRAMFIT_TUNING_METHOD", METHODS)
        lora = method != "full"
        targets = environ.get("VRAMFIT_LORA_TARGET_MODULES", "") if lora else ""
        parallelism = env.choice("VRAMFIT_PARALLELISM", PARALLELISMS)
        # A group of pods across nodes was planned with FSDP over all of its GPUs: one GPU's
        # share of the weights, gradients and optimizer states. Data parallel or one GPU would
        # hold them whole on every GPU.
        group_size = env.integer("VRAMFIT_GROUP_SIZE") if env.is_set("VRAMFIT_GROUP_SIZE") else 1
        if group_size > 1:
            parallelism = "fsdp"
        plan = cls(
            plan=Plan.from_env(environ),
            method=method,
            sequence_length=env.integer("VRAMFIT_SEQUENCE_LENGTH"),
            micro_batch=env.integer("VRAMFIT_MICRO_BATCH"),
            gradient_accumulation=env.integer("VRAMFIT_GRADIENT_ACCUMULATION"),
            effective_batch=env.integer("VRAMFIT_EFFECTIVE_BATCH"),
            gradient_checkpointing=env.boolean("VRAMFIT_GRADIENT_CHECKPOINTING"),
            optimizer=env.choice("VRAMFIT_OPTIMIZER", OPTIMIZERS),
            parallelism=parallelism,
            tf32=env.boolean("VRAMFIT_TF32"),
            lora_rank=env.integer("VRAMFIT_LORA_RANK") if lora else None,
            lora_alpha=env.integer("VRAMFIT_LORA_ALPHA") if lora else None,
            lora_dropout=_dropout(env) if lora else None,
            lora_target_modules=tuple(t.strip() for t in targets.split(",") if t.strip()),
            data_dir=environ.get("VRAMFIT_DATA_DIR") or None,
            output_dir=environ.get("VRAMFIT_OUTPUT_DIR") or None,
            group_size=group_size,
        )
        if lora and not plan.lora_target_modules:
            raise PlanError("VRAMFIT_LORA_TARGET_MODULES is not set: expected module names")
        return plan


def _dropout(env: _Env) -> float:
    value = env.fraction_or_zero("VRAMFIT_LORA_DROPOUT")
    if value >= 1:
        raise PlanError(f"VRAMFIT_LORA_DROPOUT={value} is malformed: expected 0 to below 1")
    return value


def bits_and_bytes_kwargs(t: TrainingPlan) -> dict[str, Any] | None:
    """QLoRA's 4-bit base: NF4 with double quantization, computing in the planned dtype.
    None for LoRA and full fine-tuning (a 16-bit or fp32 base). Under FSDP the packed 4-bit
    weights are stored in the planned dtype: FSDP flattens each wrapped module's parameters
    into one tensor of one dtype."""
    if t.method != "qlora":
        return None
    kwargs = {
        "load_in_4bit": True,
        "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True,
        "bnb_4bit_compute_dtype": t.plan.dtype,
    }
    if t.parallelism == "fsdp":
        kwargs["bnb_4bit_quant_storage"] = t.plan.dtype
    return kwargs


def model_kwargs(t: TrainingPlan, local_rank: int = 0) -> dict[str, Any]:
    """`from_pretrained` arguments by name. QLoRA and LoRA load the base in the planned 16-bit
    dtype; full fine-tuning loads fp32 weights (the master copy mixed precision updates; the
    forward pass runs in the planned dtype under autocast). One GPU or DDP: the whole model on
    this process's GPU; FSDP places the shards itself."""
    kwargs: dict[str, Any] = {
        "dtype": "float32" if t.method == "full" else t.plan.dtype,
        "attn_implementation": "flash_attention_2" if t.plan.flash_attention else "sdpa",
    }
    quantization = bits_and_bytes_kwargs(t)
    if quantization is not None:
        kwargs["quantization_config"] = quantization
    if t.parallelism != "fsdp":
        kwargs["device_map"] = {"": local_rank}
    return kwargs


def lora_kwargs(t: TrainingPlan) -> dict[str, Any] | None:
    """`LoraConfig` arguments; None for full fine-tuning."""
    if t.method == "full":
        return None
    targets: str | list[str] = (
        ALL_LINEAR if ALL_LINEAR in t.lora_target_modules else list(t.lora_target_modules)
    )
    return {
        "r": t.lora_rank,
        "lora_alpha": t.lora_alpha,
        "lora_dropout": t.lora_dropout,
        "target_modules": targets,
        "bias": "none",
        "task_type": "CAUSAL_LM",
    }


def training_arguments_kwargs(t: TrainingPlan, output_dir: str | None = None) -> dict[str, Any]:
    """`TrainingArguments` arguments: micro-batch, accumulation, checkpointing, optimizer,
    mixed precision (bf16, or fp16 with loss scaling), TF32 and the parallelism."""
    kwargs: dict[str, Any] = {
        "output_dir": output_dir or t.output_dir or "vramfit-output",
        "per_device_train_batch_size": t.micro_batch,
        "gradient_accumulation_steps": t.gradient_accumulation,
        "gradient_checkpointing": t.gradient_checkpointing,
        "optim": t.optimizer,
        "bf16": t.plan.dtype == "bfloat16",
        "fp16": t.plan.dtype == "float16",
        "tf32": t.tf32,
    }
    if t.gradient_checkpointing:
        # The non-reentrant checkpoint works with frozen inputs (LoRA) and is PyTorch's advice.
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if t.parallelism == "fsdp":
        kwargs["fsdp"] = "full_shard auto_wrap"
    if t.parallelism == "ddp" and t.method != "full":
        # The frozen base's parameters get no gradient: DDP must not wait for them.
        kwargs["ddp_find_unused_parameters"] = False
    return kwargs


def checked(cls: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """`kwargs` unchanged if `cls` takes every name; TypeError naming those it does not."""
    parameters = inspect.signature(cls).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    unknown = [name for name in kwargs if name not in parameters]
    if unknown and not takes_any:
        raise TypeError(f"{cls.__name__} does not take {', '.join(sorted(unknown))}")
    return dict(kwargs)


def bits_and_bytes_config(t: TrainingPlan) -> Any:
    """The real `BitsAndBytesConfig`, or None when the base is not quantized."""
    kwargs = bits_and_bytes_kwargs(t)
    if kwargs is None:
        return None
    import torch
    from transformers import BitsAndBytesConfig

    kwargs = dict(kwargs, bnb_4bit_compute_dtype=getattr(torch, t.plan.dtype))
    if "bnb_4bit_quant_storage" in kwargs:
        kwargs["bnb_4bit_quant_storage"] = getattr(torch, t.plan.dtype)
    return BitsAndBytesConfig(**checked(BitsAndBytesConfig, kwargs))


def from_pretrained_kwargs(t: TrainingPlan, local_rank: int = 0) -> dict[str, Any]:
    """The exact `from_pretrained` arguments (transformers >= 4.56 takes `dtype=`)."""
    import torch

    kwargs = model_kwargs(t, local_rank)
    kwargs["dtype"] = getattr(torch, kwargs["dtype"])
    if "quantization_config" in kwargs:
        kwargs["quantization_config"] = bits_and_bytes_config(t)
    return kwargs


def lora_config(t: TrainingPlan) -> Any:
    """The real `peft.LoraConfig`, or None for full fine-tuning."""
    kwargs = lora_kwargs(t)
    if kwargs is None:
        return None
    from peft import LoraConfig

    return LoraConfig(**checked(LoraConfig, kwargs))


# transformers 5 calls gradient checkpointing activation checkpointing; the old names warn
# until v6. The builder passes the name the installed version has.
RENAMED = {
    "gradient_checkpointing": "activation_checkpointing",
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",
}


def current_names(cls: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """`kwargs` with each name of RENAMED under its new name where `cls` takes that one."""
    parameters = inspect.signature(cls).parameters
    return {
        (RENAMED[name] if RENAMED.get(name) in parameters else name): value
        for name, value in kwargs.items()
    }


def training_arguments(t: TrainingPlan, **overrides: Any) -> Any:
    """The real `TrainingArguments`; `overrides` replace planned arguments (e.g. `use_cpu`
    and no mixed precision in a CPU-only test)."""
    from transformers import TrainingArguments

    kwargs = current_names(TrainingArguments, training_arguments_kwargs(t) | overrides)
    return TrainingArguments(**checked(TrainingArguments, kwargs))


class LossDiverged(RuntimeError):
    """The training loss became NaN or infinite."""

    def __init__(self, loss: float, step: int) -> None:
        super().__init__(f"the loss became {loss} at step {step}")
        self.loss = loss
        self.step = step


def check_loss(loss: float, step: int) -> None:
    """Raise LossDiverged when `loss` is NaN or infinite: in fp16 an overflow the loss scaler
    cannot recover from, in bf16 on a card without it garbage; either way the run is lost."""
    if not math.isfinite(loss):
        raise LossDiverged(loss, step)


def loss_watch(environ: Mapping[str, str] = os.environ, exit_on_divergence: bool = True) -> Any:
    """A `transformers.TrainerCallback` that checks every logged loss: on NaN or infinity it
    writes the `LossCheckFailed` termination message and ends the process with exit code 3
    (`exit_on_divergence=False`: raises LossDiverged instead). It also keeps the last loss
    for the result report (`.last_loss`)."""
    from transformers import TrainerCallback

    from .termination import EXIT_GARBAGE, loss_check_failed, write

    class LossWatch(TrainerCallback):
        last_loss: float | None = None

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
            loss = (logs or {}).get("loss")
            if loss is None:
                return control
            try:
                check_loss(float(loss), state.global_step)
            except LossDiverged as diverged:
                dtype = "bfloat16" if args.bf16 else "float16" if args.fp16 else "float32"
                write(loss_check_failed(diverged.loss, diverged.step, dtype), environ)
                print(f"vramfit: {diverged} in {dtype}", file=sys.stderr)
                if exit_on_divergence:
                    sys.exit(EXIT_GARBAGE)
                raise
            self.last_loss = float(loss)
            return control

    return LossWatch()
