"""Policies simulated from measured attempts: one attempt, a hedge, a failover chain. Pure: arrays in,
arrays out, every random draw from an explicit seeded ``numpy.random.Generator``.

An attempt is one measured record drawn at random, with replacement, from its endpoint's attempts at one
load level: when its first token came (inf: none came), when it ended (its answer complete, or its error
known), whether it succeeded and what it cost. The attempts of one simulated request are independent
draws: the assumption every prediction states.

    single        T = X1
    hedge(d)      T = min(X1, d + X2): a 2nd attempt goes out at d unless the 1st has answered by then, and
                  the first answer wins (the other is cancelled)
    failover(d)   A's attempt; when it has no first token at d, or fails in a way a client retries
                  elsewhere, B's attempt starts then (A's is abandoned): T = switch time + Y; and so on
                  down a longer chain, the last endpoint's attempt running to its end

A request's latency is the time to its first successful answer, inf when none came, and the percentiles
are over all requests. A percentile of the successes alone (vLLM bench's) would reward a policy that
fails slow requests and punish one that rescues failed ones late: a hedge could then raise p99.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lossless.advise.result import Estimate
from lossless.analyze import timing
from lossless.records import RequestRecord, retryable

QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
STATS = (*QUANTILES, "error_rate", "attempts_per_request", "attempts_per_success", "usd_per_success")
_CELLS = 2_000_000  # resamples x draws (or x records) in one index array: bounds memory to ~16 MB each


@dataclass(frozen=True)
class Samples:
    """One endpoint at one load: its measured attempts, as arrays [n] (ms from sending)."""

    ok: np.ndarray  # bool
    first: np.ndarray  # first token; inf: none came
    end: np.ndarray  # the answer complete, or the error known
    failover: np.ndarray  # bool: failed in a way a client retries elsewhere (see ``fails_over``)
    usd: np.ndarray  # what the attempt cost: its tokens x the endpoint's price; 0 without prices
    priced: bool = False

    def __post_init__(self) -> None:
        sizes = {len(a) for a in (self.ok, self.first, self.end, self.failover, self.usd)}
        assert len(sizes) == 1 and sizes != {0}, sizes

    @property
    def n(self) -> int:
        return len(self.end)

    @classmethod
    def of(
        cls,
        end: Sequence[float] | np.ndarray,
        ok: Sequence[bool] | np.ndarray | None = None,
        first: Sequence[float] | np.ndarray | None = None,
    ) -> Samples:
        """Attempts given by their times (tests, closed-form cases): all successful unless ``ok`` says;
        a successful one's first token at its end unless ``first`` says; every failure retried."""
        e = np.asarray(end, dtype=float)
        good = np.ones(e.size, bool) if ok is None else np.asarray(ok, dtype=bool)
        f = np.where(good, e, np.inf) if first is None else np.asarray(first, dtype=float)
        return cls(good, f, e, ~good, np.zeros(e.size))


def fails_over(kind: str | None) -> bool:
    """The errors ``bench --retries`` retries (``records.retryable``): a failover client moves on."""
    return retryable(kind)


def attempt_times(r: RequestRecord) -> tuple[float, float, float]:
    """(response headers, first token, end) in ms from sending; inf where it never came. A failure whose
    end was never stamped ended, as far as anyone waited, when it was sent."""
    if r.end_ns is None:
        return np.inf, np.inf, 0.0
    t = timing(r)
    ttfb = np.inf if t.ttfb is None else t.ttfb
    # a successful answer with no token event (all usage, or empty) is first answered at its end
    first = t.ttft if t.ttft is not None else (t.e2e if r.ok else np.inf)
    return ttfb, first, t.e2e


def samples(records: Sequence[RequestRecord], price: tuple[float | None, float | None]) -> Samples:
    """The attempts of one endpoint at one load; ``price``: USD per million (input, output) tokens. An
    attempt is charged the tokens its record reports (a failure usually reports none)."""
    times = np.array([attempt_times(r)[1:] for r in records], dtype=float).reshape(-1, 2)
    p_in, p_out = price
    usd = [((r.n_in or 0) * (p_in or 0.0) + (r.n_out or 0) * (p_out or 0.0)) / 1e6 for r in records]
    return Samples(
        ok=np.array([r.ok for r in records], dtype=bool),
        first=times[:, 0],
        end=times[:, 1],
        failover=np.array([fails_over(r.error_kind) for r in records], dtype=bool),
        usd=np.array(usd, dtype=float),
        priced=p_in is not None or p_out is not None,
    )


# --- policies -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Simulated:
    """Simulated requests, [..., M] each."""

    latency: np.ndarray  # ms to the first successful answer; inf: none came
    attempts: np.ndarray  # attempts sent
    usd: np.ndarray  # what they cost


Pick = Callable[[str, int], np.ndarray]  # (endpoint, slot) -> indices of measured attempts [..., M]
Policy = Callable[[Mapping[str, Samples], Pick], Simulated]


def _answer(s: Samples, i: np.ndarray, start: np.ndarray | float = 0.0) -> np.ndarray:
    return np.where(s.ok[i], start + s.end[i], np.inf)


def single(name: str) -> Policy:
    def run(found: Mapping[str, Samples], pick: Pick) -> Simulated:
        s, i = found[name], pick(name, 0)
        return Simulated(_answer(s, i), np.ones(i.shape), s.usd[i])

    return run


def hedge(name: str, delay: float) -> Policy:
    """A 2nd attempt at ``delay`` ms unless the 1st has answered by then; the first answer wins. Both are
    charged in full: an upper bound, as a cancelled stream stops being billed when it is cancelled."""

    def run(found: Mapping[str, Samples], pick: Pick) -> Simulated:
        s, i1, i2 = found[name], pick(name, 0), pick(name, 1)
        first = _answer(s, i1)
        sent = ~(first <= delay)
        latency = np.minimum(first, np.where(sent, _answer(s, i2, delay), np.inf))
        return Simulated(latency, 1.0 + sent, s.usd[i1] + np.where(sent, s.usd[i2], 0.0))

    return run


def failover(chain: Sequence[str], delay: float) -> Policy:
    """Down ``chain``: move on from an endpoint at ``delay`` ms without a first token from it (inf: only
    on errors), or when its attempt fails with an error ``fails_over`` retries; the last runs to its end.
    An abandoned attempt is charged in full (an upper bound, as for a hedge)."""
    assert len(chain) >= 2 and len(set(chain)) == len(chain), chain

    def run(found: Mapping[str, Samples], pick: Pick) -> Simulated:
        shape = pick(chain[0], 0).shape
        start, latency = np.zeros(shape), np.full(shape, np.inf)
        attempts, usd, active = np.zeros(shape), np.zeros(shape), np.ones(shape, bool)
        for k, name in enumerate(chain):
            s, i = found[name], pick(name, 0)
            attempts += active
            usd += np.where(active, s.usd[i], 0.0)
            if k == len(chain) - 1:
                latency = np.where(active, _answer(s, i, start), latency)
                break
            # still waiting at the delay with no token: abandoned then (a success has first <= end)
            waiting = (s.first[i] > delay) & (s.end[i] > delay)
            answered = active & s.ok[i] & ~waiting
            latency = np.where(answered, start + s.end[i], latency)
            active &= waiting | (~s.ok[i] & s.failover[i])
            start = start + np.where(waiting, delay, s.end[i])
        return Simulated(latency, attempts, usd)

    return run


# --- drawing and estimating ---------------------------------------------------------------------------


class Draws:
    """Which measured attempt each simulated one is: indices [M], or [B, M] over B resamples of the
    records (each resample the same size as the records, with replacement), one array per endpoint and
    slot (the k-th attempt a request makes there). Made on first use and then shared by every policy:
    policies are compared on common random numbers, so a hedge's prediction differs from the single
    attempt's by the hedge alone, never by the luck of the draw."""

    def __init__(self, sizes: Mapping[str, int], rng: np.random.Generator, draws: int, resamples: int = 0):
        self._sizes, self._rng, self._draws, self._resamples = dict(sizes), rng, draws, resamples
        self._base: dict[str, np.ndarray] = {}  # [B, n]: each resample of the records
        self._made: dict[tuple[str, int], np.ndarray] = {}

    def __call__(self, name: str, slot: int) -> np.ndarray:
        key = (name, slot)
        if key not in self._made:
            n, b = self._sizes[name], self._resamples
            if not b:
                self._made[key] = self._rng.integers(0, n, self._draws)
            else:
                if name not in self._base:
                    self._base[name] = self._rng.integers(0, n, (b, n))
                within = self._rng.integers(0, n, (b, self._draws))
                self._made[key] = np.take_along_axis(self._base[name], within, axis=1)
        return self._made[key]


def summary_stats(o: Simulated) -> dict[str, np.ndarray]:
    """Each of ``STATS`` over the last axis. Percentiles pick a simulated value (inverted CDF), never
    interpolate: between inf and inf there is nothing to interpolate."""
    lat = o.latency
    qs = np.quantile(lat, list(QUANTILES.values()), axis=-1, method="inverted_cdf")
    n_ok = np.isfinite(lat).sum(axis=-1)

    def per_success(x: np.ndarray) -> np.ndarray:
        return np.where(n_ok > 0, x.sum(axis=-1) / np.maximum(n_ok, 1), np.inf)

    out = {name: qs[k] for k, name in enumerate(QUANTILES)}
    out["error_rate"] = 1.0 - n_ok / lat.shape[-1]
    out["attempts_per_request"] = o.attempts.mean(axis=-1)
    out["attempts_per_success"] = per_success(o.attempts)
    out["usd_per_success"] = per_success(o.usd)
    return out


def interval(values: np.ndarray) -> tuple[float, float]:
    """The bootstrap 95% interval of resampled values (inf-safe: order statistics)."""
    lo, hi = np.quantile(values, [0.025, 0.975], method="inverted_cdf")
    return float(lo), float(hi)


def resample_count(resamples: int, samples: Mapping[str, Samples]) -> int:
    """As many resamples as asked, fewer where the records are so many that [B, n] indices would not fit
    in ``_CELLS`` (at least 50: below that a 95% interval is mostly noise)."""
    most = max(s.n for s in samples.values())
    return min(resamples, max(50, _CELLS // most)) if resamples else 0


def evaluate(
    policies: Mapping[str, Policy],
    found: Mapping[str, Samples],
    rng: np.random.Generator,
    draws: int,
    resamples: int,
) -> dict[str, dict[str, Estimate]]:
    """Every policy's ``STATS`` from ``draws`` simulated requests, each with a bootstrap 95% interval from
    ``resamples`` resamples of the records (the records resampled, then requests simulated from each
    resample: the interval covers both the records' sampling error and the simulation's)."""
    sizes = {name: s.n for name, s in found.items()}
    point = Draws(sizes, rng, draws)
    b = resample_count(resamples, found)
    boot = Draws(sizes, rng, max(200, min(draws, _CELLS // max(b, 1))), b) if b else None
    out: dict[str, dict[str, Estimate]] = {}
    for key, policy in policies.items():
        value = summary_stats(policy(found, point))
        spread = summary_stats(policy(found, boot)) if boot is not None else None
        out[key] = {
            stat: Estimate(float(value[stat]), *(interval(spread[stat]) if spread is not None else ()))
            for stat in STATS
        }
    return out
