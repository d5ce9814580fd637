"""Endpoints against each other: ratios of p50, p90 and p99 with bootstrap 95% CIs, within one run
(``comparisons``, by prompt class with ``compare_classes``) or between two saved runs (``compare_runs``);
and ``drift``, a run's first half against its second."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lossless.analyze.distribution import boot_quantiles
from lossless.analyze.metrics import CI_STATS, COMPARED, MIN_N, PERCENTILES, Metric, thin
from lossless.analyze.repeats import by_run, ratio_over_runs
from lossless.analyze.shapes import num_ as _num, obj_ as _obj, pair_ as _pair, plain_ as _plain, str_ as _str
from lossless.analyze.timing import Timing, timing
from lossless.records import RequestRecord

Groups = Mapping[tuple[str, str], list[RequestRecord]]  # (endpoint, load) -> its attempts


@dataclass(frozen=True)
class Comparison:
    """``other``'s statistic of a metric over ``baseline``'s at one load, with a bootstrap 95% CI."""

    load: str
    metric: str  # a ``Metric.key``
    stat: str  # one of CI_STATS
    baseline: str
    other: str
    ratio: float
    ci95: tuple[float, float]
    text: str  # the sentence people read
    n: tuple[int, int] | None = field(default=None, kw_only=True)  # values on each side (None: older file)
    # both sides have enough values for this statistic (metrics.MIN_N): else no claim is made of it
    supported: bool = field(default=True, kw_only=True)

    def as_dict(self) -> dict[str, Any]:
        return {("class" if k == "prompt_class" else k): v for k, v in _plain(self).items()}

    @classmethod
    def from_dict(cls, d: object) -> Comparison:
        d = _obj(d)
        strs = {k: _str(d[k], k) for k in ("load", "metric", "stat", "baseline", "other")}
        n = _pair(d["n"], "n") if d.get("n") is not None else None
        return cls(
            **strs,
            ratio=_num(d["ratio"], "ratio"),
            ci95=_pair(d["ci95"], "ci95"),
            text=_str(d["text"], "text"),
            n=None if n is None else (int(n[0]), int(n[1])),
            supported=d.get("supported", True) is not False,
        )


@dataclass(frozen=True)
class ClassComparison(Comparison):
    prompt_class: str  # summary.json's "class"

    @classmethod
    def from_dict(cls, d: object) -> ClassComparison:
        return cls(**vars(Comparison.from_dict(d)), prompt_class=_str(_obj(d)["class"], "class"))


@dataclass(frozen=True)
class RunComparison(Comparison):
    """Two saved runs: ``baseline`` is "A", ``other`` "B"."""

    endpoint_a: str
    endpoint_b: str
    label: str  # "x c=1", or "old vs new c=1" when the runs name the endpoint differently


@dataclass(frozen=True)
class Drift:
    """Median E2E of the first and the second half of one endpoint's requests at one load."""

    name: str
    load: str
    n: int
    first_half_p50_ms: float
    second_half_p50_ms: float
    ratio: float | None  # second / first; None when the first is 0


def comparisons(groups: Groups, keys: Sequence[tuple[str, str]], seed: int) -> list[Comparison]:
    """Each endpoint against the first at the same load: ratios of p50, p90 and p99, each with a bootstrap
    95% CI (the two endpoints resampled independently)."""
    out: list[Comparison] = []
    loads = list(dict.fromkeys(load for _, load in keys))
    for load in loads:
        names = [n for n, lo in keys if lo == load]
        per = {n: [timing(r) for r in groups[(n, load)] if r.ok and not r.retried] for n in names}
        for other in names[1:]:
            for metric in COMPARED:
                out += _ratios(load, metric, (names[0], other), (per[names[0]], per[other]), seed)
    return out


def _ratios(
    load: str, metric: Metric, names: tuple[str, str], timings: tuple[list[Timing], list[Timing]], seed: int
) -> list[Comparison]:
    a, b = np.asarray(metric.values(timings[0])), np.asarray(metric.values(timings[1]))
    if a.size < 2 or b.size < 2:
        return []
    rng = np.random.default_rng(seed)
    boot_a, boot_b = boot_quantiles(a, rng), boot_quantiles(b, rng)
    out = []
    for i, stat in enumerate(CI_STATS):
        base = float(np.percentile(a, PERCENTILES[stat]))
        if base == 0:
            continue
        ratio = float(np.percentile(b, PERCENTILES[stat])) / base
        boot = boot_b[i] / np.maximum(boot_a[i], 1e-12)
        lo, hi = float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))
        supported = not (thin(stat, a.size) or thin(stat, b.size))
        text = f"{names[1]}'s {stat} {metric.words} is {ratio:.2f}x {names[0]}'s (95% CI {lo:.2f}-{hi:.2f})"
        if not supported:
            text += f"; too few values to tell ({a.size} and {b.size}; a {stat} needs {MIN_N[stat]} each)"
        out.append(
            Comparison(
                load,
                metric.key,
                stat,
                names[0],
                names[1],
                ratio,
                (lo, hi),
                text,
                n=(int(a.size), int(b.size)),
                supported=supported,
            )
        )
    return out


def compare_runs(
    a: Sequence[RequestRecord], b: Sequence[RequestRecord], names: tuple[str, str] = ("A", "B"), seed: int = 0
) -> list[RunComparison]:
    """Two saved runs: each endpoint and load of run B against the same of run A, with the ratios and
    bootstrap CIs of ``comparisons``. Endpoints pair by name, or by position when the runs name them
    differently (one provider measured twice under two labels)."""
    groups_a, groups_b = _final_groups(a), _final_groups(b)
    endpoints_a = list(dict.fromkeys(name for name, _ in groups_a))
    endpoints_b = list(dict.fromkeys(name for name, _ in groups_b))
    pairs = [(n, n) for n in endpoints_a if n in endpoints_b]
    if not pairs:
        pairs = list(zip(endpoints_a, endpoints_b, strict=False))
    out: list[RunComparison] = []
    for ea, eb in pairs:
        for name, load in groups_a:
            if name != ea or (eb, load) not in groups_b:
                continue
            label = f"{ea} {load}" if ea == eb else f"{ea} vs {eb} {load}"
            groups = {(names[0], label): groups_a[(ea, load)], (names[1], label): groups_b[(eb, load)]}
            over_runs = _over_runs(groups_a[(ea, load)], groups_b[(eb, load)], names, label)
            for c in over_runs or comparisons(groups, list(groups), seed):
                out.append(
                    RunComparison(
                        load,
                        c.metric,
                        c.stat,
                        c.baseline,
                        c.other,
                        c.ratio,
                        c.ci95,
                        c.text,
                        endpoint_a=ea,
                        endpoint_b=eb,
                        label=label,
                        n=c.n,
                        supported=c.supported,
                    )
                )
    return out


def _over_runs(
    a: Sequence[RequestRecord], b: Sequence[RequestRecord], names: tuple[str, str], label: str
) -> list[Comparison]:
    """When both sides were run several times (bench --repeat): each statistic of each run, and the
    ratio of B's runs to A's with a between-run CI (``repeats.ratio_over_runs``), rather than a bootstrap
    of the pooled requests, which would ignore how much whole runs differ."""
    runs_a, runs_b = (
        by_run([r for r in a if r.ok and not r.retried]),
        by_run([r for r in b if r.ok and not r.retried]),
    )
    if len(runs_a) < 2 or len(runs_b) < 2:
        return []
    out = []
    for metric in COMPARED:
        for stat in ("p50", "p99"):
            per = [[_stat(metric, rs, stat) for rs in runs.values()] for runs in (runs_a, runs_b)]
            if any(v is None or v <= 0 for side in per for v in side):
                continue
            found = ratio_over_runs(*per)  # type: ignore[arg-type]
            if found is None:
                continue
            ratio, (lo, hi) = found
            n = min(len(rs) for runs in (runs_a, runs_b) for rs in runs.values())
            supported = not thin(stat, n)
            text = (
                f"{names[1]}'s {stat} {metric.words} is {ratio:.2f}x {names[0]}'s (95% CI "
                f"{lo:.2f}-{hi:.2f}, between {len(runs_a)} and {len(runs_b)} runs)"
            )
            out.append(
                Comparison(
                    label,
                    metric.key,
                    stat,
                    names[0],
                    names[1],
                    ratio,
                    (lo, hi),
                    text,
                    n=(len(runs_a), len(runs_b)),
                    supported=supported,
                )
            )
    return out


def _stat(metric: Metric, records: Sequence[RequestRecord], stat: str) -> float | None:
    values = metric.values(timing(r) for r in records)
    return float(np.percentile(values, PERCENTILES[stat])) if values else None


def compare_classes(
    records: Sequence[RequestRecord], names: Sequence[str], seed: int = 0
) -> list[ClassComparison]:
    """``comparisons`` prompt class by prompt class: each endpoint against ``names[0]`` at the same load
    and on the same class of prompt (a workload mixing classes can hide a class's speed-up in its p50)."""
    groups: dict[tuple[str, str], list[RequestRecord]] = {}
    where: dict[str, tuple[str, str]] = {}
    for r in records:
        if r.measured and r.endpoint in names:
            label = f"{r.load} {r.prompt_class}"
            groups.setdefault((r.endpoint, label), []).append(r)
            where[label] = (r.load, r.prompt_class)
    keys = sorted(groups, key=lambda k: (list(where).index(k[1]), list(names).index(k[0])))
    return [
        ClassComparison(
            where[c.load][0],
            c.metric,
            c.stat,
            c.baseline,
            c.other,
            c.ratio,
            c.ci95,
            c.text,
            where[c.load][1],
            n=c.n,
            supported=c.supported,
        )
        for c in comparisons(groups, keys, seed)
    ]


def _final_groups(records: Sequence[RequestRecord]) -> dict[tuple[str, str], list[RequestRecord]]:
    groups: dict[tuple[str, str], list[RequestRecord]] = {}
    for r in records:
        if r.measured:
            groups.setdefault((r.endpoint, r.load), []).append(r)
    return groups


def drift(records: Sequence[RequestRecord]) -> list[Drift]:
    """Did latency change over the run? Per endpoint and load: median E2E of the first and the second
    half of the successful requests, in the order they were sent."""
    out = []
    for (name, load), group in _final_groups(records).items():
        ok = sorted((r for r in group if r.ok and not r.retried), key=lambda r: r.sent_ns)
        e2e = [timing(r).e2e for r in ok]
        if len(e2e) < 4:
            continue
        half = len(e2e) // 2
        first, second = float(np.median(e2e[:half])), float(np.median(e2e[half:]))
        out.append(Drift(name, load, len(e2e), first, second, second / first if first else None))
    return out
