import pytest
from conftest import A10G_INT8, H100_X2, T4_NF4, V100_FP16

from vramfit_workload import Plan, PlanError

REQUIRED = [
    "VRAMFIT_MODEL",
    "VRAMFIT_NODE_CLASS",
    "VRAMFIT_GPU_COUNT",
    "VRAMFIT_DTYPE",
    "VRAMFIT_QUANTIZATION",
    "VRAMFIT_FLASH_ATTENTION",
    "VRAMFIT_MEMORY_FRACTION",
    "VRAMFIT_USABLE_MEMORY_MIB",
    "VRAMFIT_CONTEXT_LENGTH",
]


def test_reads_every_field_of_an_a10g_plan():
    assert Plan.from_env(A10G_INT8) == Plan(
        model="OpenGVLab/InternVL3-8B",
        node_class="a10g-x1",
        gpu_count=1,
        dtype="bfloat16",
        quantization="int8",
        flash_attention=True,
        memory_fraction=0.90,
        usable_memory_mib=18423,
        context_length=4096,
        max_tiles=18,
        alloc_conf="max_split_size_mb:128",
    )


@pytest.mark.parametrize(
    "env, dtype, quantization, flash, gpus",
    [
        (V100_FP16, "float16", "none", False, 3),
        (T4_NF4, "float16", "nf4", False, 1),
        (A10G_INT8, "bfloat16", "int8", True, 1),
        (H100_X2, "bfloat16", "none", True, 2),
    ],
)
def test_reads_each_generation(env, dtype, quantization, flash, gpus):
    plan = Plan.from_env(env)
    assert (plan.dtype, plan.quantization, plan.flash_attention, plan.gpu_count) == (
        dtype,
        quantization,
        flash,
        gpus,
    )


def test_the_plan_is_frozen():
    plan = Plan.from_env(A10G_INT8)
    with pytest.raises(AttributeError):
        plan.dtype = "float16"


def test_the_vramfit_names_win_over_the_teams_names():
    env = A10G_INT8 | {"TORCH_DTYPE": "float16", "USE_FLASH_ATTN": "false", "MAX_TILES": "6"}
    plan = Plan.from_env(env)
    assert (plan.dtype, plan.flash_attention, plan.max_tiles) == ("bfloat16", True, 18)


def test_tiles_and_alloc_conf_are_optional():
    env = {k: v for k, v in A10G_INT8.items() if k in REQUIRED}
    plan = Plan.from_env(env)
    assert plan.max_tiles is None
    assert plan.alloc_conf is None


def test_the_old_alloc_conf_name_is_read_when_the_new_one_is_unset():
    env = {k: v for k, v in A10G_INT8.items() if k != "PYTORCH_ALLOC_CONF"}
    env["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:64"
    assert Plan.from_env(env).alloc_conf == "max_split_size_mb:64"


def test_reads_os_environ_by_default(monkeypatch):
    for key, value in T4_NF4.items():
        monkeypatch.setenv(key, value)
    assert Plan.from_env().quantization == "nf4"


@pytest.mark.parametrize("name", REQUIRED)
@pytest.mark.parametrize("missing", ["absent", "empty"])
def test_a_missing_variable_is_named(name, missing):
    env = dict(A10G_INT8)
    if missing == "absent":
        del env[name]
    else:
        env[name] = "  "
    with pytest.raises(PlanError, match=f"^{name} is not set: expected "):
        Plan.from_env(env)


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("VRAMFIT_GPU_COUNT", "two", "a whole number >= 1"),
        ("VRAMFIT_GPU_COUNT", "0", "a whole number >= 1"),
        ("VRAMFIT_GPU_COUNT", "-1", "a whole number >= 1"),
        ("VRAMFIT_GPU_COUNT", "1.5", "a whole number >= 1"),
        ("VRAMFIT_DTYPE", "fp16", "one of bfloat16, float16"),
        ("VRAMFIT_DTYPE", "BFLOAT16", "one of bfloat16, float16"),
        ("VRAMFIT_QUANTIZATION", "8", "one of none, int8, nf4"),
        ("VRAMFIT_QUANTIZATION", "fp4", "one of none, int8, nf4"),
        ("VRAMFIT_FLASH_ATTENTION", "yes", "one of true, false"),
        ("VRAMFIT_FLASH_ATTENTION", "1", "one of true, false"),
        ("VRAMFIT_MEMORY_FRACTION", "90%", "a number greater than 0 and at most 1"),
        ("VRAMFIT_MEMORY_FRACTION", "1.5", "a number greater than 0 and at most 1"),
        ("VRAMFIT_MEMORY_FRACTION", "0", "a number greater than 0 and at most 1"),
        ("VRAMFIT_MEMORY_FRACTION", "nan", "a number greater than 0 and at most 1"),
        ("VRAMFIT_USABLE_MEMORY_MIB", "18.0GiB", "a whole number >= 1"),
        ("VRAMFIT_CONTEXT_LENGTH", "4k", "a whole number >= 1"),
        ("VRAMFIT_MAX_TILES", "many", "a whole number >= 1"),
    ],
)
def test_a_malformed_value_is_named_with_what_was_expected(name, value, expected):
    with pytest.raises(PlanError) as error:
        Plan.from_env(A10G_INT8 | {name: value})
    message = str(error.value)
    assert message.startswith(f"{name}={value!r} is malformed: expected {expected}")
