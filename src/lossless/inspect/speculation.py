"""Is the endpoint decoding speculatively? Told from the arms' records (``arms``) alone; pure.

Per request: output speed (tokens/s after the first token event, bench's definition) and *bursts*: a
speculative decoder emits a verified block of tokens at once, either as one chunk (ours, vLLM) or as
chunks with next to no time between them (a server that streams token by token); a burst ends at an
inter-chunk gap longer than ``BURST_GAP`` of the reference arm's median gap. Tokens per burst is then
the tokens a verify step emitted: an estimate of the mean accepted length (1 + accepted drafts per step,
vLLM's definition). A plain server emits about one token per burst whatever the text.

Each arm is compared with the reference (free-t1) round by round, so a change of load cancels: the ratio
of each round's speeds (and of its tokens per burst), the median over rounds with a bootstrap 95% CI
(``analyze.distribution.describe`` of the log-ratios). An arm
    speeds up       when the median reaches ``EFFECT`` and the CI lies above ``NOISE`` (tokens per
                    burst) or above ``EFFECT`` (speed: a timing, which a busy machine moves far more)
    does not        when the CI lies below ``EFFECT``
    cannot tell     otherwise (too few rounds, too noisy)
Verdict: `evident` if some arm speeds up (in speed or in tokens per burst); `not evident` if every arm
is told flat (its speed ratio "does not"; or its bursts "do not" and its median speed ratio is short of
``FLAT_SPEED``: bursts do not depend on timing, and settle long before a speed CI on a busy machine does);
`inconclusive` otherwise. The drafter kind: copying sped up, counting and greedy free text flat ->
prompt lookup (n-gram); counting or greedy free text sped up -> a draft model or head (it predicts text
that is not in the prompt).

Assumptions, and where they fail: one request at a time, so a server that speculates only under some
load (or only when idle) is judged at that one load; a server or proxy that buffers chunks sends bursts
in every arm alike (no ratio, so `not evident` unless the speed differs), and one that re-paces tokens
evenly hides bursts, leaving only the speed ratios, which must then be large (``FLAT_SPEED``); a
batching server whose speed follows its other users' load is cancelled only as far as the load holds
within a round; a drafter that cannot predict the arms' text (another language, a tiny draft) speeds
up nothing here and is `not evident`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from lossless.analyze.distribution import describe
from lossless.analyze.timing import timing
from lossless.inspect.arms import ARMS, REFERENCE
from lossless.records import TOKEN_KINDS, RequestRecord

Verdict = Literal["evident", "not evident", "inconclusive"]
Told = Literal["yes", "no", "cannot tell"]

EFFECT = 1.25  # the smallest ratio called a speed-up
NOISE = 1.10  # ... whose CI must also lie above this (tokens per burst; a speed's CI must clear EFFECT)
# with bursts told flat, a median speed ratio under this is noise: a drafter whose bursts some proxy
# evens out still copies 2-3x as fast; on 2 busy cores one plain request's speed moved 0.65-1.64x
FLAT_SPEED = 1.5
MIN_ROUNDS = 4  # paired rounds before a ratio is told either way (a bootstrap of 3 is its extremes)
BURST_GAP = 0.25  # a gap under this share of the reference's median gap continues a burst
MIN_TOKENS = 8  # a request with fewer output tokens gives no speed


@dataclass(frozen=True)
class Request:
    """What one measured request says, for this question."""

    arm: str
    round: int
    speed: float | None  # tokens/s after the first token event
    tokens: int | None  # output tokens (usage, or the whole text through a tokenizer)
    chunks: int  # token-bearing events
    bursts: int  # runs of events without a long gap between them
    gaps_ms: tuple[float, ...]


@dataclass(frozen=True)
class Ratio:
    arm: str
    of: str  # "speed" or "tokens per burst"
    ratio: float  # median over rounds of arm / reference
    ci95: tuple[float, float]
    rounds: int
    sped_up: Told


@dataclass(frozen=True)
class ArmStats:
    arm: str
    requests: int
    speed_tps: float | None  # median
    tokens_per_chunk: float | None  # all the arm's tokens / its chunks
    tokens_per_burst: float | None
    gap_ms_p50: float | None
    gap_ms_p90: float | None
    near_zero_gaps: float | None  # share of gaps inside bursts


@dataclass(frozen=True)
class Speculation:
    verdict: Verdict
    drafter: str | None  # "n-gram (prompt lookup)", "draft model or head", "unknown"; None: not evident
    accepted_length: float | None  # tokens per burst over every measured request
    ratios: tuple[Ratio, ...]
    arms: tuple[ArmStats, ...]
    counters: dict[str, float] | None = None  # the server's own, over the measurement (None: none)
    note: str = ""
    evidence: dict[str, object] = field(default_factory=dict)


def requests(records: Sequence[RequestRecord]) -> list[Request]:
    """The successful, counted records -> ``Request``; bursts split at ``BURST_GAP`` of the reference
    arm's median gap."""
    ok = [r for r in records if r.ok and not r.warmup and r.n_out is not None]
    gaps = {id(r): timing(r).gaps for r in ok}
    ref = [g for r in ok if r.prompt_class == REFERENCE for g in gaps[id(r)]]
    cut = BURST_GAP * float(np.median(ref)) if ref else 0.0
    out = []
    for r in ok:
        chunks = sum(1 for k in r.event_kinds if k in TOKEN_KINDS)
        t = timing(r)
        tokens = r.n_out if r.n_out_source != "chunks" else None
        speed = t.speed if (r.n_out or 0) >= MIN_TOKENS else None
        bursts = 1 + sum(1 for g in gaps[id(r)] if g > cut) if chunks else 0
        out.append(Request(r.prompt_class, r.request_index, speed, tokens, chunks, bursts, gaps[id(r)]))
    return out


def ratios(reqs: Sequence[Request], seed: int = 0) -> list[Ratio]:
    """Each arm against the reference, paired by round, in speed and in tokens per burst."""
    by = {(q.arm, q.round): q for q in reqs}
    out = []
    for arm in (a.name for a in ARMS if a.name != REFERENCE):
        for of in ("speed", "tokens per burst"):
            logs = []
            for (name, round_), q in by.items():
                ref = by.get((REFERENCE, round_))
                if name == arm and ref is not None:
                    a, b = _value(q, of), _value(ref, of)
                    if a and b:
                        logs.append(math.log(a / b))
            out.append(_ratio(arm, of, logs, seed))
    return out


def _value(q: Request, of: str) -> float | None:
    if of == "speed":
        return q.speed
    return q.tokens / q.bursts if q.tokens and q.bursts else None


def _ratio(arm: str, of: str, logs: list[float], seed: int) -> Ratio:
    if len(logs) < MIN_ROUNDS:
        return Ratio(
            arm,
            of,
            math.exp(float(np.median(logs))) if logs else math.nan,
            (0.0, math.inf),
            len(logs),
            "cannot tell",
        )
    d = describe(logs, seed=seed)
    lo, hi = (math.exp(v) for v in d.ci95["p50"])
    mid = math.exp(d.p50 or 0.0)
    # a speed is a timing, and a busy machine moves one request's by +-30%: its whole CI must clear
    # EFFECT; tokens per burst move little (not at all where a chunk is a verify step)
    bar = EFFECT if of == "speed" else NOISE
    told: Told = "yes" if lo > bar and mid >= EFFECT else "no" if hi < EFFECT else "cannot tell"
    return Ratio(arm, of, mid, (lo, hi), len(logs), told)


def arm_stats(reqs: Sequence[Request]) -> list[ArmStats]:
    out = []
    for arm in (a.name for a in ARMS):
        qs = [q for q in reqs if q.arm == arm]
        speeds = [q.speed for q in qs if q.speed is not None]
        counted = [q for q in qs if q.tokens is not None]
        gaps = [g for q in qs for g in q.gaps_ms]
        inside = sum(q.chunks - q.bursts for q in qs if q.chunks)
        out.append(
            ArmStats(
                arm,
                len(qs),
                float(np.median(speeds)) if speeds else None,
                _per(sum(q.tokens or 0 for q in counted), sum(q.chunks for q in counted)),
                _per(sum(q.tokens or 0 for q in counted), sum(q.bursts for q in counted)),
                float(np.percentile(gaps, 50)) if gaps else None,
                float(np.percentile(gaps, 90)) if gaps else None,
                inside / len(gaps) if gaps else None,
            )
        )
    return out


def _per(a: float, b: float) -> float | None:
    return a / b if b else None


def judge(
    records: Sequence[RequestRecord], counters: Mapping[str, float] | None = None, seed: int = 0
) -> Speculation:
    """The verdict on the records of one endpoint (module docstring); ``counters``: the change of the
    server's speculative counters over them, shown beside it (the word is behaviour's own)."""
    reqs = requests(records)
    found = ratios(reqs, seed)
    arms = arm_stats(reqs)
    counted = [q for q in reqs if q.tokens is not None and q.bursts]
    length = _per(sum(q.tokens or 0 for q in counted), sum(q.bursts for q in counted))
    verdict, note = _verdict(found)
    drafter = _drafter(found) if verdict == "evident" else None
    extra: dict[str, object] = {"requests": len(records), "answered": len(reqs)}
    return Speculation(
        verdict, drafter, length, tuple(found), tuple(arms), dict(counters or {}) or None, note, extra
    )


def _verdict(found: Sequence[Ratio]) -> tuple[Verdict, str]:
    up = [r for r in found if r.sped_up == "yes"]
    if up:
        best = max(up, key=lambda r: r.ci95[0])
        return "evident", f"{best.arm}: {best.of} {best.ratio:.2f}x the reference's (CI {_ci(best)})"
    arms = {r.arm for r in found}
    if arms and all(_flat(found, arm) for arm in arms):
        return "not evident", "no arm is burstier or clearly faster than the reference"
    unsure = ", ".join(f"{r.arm} {r.of}" for r in found if r.sped_up == "cannot tell")
    return "inconclusive", f"cannot tell: {unsure}"


def _flat(found: Sequence[Ratio], arm: str) -> bool:
    """Neither faster nor burstier than the reference: its speed ratio told "no"; or its bursts told
    "no" and its median speed ratio short of ``FLAT_SPEED`` (on a busy machine a speed CI stays wide
    long after the bursts, which do not depend on timing, have settled)."""
    speed, bursts = (
        next(r for r in found if r.arm == arm and r.of == of) for of in ("speed", "tokens per burst")
    )
    return speed.sped_up == "no" or (bursts.sped_up == "no" and speed.ratio < FLAT_SPEED)


def _drafter(found: Sequence[Ratio]) -> str:
    if any(r.sped_up == "yes" for r in found if r.arm in ("count", "free")):
        return "draft model or head"
    copy = any(r.sped_up == "yes" for r in found if r.arm == "copy")
    if copy and _flat(found, "count") and _flat(found, "free"):
        return "n-gram (prompt lookup)"
    return "unknown"


def _ci(r: Ratio) -> str:
    return f"{r.ci95[0]:.2f}-{r.ci95[1]:.2f}"


def settled(records: Sequence[RequestRecord]) -> bool:
    """Whether more rounds are unlikely to change the verdict or the drafter kind."""
    got = judge(records)
    return got.verdict == "not evident" or (got.verdict == "evident" and got.drafter != "unknown")
