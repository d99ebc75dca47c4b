"""A LoRA adapter in llama.cpp's GGUF layout, with deterministic random weights, for a llama
model of a given shape: what `convert_lora_to_gguf.py` makes of a PEFT adapter, written by
hand (GGUF version 3, no numpy and no `gguf` package) so the scripted image needs nothing
more than Python.

The layout llama.cpp's loader (src/llama-adapter.cpp) accepts:
- metadata `general.architecture` (the base model's, `llama`), `general.type` = `adapter`,
  `adapter.type` = `lora`, `adapter.lora.alpha` (float32);
- for each adapted base tensor `W` (ggml dims ne = [in, out]) the pair `W.lora_a`, ne = [in, r],
  and `W.lora_b`, ne = [r, out] (F32 here), so that W.ne[0] == a.ne[0], W.ne[1] == b.ne[1]
  and a.ne[1] == b.ne[0];
- tensor data aligned to 32 bytes (`general.alignment` unset: its default).
llama.cpp applies `scale * alpha / r * B(A x)`.
"""

from __future__ import annotations

import random
import struct
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"GGUF"
VERSION = 3
ALIGNMENT = 32
TYPE_UINT32 = 4
TYPE_FLOAT32 = 6
TYPE_STRING = 8
TENSOR_F32 = 0

# PEFT's module names of a llama attention block and the GGUF tensors they become.
ATTENTION = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output"}
# What a plan naming none of the attention modules gets: PEFT's default targets for llama.
DEFAULT_PARTS = ("attn_q", "attn_v")


@dataclass(frozen=True)
class LlamaShape:
    """The base model's blocks and width; every attention projection is width × width."""

    blocks: int
    embedding: int

    @classmethod
    def parse(cls, text: str) -> LlamaShape:
        """`blocks,embedding`, e.g. `2,256`; ValueError otherwise."""
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"{text!r} is not BLOCKS,EMBEDDING (two positive integers)")
        return cls(int(parts[0]), int(parts[1]))


def adapted_parts(targets: Iterable[str]) -> tuple[str, ...]:
    """The attention tensors adapted for PEFT `targets`: those named (`q_proj` → `attn_q`,
    …), all four for `all-linear`, `attn_q` and `attn_v` when none is named. Feed-forward
    targets are not adapted: the shape says nothing of their width."""
    targets = set(targets)
    if "all-linear" in targets:
        return tuple(ATTENTION.values())
    parts = tuple(part for module, part in ATTENTION.items() if module in targets)
    return parts or DEFAULT_PARTS


def lora_tensors(
    shape: LlamaShape, rank: int, parts: Sequence[str], seed: int
) -> list[tuple[str, list[int], bytes]]:
    """(name, ggml dims, F32 data) of every tensor, block by block: A and B uniform in
    [-0.5, 0.5] from `seed`, large enough that the adapter visibly changes what a tiny random
    model answers."""
    if rank < 1:
        raise ValueError(f"rank must be >= 1, not {rank}")
    rng = random.Random(seed)
    width = shape.embedding
    tensors = []
    for block in range(shape.blocks):
        for part in parts:
            base = f"blk.{block}.{part}.weight"
            for suffix, dims in ((".lora_a", [width, rank]), (".lora_b", [rank, width])):
                values = array("f", (rng.random() - 0.5 for _ in range(dims[0] * dims[1])))
                if sys.byteorder == "big":
                    values.byteswap()
                tensors.append((base + suffix, dims, values.tobytes()))
    return tensors


def write_gguf(
    path: Path,
    metadata: Sequence[tuple[str, int, Any]],
    tensors: Sequence[tuple[str, list[int], bytes]],
) -> int:
    """A GGUF v3 file of `metadata` (key, GGUF type: UINT32, FLOAT32 or STRING, value) and F32
    `tensors`; returns its size in bytes."""
    out = bytearray()

    def string(text: str) -> None:
        data = text.encode()
        out.extend(struct.pack("<Q", len(data)) + data)

    out.extend(MAGIC + struct.pack("<IQQ", VERSION, len(tensors), len(metadata)))
    for key, kind, value in metadata:
        string(key)
        out.extend(struct.pack("<I", kind))
        if kind == TYPE_UINT32:
            out.extend(struct.pack("<I", value))
        elif kind == TYPE_FLOAT32:
            out.extend(struct.pack("<f", value))
        elif kind == TYPE_STRING:
            string(value)
        else:
            raise ValueError(f"metadata type {kind} of {key} is not written here")
    offset = 0
    for name, dims, data in tensors:
        if len(data) != 4 * _product(dims):
            raise ValueError(f"{name}: {len(data)} bytes for dims {dims}")
        string(name)
        out.extend(struct.pack("<I", len(dims)))
        out.extend(struct.pack(f"<{len(dims)}Q", *dims))
        out.extend(struct.pack("<IQ", TENSOR_F32, offset))
        offset += _padded(len(data))
    out.extend(bytes(_padded(len(out)) - len(out)))
    for _, _, data in tensors:
        out.extend(data + bytes(_padded(len(data)) - len(data)))
    path.write_bytes(out)
    return len(out)


def write_adapter(
    path: Path, shape: LlamaShape, rank: int, alpha: float, targets: Iterable[str], seed: int
) -> int:
    """The adapter for a llama of `shape`; returns the file's size in bytes."""
    metadata = [
        ("general.architecture", TYPE_STRING, "llama"),
        ("general.type", TYPE_STRING, "adapter"),
        ("general.name", TYPE_STRING, "vramfit scripted LoRA adapter (random weights)"),
        ("adapter.type", TYPE_STRING, "lora"),
        ("adapter.lora.alpha", TYPE_FLOAT32, float(alpha)),
    ]
    return write_gguf(path, metadata, lora_tensors(shape, rank, adapted_parts(targets), seed))


def _product(dims: Iterable[int]) -> int:
    total = 1
    for dim in dims:
        total *= dim
    return total


def _padded(size: int) -> int:
    return (size + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
