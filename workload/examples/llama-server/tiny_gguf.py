"""Write a tiny llama GGUF with random weights, for testing llama-server without a model
download: 2 blocks, 256-wide, 8 heads of 32 (a q8_0 or q4_0 KV cache divides a head in
blocks of 32), a byte-fallback SentencePiece vocabulary of 280 tokens, 2.9 MB. It answers
nonsense, fast.

    python tiny_gguf.py /models/tiny-llama.gguf

Needs the `gguf` package (PyPI) and numpy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, TokenType

BLOCKS = 2
EMBEDDING = 256
HEADS = 8  # head size 32
KV_HEADS = 8
FEED_FORWARD = 512
CONTEXT = 4096
WORDS = ["▁the", "▁a", "▁of", "▁and", "▁to", "▁in", "▁is", "▁it", "▁that", "▁on"]


def vocabulary() -> tuple[list[str], list[float], list[TokenType]]:
    """<unk>, <s>, </s>, the 256 byte tokens (any text tokenizes), a few words, and the
    single letters and ▁ the words are built from (SentencePiece merges need them)."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TokenType.BYTE] * 256
    pieces = ["▁", *sorted({c for w in WORDS for c in w[1:]}), *WORDS]
    tokens += pieces
    types += [TokenType.NORMAL] * len(pieces)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return tokens, scores, types


def write(path: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    tokens, scores, types = vocabulary()
    head = EMBEDDING // HEADS

    def weight(*shape: int) -> np.ndarray:  # numpy shape: (rows, columns) = ggml (ne1, ne0)
        return (rng.standard_normal(shape) * 0.02).astype(np.float16)

    writer = GGUFWriter(str(path), "llama")
    writer.add_name("vramfit tiny llama (random weights)")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(EMBEDDING)
    writer.add_block_count(BLOCKS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(1)  # mostly F16
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)

    writer.add_tensor("token_embd.weight", weight(len(tokens), EMBEDDING))
    for i in range(BLOCKS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(EMBEDDING, np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(HEADS * head, EMBEDDING))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(KV_HEADS * head, EMBEDDING))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(KV_HEADS * head, EMBEDDING))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(EMBEDDING, HEADS * head))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(EMBEDDING, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(FEED_FORWARD, EMBEDDING))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(FEED_FORWARD, EMBEDDING))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(EMBEDDING, FEED_FORWARD))
    writer.add_tensor("output_norm.weight", np.ones(EMBEDDING, np.float32))
    writer.add_tensor("output.weight", weight(len(tokens), EMBEDDING))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write(args.output, args.seed)


if __name__ == "__main__":
    main()
