"""Caption every image in --input into --output (JSON lines), with the plan vramfit made.

The plan comes from the env; the model is loaded with it and checked, a canary caption
runs first, every Nth caption is checked for garbage, and the pod's termination message
says how it ended (docs/workload-contract.md).

    python -m captioner --input /data/images --output /data/captions.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from PIL import Image
from transformers import AutoModelForImageTextToText

from vramfit_workload import (
    OutputSampler,
    Plan,
    fail_on_garbage,
    load_model_and_processor,
    run_canary,
    tile_kwargs,
    write_result,
)

PROMPT = "Describe this image in one or two sentences."
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp"}


def checkpoint(model: str) -> str:
    """The checkpoint in transformers' own format: OpenGVLab publishes InternVL3 for its
    remote code under the plain name and for transformers' InternVL classes as "-hf"."""
    if model.startswith("OpenGVLab/InternVL3-") and not model.endswith("-hf"):
        return model + "-hf"
    return model


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, required=True, help="folder of images")
    parser.add_argument("--output", type=Path, required=True, help="JSON lines to write")
    parser.add_argument("--model", help="checkpoint to load instead of the plan's model")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--check-every", type=int, default=10, help="check every Nth caption")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    plan = Plan.from_env()
    images = sorted(p for p in args.input.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise SystemExit(f"no images in {args.input}")
    model_id = args.model or checkpoint(plan.model)
    model, processor = load_model_and_processor(
        dataclasses.replace(plan, model=model_id), model_cls=AutoModelForImageTextToText
    )

    def caption(image: Path, prompt: str = PROMPT) -> str:
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        text = processor.apply_chat_template(messages, add_generation_prompt=True)
        with Image.open(image) as picture:
            inputs = processor(
                text=text,
                images=picture.convert("RGB"),
                return_tensors="pt",
                **tile_kwargs(plan, "max_patches"),  # transformers' InternVL image processor
            ).to(model.device, dtype=model.dtype)
        output = model.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=False)
        new_tokens = output[0, inputs["input_ids"].shape[1] :]
        return processor.decode(new_tokens, skip_special_tokens=True).strip()

    # The canary: the first image, before a night of work.
    fail_on_garbage(run_canary(lambda prompt: caption(images[0], prompt), prompt=PROMPT), plan)
    sampler = OutputSampler(every=args.check_every)
    start = time.monotonic()
    with args.output.open("w", encoding="utf-8") as out:
        for image in images:
            text = caption(image)
            out.write(json.dumps({"image": image.name, "caption": text}) + "\n")
            fail_on_garbage(sampler.add(text), plan)
    write_result(items=len(images), seconds=time.monotonic() - start)


if __name__ == "__main__":
    main()
