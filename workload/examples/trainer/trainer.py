"""Fine-tune the plan's model on JSON lines of text, with the training plan vramfit made.

The plan comes from the env (`TrainingPlan.from_env`): QLoRA, LoRA or a full fine-tune, the
micro-batch, accumulation, checkpointing, optimizer, dtype and TF32 of the class it landed on.
The loss is watched for NaN or infinity, and the pod's termination message says how it ended
(docs/workload-contract.md): `LossCheckFailed`, a CUDA out-of-memory line, or `TrainingResult`,
which for LoRA and QLoRA reports the adapter saved at the root of the output folder.

    python -m trainer                       # data: $VRAMFIT_DATA_DIR/train.jsonl
    torchrun --nproc-per-node=gpu -m trainer  # plans on more than one GPU (DDP or FSDP)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer

from vramfit_workload import (
    AdapterReport,
    TrainingPlan,
    adapter_report,
    loss_watch,
    lora_config,
    training_arguments,
    write_training_result,
)
from vramfit_workload.termination import write
from vramfit_workload.training import from_pretrained_kwargs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="JSON lines with a \"text\" field (default: $VRAMFIT_DATA_DIR/train.jsonl)")
    parser.add_argument("--model", help="checkpoint to train instead of the plan's model")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--max-steps", type=int, default=-1, help="stop after this many optimizer steps")
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--cpu", action="store_true", help="no GPU: no mixed precision, no TF32 (tests)")
    return parser.parse_args(argv)


def load_texts(path: Path) -> list[str]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line in lines if line.strip()]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    plan = TrainingPlan.from_env()
    data = args.data or Path(plan.data_dir or ".") / "train.jsonl"
    model_id = args.model or plan.plan.model
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))

    tokenizer = AutoTokenizer.from_pretrained(model_id)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    texts = load_texts(data)
    dataset = [
        tokenizer(text, truncation=True, max_length=plan.sequence_length) for text in texts
    ]

    kwargs = from_pretrained_kwargs(plan, local_rank)
    if args.cpu:
        kwargs.pop("device_map", None)
    model = AutoModelForCausalLM.from_pretrained(model_id, **kwargs)
    if plan.method == "qlora":
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=plan.gradient_checkpointing
        )
    config = lora_config(plan)
    if config is not None:
        from peft import get_peft_model

        if plan.gradient_checkpointing:
            model.enable_input_require_grads()  # checkpointed blocks need an input with grad
        model = get_peft_model(model, config)

    overrides: dict = {
        "num_train_epochs": args.epochs,
        "max_steps": args.max_steps,
        "learning_rate": args.learning_rate,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "include_num_input_tokens_seen": True,
    }
    if args.cpu:
        overrides |= {"use_cpu": True, "bf16": False, "fp16": False, "tf32": False}
    watch = loss_watch()
    trainer = Trainer(
        model=model,
        args=training_arguments(plan, **overrides),
        train_dataset=dataset,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        callbacks=[watch],
    )
    start = time.monotonic()
    trainer.train()
    seconds = time.monotonic() - start
    trainer.save_model(trainer.args.output_dir)
    if trainer.is_world_process_zero():
        write_training_result(
            steps=trainer.state.global_step,
            tokens=int(trainer.state.num_input_tokens_seen),
            seconds=seconds,
            final_loss=watch.last_loss,
            adapter=reported_adapter(plan, trainer.args.output_dir),
        )


def reported_adapter(plan: TrainingPlan, output_dir: str) -> AdapterReport | None:
    """The adapter a LoRA or QLoRA run saved (PEFT's adapter_config.json and
    adapter_model.safetensors at the root of the output folder, plus a GGUF conversion if one
    is there), for the TrainingResult line; None for a full fine-tune. A report that cannot
    be made is a warning, not a failure: the trained weights are saved, and a served job that
    names this run as its adapter's source says the adapter was not reported."""
    if plan.method == "full":
        return None
    try:
        return adapter_report(output_dir)
    except (OSError, ValueError) as error:
        print(f"vramfit: no adapter report: {error}", file=sys.stderr)
        return None


if __name__ == "__main__":
    try:
        main()
    except BaseException as error:  # torch.OutOfMemoryError: "CUDA out of memory. Tried to …"
        if not isinstance(error, SystemExit):
            write(f"{type(error).__name__}: {error}"[:2048])
        raise
