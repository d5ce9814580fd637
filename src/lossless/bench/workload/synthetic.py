"""Token-exact synthetic requests: prompts of exactly N tokens as the server counts them, and outputs of
a chosen length where the server can be made to generate through end-of-sequence.

``--input-tokens`` and ``--output-tokens`` take a fixed number (``1000``) or a distribution
(``normal:1000,200``, ``uniform:100,2000``), drawn per request from the run's seed. A prompt is words
of plain English drawn at random, tokenized with the model's tokenizer and cut and mended until it is
exactly the content length asked for; the chat template's own tokens (measured once against the first
endpoint: ``usage.prompt_tokens`` of a known message) are taken off, so that what the server counts is
the number asked. Each prompt opens with its request number and a random id, so no two share a prefix a
cache could serve. ``aa`` is the Artificial Analysis-style preset: 100, 1k, 10k and 100k input tokens in
turn.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from lossless.bench.workload.prompts import WORDS
from lossless.client.prompt import Prompt
from lossless.errors import UsageError

PRESETS = {"aa": (100, 1_000, 10_000, 100_000)}
MOST = 1_000_000  # tokens in one prompt or answer


@dataclass(frozen=True)
class Lengths:
    """A number of tokens per request: fixed, normal(mean, sd) or uniform(low, high), rounded, >= 1."""

    kind: str  # "fixed", "normal", "uniform", or a preset's name (its lengths in turn)
    a: float
    b: float = 0.0
    text: str = ""  # as given

    def draw(self, i: int, rng: random.Random) -> int:
        if self.kind in PRESETS:
            return PRESETS[self.kind][i % len(PRESETS[self.kind])]
        value = {
            "fixed": lambda: self.a,
            "normal": lambda: rng.gauss(self.a, self.b),
            "uniform": lambda: rng.uniform(self.a, self.b),
        }[self.kind]()
        return max(1, min(MOST, round(value)))


def parse_lengths(text: str, option: str) -> Lengths:
    """``"1000"``, ``"normal:1000,200"``, ``"uniform:100,2000"`` or ``"aa"``."""
    if text in PRESETS:
        return Lengths(text, 0.0, text=text)
    kind, _, args = text.partition(":") if ":" in text else ("fixed", "", text)
    try:
        values = [float(v) for v in args.split(",")]
    except ValueError:
        values = []
    want = {"fixed": 1, "normal": 2, "uniform": 2}.get(kind)
    if want is None or len(values) != want or not all(0 <= v <= MOST for v in values):
        raise UsageError(f"{option} wants N, normal:MEAN,SD or uniform:LOW,HIGH (tokens), got {text!r}")
    if kind == "uniform" and values[0] > values[1]:
        raise UsageError(f"{option}: uniform:LOW,HIGH wants LOW <= HIGH, got {text!r}")
    if kind != "normal" and values[0] < 1:
        raise UsageError(f"{option} wants at least 1 token, got {text!r}")
    return Lengths(kind, values[0], values[1] if len(values) > 1 else 0.0, text)


@dataclass(frozen=True)
class Synthetic:
    """What a token-exact workload needs; travels to workers inside ``BenchConfig``."""

    input: Lengths | None  # None: a trace's lengths
    output: Lengths | None  # None: the --max-tokens of the run
    tokenizer: str  # a tokenizer.json, GGUF or embedded model's name (``counting.load_token_counter``)
    overhead: int = 0  # tokens the server adds around the content (chat template, BOS)
    force_output: bool = False  # the endpoint honours ignore_eos (probed before the run)
    trace: str | None = None  # a timestamped trace (suite trace:PATH) whose requests and lengths to replay


def synthetic_prompts(spec: Synthetic, rng: random.Random) -> Iterator[Prompt]:
    from lossless.provision.counting import load_token_encoder

    encode, decode = load_token_encoder(spec.tokenizer)
    assert spec.input is not None
    for i in range(1_000_000_000):
        asked = spec.input.draw(i, rng)
        content = max(1, asked - spec.overhead)
        text = exact_text(content, f"Request {i} ({rng.getrandbits(32):08x}).", rng, encode, decode)
        out = spec.output.draw(i, rng) if spec.output is not None else None
        cls = f"in-{_short(asked)}" if spec.input.kind in PRESETS else "synthetic"
        yield Prompt(
            f"tok-{i}",
            cls,
            (("user", text),),
            max_tokens=out,
            input_tokens=asked,
            output_tokens=out,
            force_output=spec.force_output and out is not None,
        )


def exact_text(
    n: int,
    opening: str,
    rng: random.Random,
    encode: Callable[[str], list[int]],
    decode: Callable[[list[int]], str],
) -> str:
    """Text that ``encode`` turns into exactly ``n`` tokens (n >= the opening's own), starting with
    ``opening``: words added or tokens cut, then re-encoded, until the count is right."""
    text = " ".join([opening, *rng.choices(WORDS, k=max(0, int(n / 1.3)))])
    for _ in range(200):
        ids = encode(text)
        if len(ids) == n:
            return text
        if len(ids) > n:  # cut at a token boundary (a cut inside a word may encode otherwise: measured again)
            text = decode(ids[:n])
        else:  # common words are one token each, with their space, in most tokenizers
            text += " " + " ".join(rng.choices(WORDS, k=max(1, (n - len(ids)) // 2)))
    raise UsageError(f"could not build a prompt of exactly {n} tokens with this tokenizer")


def _short(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)
