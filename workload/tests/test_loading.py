"""The plan's `from_pretrained` arguments by name, and the check of a loaded model, with
stand-ins for the model: no torch or transformers needed."""

from types import SimpleNamespace

import pytest
from conftest import A10G_INT8, H100_X2, T4_NF4, V100_FP16

from vramfit_workload import Plan, PlanMismatch, planned_kwargs, tile_kwargs
from vramfit_workload.loading import check_loaded, loaded_settings


def test_v100_float16_sdpa_over_three_gpus():
    assert planned_kwargs(Plan.from_env(V100_FP16)) == {
        "dtype": "float16",
        "attn_implementation": "sdpa",
        "device_map": "auto",
        "max_memory": {0: "12120MiB", 1: "12120MiB", 2: "12120MiB"},
    }


def test_t4_float16_nf4_computes_in_float16():
    assert planned_kwargs(Plan.from_env(T4_NF4)) == {
        "dtype": "float16",
        "quantization_config": {
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_compute_dtype": "float16",
        },
        "attn_implementation": "sdpa",
        "device_map": "auto",
        "max_memory": {0: "12288MiB"},
    }


def test_a10g_bfloat16_int8_flash_attention():
    assert planned_kwargs(Plan.from_env(A10G_INT8)) == {
        "dtype": "bfloat16",
        "quantization_config": {"load_in_8bit": True},
        "attn_implementation": "flash_attention_2",
        "device_map": "auto",
        "max_memory": {0: "18423MiB"},
    }


def test_h100_bfloat16_flash_attention_over_two_gpus():
    assert planned_kwargs(Plan.from_env(H100_X2)) == {
        "dtype": "bfloat16",
        "attn_implementation": "flash_attention_2",
        "device_map": "auto",
        "max_memory": {0: "69326MiB", 1: "69326MiB"},
    }


def test_tiles_under_the_name_the_vision_code_reads():
    plan = Plan.from_env(A10G_INT8)
    assert tile_kwargs(plan) == {"max_dynamic_patch": 18}
    assert tile_kwargs(plan, "max_num") == {"max_num": 18}
    no_tiles = {k: v for k, v in A10G_INT8.items() if "TILES" not in k}
    assert tile_kwargs(Plan.from_env(no_tiles)) == {}


def fake_model(dtype, quantization_config=None, **flags):
    """A stand-in with what transformers' models expose: `dtype` prints as torch.<name>."""
    config = SimpleNamespace(quantization_config=quantization_config)
    return SimpleNamespace(dtype=f"torch.{dtype}", config=config, **flags)


class FakeBitsAndBytesConfig:
    """Like transformers' BitsAndBytesConfig, which the model's config holds as an object."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def to_dict(self):
        return dict(self.kwargs)


@pytest.mark.parametrize(
    "model, expected",
    [
        (fake_model("float16"), ("float16", "none")),
        (fake_model("bfloat16", is_loaded_in_8bit=True), ("bfloat16", "int8")),
        (fake_model("bfloat16", {"load_in_8bit": True}), ("bfloat16", "int8")),
        (
            fake_model("float16", FakeBitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")),
            ("float16", "nf4"),
        ),
        (fake_model("float16", is_loaded_in_4bit=True), ("float16", "fp4")),
    ],
)
def test_loaded_settings(model, expected):
    assert loaded_settings(model) == expected


def test_a_model_loaded_as_planned_passes():
    check_loaded(Plan.from_env(A10G_INT8), fake_model("bfloat16", {"load_in_8bit": True}))
    check_loaded(Plan.from_env(T4_NF4), fake_model("float16", {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}))
    check_loaded(Plan.from_env(V100_FP16), fake_model("float16"))


def test_bfloat16_on_a_v100_plan_is_a_mismatch():
    with pytest.raises(PlanMismatch, match="loaded in bfloat16, the plan says float16"):
        check_loaded(Plan.from_env(V100_FP16), fake_model("bfloat16"))


def test_a_missing_quantization_is_a_mismatch():
    with pytest.raises(PlanMismatch, match="quantization none, the plan says int8"):
        check_loaded(Plan.from_env(A10G_INT8), fake_model("bfloat16"))


def test_fp4_instead_of_nf4_is_a_mismatch():
    with pytest.raises(PlanMismatch, match="quantization fp4, the plan says nf4"):
        check_loaded(Plan.from_env(T4_NF4), fake_model("float16", {"load_in_4bit": True}))
