"""Choices made from measured attempts: the time-out to set for each phase of a request, and which hedge
and failover delays are worth simulating.

The time-out rule, one per phase: ``margin`` x the ``quantile`` of the times at which attempts reached
the phase's milestone, rounded up to two significant figures (default 1.5 x p99: a request is cut only
when it is half as slow again as the slowest one in a hundred that made it, so a time-out fires on a
stuck request, not on an ordinary slow one)::

    phase         milestone             failed in the phase (what "saved" counts)
    connect       response headers      could not connect (connection, timeout_connect)
    first_token   first token           ended with no token (any error)
    total         the answer complete   any error

Records hold no connect time on its own: the time to the response headers bounds it from above, so a
connect time-out at the value shown cuts at most the share shown. Shares are of all measured attempts:
``cut``, got to the milestone after the time-out (it would have cut them); ``saved``, failed in the phase
after the time-out (they failed anyway, and it ends their wait sooner, by ``wait_saved_ms`` on average).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lossless.advise.result import Estimate, Timeout
from lossless.advise.simulate import Samples, attempt_times, interval
from lossless.records import Failure, RequestRecord

# phase -> (milestone in words, the failure bench's own time-out of the phase records, the failures of
# the phase; None: any)
CONNECT = frozenset({Failure.CONNECTION, Failure.TIMEOUT_CONNECT})
PHASES: dict[str, tuple[str, str, frozenset[str] | None]] = {
    "connect": ("response headers", Failure.TIMEOUT_CONNECT, CONNECT),
    "first_token": ("the first token", Failure.TIMEOUT_FIRST_TOKEN, None),
    "total": ("the answer's end", Failure.TIMEOUT_TOTAL, None),
}
HEDGE_LEVELS = (0.25, 0.5, 0.75, 0.9, 0.95, 0.99)  # of the successful attempts' E2E
FAILOVER_LEVELS = (0.5, 0.9, 0.95, 0.99)  # of the first choice's time to first token; and errors only


def round_sig(x: float, up: bool = False) -> float:
    """Two significant figures: 1234 -> 1200 (or 1300 ``up``); 0 stays 0."""
    if x <= 0 or not math.isfinite(x):
        return x
    step = 10.0 ** (math.floor(math.log10(x)) - 1)
    n = math.ceil(x / step - 1e-9) if up else round(x / step)
    return float(f"{n * step:.12g}")


def _milestones(records: Sequence[RequestRecord], phase: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """reached [n]: ms at which each attempt got to the phase's milestone (inf: never); failed [n]: it
    failed in the phase; end [n]: when it ended."""
    _, _, kinds = PHASES[phase]
    times = np.array([attempt_times(r) for r in records], dtype=float).reshape(-1, 3)
    ok = np.array([r.ok for r in records], dtype=bool)
    reached = {"connect": times[:, 0], "first_token": times[:, 1], "total": np.where(ok, times[:, 2], np.inf)}
    failed = np.array([not r.ok and (kinds is None or r.error_kind in kinds) for r in records], dtype=bool)
    if phase != "total":  # failed in the phase: before its milestone
        failed &= ~np.isfinite(reached[phase])
    return reached[phase], failed, times[:, 2]


def timeout(
    records: Sequence[RequestRecord],
    phase: str,
    quantile: float,
    margin: float,
    rng: np.random.Generator,
    resamples: int,
) -> Timeout:
    """The time-out for ``phase`` by the rule above, with bootstrap 95% intervals (records resampled) of
    the rule's value and of the shares cut and saved at the value recommended. A high quantile of few
    times sits near their largest, which resamples rarely reach: the interval can end below the value."""
    milestone, own, _ = PHASES[phase]
    reached, failed, end = _milestones(records, phase)
    got = reached[np.isfinite(reached)]
    censored = sum(r.error_kind == own for r in records)
    rule = f"{margin:g} x p{quantile * 100:g} of {got.size} times to {milestone}, rounded up"
    if got.size == 0:
        none = Estimate(0.0)
        return Timeout(phase, None, rule, none, none, 0.0, 0, censored)
    raw = margin * float(np.quantile(got, quantile))
    limit = round_sig(raw, up=True)
    cut, saved = np.isfinite(reached) & (reached > limit), failed & (end > limit)
    wait = float((end[saved] - limit).mean()) if saved.any() else 0.0
    if not resamples:
        return Timeout(
            phase,
            Estimate(limit),
            rule,
            Estimate(float(cut.mean())),
            Estimate(float(saved.mean())),
            wait,
            got.size,
            censored,
        )
    b = min(resamples, max(50, 2_000_000 // len(records)))
    idx = rng.integers(0, len(records), (b, len(records)))
    rule_b = margin * np.quantile(got[rng.integers(0, got.size, (b, got.size))], quantile, axis=1)
    lo, hi = interval(rule_b)
    return Timeout(
        phase,
        Estimate(limit, round_sig(lo, up=True), round_sig(hi, up=True)),
        rule,
        Estimate(float(cut.mean()), *interval(cut[idx].mean(axis=1))),
        Estimate(float(saved.mean()), *interval(saved[idx].mean(axis=1))),
        wait,
        got.size,
        censored,
    )


def _delays(times: np.ndarray, levels: Sequence[float]) -> tuple[float, ...]:
    finite = times[np.isfinite(times)]
    if finite.size == 0:
        return ()
    return tuple(sorted({round_sig(float(np.quantile(finite, q))) for q in levels}))


def hedge_delays(s: Samples) -> tuple[float, ...]:
    """Hedge delays to simulate: quantiles of the successful attempts' E2E, from p25 (a hedge on most
    requests) to p99 (on one in a hundred). "The Tail at Scale" (Dean and Barroso) hedges at p95."""
    return _delays(np.where(s.ok, s.end, np.inf), HEDGE_LEVELS)


def failover_delays(first_choice: Samples) -> tuple[float, ...]:
    """Waits for a first token before failing over: quantiles of the first choice's time to first token;
    then inf, failing over on errors only."""
    return (*_delays(np.where(first_choice.ok, first_choice.first, np.inf), FAILOVER_LEVELS), math.inf)
