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
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from vramfit_workload import OutputSampler, Plan, PlanError, fail_on_garbage, run_canary, write_result
from vramfit_workload.termination import write


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
    parser.add_argument("--items", type=int, default=20, help="prompts to answer")
    parser.add_argument("--output", type=Path, help="JSON lines to write")
    parser.add_argument("--seconds-per-item", type=float, default=0.05)
    parser.add_argument("--check-every", type=int, default=5, help="check every Nth answer")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, environ: Mapping[str, str] = os.environ) -> None:
    args = parse_args(argv)
    plan = Plan.from_env(environ)
    print(
        f"scripted: {plan.model} on {plan.node_class}: {plan.gpu_count} GPU(s), {plan.dtype}, "
        f"quantization {plan.quantization}, flash attention {plan.flash_attention}",
        file=sys.stderr,
    )
    if matches(environ.get("SCRIPTED_OOM_WHEN", ""), environ):
        raise OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate 2.00 GiB (scripted: {plan.gpu_count} GPU(s), "
            f"{plan.usable_memory_mib} MiB usable each)"
        )
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
