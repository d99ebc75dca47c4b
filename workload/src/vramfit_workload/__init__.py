"""The workload side of vramfit: read the plan from the env, load a model with it, check
what the model answers, and report the outcome in the pod's termination message; for
fine-tuning, the training arguments of the plan, a watch on the loss and the run's report,
with the LoRA adapter it wrote."""

from .adapter import AdapterReport, adapter_report
from .loading import (
    PlanMismatch,
    apply_memory_fraction,
    from_pretrained_kwargs,
    load_model_and_processor,
    planned_kwargs,
    tile_kwargs,
)
from .output_check import CheckResult, OutputSampler, check_outputs, run_canary
from .plan import Plan, PlanError
from .termination import fail_on_garbage, write_result, write_training_result
from .training import (
    LossDiverged,
    TrainingPlan,
    bits_and_bytes_config,
    check_loss,
    lora_config,
    loss_watch,
    training_arguments,
)

__all__ = [
    "AdapterReport",
    "adapter_report",
    "CheckResult",
    "LossDiverged",
    "TrainingPlan",
    "bits_and_bytes_config",
    "check_loss",
    "lora_config",
    "loss_watch",
    "training_arguments",
    "write_training_result",
    "OutputSampler",
    "Plan",
    "PlanError",
    "PlanMismatch",
    "apply_memory_fraction",
    "check_outputs",
    "fail_on_garbage",
    "from_pretrained_kwargs",
    "load_model_and_processor",
    "planned_kwargs",
    "run_canary",
    "tile_kwargs",
    "write_result",
]
