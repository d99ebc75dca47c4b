"""The real transformers and torch on CPU: a tiny randomly initialised Llama (conftest.py),
saved and loaded back through the package with the planned arguments. No download: the
model and its tokenizer are built in code. Run by workload/scripts/integration.sh."""

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from vramfit_workload import (  # noqa: E402
    Plan,
    PlanMismatch,
    from_pretrained_kwargs,
    load_model_and_processor,
    run_canary,
    write_result,
)

pytestmark = pytest.mark.integration

def plan_for(path, dtype, **env):
    return Plan.from_env(
        {
            "VRAMFIT_MODEL": str(path),
            "VRAMFIT_NODE_CLASS": "cpu-test",
            "VRAMFIT_GPU_COUNT": "1",
            "VRAMFIT_DTYPE": dtype,
            "VRAMFIT_QUANTIZATION": "none",
            "VRAMFIT_FLASH_ATTENTION": "false",
            "VRAMFIT_MEMORY_FRACTION": "0.90",
            "VRAMFIT_USABLE_MEMORY_MIB": "1024",
            "VRAMFIT_CONTEXT_LENGTH": "64",
        }
        | env
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_loads_in_the_planned_dtype_with_sdpa(model_dir, dtype):
    plan = plan_for(model_dir, dtype)
    model, processor = load_model_and_processor(
        plan, model_cls=transformers.AutoModelForCausalLM, device_map=None, max_memory=None
    )
    assert model.dtype == getattr(torch, dtype)
    assert all(p.dtype == getattr(torch, dtype) for p in model.parameters())
    assert model.config._attn_implementation == "sdpa"
    assert processor("w1 w2 w3")["input_ids"] == [3 + 1, 3 + 2, 3 + 3]


def test_a_model_loaded_in_another_dtype_than_planned_is_refused(model_dir):
    plan = plan_for(model_dir, "float16")
    with pytest.raises(PlanMismatch, match="loaded in bfloat16, the plan says float16"):
        load_model_and_processor(
            plan,
            model_cls=transformers.AutoModelForCausalLM,
            device_map=None,
            max_memory=None,
            dtype=torch.bfloat16,
        )


def test_the_real_quantization_configs(model_dir):
    nf4 = from_pretrained_kwargs(plan_for(model_dir, "float16", VRAMFIT_QUANTIZATION="nf4"))
    config = nf4["quantization_config"]
    assert isinstance(config, transformers.BitsAndBytesConfig)
    assert (config.load_in_4bit, config.bnb_4bit_quant_type) == (True, "nf4")
    assert config.bnb_4bit_compute_dtype == torch.float16
    assert nf4["dtype"] == torch.float16
    int8 = from_pretrained_kwargs(plan_for(model_dir, "bfloat16", VRAMFIT_QUANTIZATION="int8"))
    assert int8["quantization_config"].load_in_8bit is True
    assert "quantization_config" not in from_pretrained_kwargs(plan_for(model_dir, "bfloat16"))


def test_the_canary_runs_a_real_generation(model_dir):
    plan = plan_for(model_dir, "bfloat16")
    model, tokenizer = load_model_and_processor(
        plan, model_cls=transformers.AutoModelForCausalLM, device_map=None, max_memory=None
    )

    def generate(prompt):
        inputs = tokenizer(prompt, return_tensors="pt", return_token_type_ids=False)
        output = model.generate(**inputs, max_new_tokens=8, do_sample=False)
        return tokenizer.decode(output[0, inputs["input_ids"].shape[1] :])

    result = run_canary(generate, prompt="w5 w6 w7", enabled=True)
    assert result.samples == 1
    assert 0 <= result.ratio <= 1


def test_the_result_message_measures_the_visible_gpus(tmp_path):
    path = tmp_path / "termination-log"
    write_result(4, 2.0, environ={"VRAMFIT_TERMINATION_LOG": str(path)})
    message = json.loads(path.read_text().removeprefix("vramfit.io/v1 "))
    assert len(message["peakGpuMemoryMib"]) == torch.cuda.device_count()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_with_every_planned_argument(model_dir):
    """device_map="auto" within max_memory, and the memory fraction applied."""
    plan = plan_for(model_dir, "bfloat16", VRAMFIT_MEMORY_FRACTION="0.50")
    model, _ = load_model_and_processor(plan, model_cls=transformers.AutoModelForCausalLM)
    assert set(model.hf_device_map.values()) == {0}
    assert next(model.parameters()).device.type == "cuda"
