"""The tiny llama GGUF of the llama-server example (workload/examples/llama-server): what
llama.cpp reads from it must make a model it loads, with KV-cache heads that q8_0 and q4_0
(blocks of 32) divide."""

import sys
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")
sys.path.insert(0, str(Path(__file__).parents[1] / "examples" / "llama-server"))
import tiny_gguf  # noqa: E402


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.gguf"
    tiny_gguf.write(path)
    return gguf.GGUFReader(str(path))


def field(reader, key):
    value = reader.fields[key]
    return value.parts[value.data[0]].tolist()[0]


def test_the_hyperparameters_make_a_small_llama_with_32_wide_heads(reader):
    assert bytes(reader.fields["general.architecture"].parts[-1]).decode() == "llama"
    blocks = field(reader, "llama.block_count")
    width = field(reader, "llama.embedding_length")
    heads = field(reader, "llama.attention.head_count")
    assert blocks == 2
    assert width % heads == 0 and (width // heads) % 32 == 0
    assert field(reader, "llama.attention.head_count_kv") == heads


def test_every_tensor_llama_cpp_loads_is_there_with_its_shape(reader):
    tensors = {t.name: [int(n) for n in t.shape] for t in reader.tensors}
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    width, ff = tiny_gguf.EMBEDDING, tiny_gguf.FEED_FORWARD
    # GGUF lists shapes as ggml does: the row length first.
    expected = {"token_embd.weight": [width, vocab], "output.weight": [width, vocab],
                "output_norm.weight": [width]}
    for i in range(tiny_gguf.BLOCKS):
        expected |= {
            f"blk.{i}.attn_norm.weight": [width], f"blk.{i}.ffn_norm.weight": [width],
            f"blk.{i}.attn_q.weight": [width, width], f"blk.{i}.attn_k.weight": [width, width],
            f"blk.{i}.attn_v.weight": [width, width], f"blk.{i}.attn_output.weight": [width, width],
            f"blk.{i}.ffn_gate.weight": [width, ff], f"blk.{i}.ffn_up.weight": [width, ff],
            f"blk.{i}.ffn_down.weight": [ff, width],
        }
    assert tensors == expected


def test_any_text_tokenizes_through_the_byte_tokens(reader):
    tokens = [bytes(reader.fields["tokenizer.ggml.tokens"].parts[i]).decode()
              for i in reader.fields["tokenizer.ggml.tokens"].data]
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert all(f"<0x{b:02X}>" in tokens for b in range(256))
    assert field(reader, "tokenizer.ggml.bos_token_id") == 1
    assert field(reader, "tokenizer.ggml.eos_token_id") == 2
