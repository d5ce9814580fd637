"""Repeated runs (bench --repeat N): each statistic per run, its between-run 95% confidence interval, and
the 95% interval one more run will fall in.

A run's percentiles vary from run to run by more than one run's bootstrap says (the server's state, a
neighbour, the order the endpoints went in, how long the sampled answers came out): the spread of N whole
runs is the honest error bar. Both intervals are Student's t over the N values of the statistic (N - 1
degrees of freedom), on the log scale for positive values (a geometric mean): ``ci95`` is where the mean
of all runs lies (half-width t s / sqrt(N)); ``rerun95`` is where a single further run's value lies
(half-width t s sqrt(1 + 1/N), a prediction interval). They differ by sqrt(N + 1), twice at N = 3: a
rerun falls outside the mean's interval of 3 runs in 16% of cases even when nothing changed, so a rerun
is to be read against ``rerun95``. ``ratio_over_runs`` compares two sets of runs (Welch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from lossless.analyze.metrics import METRICS, PERCENTILES
from lossless.analyze.shapes import int_ as _int, list_ as _list, num_ as _num, obj_ as _obj, pair_ as _pair
from lossless.analyze.timing import timing
from lossless.records import RequestRecord

# the statistics given per run: every metric's overview statistics, then the two throughputs
SPREAD = (*(f"{m.key} {s}" for m in METRICS for s in m.overview), "tok/s", "req/s")


@dataclass(frozen=True)
class Spread:
    """One statistic over N runs: each run's value, their (geometric, when all positive) mean, its
    t-interval, and the t-interval of one more run (None in summaries written before it was added)."""

    runs: tuple[float, ...]
    mean: float
    ci95: tuple[float, float]
    rerun95: tuple[float, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        found = {"runs": list(self.runs), "mean": self.mean, "ci95": list(self.ci95)}
        return found | ({} if self.rerun95 is None else {"rerun95": list(self.rerun95)})

    @classmethod
    def from_dict(cls, d: object) -> Spread:
        d = _obj(d)
        runs = tuple(_num(v, "runs") for v in _list(d["runs"], "runs"))
        rerun = None if d.get("rerun95") is None else _pair(d["rerun95"], "rerun95")
        return cls(runs, _num(d["mean"], "mean"), _pair(d["ci95"], "ci95"), rerun)


@dataclass(frozen=True)
class Repeats:
    runs: int
    stats: Mapping[str, Spread]  # "ttft_ms p50", "tok/s" ... (SPREAD), where every run has a value

    def as_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "stats": {k: v.as_dict() for k, v in self.stats.items()}}

    @classmethod
    def from_dict(cls, d: object) -> Repeats:
        d = _obj(d)
        found = {k: Spread.from_dict(v) for k, v in _obj(d["stats"]).items()}
        return cls(_int(d["runs"], "runs"), found)


def spread(values: Sequence[float]) -> Spread:
    """The runs' mean, its t-interval and a further run's; for values that are all positive (times,
    speeds, throughputs) on the log scale, so that the centre is the geometric mean and no interval goes
    below zero: a run's times vary by a factor, not by an amount, when the machine is busier."""
    x = np.asarray(values, dtype=float)
    t = float(stats.t.ppf(0.975, x.size - 1))
    mean_se, rerun_se = 1 / np.sqrt(x.size), np.sqrt(1 + 1 / x.size)  # in units of one run's sd
    positive = bool((x > 0).all())
    y = np.log(x) if positive else x
    centre, sd = float(y.mean()), float(y.std(ddof=1))
    back = np.exp if positive else (lambda v: v)

    def around(se: float) -> tuple[float, float]:
        return float(back(centre - t * sd * se)), float(back(centre + t * sd * se))

    return Spread(tuple(float(v) for v in x), float(back(centre)), around(mean_se), around(rerun_se))


def by_run(records: Sequence[RequestRecord]) -> dict[int, list[RequestRecord]]:
    runs: dict[int, list[RequestRecord]] = {}
    for r in records:
        runs.setdefault(r.repeat, []).append(r)
    return dict(sorted(runs.items()))


def repeats(
    attempts: Sequence[RequestRecord],
    throughput: Callable[[Sequence[RequestRecord]], tuple[float, float] | None],
) -> Repeats | None:
    """``attempts``: one endpoint's measured attempts at one load, over every run; ``throughput``: one
    run's (tokens/s, requests/s) from its attempts. None for a single run."""
    runs = by_run(attempts)
    if len(runs) < 2:
        return None
    values: dict[str, list[float]] = {}
    for rs in runs.values():
        ok = [timing(r) for r in rs if r.ok and not r.retried]
        for m in METRICS:
            got = m.values(ok)
            for s in m.overview:
                if got:
                    values.setdefault(f"{m.key} {s}", []).append(float(np.percentile(got, PERCENTILES[s])))
        if (rates := throughput(rs)) is not None:
            values.setdefault("tok/s", []).append(rates[0])
            values.setdefault("req/s", []).append(rates[1])
    found = {k: spread(v) for k in SPREAD if len(v := values.get(k, [])) == len(runs)}
    return Repeats(len(runs), found)


def ratio_over_runs(a: Sequence[float], b: Sequence[float]) -> tuple[float, tuple[float, float]] | None:
    """B's runs over A's: the ratio of geometric means with a Welch t-interval on the log scale."""
    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    if la.size < 2 or lb.size < 2 or not (np.isfinite(la).all() and np.isfinite(lb).all()):
        return None
    va, vb = la.var(ddof=1) / la.size, lb.var(ddof=1) / lb.size
    diff, se = float(lb.mean() - la.mean()), float(np.sqrt(va + vb))
    if se == 0:
        return float(np.exp(diff)), (float(np.exp(diff)), float(np.exp(diff)))
    df = (va + vb) ** 2 / (va**2 / (la.size - 1) + vb**2 / (lb.size - 1))
    half = float(stats.t.ppf(0.975, df)) * se
    return float(np.exp(diff)), (float(np.exp(diff - half)), float(np.exp(diff + half)))
