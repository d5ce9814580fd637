"""Capacity under SLOs: the highest load at which a target share of requests meets every objective.

``search`` raises the load (open-loop rate, or closed-loop concurrency) by doubling until the attainment
falls below the target, then bisects between the last load that held and the first that did not, until
they are within ``precision`` of each other or the time budget is spent. Each step measures a whole load
level (``probe``), so the answer is only as sharp as a level's request count allows: the result keeps
every level tried, with its attainment, for the reader to judge.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from lossless.analyze.summary import Capacity


def search(
    probe: Callable[[float], float | None],
    *,
    kind: str,
    start: float,
    target: float,
    slo_ms: Mapping[str, float],
    precision: float = 0.05,
    budget_s: float = 600.0,
    most: float = 1e6,
    clock: Callable[[], float] = time.monotonic,
) -> Capacity:
    """``probe(load)`` measures one level and returns the share of its requests that met every objective
    (None: it was interrupted). Concurrency is searched over integers."""
    integer = kind == "concurrency"
    deadline = clock() + budget_s
    tried: list[tuple[float, float]] = []
    held: float | None = None
    failed: float | None = None
    load, stopped = start, "precision"
    while True:
        share = probe(load)
        if share is None:
            stopped = "interrupted"
            break
        tried.append((load, share))
        if share >= target:
            held = load
        else:
            failed = load
        following = _next(held, failed, load, precision, most, integer)
        if following is None:
            stopped = "limit" if failed is None else "floor" if held is None else "precision"
            break
        if clock() >= deadline:
            stopped = "budget"
            break
        load = following
    return Capacity(kind, target, dict(slo_ms), held, failed, tuple(tried), stopped, precision)


def _next(
    held: float | None, failed: float | None, load: float, precision: float, most: float, integer: bool
) -> float | None:
    """The next load to measure, or None when the search is done."""
    if failed is None:  # nothing missed yet: double
        return None if load >= most else min(most, load * 2)
    if held is None:  # even the lowest missed: halve
        lower = math.floor(load / 2) if integer else load / 2
        return None if lower < (1 if integer else 1e-6) else lower
    if (failed - held) / held <= precision:
        return None
    middle = (held + failed) // 2 if integer else (held + failed) / 2
    return None if middle in (held, failed) else middle
