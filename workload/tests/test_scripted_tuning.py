"""The scripted generator's fine-tuning mode (workload/examples/scripted): a tuning job's plan
in the env, an adapter at the root of the output folder (a PEFT-shaped adapter_config.json
and a LoRA adapter in llama.cpp's GGUF layout for the tiny llama), the TrainingResult that
reports it. The GGUF is read back by a minimal reader written here from the format, and
checked against the base model's tensors as llama.cpp's loader checks them."""

import json
import struct
import sys
from pathlib import Path

import pytest
from conftest import A10G_INT8

sys.path.insert(0, str(Path(__file__).parents[1] / "examples" / "scripted"))
sys.path.insert(0, str(Path(__file__).parents[1] / "examples" / "llama-server"))
import lora_gguf  # noqa: E402
import scripted  # noqa: E402

TUNING = {
    "VRAMFIT_TUNING_METHOD": "lora",
    "VRAMFIT_SEQUENCE_LENGTH": "512",
    "VRAMFIT_MICRO_BATCH": "2",
    "VRAMFIT_GRADIENT_ACCUMULATION": "2",
    "VRAMFIT_EFFECTIVE_BATCH": "4",
    "VRAMFIT_GRADIENT_CHECKPOINTING": "true",
    "VRAMFIT_OPTIMIZER": "adamw_torch",
    "VRAMFIT_PARALLELISM": "single",
    "VRAMFIT_TF32": "true",
    "VRAMFIT_LORA_RANK": "8",
    "VRAMFIT_LORA_ALPHA": "16",
    "VRAMFIT_LORA_DROPOUT": "0.05",
    "VRAMFIT_LORA_TARGET_MODULES": "q_proj,v_proj",
}


def read_gguf(data: bytes) -> dict:
    """A GGUF v3 file: header, metadata (uint32, float32 and string values) and tensor infos
    (name, ggml dims, type, offset), with each tensor's data bytes."""
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return values

    def string():
        nonlocal pos
        (length,) = take("<Q")
        text = data[pos : pos + length].decode()
        pos += length
        return text

    magic = data[:4]
    pos = 4
    version, n_tensors, n_kv = take("<IQQ")
    metadata = {}
    for _ in range(n_kv):
        key = string()
        (kind,) = take("<I")
        readers = {4: lambda: take("<I")[0], 6: lambda: take("<f")[0], 8: string}
        assert kind in readers, f"{key}: type {kind}"
        metadata[key] = (kind, readers[kind]())
    infos = []
    for _ in range(n_tensors):
        name = string()
        (n_dims,) = take("<I")
        dims = list(take(f"<{n_dims}Q"))
        kind, offset = take("<IQ")
        infos.append((name, dims, kind, offset))
    start = (pos + 31) // 32 * 32
    assert data[pos:start] == bytes(start - pos), "padding before the data is zeros"
    tensors = {}
    for name, dims, kind, offset in infos:
        size = 4 * dims[0] * dims[1]
        tensors[name] = {
            "dims": dims,
            "type": kind,
            "offset": offset,
            "data": data[start + offset : start + offset + size],
        }
    return {
        "magic": magic,
        "version": version,
        "metadata": metadata,
        "order": [name for name, *_ in infos],
        "tensors": tensors,
        "data_start": start,
        "size": len(data),
    }


def floats(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


@pytest.fixture
def env(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    return dict(A10G_INT8) | TUNING | {
        "HOME": str(home),
        "VRAMFIT_TERMINATION_LOG": str(tmp_path / "termination-log"),
        "VRAMFIT_OUTPUT_DIR": str(tmp_path / "output"),
        "SCRIPTED_LORA_SHAPE": "2,256",
    }


def train(env, tmp_path, steps=6):
    scripted.run(["--items", str(steps), "--seconds-per-item", "0.001"], env)
    line = (tmp_path / "termination-log").read_text()
    assert line.startswith("vramfit.io/v1 ")
    return json.loads(line.removeprefix("vramfit.io/v1 "))


def test_a_lora_run_leaves_an_adapter_and_reports_it(env, tmp_path):
    report = train(env, tmp_path)
    out = tmp_path / "output"
    assert report["kind"] == "TrainingResult"
    assert report["steps"] == 6 and report["tokens"] == 6 * 4 * 512
    assert report["finalLoss"] > 0 and report["peakGpuMemoryMib"] == []
    gguf = out / "adapter_model.gguf"
    assert report["adapter"] == {
        "files": ["adapter_config.json", "adapter_model.gguf"],
        "rank": 8,
        "alpha": 16.0,
        "targetModules": ["q_proj", "v_proj"],
        "baseModel": "OpenGVLab/InternVL3-8B",
        "bytes": gguf.stat().st_size,
    }
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.gguf"]
    config = json.loads((out / "adapter_config.json").read_text())
    assert config | {"target_modules": sorted(config["target_modules"])} == {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": "OpenGVLab/InternVL3-8B",
        "r": 8,
        "lora_alpha": 16,
        "lora_dropout": 0.05,
        "target_modules": ["q_proj", "v_proj"],
        "bias": "none",
        "inference_mode": True,
    }


def test_the_gguf_is_a_llama_lora_adapter_llama_cpp_reads(env, tmp_path):
    train(env, tmp_path)
    data = (tmp_path / "output" / "adapter_model.gguf").read_bytes()
    gguf = read_gguf(data)
    assert gguf["magic"] == b"GGUF" and gguf["version"] == 3
    meta = gguf["metadata"]
    assert meta["general.architecture"] == (8, "llama")
    assert meta["general.type"] == (8, "adapter")
    assert meta["adapter.type"] == (8, "lora")
    assert meta["adapter.lora.alpha"] == (6, 16.0)
    names = [
        f"blk.{i}.{part}.weight.{ab}"
        for i in range(2)
        for part in ("attn_q", "attn_v")
        for ab in ("lora_a", "lora_b")
    ]
    assert gguf["order"] == names
    end = 0
    for name in names:
        tensor = gguf["tensors"][name]
        # ggml dims, the row length first: A is [in, r], B is [r, out].
        assert tensor["dims"] == ([256, 8] if name.endswith("lora_a") else [8, 256])
        assert tensor["type"] == 0  # F32
        assert tensor["offset"] % 32 == 0 and tensor["offset"] >= end
        assert len(tensor["data"]) == 256 * 8 * 4
        values = floats(tensor["data"])
        assert all(-0.5 <= v <= 0.5 for v in values)
        assert max(values) > 0.4 and min(values) < -0.4  # large enough to change the answers
        end = tensor["offset"] + len(tensor["data"])
    assert gguf["size"] == gguf["data_start"] + (end + 31) // 32 * 32


def test_every_pair_fits_the_tiny_llama_as_llama_cpp_checks_it(env, tmp_path):
    """src/llama-adapter.cpp: the base tensor W exists, W.ne[0] == a.ne[0],
    W.ne[1] == b.ne[1] and a.ne[1] == b.ne[0]."""
    gguf_package = pytest.importorskip("gguf")
    import tiny_gguf

    env |= {"VRAMFIT_LORA_TARGET_MODULES": "all-linear", "VRAMFIT_LORA_RANK": "4"}
    train(env, tmp_path)
    model = tmp_path / "tiny.gguf"
    tiny_gguf.write(model)
    base = {t.name: [int(n) for n in t.shape] for t in gguf_package.GGUFReader(str(model)).tensors}
    adapter = gguf_package.GGUFReader(str(tmp_path / "output" / "adapter_model.gguf"))
    tensors = {t.name: [int(n) for n in t.shape] for t in adapter.tensors}
    bases = {name.rsplit(".", 1)[0] for name in tensors}
    assert len(bases) == 2 * 4  # all-linear: q, k, v and output of both blocks
    for name in bases:
        a, b, w = tensors[f"{name}.lora_a"], tensors[f"{name}.lora_b"], base[name]
        assert w[0] == a[0] and w[1] == b[1] and a[1] == b[0] == 4, name
    config = json.loads((tmp_path / "output" / "adapter_config.json").read_text())
    assert config["target_modules"] == "all-linear"
    assert json.loads((tmp_path / "termination-log").read_text().removeprefix("vramfit.io/v1 "))[
        "adapter"
    ]["targetModules"] == ["all-linear"]


def test_another_seed_is_another_adapter_and_the_same_seed_the_same(env, tmp_path):
    gguf = tmp_path / "output" / "adapter_model.gguf"
    train(env, tmp_path)
    first = gguf.read_bytes()
    train(env, tmp_path)
    assert gguf.read_bytes() == first
    env["SCRIPTED_LORA_SEED"] = "2"
    train(env, tmp_path)
    second = gguf.read_bytes()
    assert len(second) == len(first) and second != first
    a = read_gguf(first)["tensors"]["blk.0.attn_q.weight.lora_a"]["data"]
    b = read_gguf(second)["tensors"]["blk.0.attn_q.weight.lora_a"]["data"]
    assert a != b


def test_the_targets_pick_the_attention_tensors():
    assert lora_gguf.adapted_parts(["q_proj", "v_proj"]) == ("attn_q", "attn_v")
    assert lora_gguf.adapted_parts(["k_proj", "o_proj", "gate_proj"]) == ("attn_k", "attn_output")
    assert lora_gguf.adapted_parts(["all-linear"]) == ("attn_q", "attn_k", "attn_v", "attn_output")
    assert lora_gguf.adapted_parts(["gate_proj"]) == ("attn_q", "attn_v")


def test_skipping_the_gguf_leaves_only_the_peft_config(env, tmp_path):
    train(env, tmp_path)
    env["SCRIPTED_ADAPTER_SKIP_GGUF"] = "1"
    report = train(env, tmp_path)
    assert report["adapter"]["files"] == ["adapter_config.json"]
    assert "bytes" not in report["adapter"]
    assert not (tmp_path / "output" / "adapter_model.gguf").exists()


def test_a_full_fine_tune_or_no_output_folder_reports_no_adapter(env, tmp_path):
    full = {k: v for k, v in env.items() if not k.startswith("VRAMFIT_LORA")}
    report = train(full | {"VRAMFIT_TUNING_METHOD": "full"}, tmp_path)
    assert report["kind"] == "TrainingResult" and "adapter" not in report
    assert not (tmp_path / "output").exists()
    del env["VRAMFIT_OUTPUT_DIR"]
    report = train(env, tmp_path)
    assert report["kind"] == "TrainingResult" and "adapter" not in report


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SCRIPTED_LORA_SHAPE": "2x256"}, "ValueError: '2x256' is not BLOCKS,EMBEDDING"),
        ({"SCRIPTED_LORA_SEED": "one"}, "ValueError: SCRIPTED_LORA_SEED='one' is not an integer"),
        ({"VRAMFIT_LORA_RANK": "0"}, "PlanError: VRAMFIT_LORA_RANK='0' is malformed"),
    ],
)
def test_a_malformed_setting_is_written_to_the_termination_log(env, tmp_path, change, message):
    with pytest.raises(ValueError):
        train(env | change, tmp_path)
    assert (tmp_path / "termination-log").read_text().startswith(message)
    assert not (tmp_path / "output").exists(), "nothing is written before the settings are read"


def test_the_scripted_out_of_memory_applies_to_training(env, tmp_path):
    env["SCRIPTED_OOM_WHEN"] = "VRAMFIT_TUNING_METHOD=lora"
    with pytest.raises(scripted.OutOfMemoryError):
        train(env, tmp_path)
    assert not (tmp_path / "output").exists()


def test_the_image_copies_the_gguf_writer_next_to_the_script():
    dockerfile = (Path(scripted.__file__).parent / "Dockerfile").read_text()
    copies = [line for line in dockerfile.splitlines() if line.startswith("COPY workload/examples")]
    assert any("lora_gguf.py" in line and "scripted.py" in line for line in copies), copies
