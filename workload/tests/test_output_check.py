"""The output check on real garbage and real text."""

import pytest

from vramfit_workload import OutputSampler, check_outputs, run_canary
from vramfit_workload.output_check import pattern_ratios, verdict

CAPTIONS = [
    "A brown dog runs across a sandy beach with a red ball in its mouth.",
    "Two people sit on a wooden bench in a park, looking at a small pond with ducks.",
    "A plate of spaghetti with tomato sauce and basil leaves on a white table.",
    "The photo shows a busy city street at night, with cars, buses and bright shop signs.",
    "An aerial view of a green valley with a river winding between low hills.",
    "A cyclist in a yellow jacket waits at a traffic light next to a bakery.",
    "Three children build a sandcastle while waves roll onto the shore behind them.",
    "A chart comparing sales in 2023 and 2024; revenue grew from 100000 to 125000 dollars.",
]
EXCITED = (
    "What a view! The sun sets over the harbour, the boats are coming home and the "
    "whole sky turns orange and pink. Lovely!"
)


def test_real_captions_are_good():
    result = check_outputs(CAPTIONS)
    assert result.verdict == "good", result
    assert result.samples == len(CAPTIONS)


def test_a_couple_of_legitimate_exclamation_marks_are_good():
    result = check_outputs([EXCITED])
    assert result.verdict == "good", result
    assert result.pattern == "exclamation"
    assert 0 < result.ratio < 0.05


def test_text_with_no_pattern_at_all_scores_zero():
    result = check_outputs(["A cat."])
    assert (result.ratio, result.pattern, result.verdict) == (0.0, "none", "good")


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("!!!!!!!!", "exclamation"),
        ("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!", "exclamation"),
        ("The image shows !!!!!!!!!!!!!!!!!!!!!!!!", "exclamation"),
        ("the the the the the the the the the the the the", "repeated-token"),
        ("A cat a cat a cat a cat a cat a cat a cat", "repeated-token"),
        ("\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd", "replacement-char"),
        ("Caption: \ufffd\ufffd\ufffd \ufffd\ufffd \ufffd\ufffd\ufffd", "replacement-char"),
        ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "repeated-char"),
        ("........................................", "repeated-char"),
        ("", "empty"),
        ("   \n\t ", "empty"),
    ],
)
def test_real_garbage_is_garbage(text, pattern):
    result = check_outputs([text])
    assert (result.pattern, result.verdict) == (pattern, "garbage"), result
    assert result.ratio > 0.30


def test_exclamation_ratio_is_the_share_of_visible_characters():
    assert pattern_ratios("ab!!")["exclamation"] == 0.5
    assert pattern_ratios("a b ! !")["exclamation"] == 0.5


def test_a_word_said_twice_or_a_short_ellipsis_is_no_loop():
    ratios = pattern_ratios("It was very very good... and 100000 people came.")
    assert ratios["repeated-token"] == 0
    assert ratios["repeated-char"] == 0


@pytest.mark.parametrize(
    "ratio, expected",
    [(0.0, "good"), (0.049, "good"), (0.05, "warning"), (0.30, "warning"), (0.301, "garbage")],
)
def test_verdict_thresholds(ratio, expected):
    assert verdict(ratio) == expected


def test_one_garbage_answer_in_eight_is_a_warning():
    result = check_outputs(CAPTIONS[:7] + ["!!!!!!!!"])
    assert (result.pattern, result.verdict) == ("exclamation", "warning")
    assert result.ratio == pytest.approx(1 / 8)


def test_three_garbage_answers_in_eight_are_garbage_whatever_their_patterns():
    result = check_outputs(CAPTIONS[:5] + ["!!!!!!!!", "", "!!!!"])
    assert (result.pattern, result.verdict) == ("exclamation", "garbage")
    assert result.ratio == pytest.approx(3 / 8, abs=0.01)


def test_an_empty_sample_is_an_error():
    with pytest.raises(ValueError):
        check_outputs([])


def test_the_canary_checks_one_answer_to_its_prompt():
    prompts = []

    def generate(prompt):
        prompts.append(prompt)
        return "!!!!!!!!"

    result = run_canary(generate, prompt="Say hello.", environ={})
    assert prompts == ["Say hello."]
    assert (result.verdict, result.samples) == ("garbage", 1)


def test_the_canary_passes_a_real_answer():
    answer = "The park is full of families having picnics under the trees."
    assert run_canary(lambda _: answer, environ={}).verdict == "good"


def test_the_canary_is_off_by_env_or_parameter():
    def generate(prompt):
        raise AssertionError("the canary ran")

    assert run_canary(generate, environ={"VRAMFIT_CANARY": "off"}) is None
    assert run_canary(generate, enabled=False, environ={}) is None
    assert run_canary(lambda _: "ok fine", enabled=True, environ={"VRAMFIT_CANARY": "off"})


def test_the_sampler_checks_every_nth_output_once_it_has_enough():
    sampler = OutputSampler(every=3, window=4, min_samples=2)
    results = [sampler.add(caption) for caption in CAPTIONS[:6]]
    # Outputs 1 and 4 are sampled; the second sample is the first with a result.
    assert [r is not None for r in results] == [False, False, False, True, False, False]
    assert results[3].samples == 2 and results[3].verdict == "good"


def test_the_sampler_finds_garbage_in_real_outputs():
    sampler = OutputSampler(every=2, window=4, min_samples=4)
    results = [sampler.add("!!!!!!!!") for _ in range(8)]
    assert results[-2].verdict == "garbage"
    assert results[-2].samples == 4


def test_the_sampler_forgets_what_left_its_window():
    sampler = OutputSampler(every=1, window=4, min_samples=4)
    for _ in range(4):
        sampler.add("")
    results = [sampler.add(caption) for caption in CAPTIONS[:4]]
    assert [r.verdict for r in results] == ["garbage", "garbage", "warning", "good"]
