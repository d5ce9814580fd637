"""The Pareto front of a sweep: the configurations and loads that no other beats on both counts.

A point is one server configuration at one load: its total output throughput (tokens/s, all requests
together) against what each user meets (per-request output speed, higher is better; or TTFT, lower is
better). A point is on the front when no other point has at least its throughput and at least as good a
per-user figure, and is strictly better in one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class OperatingPoint:
    config: str
    load: str
    throughput: float  # output tokens/s over the measured window
    per_user: float  # per-request output speed p50 (tokens/s), or TTFT p50 (ms)


def front(points: Sequence[OperatingPoint], higher_is_better: bool = True) -> list[OperatingPoint]:
    """The points on the front, by throughput."""

    def better_or_equal(a: OperatingPoint, b: OperatingPoint) -> bool:
        user = a.per_user >= b.per_user if higher_is_better else a.per_user <= b.per_user
        return a.throughput >= b.throughput and user

    kept = [
        p
        for p in points
        if not any(
            better_or_equal(q, p) and (q.throughput, q.per_user) != (p.throughput, p.per_user) for q in points
        )
    ]
    return sorted(kept, key=lambda p: p.throughput)
