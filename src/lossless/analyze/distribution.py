"""Numbers -> a ``Distribution``: n, mean, std, min, percentiles, max, cv, and bootstrap CIs; and a
Distribution read back from summary.json."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from lossless.analyze.metrics import CI_STATS, PERCENTILES, thin
from lossless.analyze.shapes import int_ as _int, obj_ as _obj, opt_ as _opt, pair_ as _pair

_BOOT = 1000  # bootstrap resamples


@dataclass(frozen=True)
class Distribution:
    """One metric over the requests of a group (ms, tokens/s or tokens, as the metric's unit says).
    n == 0: no value, and every statistic None."""

    n: int
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p99_9: float | None = None
    max: float | None = None
    cv: float | None = None  # std / mean; None for a zero mean
    ci95: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # bootstrap, of CI_STATS

    def get(self, stat: str) -> float | None:
        """A statistic by its summary.json name ("p99.9", "n", "mean")."""
        value: float | None = getattr(self, stat.replace(".", "_"))
        return value

    def as_dict(self) -> dict[str, Any]:
        if self.n == 0:
            return {"n": 0}
        out: dict[str, Any] = {f.name.replace("_", "."): getattr(self, f.name) for f in fields(self)[:-1]}
        out |= {f"{stat}_ci95": list(pair) for stat, pair in self.ci95.items()}
        return out | ({"thin": few} if (few := [s for s in PERCENTILES if thin(s, self.n)]) else {})

    @classmethod
    def from_dict(cls, d: object) -> Distribution:
        d = _obj(d)
        n = _int(d["n"], "n")
        if n == 0:
            return cls(n=0)
        stats = {f.name: _opt(d[f.name.replace("_", ".")], f.name) for f in fields(cls)[1:-1]}
        ci = {s: _pair(d[f"{s}_ci95"], f"{s}_ci95") for s in CI_STATS if f"{s}_ci95" in d}
        return cls(n, **stats, ci95=ci)


def describe(values: Sequence[float] | np.ndarray, seed: int = 0, ci: bool = True) -> Distribution:
    """n, mean, std, min, percentiles, max, cv, and bootstrap 95% CIs of p50, p90 and p99.

    ``ci=False`` for values that are not one per request (inter-chunk gaps): gaps of one request are
    correlated, and a bootstrap that resamples them one by one would claim too narrow an interval.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return Distribution(n=0)
    mean, std = float(x.mean()), float(x.std(ddof=1) if x.size > 1 else 0.0)
    q = {name: float(np.percentile(x, p)) for name, p in PERCENTILES.items()}
    ci95: dict[str, tuple[float, float]] = {}
    if ci:
        boot = boot_quantiles(x, np.random.default_rng(seed))
        for name, row in zip(CI_STATS, boot, strict=True):
            ci95[name] = (float(np.percentile(row, 2.5)), float(np.percentile(row, 97.5)))
    return Distribution(
        n=int(x.size),
        mean=mean,
        std=std,
        min=float(x.min()),
        p50=q["p50"],
        p90=q["p90"],
        p95=q["p95"],
        p99=q["p99"],
        p99_9=q["p99.9"],
        max=float(x.max()),
        cv=std / mean if mean else None,
        ci95=ci95,
    )


def boot_quantiles(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[len(CI_STATS), _BOOT]: p50, p90, p99 of each bootstrap resample (in slices, to bound memory)."""
    qs = [PERCENTILES[name] for name in CI_STATS]
    if x.size < 2:
        return np.full((len(qs), _BOOT), float(x[0]))
    per_slice = max(1, min(_BOOT, 2_000_000 // x.size))
    parts = []
    for start in range(0, _BOOT, per_slice):
        idx = rng.integers(0, x.size, size=(min(per_slice, _BOOT - start), x.size))
        parts.append(np.percentile(x[idx], qs, axis=1))
    return np.concatenate(parts, axis=1)
