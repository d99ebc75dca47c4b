"""The training plan read from the env and its arguments by name, the loss check and the
training reports: no torch, transformers or peft needed. The fixtures are the env
`vramfit plan examples/mistral-qlora.yaml --class a10g-x1` and
`vramfit plan examples/mistral-full-finetune.yaml --class h100-80gb-x8` print."""

import json
import math

import pytest

from vramfit_workload import LossDiverged, PlanError, TrainingPlan, check_loss
from vramfit_workload.termination import (
    PREFIX,
    loss_check_failed,
    training_result_message,
    write_training_result,
)
from vramfit_workload.training import (
    bits_and_bytes_kwargs,
    checked,
    lora_kwargs,
    model_kwargs,
    training_arguments_kwargs,
)

QLORA_A10G = {
    "VRAMFIT_NODE_CLASS": "a10g-x1",
    "VRAMFIT_MODEL": "mistralai/Mistral-7B-Instruct-v0.3",
    "VRAMFIT_GPU_COUNT": "1",
    "VRAMFIT_DTYPE": "bfloat16",
    "VRAMFIT_QUANTIZATION": "nf4",
    "VRAMFIT_FLASH_ATTENTION": "true",
    "VRAMFIT_MEMORY_FRACTION": "0.90",
    "VRAMFIT_CONTEXT_LENGTH": "512",
    "VRAMFIT_USABLE_MEMORY_MIB": "18423",
    "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128",
    "PYTORCH_ALLOC_CONF": "max_split_size_mb:128",
    "VRAMFIT_TUNING_METHOD": "qlora",
    "VRAMFIT_SEQUENCE_LENGTH": "512",
    "VRAMFIT_MICRO_BATCH": "7",
    "VRAMFIT_GRADIENT_ACCUMULATION": "5",
    "VRAMFIT_EFFECTIVE_BATCH": "35",
    "VRAMFIT_GRADIENT_CHECKPOINTING": "true",
    "VRAMFIT_OPTIMIZER": "paged_adamw_8bit",
    "VRAMFIT_PARALLELISM": "single",
    "VRAMFIT_TF32": "true",
    "VRAMFIT_LORA_RANK": "16",
    "VRAMFIT_LORA_ALPHA": "32",
    "VRAMFIT_LORA_DROPOUT": "0.05",
    "VRAMFIT_LORA_TARGET_MODULES": "all-linear",
    "VRAMFIT_DATA_DIR": "/vramfit/data",
    "VRAMFIT_OUTPUT_DIR": "/vramfit/output",
}

FULL_H100_FSDP = {
    key: value for key, value in QLORA_A10G.items() if not key.startswith("VRAMFIT_LORA")
} | {
    "VRAMFIT_NODE_CLASS": "h100-80gb-x8",
    "VRAMFIT_GPU_COUNT": "2",
    "VRAMFIT_QUANTIZATION": "none",
    "VRAMFIT_TUNING_METHOD": "full",
    "VRAMFIT_SEQUENCE_LENGTH": "2048",
    "VRAMFIT_MICRO_BATCH": "2",
    "VRAMFIT_GRADIENT_ACCUMULATION": "16",
    "VRAMFIT_EFFECTIVE_BATCH": "64",
    "VRAMFIT_OPTIMIZER": "adamw_torch",
    "VRAMFIT_PARALLELISM": "fsdp",
}


def test_the_qlora_plan_builds_nf4_with_double_quantization_and_adapters_on_every_layer():
    t = TrainingPlan.from_env(QLORA_A10G)
    assert (t.method, t.micro_batch, t.gradient_accumulation) == ("qlora", 7, 5)
    assert bits_and_bytes_kwargs(t) == {
        "load_in_4bit": True,
        "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True,
        "bnb_4bit_compute_dtype": "bfloat16",
    }
    assert lora_kwargs(t) == {
        "r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "target_modules": "all-linear",
        "bias": "none",
        "task_type": "CAUSAL_LM",
    }
    assert model_kwargs(t) == {
        "dtype": "bfloat16",
        "attn_implementation": "flash_attention_2",
        "quantization_config": bits_and_bytes_kwargs(t),
        "device_map": {"": 0},
    }
    assert training_arguments_kwargs(t) == {
        "output_dir": "/vramfit/output",
        "per_device_train_batch_size": 7,
        "gradient_accumulation_steps": 5,
        "gradient_checkpointing": True,
        "gradient_checkpointing_kwargs": {"use_reentrant": False},
        "optim": "paged_adamw_8bit",
        "bf16": True,
        "fp16": False,
        "tf32": True,
    }


def test_a_full_fine_tune_loads_fp32_master_weights_and_shards_with_fsdp():
    t = TrainingPlan.from_env(FULL_H100_FSDP)
    assert bits_and_bytes_kwargs(t) is None
    assert lora_kwargs(t) is None
    assert model_kwargs(t) == {"dtype": "float32", "attn_implementation": "flash_attention_2"}
    args = training_arguments_kwargs(t)
    assert args["fsdp"] == "full_shard auto_wrap"
    assert (args["optim"], args["per_device_train_batch_size"]) == ("adamw_torch", 2)


def test_float16_trains_with_loss_scaling_and_data_parallel_lora_skips_frozen_parameters():
    env = QLORA_A10G | {
        "VRAMFIT_DTYPE": "float16",
        "VRAMFIT_TUNING_METHOD": "lora",
        "VRAMFIT_PARALLELISM": "ddp",
        "VRAMFIT_GPU_COUNT": "2",
        "VRAMFIT_TF32": "false",
        "VRAMFIT_LORA_TARGET_MODULES": "q_proj,v_proj",
        "VRAMFIT_QUANTIZATION": "none",
    }
    t = TrainingPlan.from_env(env)
    args = training_arguments_kwargs(t)
    assert (args["fp16"], args["bf16"], args["tf32"]) == (True, False, False)
    assert args["ddp_find_unused_parameters"] is False
    assert lora_kwargs(t)["target_modules"] == ["q_proj", "v_proj"]
    assert model_kwargs(t, local_rank=1)["device_map"] == {"": 1}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"VRAMFIT_TUNING_METHOD": "prefix"}, "VRAMFIT_TUNING_METHOD='prefix' is malformed"),
        ({"VRAMFIT_MICRO_BATCH": "0"}, "VRAMFIT_MICRO_BATCH='0' is malformed"),
        ({"VRAMFIT_OPTIMIZER": "sgd"}, "VRAMFIT_OPTIMIZER='sgd' is malformed"),
        ({"VRAMFIT_LORA_DROPOUT": "1.5"}, "VRAMFIT_LORA_DROPOUT='1.5' is malformed"),
        ({"VRAMFIT_LORA_TARGET_MODULES": " , "}, "VRAMFIT_LORA_TARGET_MODULES is not set"),
        ({"VRAMFIT_GRADIENT_ACCUMULATION": ""}, "VRAMFIT_GRADIENT_ACCUMULATION is not set"),
    ],
)
def test_a_missing_or_malformed_variable_is_named(change, message):
    with pytest.raises(PlanError, match=message):
        TrainingPlan.from_env(QLORA_A10G | change)


def test_names_a_class_does_not_take_are_refused():
    class Config:
        def __init__(self, r=8, lora_alpha=8):
            pass

    assert checked(Config, {"r": 16}) == {"r": 16}
    with pytest.raises(TypeError, match="Config does not take lora_dropout, target_modules"):
        checked(Config, {"r": 16, "target_modules": "all-linear", "lora_dropout": 0.1})


def test_a_nan_or_infinite_loss_diverges():
    check_loss(2.31, 10)
    for loss in (math.nan, math.inf, -math.inf):
        with pytest.raises(LossDiverged) as diverged:
            check_loss(loss, 12)
        assert diverged.value.step == 12


def test_the_loss_check_message_names_the_loss_step_and_dtype():
    line = loss_check_failed(math.nan, 12, "float16")
    assert line == (
        PREFIX
        + '{"kind":"LossCheckFailed","check":"non-finite-loss","loss":"nan","step":12,"dtype":"float16"}'
    )
    assert '"loss":"-inf"' in loss_check_failed(-math.inf, 1, "bfloat16")
    with pytest.raises(ValueError):
        loss_check_failed(1.0, 1, "float16")


def test_the_training_result_reports_tokens_per_second_and_the_final_loss(tmp_path):
    line = training_result_message(100, 1_638_400, 3600.0, 1.2345678, [17000])
    body = json.loads(line.removeprefix(PREFIX))
    assert body == {
        "kind": "TrainingResult",
        "steps": 100,
        "tokens": 1_638_400,
        "seconds": 3600.0,
        "tokensPerSecond": 455.1,
        "finalLoss": 1.234568,
        "peakGpuMemoryMib": [17000],
    }
    with pytest.raises(ValueError):
        training_result_message(1, 1, 1.0, math.nan)
    path = tmp_path / "termination-log"
    write_training_result(2, 64, 0.5, None, [], environ={"VRAMFIT_TERMINATION_LOG": str(path)})
    assert json.loads(path.read_text().removeprefix(PREFIX))["tokensPerSecond"] == 128.0


def test_checkpointing_goes_under_the_name_the_installed_transformers_has():
    from vramfit_workload.training import current_names

    class Old:
        def __init__(self, gradient_checkpointing=False, gradient_checkpointing_kwargs=None):
            pass

    class New(Old):
        def __init__(
            self,
            gradient_checkpointing=False,
            gradient_checkpointing_kwargs=None,
            activation_checkpointing=False,
            activation_checkpointing_kwargs=None,
        ):
            pass

    kwargs = training_arguments_kwargs(TrainingPlan.from_env(QLORA_A10G))
    assert current_names(Old, kwargs) == kwargs
    renamed = current_names(New, kwargs)
    assert renamed["activation_checkpointing"] is True
    assert renamed["activation_checkpointing_kwargs"] == {"use_reentrant": False}
    assert "gradient_checkpointing" not in renamed


def test_a_group_across_nodes_shards_with_fsdp_whatever_one_pod_would_do():
    # Each pod of a 2-node group: the plan budgets one GPU's share of the whole group.
    group = QLORA_A10G | {"VRAMFIT_GROUP_SIZE": "2", "VRAMFIT_PARALLELISM": "single"}
    t = TrainingPlan.from_env(group)
    assert (t.group_size, t.parallelism) == (2, "fsdp")
    assert training_arguments_kwargs(t)["fsdp"] == "full_shard auto_wrap"
    # FSDP places the shards itself: no whole model on this process's GPU.
    assert "device_map" not in model_kwargs(t, local_rank=1)
    # FSDP flattens one dtype per module: the 4-bit weights are stored in the planned one.
    assert bits_and_bytes_kwargs(t)["bnb_4bit_quant_storage"] == "bfloat16"


def test_a_group_of_one_or_no_group_keeps_the_planned_parallelism():
    for env in (QLORA_A10G, QLORA_A10G | {"VRAMFIT_GROUP_SIZE": "1"}):
        t = TrainingPlan.from_env(env)
        assert (t.group_size, t.parallelism) == (1, "single")
        assert "fsdp" not in training_arguments_kwargs(t)
        assert "bnb_4bit_quant_storage" not in bits_and_bytes_kwargs(t)


def test_a_malformed_group_size_is_named():
    with pytest.raises(PlanError, match="VRAMFIT_GROUP_SIZE='two' is malformed"):
        TrainingPlan.from_env(QLORA_A10G | {"VRAMFIT_GROUP_SIZE": "two"})
