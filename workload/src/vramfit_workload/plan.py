"""The plan vramfit made for this pod, read from the env the operator sets.

The `VRAMFIT_*` names are the source of truth; the teams' older names (`TORCH_DTYPE`,
`USE_QUANTIZATION`, ...) carry the same values and are not read here. A missing or
malformed variable fails at once, before a model is loaded, with a message naming it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

DTYPES = ("bfloat16", "float16")
QUANTIZATIONS = ("none", "int8", "nf4")


class PlanError(ValueError):
    """An env variable of the plan is missing or malformed."""


@dataclass(frozen=True)
class Plan:
    """One pod's plan: what to load, in which precision, within how much memory."""

    model: str
    node_class: str
    gpu_count: int
    dtype: str
    quantization: str
    flash_attention: bool
    memory_fraction: float
    usable_memory_mib: int
    context_length: int
    max_tiles: int | None = None
    alloc_conf: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Plan:
        """Read the plan; raises PlanError naming the first variable that is wrong."""
        env = _Env(environ)
        return cls(
            model=env.text("VRAMFIT_MODEL"),
            node_class=env.text("VRAMFIT_NODE_CLASS"),
            gpu_count=env.integer("VRAMFIT_GPU_COUNT"),
            dtype=env.choice("VRAMFIT_DTYPE", DTYPES),
            quantization=env.choice("VRAMFIT_QUANTIZATION", QUANTIZATIONS),
            flash_attention=env.boolean("VRAMFIT_FLASH_ATTENTION"),
            memory_fraction=env.fraction("VRAMFIT_MEMORY_FRACTION"),
            usable_memory_mib=env.integer("VRAMFIT_USABLE_MEMORY_MIB"),
            context_length=env.integer("VRAMFIT_CONTEXT_LENGTH"),
            max_tiles=env.optional_integer("VRAMFIT_MAX_TILES"),
            # PyTorch 2.9 reads the new name first; older releases only the old one.
            alloc_conf=environ.get("PYTORCH_ALLOC_CONF")
            or environ.get("PYTORCH_CUDA_ALLOC_CONF")
            or None,
        )


class _Env:
    """Typed reads of one env mapping, each failing with the variable's name."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def is_set(self, name: str) -> bool:
        return self._environ.get(name, "").strip() != ""

    def _get(self, name: str, expected: str) -> str:
        if not self.is_set(name):
            raise PlanError(f"{name} is not set: expected {expected}")
        return self._environ[name].strip()

    @staticmethod
    def _bad(name: str, value: str, expected: str) -> PlanError:
        return PlanError(f"{name}={value!r} is malformed: expected {expected}")

    def text(self, name: str) -> str:
        return self._get(name, "a non-empty string")

    def integer(self, name: str) -> int:
        expected = "a whole number >= 1"
        value = self._get(name, expected)
        if not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise self._bad(name, value, expected)
        return int(value)

    def optional_integer(self, name: str) -> int | None:
        return self.integer(name) if self.is_set(name) else None

    def choice(self, name: str, allowed: tuple[str, ...]) -> str:
        expected = "one of " + ", ".join(allowed)
        value = self._get(name, expected)
        if value not in allowed:
            raise self._bad(name, value, expected)
        return value

    def boolean(self, name: str) -> bool:
        return self.choice(name, ("true", "false")) == "true"

    def fraction_or_zero(self, name: str) -> float:
        return self._number(name, "a number from 0 to 1, e.g. 0.05", lambda n: 0 <= n <= 1)

    def fraction(self, name: str) -> float:
        return self._number(
            name, "a number greater than 0 and at most 1, e.g. 0.90", lambda n: 0 < n <= 1
        )

    def _number(self, name: str, expected: str, in_range) -> float:
        value = self._get(name, expected)
        try:
            number = float(value)
        except ValueError:
            raise self._bad(name, value, expected) from None
        if not (math.isfinite(number) and in_range(number)):
            raise self._bad(name, value, expected)
        return number
