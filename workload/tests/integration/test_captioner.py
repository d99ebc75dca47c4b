"""The example captioner end to end on CPU: a tiny randomly initialised InternVL (the
transformers classes the captioner loads), built here with its processor, captions
generated images into JSON lines and the termination message says how it ended."""

import functools
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("torchvision")  # transformers' InternVL processor needs it
Image = pytest.importorskip("PIL.Image")

import vramfit_workload  # noqa: E402

pytestmark = pytest.mark.integration

CAPTIONER = Path(__file__).parents[2] / "examples" / "captioner"
SPECIAL = ["<unk>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>", "<video>"]
WORDS = SPECIAL + ["user", "assistant"] + [f"w{i}" for i in range(55)]
CHAT = (
    "{% for m in messages %}<|im_start|> {{ m['role'] }} {% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<IMG_CONTEXT> {% else %}{{ c['text'] }} {% endif %}"
    "{% endfor %}<|im_end|> {% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
)


def save_tiny_internvl(path: Path, answer_unk_only: bool) -> None:
    """Save an InternVL with 28-pixel tiles, 1 token per tile and a word-level tokenizer.
    `answer_unk_only` zeroes the output layer, so every answer is <unk>: empty once the
    special tokens are skipped, a model that answers garbage for certain."""
    vocab = {word: i for i, word in enumerate(WORDS)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<unk>",
        eos_token="<|im_end|>",
        extra_special_tokens={
            "start_image_token": "<img>",
            "end_image_token": "</img>",
            "context_image_token": "<IMG_CONTEXT>",
            "video_token": "<video>",
        },
    )
    transformers.InternVLProcessor(
        image_processor=transformers.GotOcr2ImageProcessor(size={"height": 28, "width": 28}),
        video_processor=transformers.InternVLVideoProcessor(),
        tokenizer=tokenizer,
        image_seq_length=1,
        chat_template=CHAT,
    ).save_pretrained(path)
    config = transformers.InternVLConfig(
        vision_config=dict(
            hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, image_size=28, patch_size=14,
        ),
        text_config=dict(
            model_type="qwen2", vocab_size=len(WORDS), hidden_size=16, intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            eos_token_id=vocab["<|im_end|>"], tie_word_embeddings=False,
        ),
        image_token_id=vocab["<IMG_CONTEXT>"],
        image_seq_length=1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = transformers.InternVLForConditionalGeneration(config)
    if answer_unk_only:
        torch.nn.init.zeros_(model.lm_head.weight)
    model.save_pretrained(path)


@pytest.fixture
def run_captioner(tmp_path, monkeypatch):
    """Run the captioner's main() over 3 images with a float16 plan for the tiny model
    (bfloat16 on some CPUs dies of an illegal instruction in PyTorch's CPU kernels)."""
    monkeypatch.syspath_prepend(str(CAPTIONER))
    import captioner

    # No GPU here: the planned device_map and max_memory are for GPUs.
    load = functools.partial(
        vramfit_workload.load_model_and_processor, device_map=None, max_memory=None
    )
    monkeypatch.setattr(captioner, "load_model_and_processor", load)
    images = tmp_path / "images"
    images.mkdir()
    for i, size in enumerate([(64, 40), (28, 28), (40, 90)]):
        Image.new("RGB", size, (40 * i, 200, 30)).save(images / f"{i}.png")

    def run(answer_unk_only: bool, **env: str) -> tuple[Path, Path]:
        model = tmp_path / "model"
        save_tiny_internvl(model, answer_unk_only)
        termination, output = tmp_path / "termination-log", tmp_path / "captions.jsonl"
        plan_env = {
            "VRAMFIT_MODEL": str(model),
            "VRAMFIT_NODE_CLASS": "cpu-test",
            "VRAMFIT_GPU_COUNT": "1",
            "VRAMFIT_DTYPE": "float16",
            "VRAMFIT_QUANTIZATION": "none",
            "VRAMFIT_FLASH_ATTENTION": "false",
            "VRAMFIT_MEMORY_FRACTION": "0.90",
            "VRAMFIT_USABLE_MEMORY_MIB": "1024",
            "VRAMFIT_CONTEXT_LENGTH": "256",
            "VRAMFIT_MAX_TILES": "2",
            "VRAMFIT_TERMINATION_LOG": str(termination),
        }
        for key, value in (plan_env | env).items():
            monkeypatch.setenv(key, value)
        captioner.main(["--input", str(images), "--output", str(output), "--max-new-tokens", "4"])
        return termination, output

    return run


def message(path: Path) -> dict:
    line = path.read_text()
    assert line.startswith("vramfit.io/v1 ")
    return json.loads(line.removeprefix("vramfit.io/v1 "))


def test_the_canary_stops_a_model_that_answers_garbage(run_captioner, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        run_captioner(answer_unk_only=True)
    assert exit_.value.code == 3
    assert message(tmp_path / "termination-log") == {
        "kind": "OutputCheckFailed",
        "check": "degenerate-output",
        "pattern": "empty",
        "ratio": 1.0,
        "threshold": 0.3,
        "dtype": "float16",
        "samples": 1,
    }
    assert not (tmp_path / "captions.jsonl").exists()


def test_captions_every_image_and_reports_the_result(run_captioner):
    termination, output = run_captioner(answer_unk_only=False, VRAMFIT_CANARY="off")
    captions = [json.loads(line) for line in output.read_text().splitlines()]
    assert [c["image"] for c in captions] == ["0.png", "1.png", "2.png"]
    result = message(termination)
    assert (result["kind"], result["items"], result["peakGpuMemoryMib"]) == ("Result", 3, [])
    assert result["seconds"] > 0
