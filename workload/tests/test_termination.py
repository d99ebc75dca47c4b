"""The termination message: the line the operator parses."""

import json

import pytest
from conftest import A10G_INT8, V100_FP16

from vramfit_workload import Plan, check_outputs, fail_on_garbage, write_result
from vramfit_workload.output_check import CheckResult
from vramfit_workload.termination import (
    EXIT_GARBAGE,
    MAX_BYTES,
    PREFIX,
    encode,
    output_check_failed,
    result_message,
)


def parse(line):
    """What the operator does: the prefix, then one JSON object."""
    assert line.startswith("vramfit.io/v1 ")
    assert "\n" not in line
    assert len(line.encode()) <= 4096
    return json.loads(line[len("vramfit.io/v1 ") :])


def test_output_check_failed_names_the_check_ratio_and_dtype():
    result = check_outputs(["!!!!!!!!"] * 7 + ["A dog on a beach."])
    line = output_check_failed(result, Plan.from_env(A10G_INT8))
    assert line == (
        'vramfit.io/v1 {"kind":"OutputCheckFailed","check":"degenerate-output",'
        '"pattern":"exclamation","ratio":0.875,"threshold":0.3,"dtype":"bfloat16","samples":8}'
    )


def test_the_ratio_is_rounded_to_four_decimals():
    result = CheckResult(ratio=2 / 3, pattern="repeated-token", verdict="garbage", samples=3)
    assert parse(output_check_failed(result, Plan.from_env(V100_FP16)))["ratio"] == 0.6667


def test_result_summary():
    line = result_message(120, 300.5, [15000, 14900])
    assert line == (
        'vramfit.io/v1 {"kind":"Result","items":120,"seconds":300.5,'
        '"itemsPerSecond":0.3993,"peakGpuMemoryMib":[15000,14900]}'
    )


def test_result_without_gpus_or_time():
    assert parse(result_message(0, 0.0)) == {
        "kind": "Result",
        "items": 0,
        "seconds": 0.0,
        "itemsPerSecond": 0.0,
        "peakGpuMemoryMib": [],
    }


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), -1.0])
def test_result_numbers_are_finite_and_not_negative(seconds):
    with pytest.raises(ValueError):
        result_message(10, seconds)


def test_an_oversized_device_list_is_cut_to_fit_never_the_json():
    line = result_message(5, 10.0, [123456789] * 1000)
    message = parse(line)
    assert 0 < len(message["peakGpuMemoryMib"]) < 1000
    assert len(line.encode()) > MAX_BYTES - 12  # as many devices as fit
    assert message["items"] == 5


def test_an_optional_field_that_cannot_shrink_goes():
    line = encode({"kind": "Result", "note": "x" * 5000}, optional=("note",))
    assert parse(line) == {"kind": "Result"}


def test_a_message_that_cannot_fit_is_an_error():
    with pytest.raises(ValueError, match="over 4096 bytes"):
        encode({"kind": "Result", "note": "x" * 5000})


def test_write_result_writes_the_file_named_by_the_env(tmp_path):
    path = tmp_path / "termination-log"
    written = write_result(3, 1.5, [100], environ={"VRAMFIT_TERMINATION_LOG": str(path)})
    assert written == str(path)
    assert path.read_text() == PREFIX + (
        '{"kind":"Result","items":3,"seconds":1.5,"itemsPerSecond":2.0,"peakGpuMemoryMib":[100]}'
    )


def test_write_result_measures_no_gpus_without_torch_or_cuda(tmp_path):
    path = tmp_path / "log"
    write_result(1, 1.0, environ={"VRAMFIT_TERMINATION_LOG": str(path)})
    assert parse(path.read_text())["peakGpuMemoryMib"] in ([], pytest.approx([]))


def test_garbage_ends_the_process_with_the_message(tmp_path, capsys):
    path = tmp_path / "log"
    env = {"VRAMFIT_TERMINATION_LOG": str(path)}
    with pytest.raises(SystemExit) as exit_:
        fail_on_garbage(check_outputs(["!!!!!!!!"]), Plan.from_env(A10G_INT8), env)
    assert exit_.value.code == EXIT_GARBAGE != 0
    assert parse(path.read_text()) == {
        "kind": "OutputCheckFailed",
        "check": "degenerate-output",
        "pattern": "exclamation",
        "ratio": 1.0,
        "threshold": 0.3,
        "dtype": "bfloat16",
        "samples": 1,
    }
    assert "output check failed (bfloat16)" in capsys.readouterr().err


@pytest.mark.parametrize("texts", [["A dog on a beach."], ["A dog!!! On a beach!!"]])
def test_good_or_warning_output_goes_on_without_a_message(tmp_path, texts):
    path = tmp_path / "log"
    fail_on_garbage(check_outputs(texts), Plan.from_env(A10G_INT8), {"VRAMFIT_TERMINATION_LOG": str(path)})
    fail_on_garbage(None, Plan.from_env(A10G_INT8), {"VRAMFIT_TERMINATION_LOG": str(path)})
    assert not path.exists()
