"""A deterministic text generator in place of a model, around the workload package's real
path: the plan from the env, the canary and sampled output checks, the termination message.

It lets vramfit's promises that need a kubelet be tested on any node, without a GPU and
without downloading a model: the job scripts what the "model" does through its own env
(`spec.pod.env`), and everything else is what a real workload does.

    python -m scripted --items 20

Env:
  SCRIPTED_GARBAGE_WHEN  NAME=VALUE[,NAME=VALUE...]: answer "!!!!…" (as a bfloat16 model
                         emulated on a V100 does) when the pod's env has every NAME=VALUE,
                         e.g. VRAMFIT_DTYPE=bfloat16.
  SCRIPTED_OOM_WHEN      NAME=VALUE[,...]: end with a CUDA out-of-memory error written to the
                         termination log (exit code 1) when the env matches, e.g.
                         VRAMFIT_GPU_COUNT=1.
The answers are written, one JSON line each, to --output (default
$HOME/.cache/vramfit-scripted/answers.jsonl: the image's HOME must be writable for the UID
the pod runs as).

Fine-tuning: with VRAMFIT_TUNING_METHOD in the env (a tuning job's plan, read whole with
TrainingPlan.from_env), it "trains" instead: --items optimizer steps of --seconds-per-item
each, then, for a lora or qlora plan with VRAMFIT_OUTPUT_DIR, writes an adapter at the root
of that folder: a PEFT-shaped adapter_config.json (r = VRAMFIT_LORA_RANK, lora_alpha =
VRAMFIT_LORA_ALPHA, target_modules from VRAMFIT_LORA_TARGET_MODULES, base_model_name_or_path
= VRAMFIT_MODEL) and adapter_model.gguf, a LoRA adapter in llama.cpp's GGUF layout with
random weights (lora_gguf.py), and ends with a TrainingResult line that reports it.
  SCRIPTED_LORA_SHAPE      BLOCKS,EMBEDDING of the llama base model the GGUF adapts
                           (default 2,256: the tiny llama of examples/llama-server).
  SCRIPTED_LORA_SEED       integer seed of the adapter's weights (default 1): another seed,
                           another adapter.
  SCRIPTED_ADAPTER_SKIP_GGUF  1: write no GGUF (and remove one an earlier run left).
SCRIPTED_OOM_WHEN applies to a tuning run too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from vramfit_workload import (
    OutputSampler,
    Plan,
    PlanError,
    TrainingPlan,
    adapter_report,
    fail_on_garbage,
    run_canary,
    write_result,
    write_training_result,
)
from vramfit_workload.termination import write
from vramfit_workload.training import lora_kwargs

import lora_gguf

DEFAULT_LORA_SHAPE = "2,256"


class OutOfMemoryError(RuntimeError):
    """What PyTorch raises when a CUDA allocation fails (torch.OutOfMemoryError)."""


def matches(condition: str, environ: Mapping[str, str]) -> bool:
    """Whether every NAME=VALUE of the comma-separated `condition` holds in `environ`;
    False for an empty condition. A word without "=" is a mistake in the job: ValueError."""
    pairs = [part.strip() for part in condition.split(",") if part.strip()]
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"{pair!r} is not NAME=VALUE")
    return bool(pairs) and all(
        environ.get(name.strip()) == value.strip()
        for name, value in (pair.split("=", 1) for pair in pairs)
    )


def answer(prompt: str, index: int, garbage: bool) -> str:
    """The scripted answer to one prompt: a plain sentence, or the bfloat16-on-V100 garbage."""
    if garbage:
        return "!" * 48
    return f"Answer {index}: {prompt.rstrip('.?')} is answered by the scripted generator."


def default_output(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME") or "/"
    return Path(home) / ".cache" / "vramfit-scripted" / "answers.jsonl"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20, help="prompts to answer (training steps)")
    parser.add_argument("--output", type=Path, help="JSON lines to write")
    parser.add_argument("--seconds-per-item", type=float, default=0.05)
    parser.add_argument("--check-every", type=int, default=5, help="check every Nth answer")
    return parser.parse_args(argv)


def write_adapter(t: TrainingPlan, output_dir: Path, environ: Mapping[str, str]) -> None:
    """A PEFT-shaped adapter_config.json and, unless SCRIPTED_ADAPTER_SKIP_GGUF=1, the GGUF
    adapter for the llama of SCRIPTED_LORA_SHAPE, at the root of `output_dir`."""
    shape = lora_gguf.LlamaShape.parse(environ.get("SCRIPTED_LORA_SHAPE") or DEFAULT_LORA_SHAPE)
    seed_text = (environ.get("SCRIPTED_LORA_SEED") or "1").strip()
    try:
        seed = int(seed_text)
    except ValueError:
        raise ValueError(f"SCRIPTED_LORA_SEED={seed_text!r} is not an integer") from None
    kwargs = lora_kwargs(t) or {}
    config = {
        "peft_type": "LORA",
        "task_type": kwargs.get("task_type"),
        "base_model_name_or_path": t.plan.model,
        "r": t.lora_rank,
        "lora_alpha": t.lora_alpha,
        "lora_dropout": t.lora_dropout,
        "target_modules": kwargs.get("target_modules"),
        "bias": kwargs.get("bias"),
        "inference_mode": True,
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    gguf = output_dir / "adapter_model.gguf"
    if environ.get("SCRIPTED_ADAPTER_SKIP_GGUF") == "1":
        gguf.unlink(missing_ok=True)
        return
    size = lora_gguf.write_adapter(
        gguf, shape, t.lora_rank or 0, float(t.lora_alpha or 0), t.lora_target_modules, seed
    )
    print(f"scripted: LoRA adapter r={t.lora_rank} in {gguf}, {size} bytes", file=sys.stderr)


def out_of_memory_if_asked(plan: Plan, environ: Mapping[str, str]) -> None:
    """Ends as a CUDA out-of-memory error would when SCRIPTED_OOM_WHEN matches the env."""
    if matches(environ.get("SCRIPTED_OOM_WHEN", ""), environ):
        raise OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate 2.00 GiB (scripted: {plan.gpu_count} GPU(s), "
            f"{plan.usable_memory_mib} MiB usable each)"
        )


def train(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    """The fine-tuning mode: steps, an adapter for lora and qlora, the TrainingResult."""
    t = TrainingPlan.from_env(environ)
    plan = t.plan
    print(
        f"scripted: {t.method} of {plan.model} on {plan.node_class}: {plan.gpu_count} GPU(s), "
        f"{plan.dtype}, micro-batch {t.micro_batch} x {t.gradient_accumulation}",
        file=sys.stderr,
    )
    out_of_memory_if_asked(plan, environ)
    start = time.monotonic()
    for _ in range(args.items):
        time.sleep(args.seconds_per_item)
    seconds = time.monotonic() - start
    adapter = None
    if t.method != "full" and t.output_dir:
        output_dir = Path(t.output_dir)
        write_adapter(t, output_dir, environ)
        adapter = adapter_report(output_dir)
    write_training_result(
        steps=args.items,
        tokens=args.items * t.effective_batch * t.sequence_length,
        seconds=seconds,
        final_loss=round(3.0 / (1 + 0.1 * args.items), 6),
        peak_gpu_memory=[],
        environ=environ,
        adapter=adapter,
    )
    print(f"scripted: {args.items} training steps", file=sys.stderr)


def main(argv: list[str] | None = None, environ: Mapping[str, str] = os.environ) -> None:
    args = parse_args(argv)
    if environ.get("VRAMFIT_TUNING_METHOD"):
        train(args, environ)
        return
    plan = Plan.from_env(environ)
    print(
        f"scripted: {plan.model} on {plan.node_class}: {plan.gpu_count} GPU(s), {plan.dtype}, "
        f"quantization {plan.quantization}, flash attention {plan.flash_attention}",
        file=sys.stderr,
    )
    out_of_memory_if_asked(plan, environ)
    garbage = matches(environ.get("SCRIPTED_GARBAGE_WHEN", ""), environ)
    fail_on_garbage(run_canary(lambda prompt: answer(prompt, 0, garbage), environ=environ), plan, environ)

    output = args.output or default_output(environ)
    output.parent.mkdir(parents=True, exist_ok=True)
    sampler, start = OutputSampler(every=args.check_every), time.monotonic()
    with output.open("w", encoding="utf-8") as out:
        for index in range(1, args.items + 1):
            prompt = f"Prompt {index}."
            text = answer(prompt, index, garbage)
            time.sleep(args.seconds_per_item)
            out.write(json.dumps({"prompt": prompt, "answer": text}) + "\n")
            fail_on_garbage(sampler.add(text), plan, environ)
    write_result(items=args.items, seconds=time.monotonic() - start, environ=environ)
    print(f"scripted: {args.items} answers in {output}", file=sys.stderr)


def run(argv: list[str] | None = None, environ: Mapping[str, str] = os.environ) -> None:
    """main(), with a failure written to the termination log first (docs/planning.md)."""
    try:
        main(argv, environ)
    except (OutOfMemoryError, PlanError, OSError, ValueError) as error:
        write(f"{type(error).__name__}: {error}"[:2048], environ)
        raise


if __name__ == "__main__":
    run()
