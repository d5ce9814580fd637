"""Was the load generator itself the bottleneck? Each load process's CPU per level, read as warnings.

A process that spends most of a level's wall time on its own CPU reads events late: its timestamps then
measure its own queue as much as the endpoint. ``benchmarks/workers_speed.py`` measures where that starts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lossless.records import ClientLoad

SATURATED = 0.9  # of one core: past this a process's timings are suspect
COMFORTABLE = 0.5  # of one core: the load per process that keeps its own queueing small
MIN_WALL_S = 1.0  # a shorter level's CPU share is start-up noise, not load


def client_table(clients: Sequence[ClientLoad]) -> tuple[Mapping[str, Any], ...]:
    """As summary.json keeps them: one row per process and level."""
    return tuple(
        {
            "worker": c.worker,
            "host": c.host,
            "load": c.load,
            "cpu_s": round(c.cpu_s, 3),
            "wall_s": round(c.wall_s, 3),
            "busy": round(c.busy, 3),
        }
        for c in clients
    )


def saturation_warnings(clients: Sequence[ClientLoad]) -> list[str]:
    """One warning per level where a load process was saturated, with the processes it would have needed
    to stay under ``COMFORTABLE`` each."""
    by_level: dict[str, list[ClientLoad]] = {}
    for c in clients:
        by_level.setdefault(c.load, []).append(c)
    warnings = []
    for load, group in by_level.items():
        hot = [c for c in group if c.busy >= SATURATED and c.wall_s >= MIN_WALL_S]
        if not hot:
            continue
        need = max(len(group) + 1, math.ceil(sum(c.busy for c in group) / COMFORTABLE))
        who = ", ".join(f"worker {c.worker} on {c.host} {c.busy:.0%}" for c in hot)
        warnings.append(
            f"{load}: the load generator was saturated ({who} of a CPU): its timings there are suspect "
            f"(it read events late); about {need} workers (--workers {need}) would keep each under "
            f"{COMFORTABLE:.0%}"
        )
    return warnings
