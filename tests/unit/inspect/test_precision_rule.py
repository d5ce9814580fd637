"""Precision's distance and word (``lossless.inspect.precision``) on made-up scores: the distance is the
mean absolute log-probability difference over tokens both scored, texts tokenized differently are
skipped, the CI comes from resampling texts, and each word's rule holds at its edges."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from lossless.client.endpoints import Endpoint
from lossless.inspect import precision as p
from lossless.inspect.precision import Scores, Text


def scores(values: list[list[float | None]], tokens: list[list[str]] | None = None) -> Scores:
    tokens = tokens or [[f"t{i}" for i in range(len(v))] for v in values]
    return Scores("echo", tuple(Text(tuple(t), tuple(v)) for t, v in zip(tokens, values, strict=True)))


def shifted(base: list[list[float | None]], by: float, seed: int = 0) -> list[list[float | None]]:
    """``base`` with every score moved by about ``by`` (up or down, at random)."""
    rng = random.Random(seed)
    return [
        [None if v is None else v + rng.choice((-1, 1)) * by * rng.uniform(0.5, 1.5) for v in t] for t in base
    ]


BASE: list[list[float | None]] = [
    [None, -1.0, -2.5, -0.1, -3.0],
    [None, -0.5, -4.0, -1.2],
    [None, -2.0, -0.3],
]


def test_distance_is_the_mean_absolute_difference_over_tokens_both_scored() -> None:
    a = scores([[None, -1.0, -2.0], [None, -1.0, None]])
    b = scores([[-5.0, -1.5, -2.0], [None, -2.0, -3.0]])
    d = p.distance(a, b)
    assert d is not None
    assert d.distance == pytest.approx((0.5 + 0.0 + 1.0) / 3) and d.tokens == 3 and d.texts == 2
    assert d.ci[0] <= d.distance <= d.ci[1]


def test_a_text_tokenized_differently_is_skipped() -> None:
    a = scores([[None, -1.0], [None, -1.0]], [["a", "b"], ["c", "d"]])
    b = scores([[None, -2.0], [None, -1.0]], [["a", "b"], ["c", "dd"]])
    d = p.distance(a, b)
    assert d is not None and d.texts == 1 and d.distance == pytest.approx(1.0)
    assert p.distance(a, scores([[None, -1.0]], [["x", "y"]])) is None


def test_the_ci_is_over_texts() -> None:
    # one text far off, the other two equal: resampling texts spans 0 .. the far text's difference
    a = scores([[None, -1.0, -1.0], [None, -1.0, -1.0], [None, -1.0, -1.0]])
    b = scores([[None, -1.0, -1.0], [None, -1.0, -1.0], [None, -2.0, -2.0]])
    d = p.distance(a, b)
    assert d is not None and d.ci[0] == 0.0 and d.ci[1] == pytest.approx(1.0)


def judge(
    candidate: list[list[float | None]], refs: dict[str, list[list[float | None]]], **kw: Any
) -> p.Precision:
    again = kw.pop("again", candidate)
    return p.judge(scores(candidate), scores(again), {k: scores(v) for k, v in refs.items()})


def test_placed_at_the_reference_within_the_band_and_clearly_nearer() -> None:
    # as measured: float32 against bfloat16 ~0.04 nats/token, against a 2-bit copy ~0.6
    got = judge(BASE, {"float32": BASE, "bfloat16": shifted(BASE, 0.04), "q2_k": shifted(BASE, 0.6)})
    assert got.verdict == "evident" and got.nearest == "float32" and got.bit_identical is True
    assert got.floor == 0.0 and [d["reference"] for d in got.distances] == ["float32", "bfloat16", "q2_k"]
    assert got.as_dict()["distances"][0] == {"reference": "float32", "distance": 0.0, "ci": [0.0, 0.0]}
    assert got.texts == 3 and got.tokens == 9 and got.method == "echo"


def test_a_noisy_candidate_is_placed_by_its_floor() -> None:
    # repeats differ by ~0.03 (a batch-variant server): the band widens to 3 floors, bfloat16 is in it
    candidate = shifted(BASE, 0.05, seed=1)
    got = judge(
        candidate, {"float32": shifted(BASE, 0.5), "bfloat16": BASE}, again=shifted(candidate, 0.03, 2)
    )
    assert got.verdict == "evident" and got.nearest == "bfloat16" and got.bit_identical is False
    assert got.floor is not None and got.floor > p.BAND


def test_no_reference_near_is_not_evident_and_names_the_nearest() -> None:
    got = judge(BASE, {"float32": shifted(BASE, 0.1), "q2_k": shifted(BASE, 0.5)})
    assert got.verdict == "not evident" and got.nearest == "float32" and "no reference near" in got.note


def test_two_references_equally_near_is_inconclusive() -> None:
    got = judge(BASE, {"a": BASE, "b": shifted(BASE, p.BAND / 2)})
    assert got.verdict == "inconclusive" and "equally near" in got.note
    # the runner-up's CI reaching into the band: not clearly farther
    near_and_far = [t[:] for t in BASE]
    near_and_far[0] = shifted([BASE[0]], 0.3)[0]  # one text far off, the others as the candidate
    got = judge(BASE, {"a": BASE, "b": near_and_far})
    assert got.distances[1]["ci"][0] <= p.BAND and got.verdict == "inconclusive"


def test_cannot_score_or_too_few_texts_is_inconclusive() -> None:
    none = Scores(None, why="no echo with logprobs on /completions")
    got = p.judge(none, none, {"float32": scores(BASE)})
    assert got.verdict == "inconclusive" and "cannot score" in got.note and got.method is None
    one = scores(BASE[:1])
    assert p.judge(one, one, {"float32": scores(BASE)}).verdict == "inconclusive"
    unscored = p.judge(scores(BASE), scores(BASE), {"float32": none})
    assert unscored.verdict == "inconclusive" and "float32" in unscored.note


class Echoing:
    """A caller whose echo files each position's alternatives one token early, as llama-cpp-python's."""

    def __init__(self, tokens: list[str], alts: list[dict[str, float]]) -> None:
        offsets = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
        self.lp = {
            "tokens": tokens,
            "text_offset": offsets,
            "token_logprobs": [None] * len(tokens),
            "top_logprobs": alts,
        }

    async def echoed(self, prompt: str) -> dict[str, Any]:
        return self.lp


def test_per_position_reads_each_token_from_the_alternatives_before_it() -> None:
    tokens = ["The", " cat", " sat", "."]
    alts = [{"The": -9.0, " cat": -2.0}, {" sat": -1.0, " cat": -7.0}, {" dog": -0.5}, {"\n": -0.1}]
    got = asyncio.run(p._per_position(Echoing(tokens, alts), "The cat sat."))  # type: ignore[arg-type]
    assert got == Text(tuple(tokens), (None, -2.0, -1.0, None))  # "." is not among its alternatives
    assert asyncio.run(p._per_position(Echoing(tokens, alts), "The cat sat!")) is None  # type: ignore[arg-type]


def test_references_are_named_by_the_user_the_word_or_the_host() -> None:
    from lossless.inspect import run as stage
    from lossless.inspect.options import InspectOptions

    refs = ("bfloat16", "q2=http://127.0.0.1:9/v1", "http://127.0.0.1:8/v1?k=a=b")
    options = InspectOptions(urls=("http://127.0.0.1:9/v1",), model="m", references=refs)
    (word, named, bare) = stage._references(options)
    assert word == ("bfloat16", "bfloat16")
    assert named[0] == "q2" and isinstance(named[1], Endpoint) and named[1].name == "q2"
    assert bare[0] == "127.0.0.1:8" and isinstance(bare[1], Endpoint) and bare[1].model == "m"


def test_without_references_only_smollm2_gets_the_default_ones() -> None:
    from lossless.inspect import run as stage
    from lossless.inspect.identity import Identity
    from lossless.inspect.options import InspectOptions

    other = Identity("evident", "qwen2")
    endpoint = Endpoint("e", "http://127.0.0.1:9/v1", "m")  # never asked: the rule answers first
    got = stage._precision(endpoint, other, (), {}, InspectOptions())
    assert got.verdict == "inconclusive" and "--reference" in got.note
