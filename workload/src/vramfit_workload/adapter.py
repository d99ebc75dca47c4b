"""The LoRA adapter a fine-tuning run leaves at the root of its output folder, as the `adapter`
object of its `TrainingResult` termination line (docs/workload-contract.md): the files a
served job loads it from, its rank, alpha, targets and base model, and the bytes a replica
holds per loaded adapter.

The bounds are the operator's (`TrainedAdapter::is_valid` in crds/src/adapters.rs): a report
outside them would make the operator drop the whole `TrainingResult`, so this module never
builds one (`AdapterReport.problems`).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_FILE = "adapter_config.json"
SAFETENSORS_FILE = "adapter_model.safetensors"
BIN_FILE = "adapter_model.bin"
GGUF_FILE = "adapter_model.gguf"
# The PEFT files in the order PEFT loads them: the first weights file found is the one a
# replica loads.
PEFT_WEIGHTS = (SAFETENSORS_FILE, BIN_FILE)

MAX_FILES = 8
MAX_FILE_NAME = 255
MAX_RANK = 65_536
MAX_TARGET_MODULES = 64
MAX_MODULE_NAME = 128
MAX_BASE_MODEL = 256
_MODULE = re.compile(r"[A-Za-z0-9_.\-]+")


@dataclass(frozen=True)
class AdapterReport:
    """What a run reports of the adapter it wrote. `files` are relative to the output folder;
    the first `.gguf` among them is the one a llama.cpp replica loads."""

    files: tuple[str, ...]
    rank: int
    alpha: float | None = None
    target_modules: tuple[str, ...] = ()
    base_model: str | None = None
    bytes: int | None = None

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> AdapterReport:
        """From the wire form (camelCase keys: `files`, `rank`, `alpha`, `targetModules`,
        `baseModel`, `bytes`); ValueError for a key it does not know."""
        known = {"files", "rank", "alpha", "targetModules", "baseModel", "bytes"}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"adapter report: unknown key(s) {', '.join(unknown)}")
        return cls(
            files=tuple(value.get("files") or ()),
            rank=value.get("rank"),  # type: ignore[arg-type]
            alpha=value.get("alpha"),
            target_modules=tuple(value.get("targetModules") or ()),
            base_model=value.get("baseModel"),
            bytes=value.get("bytes"),
        )

    def problems(self) -> list[str]:
        """Why the operator would refuse this report; [] when it is well formed."""
        found = []
        if not self.files:
            found.append("no files")
        if len(self.files) > MAX_FILES:
            found.append(f"{len(self.files)} files, more than {MAX_FILES}")
        for name in self.files:
            if not plain_file(name):
                found.append(f"file name {name!r} is not a plain relative name")
        if not _integer(self.rank) or not 1 <= self.rank <= MAX_RANK:
            found.append(f"rank {self.rank!r} is not an integer from 1 to {MAX_RANK}")
        if self.alpha is not None and not _positive_number(self.alpha):
            found.append(f"alpha {self.alpha!r} is not a positive finite number")
        if len(self.target_modules) > MAX_TARGET_MODULES:
            found.append(f"{len(self.target_modules)} targets, more than {MAX_TARGET_MODULES}")
        for name in self.target_modules:
            if not plain_module(name):
                found.append(f"target module {name!r} is not a plain name")
        if self.base_model is not None and not plain_base_model(self.base_model):
            found.append(f"base model {self.base_model!r}: empty, too long or with controls")
        if self.bytes is not None and (not _integer(self.bytes) or self.bytes < 0):
            found.append(f"bytes {self.bytes!r} is not an integer >= 0")
        return found

    def to_json(self) -> dict[str, Any]:
        """The wire form, optional keys left out when unknown; ValueError when malformed."""
        problems = self.problems()
        if problems:
            raise ValueError(f"adapter report: {'; '.join(problems)}")
        value: dict[str, Any] = {"files": list(self.files), "rank": int(self.rank)}
        if self.alpha is not None:
            value["alpha"] = float(self.alpha)
        if self.target_modules:
            value["targetModules"] = list(self.target_modules)
        if self.base_model is not None:
            value["baseModel"] = self.base_model
        if self.bytes is not None:
            value["bytes"] = int(self.bytes)
        return value


def plain_file(name: str) -> bool:
    """A relative file name the operator can join to a mount path: no `..`, no `/` first."""
    return (
        isinstance(name, str)
        and 0 < len(name.encode()) <= MAX_FILE_NAME
        and not name.startswith("/")
        and all(part not in ("", ".", "..") for part in name.split("/"))
        and not any(c == "\\" or _control(c) for c in name)
    )


def plain_module(name: str) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name) <= MAX_MODULE_NAME
        and _MODULE.fullmatch(name) is not None
    )


def plain_base_model(name: str) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name.encode()) <= MAX_BASE_MODEL
        and not any(_control(c) for c in name)
    )


def _control(c: str) -> bool:
    # Rust's char::is_control: the Unicode Cc category, U+0000-001F and U+007F-009F.
    return ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def adapter_files(output_dir: str | os.PathLike[str]) -> list[str]:
    """The adapter files at the root of `output_dir`, in the order a replica looks for them:
    `adapter_config.json`, `adapter_model.safetensors`, `adapter_model.bin`, then the GGUF
    conversions, `adapter_model.gguf` first and the others by name. At most MAX_FILES:
    surplus GGUF files are left out; so are names the operator would refuse."""
    root = Path(output_dir)
    present = [name for name in (CONFIG_FILE, *PEFT_WEIGHTS) if (root / name).is_file()]
    ggufs = sorted(
        entry.name
        for entry in root.iterdir()
        if entry.name.endswith(".gguf") and entry.name != GGUF_FILE and entry.is_file()
    )
    if (root / GGUF_FILE).is_file():
        ggufs.insert(0, GGUF_FILE)
    present += [name for name in ggufs if plain_file(name)]
    return present[:MAX_FILES]


def weights_bytes(output_dir: str | os.PathLike[str], files: list[str]) -> int | None:
    """Bytes of the weights a replica loads: the PEFT weights file PEFT and vLLM read
    (`adapter_model.safetensors`, else `adapter_model.bin`), never both; a GGUF conversion
    is not added (it holds the same weights, at most as many bytes with `--outtype f16` of an
    fp32 adapter). Only without PEFT weights, the first GGUF's size. None without weights."""
    root = Path(output_dir)
    for name in (*PEFT_WEIGHTS, *(f for f in files if f.endswith(".gguf"))):
        if name in files:
            return (root / name).stat().st_size
    return None


def adapter_report(output_dir: str | os.PathLike[str]) -> AdapterReport:
    """The report of the adapter at the root of `output_dir`, from PEFT's
    `adapter_config.json` there (`r`, `lora_alpha`, `target_modules`,
    `base_model_name_or_path`) and the files present. A target that is no plain module name
    (a regular expression) leaves the targets out, as a base model name the operator would
    refuse leaves it out; ValueError when there is no config or no valid rank."""
    root = Path(output_dir)
    config_path = root / CONFIG_FILE
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"no {CONFIG_FILE} in {root}: no adapter was saved there") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{config_path} is not JSON: {error}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{config_path} is not a JSON object")
    files = adapter_files(root)
    rank = config.get("r")
    if isinstance(rank, float) and rank.is_integer():
        rank = int(rank)
    alpha = config.get("lora_alpha")
    base_model = config.get("base_model_name_or_path")
    report = AdapterReport(
        files=tuple(files),
        rank=rank,  # type: ignore[arg-type]
        alpha=float(alpha) if _positive_number(alpha) else None,
        target_modules=_targets(config.get("target_modules")),
        base_model=base_model if plain_base_model(base_model) else None,
        bytes=weights_bytes(root, files),
    )
    problems = report.problems()
    if problems:
        raise ValueError(f"the adapter in {root}: {'; '.join(problems)}")
    return report


def _targets(value: Any) -> tuple[str, ...]:
    """PEFT's `target_modules`: a list of names, or one string (`all-linear`, or a regular
    expression). Each name as the model's code names the module, its last dotted part (PEFT
    matches a name against the end of a module's path, and saves `all-linear` resolved to
    full paths such as `model.layers.0.self_attn.q_proj`), sorted and deduplicated; () when
    any is not a plain name or there are too many to report."""
    names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    if not names or not all(isinstance(n, str) and plain_module(n) for n in names):
        return ()
    short = {name.rsplit(".", 1)[-1] for name in names}
    if len(short) > MAX_TARGET_MODULES or not all(plain_module(n) for n in short):
        return ()
    return tuple(sorted(short))
