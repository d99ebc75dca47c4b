"""The termination message: how a finished container tells the operator what happened.

Kubernetes copies the file a container writes to its termination-message path into the
pod's status (at most 4096 bytes). vramfit reads one versioned line from it:

    vramfit.io/v1 {"kind":"Result","items":120,...}

The format is a contract with the operator (docs/workload-contract.md): a new,
incompatible format gets a new version prefix; readers ignore fields they do not know.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .adapter import AdapterReport
from .output_check import GARBAGE_ABOVE, CheckResult
from .plan import Plan

PREFIX = "vramfit.io/v1 "
MAX_BYTES = 4096
DEFAULT_PATH = "/dev/termination-log"
EXIT_GARBAGE = 3


class MessageTooLong(ValueError):
    """The message cannot be made to fit in MAX_BYTES."""


def encode(message: Mapping[str, Any], optional: Sequence[str] = ()) -> str:
    """The message as one line within MAX_BYTES. Fields named in `optional` give way when
    it is too long: a list loses its last items, then the field goes; a JSON object is
    never cut. Raises ValueError for NaN or infinite numbers, MessageTooLong when it cannot
    fit."""
    message = dict(message)
    while True:
        line = PREFIX + json.dumps(message, separators=(",", ":"), allow_nan=False)
        if len(line.encode()) <= MAX_BYTES:
            return line
        present = [key for key in optional if key in message]
        if not present:
            raise MessageTooLong(f"termination message over {MAX_BYTES} bytes: {line[:80]}...")
        key = present[-1]
        if isinstance(message[key], list) and message[key]:
            message[key] = message[key][:-1]
        else:
            del message[key]


def write(line: str, environ: Mapping[str, str] = os.environ) -> str:
    """Write the line to VRAMFIT_TERMINATION_LOG, else /dev/termination-log; returns the path."""
    path = environ.get("VRAMFIT_TERMINATION_LOG") or DEFAULT_PATH
    with open(path, "w", encoding="utf-8") as f:
        f.write(line)
    return path


def output_check_failed(result: CheckResult, plan: Plan) -> str:
    """The OutputCheckFailed line: which pattern, how much of it, in which dtype."""
    return encode(
        {
            "kind": "OutputCheckFailed",
            "check": "degenerate-output",
            "pattern": result.pattern,
            "ratio": round(_finite(result.ratio, "ratio"), 4),
            "threshold": GARBAGE_ABOVE,
            "dtype": plan.dtype,
            "samples": result.samples,
        }
    )


def fail_on_garbage(
    result: CheckResult | None, plan: Plan, environ: Mapping[str, str] = os.environ
) -> None:
    """End the process with exit code EXIT_GARBAGE and the OutputCheckFailed message when
    the check says garbage; note a warning on stderr; otherwise do nothing."""
    if result is None or result.verdict == "good":
        return
    summary = f"{result.pattern} {result.ratio:.1%} over {result.samples} output(s)"
    if result.verdict == "warning":
        print(f"vramfit: output check warning: {summary}", file=sys.stderr)
        return
    write(output_check_failed(result, plan), environ)
    print(f"vramfit: output check failed ({plan.dtype}): {summary}", file=sys.stderr)
    sys.exit(EXIT_GARBAGE)


def result_message(
    items: int, seconds: float, peak_gpu_memory_mib: Sequence[int] = ()
) -> str:
    """The Result line: items done, seconds, items per second, peak memory per GPU."""
    if items < 0:
        raise ValueError(f"items must be >= 0, not {items}")
    seconds = _finite(seconds, "seconds")
    if seconds < 0:
        raise ValueError(f"seconds must be >= 0, not {seconds}")
    return encode(
        {
            "kind": "Result",
            "items": items,
            "seconds": round(seconds, 3),
            "itemsPerSecond": round(items / seconds, 4) if seconds > 0 else 0.0,
            "peakGpuMemoryMib": [int(mib) for mib in peak_gpu_memory_mib],
        },
        optional=("peakGpuMemoryMib",),
    )


def peak_gpu_memory_mib() -> list[int]:
    """Peak memory PyTorch allocated on each visible GPU, in MiB; [] without CUDA."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    return [
        torch.cuda.max_memory_allocated(device) // (1024 * 1024)
        for device in range(torch.cuda.device_count())
    ]


def write_result(
    items: int,
    seconds: float,
    peak_gpu_memory: Sequence[int] | None = None,
    environ: Mapping[str, str] = os.environ,
) -> str:
    """Write the Result message (peak memory measured when not given); returns the path."""
    peaks = peak_gpu_memory_mib() if peak_gpu_memory is None else peak_gpu_memory
    return write(result_message(items, seconds, peaks), environ)


def _finite(number: float, name: str) -> float:
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, not {number}")
    return float(number)


def loss_check_failed(loss: float, step: int, dtype: str) -> str:
    """The LossCheckFailed line: the loss became NaN or infinite at a step, in a dtype (JSON
    holds no NaN: the loss is written as the word `nan`, `inf` or `-inf`)."""
    if math.isfinite(loss):
        raise ValueError(f"loss {loss} is finite: nothing diverged")
    word = "nan" if math.isnan(loss) else "inf" if loss > 0 else "-inf"
    return encode(
        {
            "kind": "LossCheckFailed",
            "check": "non-finite-loss",
            "loss": word,
            "step": int(step),
            "dtype": dtype,
        }
    )


def training_result_message(
    steps: int,
    tokens: int,
    seconds: float,
    final_loss: float | None = None,
    peak_gpu_memory_mib: Sequence[int] = (),
    adapter: AdapterReport | Mapping[str, Any] | None = None,
) -> str:
    """The TrainingResult line: optimizer steps, training tokens, seconds, tokens per second,
    the last loss, the peak memory per GPU and the LoRA adapter written (an AdapterReport, or
    its wire form with camelCase keys; ValueError when the operator would refuse it). When
    the line is too long the peak memory loses entries first; when that is not enough the
    adapter's `targetModules` go (whole: a shorter list would claim fewer modules), then its
    `baseModel`, and as much of the peak memory as then fits stays. The adapter's files,
    rank, alpha and bytes always stay (MessageTooLong when they alone do not fit)."""
    if steps < 0 or tokens < 0:
        raise ValueError(f"steps and tokens must be >= 0, not {steps} and {tokens}")
    seconds = _finite(seconds, "seconds")
    if seconds < 0:
        raise ValueError(f"seconds must be >= 0, not {seconds}")
    message: dict[str, Any] = {
        "kind": "TrainingResult",
        "steps": int(steps),
        "tokens": int(tokens),
        "seconds": round(seconds, 3),
        "tokensPerSecond": round(tokens / seconds, 1) if seconds > 0 else 0.0,
    }
    if final_loss is not None:
        message["finalLoss"] = round(_finite(final_loss, "final_loss"), 6)
    message["peakGpuMemoryMib"] = [int(mib) for mib in peak_gpu_memory_mib]
    if adapter is None:
        return encode(message, optional=("peakGpuMemoryMib",))
    if not isinstance(adapter, AdapterReport):
        adapter = AdapterReport.from_json(adapter)
    report = adapter.to_json()
    for giving_way in ("targetModules", "baseModel"):
        try:
            return encode(message | {"adapter": report}, optional=("peakGpuMemoryMib",))
        except MessageTooLong:
            report.pop(giving_way, None)
    return encode(message | {"adapter": report}, optional=("peakGpuMemoryMib",))


def write_training_result(
    steps: int,
    tokens: int,
    seconds: float,
    final_loss: float | None = None,
    peak_gpu_memory: Sequence[int] | None = None,
    environ: Mapping[str, str] = os.environ,
    adapter: AdapterReport | Mapping[str, Any] | None = None,
) -> str:
    """Write the TrainingResult message (peak memory measured when not given), with the
    adapter a LoRA or QLoRA run wrote (`adapter_report(output_dir)`); the path."""
    peaks = peak_gpu_memory_mib() if peak_gpu_memory is None else peak_gpu_memory
    line = training_result_message(steps, tokens, seconds, final_loss, peaks, adapter)
    return write(line, environ)
