"""The adapter a LoRA or QLoRA run reports in its TrainingResult line: read from PEFT's files at
the root of the output folder, in the operator's bounds (`TrainedAdapter::is_valid`), and the
line kept within the termination message's 4096 bytes."""

import json
import math

import pytest

from vramfit_workload import AdapterReport, adapter_report
from vramfit_workload.termination import (
    MAX_BYTES,
    PREFIX,
    MessageTooLong,
    training_result_message,
    write_training_result,
)

PEFT_CONFIG = {
    "peft_type": "LORA",
    "task_type": "CAUSAL_LM",
    "base_model_name_or_path": "mistralai/Mistral-7B-Instruct-v0.3",
    "r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.05,
    "target_modules": ["v_proj", "q_proj", "o_proj", "k_proj"],
    "bias": "none",
}


def saved(folder, config=PEFT_CONFIG, **files):
    """A folder as PEFT's save_pretrained leaves it: the config and files of given sizes."""
    folder.mkdir(exist_ok=True)
    if config is not None:
        (folder / "adapter_config.json").write_text(json.dumps(config))
    for name, size in files.items():
        (folder / name.replace("__", ".")).write_bytes(b"\0" * size)
    return folder


def body(line):
    assert line.startswith(PREFIX) and len(line.encode()) <= MAX_BYTES
    return json.loads(line.removeprefix(PREFIX))


def test_a_peft_adapter_and_its_gguf_conversion_are_reported_with_the_peft_weights_bytes(tmp_path):
    folder = saved(
        tmp_path / "out",
        adapter_model__safetensors=1000,
        adapter_model__gguf=600,
        README__md=10,
        training_args__bin=7,
    )
    (folder / "checkpoint-5").mkdir()
    report = adapter_report(folder)
    assert report.to_json() == {
        "files": ["adapter_config.json", "adapter_model.safetensors", "adapter_model.gguf"],
        "rank": 16,
        "alpha": 32.0,
        "targetModules": ["k_proj", "o_proj", "q_proj", "v_proj"],
        "baseModel": "mistralai/Mistral-7B-Instruct-v0.3",
        # The weights a replica loads: the safetensors, not the GGUF conversion on top.
        "bytes": 1000,
    }


def test_bytes_count_one_weights_file_the_one_peft_loads(tmp_path):
    both = saved(tmp_path / "both", adapter_model__safetensors=1000, adapter_model__bin=3000)
    assert adapter_report(both).bytes == 1000
    assert adapter_report(both).files == (
        "adapter_config.json",
        "adapter_model.safetensors",
        "adapter_model.bin",
    )
    assert adapter_report(saved(tmp_path / "bin", adapter_model__bin=3000)).bytes == 3000
    # A GGUF alone (no PEFT weights): its size.
    assert adapter_report(saved(tmp_path / "gguf", my__gguf=500)).bytes == 500
    assert adapter_report(saved(tmp_path / "none")).bytes is None


def test_the_served_gguf_comes_first_and_at_most_eight_files_are_named(tmp_path):
    folder = saved(tmp_path / "out", adapter_model__safetensors=10, adapter_model__gguf=5)
    for i in range(9):
        (folder / f"a-{i}.gguf").write_bytes(b"x")
    (folder / "bad\\name.gguf").write_bytes(b"x")
    (folder / "dir.gguf").mkdir()
    files = adapter_report(folder).files
    assert len(files) == 8
    assert files[:4] == (
        "adapter_config.json",
        "adapter_model.safetensors",
        "adapter_model.gguf",
        "a-0.gguf",
    )
    assert "bad\\name.gguf" not in files and "dir.gguf" not in files


@pytest.mark.parametrize(
    ("targets", "reported"),
    [
        ("all-linear", ("all-linear",)),
        (["q_proj", "q_proj", "v_proj"], ("q_proj", "v_proj")),
        # all-linear as PEFT saves it, resolved to the model's paths.
        (
            [f"model.layers.{i}.{m}" for i in range(40) for m in ("self_attn.q_proj", "mlp.up_proj")],
            ("q_proj", "up_proj"),
        ),
        (["model.layers.0.self_attn.q_proj."], ()),
        (r".*\.(q_proj|v_proj)$", ()),  # a regular expression: the targets are not known
        (None, ()),
        ([f"m{i}" for i in range(65)], ()),
    ],
)
def test_targets_are_plain_module_names_or_left_out(tmp_path, targets, reported):
    folder = saved(tmp_path / "out", PEFT_CONFIG | {"target_modules": targets})
    report = adapter_report(folder)
    assert report.target_modules == reported
    assert ("targetModules" in report.to_json()) == bool(reported)


@pytest.mark.parametrize("base", ["", "a\nb", "x" * 257, None, 7])
def test_a_base_model_the_operator_would_refuse_is_left_out(tmp_path, base):
    folder = saved(tmp_path / "out", PEFT_CONFIG | {"base_model_name_or_path": base})
    assert "baseModel" not in adapter_report(folder).to_json()


@pytest.mark.parametrize("alpha", [0, -8, None, "16", math.inf])
def test_an_alpha_that_is_not_positive_is_left_out(tmp_path, alpha):
    folder = saved(tmp_path / "out", PEFT_CONFIG | {"lora_alpha": alpha})
    assert "alpha" not in adapter_report(folder).to_json()


@pytest.mark.parametrize("rank", [0, -1, None, "8", 65537, True, 2.5])
def test_no_valid_rank_is_an_error(tmp_path, rank):
    folder = saved(tmp_path / "out", PEFT_CONFIG | {"r": rank})
    with pytest.raises(ValueError, match="rank"):
        adapter_report(folder)


def test_a_whole_float_rank_is_an_integer(tmp_path):
    assert adapter_report(saved(tmp_path / "out", PEFT_CONFIG | {"r": 8.0})).rank == 8


def test_no_config_or_a_broken_one_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no adapter_config.json"):
        adapter_report(saved(tmp_path / "none", None, adapter_model__safetensors=1))
    broken = saved(tmp_path / "broken", None)
    (broken / "adapter_config.json").write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        adapter_report(broken)
    (broken / "adapter_config.json").write_text("[1]")
    with pytest.raises(ValueError, match="not a JSON object"):
        adapter_report(broken)


REPORT = AdapterReport(
    files=("adapter_config.json", "adapter_model.gguf"),
    rank=8,
    alpha=16.0,
    target_modules=("q_proj", "v_proj"),
    base_model="example/tiny-llama",
    bytes=66336,
)


def test_the_training_result_carries_the_adapter_in_camel_case(tmp_path):
    line = training_result_message(20, 40960, 1.5, 2.0, [100], adapter=REPORT)
    assert body(line) == {
        "kind": "TrainingResult",
        "steps": 20,
        "tokens": 40960,
        "seconds": 1.5,
        "tokensPerSecond": 27306.7,
        "finalLoss": 2.0,
        "peakGpuMemoryMib": [100],
        "adapter": {
            "files": ["adapter_config.json", "adapter_model.gguf"],
            "rank": 8,
            "alpha": 16.0,
            "targetModules": ["q_proj", "v_proj"],
            "baseModel": "example/tiny-llama",
            "bytes": 66336,
        },
    }
    # The wire form is taken as well, and written through the env's termination log.
    path = tmp_path / "termination-log"
    environ = {"VRAMFIT_TERMINATION_LOG": str(path)}
    write_training_result(1, 2, 1.0, None, [], environ, adapter={"files": ["a.gguf"], "rank": 4})
    assert body(path.read_text())["adapter"] == {"files": ["a.gguf"], "rank": 4}
    assert "adapter" not in body(training_result_message(1, 2, 1.0))


@pytest.mark.parametrize(
    "change",
    [
        {"files": ()},
        {"files": tuple(f"f{i}" for i in range(9))},
        {"files": ("../escape.gguf",)},
        {"files": ("/abs.gguf",)},
        {"files": ("a//b",)},
        {"files": ("a\\b",)},
        {"files": ("a\x7fb",)},
        {"files": ("x" * 256,)},
        {"rank": 0},
        {"rank": 65537},
        {"rank": True},
        {"alpha": math.nan},
        {"alpha": 0.0},
        {"target_modules": ("q proj",)},
        {"target_modules": tuple(f"m{i}" for i in range(65))},
        {"base_model": ""},
        {"base_model": "a\tb"},
        {"bytes": -1},
    ],
)
def test_a_report_the_operator_would_refuse_is_never_written(change):
    bad = AdapterReport(**(REPORT.__dict__ | change))
    assert bad.problems()
    with pytest.raises(ValueError, match="adapter report"):
        training_result_message(1, 1, 1.0, adapter=bad)


def test_an_unknown_key_of_the_wire_form_is_refused():
    with pytest.raises(ValueError, match="unknown key"):
        training_result_message(1, 1, 1.0, adapter={"files": ["a.gguf"], "rank": 4, "size": 1})


def test_the_bounds_are_the_operators():
    widest = AdapterReport(
        files=tuple("f" * 249 + f"{i}.gguf" for i in range(8)),
        rank=65536,
        target_modules=tuple("m" * 127 + str(i % 10) for i in range(64)),
        base_model="b" * 256,
    )
    assert widest.problems() == []


def test_a_long_report_loses_peak_memory_the_targets_then_the_base_model():
    # Targets that fit once the peak memory is gone stay.
    modules = tuple(f"model.layers.{i}.self_attn.q_proj.{'x' * 24}" for i in range(64))
    fits = AdapterReport(**(REPORT.__dict__ | {"target_modules": modules}))
    line = training_result_message(1, 1, 1.0, None, [1] * 16, adapter=fits)
    assert len(line.encode()) > MAX_BYTES - 40, "the case must need the peak memory's room"
    message = body(line)
    assert message["adapter"]["targetModules"] == list(modules)
    assert "peakGpuMemoryMib" not in message
    # Targets that never fit go whole, and the peak memory comes back.
    modules = tuple(f"model.layers.{i}.self_attn.q_proj.{'x' * 40}" for i in range(64))
    long = AdapterReport(**(REPORT.__dict__ | {"target_modules": modules}))
    message = body(training_result_message(1, 1, 1.0, None, [1] * 16, adapter=long))
    assert message["peakGpuMemoryMib"] == [1] * 16
    assert "targetModules" not in message["adapter"]
    assert message["adapter"] == {
        key: value for key, value in REPORT.to_json().items() if key != "targetModules"
    }
    # Names that JSON escapes (6 bytes a character) fill the line: the base model goes too,
    # never a file, the rank, alpha or bytes.
    escaped = tuple("é" * 127 + str(i) for i in range(5))
    wide = AdapterReport(**(long.__dict__ | {"files": escaped, "base_model": "b" * 256}))
    message = body(training_result_message(1, 1, 1.0, None, [1] * 16, adapter=wide))
    assert set(message["adapter"]) == {"files", "rank", "alpha", "bytes"}
    assert message["adapter"]["files"] == list(escaped)
    # Files alone over the limit: an error, never a cut object.
    wider = AdapterReport(**(wide.__dict__ | {"files": tuple("é" * 127 + str(i) for i in range(8))}))
    with pytest.raises(MessageTooLong):
        training_result_message(1, 1, 1.0, adapter=wider)
