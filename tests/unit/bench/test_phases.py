"""A level's windows (warm-up, measured, cool-down) by requests or seconds, and the ramps."""

from __future__ import annotations

import itertools
import random

import pytest

from lossless.bench.phases import COOLDOWN, MEASURED, WARMUP, Phases, Window, parse_window, ramp_delay
from lossless.bench.workload.arrivals import poisson, ramped
from lossless.errors import UsageError


def _walk(phases: Phases, times: list[float]) -> list[str | None]:
    return [phases.at(i, t) for i, t in enumerate(times)]


def test_windows_by_count() -> None:
    got = _walk(Phases(Window(2), 3, None, Window(2)), [0.0] * 9)
    assert got == [WARMUP] * 2 + [MEASURED] * 3 + [COOLDOWN] * 2 + [None, None]


def test_windows_by_seconds_around_a_count_and_a_duration() -> None:
    got = _walk(
        Phases(Window(seconds=1.0), 2, None, Window(seconds=0.5)), [0.0, 0.5, 1.0, 1.1, 1.2, 1.6, 1.8]
    )
    assert got == [WARMUP, WARMUP, MEASURED, MEASURED, COOLDOWN, COOLDOWN, None]  # cool-down: 1.2 to 1.7
    got = _walk(Phases(Window(), None, 1.0, Window(1)), [0.0, 0.4, 0.99, 1.0, 1.5])
    assert got == [MEASURED, MEASURED, MEASURED, COOLDOWN, None]


def test_parse_window() -> None:
    assert parse_window("5", "--warmup") == Window(5) and parse_window("2.5s", "--warmup") == Window(
        seconds=2.5
    )
    assert parse_window("0", "--cooldown").empty
    for bad in ("x", "1.5", "-1", "3m"):
        with pytest.raises(UsageError, match="--warmup"):
            parse_window(bad, "--warmup")


def test_ramps() -> None:
    assert [ramp_delay(k, 4, 2.0) for k in range(4)] == [0.0, 0.5, 1.0, 1.5]
    assert ramp_delay(3, 4, 0.0) == 0.0
    flat = list(itertools.islice(poisson(10.0, random.Random(1)), 400))
    ramp = list(ramped(iter(flat), 4.0))
    assert ramp == sorted(ramp) and len(ramp) == len(flat)
    # the ramp's integral: 10 * t^2 / 8 arrivals by t < 4, then 10 a second
    assert sum(t < 2.0 for t in ramp) == pytest.approx(10 * 4 / 8, abs=5)
    assert sum(4.0 <= t < 8.0 for t in ramp) == pytest.approx(40, abs=15)
    assert ramp[-1] == pytest.approx(flat[-1] + 2.0)
