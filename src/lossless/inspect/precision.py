"""Claim 2 of ``lossless inspect``: at what precision (which variant of the weights) an endpoint serves,
told by teacher-forced log-probabilities of a few fixed texts (issue #23).

Each of TEXTS is scored token by token on the candidate twice (A/A: the repeat-noise floor, and whether
the repeats are bit-identical) and once on each reference (references are scored once per run and
shared by every candidate). How a text is scored (``score``):

    echo           /completions with echo + logprobs: every token's log-probability in one request
                   (ours; any server verify's detection finds scoring right)
    per-position   where detect found echo scores one token off (llama-cpp-python): each token's
                   log-probability read from the alternatives its position lists (a token outside
                   the endpoint's top alternatives goes unscored)

Distance between two endpoints: the mean absolute difference of the tokens' log-probabilities (nats
per token) over the tokens both scored, on the texts both tokenized the same way (a text tokenized
differently is skipped). Its 95% CI is a bootstrap over *texts*, not tokens: a text's tokens share a
context and move together under a change of weights, so resampling tokens would claim a precision the
handful of texts does not have.

The word (``judge``); band = max(FLOOR_FACTOR x the A/A floor, BAND):
    inconclusive  the candidate cannot be scored (no echo with logprobs on /completions), fewer than
                  MIN_TEXTS texts were scored both ways, no reference could be scored, or the nearest
                  reference is within the band but so is the runner-up, or their CIs overlap (two
                  references equally near: they are the same variant, as far as these texts tell)
    evident       placed at the nearest reference: its distance lies within the band, and the
                  runner-up is clearly outside it (its CI wholly above the band and above the
                  nearest's CI)
    not evident   no reference within the band: the candidate differs from every named reference
                  (the nearest is still reported)
Measured on SmolLM2-135M (docs/results/2026-12-02-inspect.md; nats/token over the 8 texts, ~450 tokens):
every server's repeats bit-identical (floor 0); the same weights on two servers of ours 0; float32
against bfloat16 0.038 (CI 0.029-0.045); llama.cpp's Q4_1 against our float32 dequantization of that file
0.047, against bfloat16 0.056; a Q2_K copy against all of those 0.57-0.61. BAND, the band under a
deterministic candidate, is a quarter of the smallest gap between variants (float32 / bfloat16): the same
numerics land within it, another dtype or kernel does not. So a bfloat16 server on other hardware (other
rounding) may be `not evident` against our bfloat16: its numerics differ, and the card says how far.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from lossless.client.endpoints import Endpoint
from lossless.client.wire import Wire
from lossless.verify.collect import Caller
from lossless.verify.detect import detect

MIN_TEXTS = 2  # texts scored both ways, at least, for any word but inconclusive
BAND = 0.01  # nats/token: the least band around the floor (see above)
# the band is this many floors wide when the repeats themselves differ (batch-variant servers); not
# calibrated: every server measured here repeated itself bit for bit
FLOOR_FACTOR = 3.0
BOOTSTRAP = 2000  # resamples of the texts

# Varied on purpose (prose, code, numbers, a list, dialogue, instructions): quantization moves some
# kinds of text more than others. 38-80 tokens each in SmolLM2's tokenizer, 456 in all.
TEXTS = (
    "The old lighthouse stood at the edge of the cliff, its white paint peeling after decades of salt "
    "and wind. Every evening the keeper climbed the spiral stairs to light the lamp, and every morning "
    "he wrote the weather in a small leather notebook.",
    "def merge_sorted(left, right):\n    result = []\n    i = j = 0\n    while i < len(left) and j < "
    "len(right):\n        if left[i] <= right[j]:\n            result.append(left[i])\n            i += 1\n"
    "        else:\n            result.append(right[j])\n            j += 1\n    return result",
    "Quarterly revenue rose 12.4% to $3.81 billion, while operating costs fell from 2.95 to 2.71 "
    "billion. The company expects 2025 earnings per share between 4.10 and 4.35, up from 3.62 in 2024.",
    "Shopping list for the weekend:\n1. Two loaves of whole wheat bread\n2. A dozen eggs\n3. Fresh "
    "spinach and tomatoes\n4. Olive oil\n5. Coffee beans, medium roast\n6. Dish soap",
    "Photosynthesis converts light energy into chemical energy. In the chloroplasts, chlorophyll absorbs "
    "sunlight, water is split into oxygen and hydrogen, and carbon dioxide is fixed into sugars through "
    "the Calvin cycle.",
    '"Are you coming to the meeting tomorrow?" asked Maria.\n"I think so, but my train gets in late," '
    'said Tom. "Could you save me a seat near the door?"\n"Of course. I will bring the slides too."',
    "To reset your password, open the settings page and choose Security. Click Change password, enter "
    "your current password, then type the new one twice. It must have at least twelve characters, one "
    "number and one symbol.",
    "SELECT customer_id, COUNT(*) AS orders, SUM(total) AS spent\nFROM orders\nWHERE created_at >= "
    "'2024-01-01'\nGROUP BY customer_id\nHAVING COUNT(*) > 3\nORDER BY spent DESC\nLIMIT 10;",
)


@dataclass(frozen=True)
class Text:
    tokens: tuple[str, ...]
    values: tuple[float | None, ...]  # each token's log-probability; None: not scored


@dataclass(frozen=True)
class Scores:
    """One endpoint's scores of TEXTS (None where a text could not be scored)."""

    method: str | None  # "echo", "per-position"; None: cannot score
    texts: tuple[Text | None, ...] = ()
    why: str = ""  # why it cannot score


@dataclass(frozen=True)
class Distance:
    distance: float  # nats per token
    ci: tuple[float, float]
    texts: int  # scored both ways, same tokens
    tokens: int  # scored both ways


@dataclass(frozen=True)
class Precision:
    verdict: str  # "evident", "not evident", "inconclusive"
    note: str
    nearest: str | None = None
    floor: float | None = None  # A/A distance, nats/token
    bit_identical: bool | None = None
    distances: tuple[dict[str, Any], ...] = ()  # {"reference", "distance", "ci": [lo, hi]}, nearest first
    method: str | None = None
    texts: int = 0
    tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "nearest": self.nearest,
            "note": self.note,
            "floor": self.floor,
            "bit_identical": self.bit_identical,
            "distances": [dict(d) for d in self.distances],
            "method": self.method,
            "texts": self.texts,
            "tokens": self.tokens,
        }


# --- scoring -----------------------------------------------------------------------------------------


async def score(
    endpoint: Endpoint, repeats: int = 1, texts: Sequence[str] = TEXTS, timeout_s: float = 120.0
) -> tuple[Scores, ...]:
    """``texts`` scored on ``endpoint`` ``repeats`` times over, one request at a time (a server that
    batches requests together rounds differently: A/A must see the noise a lone request meets)."""
    async with Wire(endpoint, timeout_s) as wire:
        caller = Caller(wire, "completions", asyncio.Semaphore(1))
        caps = await detect(caller)
        if caps.scoring is None and caps.late is None:
            said = [s.split("cannot score text (", 1)[1] for s in caps.said if "cannot score text (" in s]
            why = said[0].rsplit(")", 1)[0] if said else "no echo with logprobs"
            return tuple(Scores(None, why=why) for _ in range(repeats))
        # no sampler fields: the scores are the model's log-softmax, which samplers act after (llama.cpp,
        # default repeat penalty and all, scored within 0.05 nats/token of our float32 server)
        caller.scoring = caps.scoring if caps.scoring is not None else caps.late
        method = "echo" if caps.scoring is not None else "per-position"
        one = _echo if method == "echo" else _per_position
        return tuple([Scores(method, tuple([await one(caller, t) for t in texts])) for _ in range(repeats)])


async def _echo(caller: Caller, text: str) -> Text | None:
    lp = await caller.echoed(text)
    if lp is None:
        return None
    rows = zip(lp.get("tokens") or [], lp.get("text_offset") or [], lp["token_logprobs"], strict=False)
    mine = [(str(t), v) for t, at, v in rows if isinstance(at, int) and at < len(text)]
    if "".join(t for t, _ in mine) != text:
        return None
    return Text(tuple(t for t, _ in mine), tuple(_number(v) for _, v in mine))


async def _per_position(caller: Caller, text: str) -> Text | None:
    """Such a server's echo lists, at each token, the alternatives for the *next* one (the position's
    distribution, filed one token early): each token's log-probability is read from the alternatives
    before it, so a token outside the top SCORING alternatives goes unscored. One request per text
    (~0.2 s a token on 2 busy cores): a request per position (``next_token``: the generated token's
    alternatives, the same values) took ~0.5 s each."""
    lp = await caller.echoed(text)
    if lp is None:
        return None
    rows = zip(
        lp.get("tokens") or [], lp.get("text_offset") or [], lp.get("top_logprobs") or [], strict=False
    )
    mine = [(str(t), alts) for t, at, alts in rows if isinstance(at, int) and at < len(text)]
    if "".join(t for t, _ in mine) != text:
        return None
    values: list[float | None] = [None]  # the first token has no context of its own
    for (_, before), (token, _) in pairwise(mine):
        values.append(_number(before.get(token)) if isinstance(before, dict) else None)
    return Text(tuple(t for t, _ in mine), tuple(values))


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


# --- distance and the word ---------------------------------------------------------------------------


def differences(a: Scores, b: Scores) -> list[list[float]]:
    """Per text both scored with the same tokens, the absolute differences of the tokens both scored."""
    out = []
    for x, y in zip(a.texts, b.texts, strict=False):
        if x is None or y is None or x.tokens != y.tokens:
            continue
        diffs = [
            abs(u - v) for u, v in zip(x.values, y.values, strict=True) if u is not None and v is not None
        ]
        if diffs:
            out.append(diffs)
    return out


def distance(a: Scores, b: Scores, seed: int = 0) -> Distance | None:
    """Mean absolute difference per token, with a bootstrap 95% CI over texts; None with no text."""
    per_text = differences(a, b)
    if not per_text:
        return None
    sums, counts = [sum(d) for d in per_text], [len(d) for d in per_text]
    rng = random.Random(seed)
    n = len(per_text)
    means = []
    for _ in range(BOOTSTRAP):
        pick = [rng.randrange(n) for _ in range(n)]
        means.append(sum(sums[i] for i in pick) / sum(counts[i] for i in pick))
    means.sort()
    ci = (means[int(0.025 * BOOTSTRAP)], means[int(0.975 * BOOTSTRAP) - 1])
    return Distance(sum(sums) / sum(counts), ci, n, sum(counts))


def identical(a: Scores, b: Scores) -> bool:
    return a.method is not None and a.texts == b.texts and all(t is not None for t in a.texts)


def judge(first: Scores, second: Scores, references: Mapping[str, Scores], seed: int = 0) -> Precision:
    if first.method is None:
        return Precision("inconclusive", f"cannot score texts ({first.why})")
    aa = distance(first, second, seed)
    if aa is None or aa.texts < MIN_TEXTS:
        return Precision("inconclusive", "fewer than two texts scored", method=first.method)
    found = {name: d for name, ref in references.items() if (d := distance(first, ref, seed)) is not None}
    usable = {name: d for name, d in found.items() if d.texts >= MIN_TEXTS}
    ranked = sorted(usable.items(), key=lambda kv: kv[1].distance)
    rows = tuple(
        {"reference": name, "distance": round(d.distance, 5), "ci": [round(d.ci[0], 5), round(d.ci[1], 5)]}
        for name, d in ranked
    )
    common = Precision(
        "inconclusive",
        "",
        None,
        round(aa.distance, 5),
        identical(first, second),
        rows,
        first.method,
        aa.texts,
        aa.tokens,
    )
    if not ranked:
        unscored = [n for n, r in references.items() if r.method is None]
        why = f"references not scored: {', '.join(unscored)}" if unscored else "no reference shares the texts"
        return _with(common, "inconclusive", why)
    return _word(common, ranked, aa)


def _word(common: Precision, ranked: Sequence[tuple[str, Distance]], aa: Distance) -> Precision:
    band = max(FLOOR_FACTOR * aa.distance, BAND)
    (name, near), rest = ranked[0], ranked[1:]
    said = f"{near.distance:.3f} nats/token from {name} (floor {aa.distance:.3f}, band {band:.3f})"
    if near.distance > band:
        return _with(common, "not evident", f"no reference near: nearest {said}", name)
    if not rest:
        return _with(common, "evident", f"at {name}: {said}", name)
    other_name, other = rest[0]
    if other.ci[0] <= band or other.ci[0] <= near.ci[1]:
        return _with(
            common,
            "inconclusive",
            f"{name} and {other_name} equally near ({said}; {other.distance:.3f} from {other_name})",
            name,
        )
    return _with(common, "evident", f"at {name}: {said}; next {other_name} at {other.distance:.3f}", name)


def _with(p: Precision, verdict: str, note: str, nearest: str | None = None) -> Precision:
    return Precision(
        verdict, note, nearest, p.floor, p.bit_identical, p.distances, p.method, p.texts, p.tokens
    )
