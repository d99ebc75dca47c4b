"""Degenerate-output detection: the failure a wrong dtype causes is not a crash.

bfloat16 emulated on a GPU below compute capability 8.0 (a V100) loads and runs, then
answers "!!!!!!!!". The same kind of garbage comes from a wrong image or wrong user code:
one character or token over and over, U+FFFD replacement characters, empty answers. Each
text is scored by its worst pattern; a sample's score is the mean over its texts, so one odd
answer in eight is a warning, not a failure.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

GOOD_BELOW = 0.05
GARBAGE_ABOVE = 0.30
# In order of preference when two patterns score the same ("!!!!" is also one repeated
# character; calling it an exclamation run names the known cause).
PATTERNS = ("empty", "exclamation", "replacement-char", "repeated-char", "repeated-token")
# A run of this many identical characters ("aaaa", "....") is degenerate; "..." is not.
CHAR_RUN = 4
# Token loops of up to this many tokens ("the the", "a cat a cat") are looked for.
MAX_TOKEN_PERIOD = 4
DEFAULT_CANARY_PROMPT = "Describe a sunny afternoon in a city park in two sentences."


@dataclass(frozen=True)
class CheckResult:
    """The worst pattern in a sample: its ratio (0 to 1) and the verdict it gives."""

    ratio: float
    pattern: str
    verdict: str
    samples: int


def verdict(ratio: float) -> str:
    """good below 5%, garbage above 30%, a warning in between."""
    if ratio < GOOD_BELOW:
        return "good"
    if ratio > GARBAGE_ABOVE:
        return "garbage"
    return "warning"


def pattern_ratios(text: str) -> dict[str, float]:
    """Each pattern's share of one text: of its visible characters, or of its tokens."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return {pattern: float(pattern == "empty") for pattern in PATTERNS}
    return {
        "empty": 0.0,
        "exclamation": chars.count("!") / len(chars),
        "replacement-char": chars.count("\ufffd") / len(chars),
        "repeated-char": _in_char_runs(chars) / len(chars),
        "repeated-token": _repeated_tokens(text.lower().split()),
    }


def _in_char_runs(chars: list[str]) -> int:
    """How many characters stand in runs of CHAR_RUN or more of the same one (digits
    aside: "100000" is a number, not a loop)."""
    count, run = 0, 1
    for i in range(1, len(chars) + 1):
        if i < len(chars) and chars[i] == chars[i - 1]:
            run += 1
            continue
        if run >= CHAR_RUN and not chars[i - 1].isdigit():
            count += run
        run = 1
    return count


def _repeated_tokens(tokens: list[str]) -> float:
    """The share of tokens inside a loop: a unit of 1 to MAX_TOKEN_PERIOD tokens said at
    least three times in a row ("the the the", "a cat a cat a cat"); the longest-covering
    period counts. "very very good" is no loop."""
    best = 0
    for period in range(1, MAX_TOKEN_PERIOD + 1):
        covered, stretch = 0, 0
        for i in range(period, len(tokens) + 1):
            if i < len(tokens) and tokens[i] == tokens[i - period]:
                stretch += 1
                continue
            if stretch >= 2 * period:
                covered += stretch
            stretch = 0
        best = max(best, covered)
    return best / len(tokens) if tokens else 0.0


def check_outputs(texts: Iterable[str]) -> CheckResult:
    """Score a sample of generated texts: each text counts with its worst pattern, the
    sample's ratio is their mean, and its pattern the one that adds most to it."""
    worst = [max(pattern_ratios(text).items(), key=lambda item: item[1]) for text in texts]
    if not worst:
        raise ValueError("no outputs to check")
    ratio = sum(r for _, r in worst) / len(worst)
    totals = {p: sum(r for q, r in worst if q == p) for p in PATTERNS}
    pattern = max(PATTERNS, key=totals.__getitem__)  # the first of equal ones
    return CheckResult(
        ratio=ratio,
        pattern=pattern if ratio > 0 else "none",
        verdict=verdict(ratio),
        samples=len(worst),
    )


def canary_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """The canary runs unless VRAMFIT_CANARY=off."""
    return environ.get("VRAMFIT_CANARY", "on").strip().lower() != "off"


def run_canary(
    generate_fn: Callable[[str], str],
    prompt: str = DEFAULT_CANARY_PROMPT,
    enabled: bool | None = None,
    environ: Mapping[str, str] = os.environ,
) -> CheckResult | None:
    """Generate one answer before the real work and check it, so a broken setup fails in
    seconds instead of after a night of garbage. None when turned off (`enabled=False`, or
    VRAMFIT_CANARY=off when `enabled` is not given)."""
    if not (canary_enabled(environ) if enabled is None else enabled):
        return None
    return check_outputs([generate_fn(prompt)])


class OutputSampler:
    """Checks every `every`-th real output, over the last `window` sampled ones.

    `add` returns a result once `min_samples` outputs are sampled (one odd answer alone
    decides nothing), and None for outputs it does not sample.
    """

    def __init__(self, every: int = 10, window: int = 8, min_samples: int = 4) -> None:
        if every < 1 or window < 1 or not 1 <= min_samples <= window:
            raise ValueError("every >= 1, window >= 1 and 1 <= min_samples <= window")
        self.every = every
        self.min_samples = min_samples
        self._seen = 0
        self._sampled: deque[str] = deque(maxlen=window)

    def add(self, text: str) -> CheckResult | None:
        """Offer one output; the first, then every `every`-th, is sampled."""
        self._seen += 1
        if (self._seen - 1) % self.every:
            return None
        self._sampled.append(text)
        if len(self._sampled) < self.min_samples:
            return None
        return check_outputs(self._sampled)
