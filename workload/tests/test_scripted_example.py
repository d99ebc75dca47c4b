"""The scripted generator (workload/examples/scripted): the image the e2e suite runs on a
real kubelet. What the job scripts through its env must come out as the termination
message the operator acts on."""

import json
import sys
from pathlib import Path

import pytest
from conftest import A10G_INT8

sys.path.insert(0, str(Path(__file__).parents[1] / "examples" / "scripted"))
import scripted  # noqa: E402


def parse(path):
    line = path.read_text()
    assert line.startswith("vramfit.io/v1 ")
    return json.loads(line[len("vramfit.io/v1 ") :])


@pytest.fixture
def env(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    return dict(A10G_INT8) | {
        "HOME": str(home),
        "VRAMFIT_TERMINATION_LOG": str(tmp_path / "termination-log"),
    }


def run(env, *args):
    scripted.run(["--items", "6", "--seconds-per-item", "0.01", *args], env)


def test_a_plain_run_writes_the_answers_under_home_and_a_result(env, tmp_path):
    run(env)
    result = parse(tmp_path / "termination-log")
    assert result["kind"] == "Result"
    assert result["items"] == 6 and result["seconds"] > 0
    answers = (Path(env["HOME"]) / ".cache" / "vramfit-scripted" / "answers.jsonl").read_text()
    assert [json.loads(line)["prompt"] for line in answers.splitlines()] == [
        f"Prompt {i}." for i in range(1, 7)
    ]


def test_garbage_in_the_scripted_dtype_fails_the_canary_with_exit_code_3(env, tmp_path):
    env["SCRIPTED_GARBAGE_WHEN"] = "VRAMFIT_DTYPE=bfloat16"
    with pytest.raises(SystemExit) as exit:
        run(env)
    assert exit.value.code == 3
    message = parse(tmp_path / "termination-log")
    assert message["kind"] == "OutputCheckFailed"
    assert message["dtype"] == "bfloat16" and message["pattern"] == "exclamation"


def test_garbage_only_in_the_scripted_dtype(env, tmp_path):
    env["SCRIPTED_GARBAGE_WHEN"] = "VRAMFIT_DTYPE=bfloat16"
    env["VRAMFIT_DTYPE"] = "float16"
    run(env)
    assert parse(tmp_path / "termination-log")["kind"] == "Result"


def test_garbage_without_the_canary_is_caught_by_the_sampled_check(env, tmp_path):
    env |= {"SCRIPTED_GARBAGE_WHEN": "VRAMFIT_DTYPE=bfloat16", "VRAMFIT_CANARY": "off"}
    with pytest.raises(SystemExit) as exit:
        run(env, "--check-every", "1")
    assert exit.value.code == 3
    assert parse(tmp_path / "termination-log")["samples"] == 4  # the sampler decides from 4 answers on


def test_out_of_memory_is_written_as_pytorch_words_it(env, tmp_path):
    env["SCRIPTED_OOM_WHEN"] = "VRAMFIT_GPU_COUNT=1,VRAMFIT_QUANTIZATION=int8"
    with pytest.raises(scripted.OutOfMemoryError):
        run(env)
    message = (tmp_path / "termination-log").read_text()
    assert message.startswith("OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert not (Path(env["HOME"]) / ".cache").exists()


def test_out_of_memory_needs_every_condition(env, tmp_path):
    env["SCRIPTED_OOM_WHEN"] = "VRAMFIT_GPU_COUNT=2,VRAMFIT_QUANTIZATION=int8"
    run(env)
    assert parse(tmp_path / "termination-log")["kind"] == "Result"


def test_a_missing_plan_is_reported_by_name(env, tmp_path):
    del env["VRAMFIT_DTYPE"]
    with pytest.raises(scripted.PlanError):
        run(env)
    assert (tmp_path / "termination-log").read_text().startswith(
        "PlanError: VRAMFIT_DTYPE is not set"
    )


def test_an_unwritable_home_fails_with_a_message(env, tmp_path):
    env["HOME"] = str(tmp_path / "termination-log" / "not-a-dir")
    (tmp_path / "termination-log").write_text("")
    with pytest.raises(OSError):
        run(env)
    assert (tmp_path / "termination-log").read_text().startswith(
        ("NotADirectoryError", "FileExistsError")
    )


def test_conditions_are_name_value_pairs():
    assert not scripted.matches("", {"A": "1"})
    assert scripted.matches(" A=1 , B=x=y ", {"A": "1", "B": "x=y"})
    assert not scripted.matches("A=1,B=2", {"A": "1"})
    with pytest.raises(ValueError, match="'A' is not NAME=VALUE"):
        scripted.matches("A", {"A": "1"})
