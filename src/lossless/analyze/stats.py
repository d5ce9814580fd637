"""Numbers -> a ``Distribution``: n, mean, std, min, percentiles, max, cv, and bootstrap CIs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lossless.analyze.metrics import CI_STATS, PERCENTILES
from lossless.analyze.result import Distribution

_BOOT = 1000  # bootstrap resamples


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
        n=int(x.size), mean=mean, std=std, min=float(x.min()), p50=q["p50"], p90=q["p90"], p95=q["p95"],
        p99=q["p99"], p99_9=q["p99.9"], max=float(x.max()), cv=std / mean if mean else None, ci95=ci95,
    )  # fmt: skip


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
