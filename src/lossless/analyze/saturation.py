"""Can the server keep up with a load level? Tested, not eyeballed, from the level's measured records.

A server past its capacity shows it three ways, and each is a test with a stated error rate (ALPHA):
- **the wait grows** (any loop): the time from a request's schedule to its first token rises over the
  level as a queue builds. Kendall's tau of the wait against the scheduled time, one-sided, and the
  Theil-Sen rise over the level at least the level's early wait (GROWTH: the wait at least doubled), so
  that a real but trivial trend is not called saturation.
- **fewer are served than offered** (open loop): the completion rate against the arrival rate over the
  same requests. Both are rates of n events over a span; were they equal, the ratio of the two spans
  would follow F(2(m-1), 2(n-1)) (gamma-distributed spans, as for Poisson events), which is conservative
  here: completions track arrivals more closely than independent events would. Saturated when that test
  says achieved < offered and the shortfall is at least SHORTFALL.
- **more load buys no throughput** (closed loop, against the previous, lower concurrency): by Little's
  law a closed loop of c requests in flight serves c / mean E2E requests per second, so the gain over the
  previous level is (c / c_prev) * (mean E2E_prev / mean E2E), bootstrapped. Saturated when even its 95%
  upper bound is below a quarter of the proportional gain (MIN_GAIN).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from scipy import stats

from lossless.analyze.shapes import obj_ as _obj, opt_ as _opt, plain_ as _plain, str_ as _str
from lossless.records import TOKEN_KINDS, RequestRecord

ALPHA = 0.01  # each test's false-alarm rate on a server that keeps up
GROWTH = 1.0  # the wait's rise over the level, as a share of its early value, that counts
SHORTFALL = 0.9  # achieved / offered below this counts
MIN_GAIN = 0.25  # share of the proportional throughput gain below which more concurrency bought nothing
MIN_REQUESTS = 8  # fewer measured requests: no verdict


@dataclass(frozen=True)
class Saturation:
    """One endpoint at one load level."""

    saturated: bool
    reason: str  # the sentence people read, for either verdict
    trend_p: float | None = None  # one-sided p of the wait rising over the level
    growth: float | None = None  # the wait's Theil-Sen rise over the level / its early median
    offered_rps: float | None = None  # open loop: arrivals per second over the measured requests
    achieved_rps: float | None = None  # ... and successful completions per second over the same
    rate_p: float | None = None  # one-sided p of achieved < offered
    gain: float | None = None  # closed loop: throughput over the previous level's
    gain_hi: float | None = None  # its 95% upper bound
    ideal_gain: float | None = None  # the concurrency's own ratio

    def as_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_dict(cls, d: object) -> Saturation:
        d = _obj(d)
        saturated = d["saturated"]
        if not isinstance(saturated, bool):
            raise TypeError("saturated is not true or false")
        nums = {f.name: _opt(d.get(f.name), f.name) for f in fields(cls)[2:]}
        return cls(saturated, _str(d["reason"], "reason"), **nums)


def _final(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """The measured final attempts of the first run (bench --repeat: the run a sweep's stop was decided
    on; runs are apart in time, so a trend or a rate over several would be over their pauses)."""
    first = min((r.repeat for r in records), default=0)
    kept = (r for r in records if r.measured and not r.retried and r.repeat == first)
    return sorted(kept, key=lambda r: r.scheduled_ns)


def _wait_ms(r: RequestRecord) -> float:
    """Schedule to first token (to the end when no token came): queueing anywhere, and prefill."""
    first = next((t for t, k in zip(r.event_ns, r.event_kinds, strict=True) if k in TOKEN_KINDS), None)
    return ((first if first is not None else (r.end_ns or r.sent_ns)) - r.scheduled_ns) / 1e6


def trend(ok: Sequence[RequestRecord]) -> tuple[float, float] | None:
    """(one-sided p of the wait rising, its rise over the level / its early median), or None."""
    if len(ok) < MIN_REQUESTS:
        return None
    x = np.array([r.scheduled_ns for r in ok], dtype=float) / 1e9
    y = np.array([_wait_ms(r) for r in ok])
    if np.ptp(x) <= 0 or np.ptp(y) <= 0:
        return None
    p = float(stats.kendalltau(x, y, alternative="greater").pvalue)
    slope = float(stats.theilslopes(y, x).slope)
    early = float(np.median(y[: max(2, len(y) // 4)]))
    return p, slope * float(np.ptp(x)) / max(early, 1e-9)


def shortfall(final: Sequence[RequestRecord]) -> tuple[float, float, float] | None:
    """Open loop: (offered requests/s, achieved, one-sided p of achieved < offered), or None."""
    ok = [r for r in final if r.ok and r.end_ns is not None]
    if len(final) < MIN_REQUESTS or len(ok) < 2:
        return None
    sched = [r.scheduled_ns for r in final]
    ends = sorted(r.end_ns for r in ok if r.end_ns is not None)
    offered_span, achieved_span = (max(sched) - min(sched)) / 1e9, (ends[-1] - ends[0]) / 1e9
    if offered_span <= 0 or achieved_span <= 0:
        return None
    offered, achieved = (len(final) - 1) / offered_span, (len(ok) - 1) / achieved_span
    p = float(stats.f.sf(offered / achieved, 2 * (len(ok) - 1), 2 * (len(final) - 1)))
    return offered, achieved, p


def gain(
    previous: Sequence[RequestRecord], current: Sequence[RequestRecord], c_prev: int, c: int, seed: int = 0
) -> tuple[float, float] | None:
    """Closed loop: (throughput gain over the previous level by Little's law, its 95% upper bound)."""
    e_prev = np.array([(r.end_ns or r.sent_ns) - r.sent_ns for r in previous if r.ok], dtype=float)
    e_now = np.array([(r.end_ns or r.sent_ns) - r.sent_ns for r in current if r.ok], dtype=float)
    if e_prev.size < MIN_REQUESTS or e_now.size < MIN_REQUESTS or e_now.mean() <= 0:
        return None
    rng = np.random.default_rng(seed)
    boot_prev = e_prev[rng.integers(0, e_prev.size, (1000, e_prev.size))].mean(axis=1)
    boot_now = e_now[rng.integers(0, e_now.size, (1000, e_now.size))].mean(axis=1)
    ratio = c / c_prev
    boot = ratio * boot_prev / np.maximum(boot_now, 1e-9)
    return ratio * float(e_prev.mean() / e_now.mean()), float(np.percentile(boot, 97.5))


def judge_saturation(
    records: Sequence[RequestRecord],
    previous: Sequence[RequestRecord] = (),
    concurrency: tuple[int, int] = (0, 0),
) -> Saturation | None:
    """The verdict on one endpoint's level (its records, any window; the measured ones are judged).
    ``previous`` and ``concurrency`` (previous, this): a closed loop's lower level before it."""
    final = _final(records)
    ok = [r for r in final if r.ok]
    if len(final) < MIN_REQUESTS:
        return None
    found: dict[str, Any] = {}
    reasons: list[str] = []
    if (t := trend(ok)) is not None:
        found |= {"trend_p": t[0], "growth": t[1]}
        if t[0] < ALPHA and t[1] >= GROWTH:
            reasons.append(
                f"the wait for the first token rose by {t[1]:.1f}x its early value over the level "
                f"(Kendall's tau, p = {t[0]:.1g})"
            )
    open_loop = concurrency == (0, 0)
    if open_loop and (s := shortfall(final)) is not None:
        found |= {"offered_rps": s[0], "achieved_rps": s[1], "rate_p": s[2]}
        if s[2] < ALPHA and s[1] / s[0] < SHORTFALL:
            reasons.append(f"{s[1]:.3g} of the {s[0]:.3g} requests/s offered were served (p = {s[2]:.1g})")
    if not open_loop and (g := gain(_final(previous), final, *concurrency)) is not None:
        ideal = concurrency[1] / concurrency[0]
        found |= {"gain": g[0], "gain_hi": g[1], "ideal_gain": ideal}
        if g[1] < 1 + MIN_GAIN * (ideal - 1):
            reasons.append(
                f"{concurrency[1]} in flight served {g[0]:.2f}x the requests/s of "
                f"{concurrency[0]} (95% CI up to {g[1]:.2f}x; {ideal:.2f}x as many in flight)"
            )
    if reasons:
        return Saturation(True, "saturated: " + "; ".join(reasons), **found)
    return Saturation(False, "keeps up: " + _kept(found), **found)


def _kept(found: dict[str, Any]) -> str:
    parts = []
    if "growth" in found:
        parts.append(f"the wait rose {found['growth']:+.0%} over the level (p = {found['trend_p']:.2g})")
    if "achieved_rps" in found:
        parts.append(f"{found['achieved_rps']:.3g} of {found['offered_rps']:.3g} requests/s served")
    if "gain" in found:
        parts.append(f"{found['gain']:.2f}x the previous level's requests/s")
    return "; ".join(parts) or "no sign of a queue"
