"""The training half with the real transformers, peft and torch on CPU, at the versions
docs/runtime-contracts.md pins: every name the package passes to BitsAndBytesConfig,
LoraConfig and TrainingArguments is one those versions take, and a tiny Llama (conftest.py)
is fine-tuned for a few steps with the arguments the package builds, through the example
trainer (workload/examples/trainer), LoRA and full. Run by workload/scripts/integration.sh."""

import inspect
import json
import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from vramfit_workload import LossDiverged, TrainingPlan, loss_watch  # noqa: E402
from vramfit_workload.termination import PREFIX  # noqa: E402
from vramfit_workload.training import (  # noqa: E402
    bits_and_bytes_config,
    bits_and_bytes_kwargs,
    checked,
    current_names,
    lora_config,
    lora_kwargs,
    training_arguments,
    training_arguments_kwargs,
)

pytestmark = pytest.mark.integration

TRAINER = Path(__file__).parents[2] / "examples" / "trainer"
# The versions docs/runtime-contracts.md pins for fine-tuning.
PINNED = {"transformers": "5.24.0", "peft": "0.21.2"}


def training_env(path, method, dtype="bfloat16", **extra):
    """The env `vramfit plan` gives a tuning job (docs/runtime-contracts.md), for the tiny
    model at `path`: 2 sequences of 32 tokens per step, 2 steps of accumulation."""
    env = {
        "VRAMFIT_MODEL": str(path),
        "VRAMFIT_NODE_CLASS": "cpu-test",
        "VRAMFIT_GPU_COUNT": "1",
        "VRAMFIT_DTYPE": dtype,
        "VRAMFIT_QUANTIZATION": "nf4" if method == "qlora" else "none",
        "VRAMFIT_FLASH_ATTENTION": "false",
        "VRAMFIT_MEMORY_FRACTION": "0.90",
        "VRAMFIT_USABLE_MEMORY_MIB": "1024",
        "VRAMFIT_CONTEXT_LENGTH": "32",
        "VRAMFIT_TUNING_METHOD": method,
        "VRAMFIT_SEQUENCE_LENGTH": "32",
        "VRAMFIT_MICRO_BATCH": "2",
        "VRAMFIT_GRADIENT_ACCUMULATION": "2",
        "VRAMFIT_EFFECTIVE_BATCH": "4",
        "VRAMFIT_GRADIENT_CHECKPOINTING": "true",
        "VRAMFIT_OPTIMIZER": "paged_adamw_8bit" if method == "qlora" else "adamw_torch",
        "VRAMFIT_PARALLELISM": "single",
        "VRAMFIT_TF32": "true",
    }
    if method != "full":
        env |= {
            "VRAMFIT_LORA_RANK": "4",
            "VRAMFIT_LORA_ALPHA": "8",
            "VRAMFIT_LORA_DROPOUT": "0.05",
            "VRAMFIT_LORA_TARGET_MODULES": "all-linear",
        }
    return env | extra


def test_the_pinned_versions_are_the_ones_checked():
    assert transformers.__version__ == PINNED["transformers"]
    assert peft.__version__ == PINNED["peft"]


@pytest.mark.parametrize(
    "method, extra",
    [
        ("qlora", {}),
        ("lora", {"VRAMFIT_PARALLELISM": "ddp", "VRAMFIT_LORA_TARGET_MODULES": "q_proj,v_proj"}),
        ("full", {"VRAMFIT_PARALLELISM": "fsdp", "VRAMFIT_DTYPE": "float16"}),
    ],
)
def test_every_argument_name_and_value_is_one_the_pinned_versions_take(model_dir, method, extra):
    t = TrainingPlan.from_env(training_env(model_dir, method, **extra))
    parameters = inspect.signature(transformers.TrainingArguments).parameters
    kwargs = current_names(transformers.TrainingArguments, training_arguments_kwargs(t))
    assert set(kwargs) <= set(parameters), set(kwargs) - set(parameters)
    # The pinned transformers' own name for checkpointing (the old one warns until v6).
    assert "activation_checkpointing" in kwargs
    assert kwargs["optim"] in {o.value for o in transformers.training_args.OptimizerNames}
    for option in kwargs.get("fsdp", "").split():
        assert option in {o.value for o in transformers.trainer_utils.FSDPOption}
    if method != "full":
        config = lora_config(t)
        assert isinstance(config, peft.LoraConfig)
        assert set(lora_kwargs(t)) <= set(inspect.signature(peft.LoraConfig).parameters)
        assert (config.r, config.lora_alpha, config.lora_dropout) == (4, 8, 0.05)
        assert config.task_type == "CAUSAL_LM"
    if method == "qlora":
        bnb = bits_and_bytes_config(t)
        assert set(bits_and_bytes_kwargs(t)) <= set(
            inspect.signature(transformers.BitsAndBytesConfig).parameters
        )
        assert (bnb.load_in_4bit, bnb.bnb_4bit_quant_type) == (True, "nf4")
        assert bnb.bnb_4bit_use_double_quant is True
        assert bnb.bnb_4bit_compute_dtype == torch.bfloat16


def test_a_misspelt_argument_is_refused_by_the_real_class():
    with pytest.raises(TypeError, match="TrainingArguments does not take per_device_batch"):
        checked(transformers.TrainingArguments, {"per_device_batch": 2})


def run_trainer(monkeypatch, tmp_path, env, argv):
    """The example trainer's main() with `env` and a termination log in `tmp_path`; the
    report it wrote."""
    data = tmp_path / "train.jsonl"
    words = [" ".join(f"w{(i * 7 + j) % 120}" for j in range(24)) for i in range(16)]
    data.write_text("".join(json.dumps({"text": w}) + "\n" for w in words))
    log = tmp_path / "termination-log"
    for key, value in (env | {"VRAMFIT_TERMINATION_LOG": str(log)}).items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(str(TRAINER))
    sys.modules.pop("trainer", None)
    import trainer

    trainer.main(["--data", str(data), "--max-steps", "3", "--cpu", *argv])
    return json.loads(log.read_text().removeprefix(PREFIX))


@pytest.mark.parametrize("method", ["lora", "full"])
def test_the_example_trainer_fine_tunes_a_tiny_model_with_the_planned_arguments(
    model_dir, monkeypatch, tmp_path, method
):
    out = tmp_path / "out"
    env = training_env(model_dir, method, VRAMFIT_OUTPUT_DIR=str(out))
    report = run_trainer(monkeypatch, tmp_path, env, [])
    assert report["kind"] == "TrainingResult"
    assert report["steps"] == 3
    # 3 steps × 2 micro-batches of 2 sequences of 24 tokens (the word-level tokenizer adds
    # no special token).
    assert report["tokens"] == 3 * 2 * 2 * 24
    assert math.isfinite(report["finalLoss"]) and report["finalLoss"] > 0
    assert report["tokensPerSecond"] > 0
    saved = {p.name for p in out.iterdir()}
    if method == "lora":
        assert "adapter_config.json" in saved, saved
        assert json.loads((out / "adapter_config.json").read_text())["r"] == 4
        # The adapter PEFT saved, as the TrainingResult reports it for a served job.
        adapter = report["adapter"]
        assert adapter["files"] == ["adapter_config.json", "adapter_model.safetensors"]
        assert adapter["rank"] == 4 and adapter["alpha"] == 8.0
        # all-linear, as PEFT resolved it, by the modules' names.
        assert adapter["targetModules"] == [
            "down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"
        ]
        assert adapter["baseModel"] == str(model_dir)
        assert adapter["bytes"] == (out / "adapter_model.safetensors").stat().st_size
    else:
        assert "config.json" in saved, saved
        assert "adapter" not in report


def test_the_training_arguments_build_as_planned_with_cpu_overrides(model_dir, recwarn):
    t = TrainingPlan.from_env(training_env(model_dir, "lora"))
    args = training_arguments(t, use_cpu=True, bf16=False, tf32=False, output_dir="x")
    assert not [w for w in recwarn if "deprecated" in str(w.message)], [str(w.message) for w in recwarn]
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (2, 2)
    assert args.activation_checkpointing is True
    assert args.activation_checkpointing_kwargs == {"use_reentrant": False}
    assert args.optim == transformers.training_args.OptimizerNames.ADAMW_TORCH


def test_a_nan_loss_writes_the_loss_check_and_stops(model_dir, tmp_path):
    t = TrainingPlan.from_env(training_env(model_dir, "lora"))
    args = training_arguments(t, use_cpu=True, tf32=False, output_dir=str(tmp_path))
    log = tmp_path / "termination-log"
    watch = loss_watch({"VRAMFIT_TERMINATION_LOG": str(log)}, exit_on_divergence=False)
    state = transformers.TrainerState(global_step=12)
    control = transformers.TrainerControl()
    watch.on_log(args, state, control, logs={"loss": 2.5})
    assert watch.last_loss == 2.5
    with pytest.raises(LossDiverged):
        watch.on_log(args, state, control, logs={"loss": float("nan")})
    report = json.loads(log.read_text().removeprefix(PREFIX))
    assert report == {
        "kind": "LossCheckFailed",
        "check": "non-finite-loss",
        "loss": "nan",
        "step": 12,
        "dtype": "bfloat16",
    }
    watch = loss_watch({"VRAMFIT_TERMINATION_LOG": str(log)})
    with pytest.raises(SystemExit) as stopped:
        watch.on_log(args, state, control, logs={"loss": float("inf")})
    assert stopped.value.code == 3
