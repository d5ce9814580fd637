"""The capacity search on a synthetic endpoint whose attainment falls at a known load."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from lossless.analyze.summary import Capacity
from lossless.bench.capacity import search

SLO = {"ttft": 500.0}


@given(st.floats(0.5, 5000.0), st.floats(0.1, 100.0), st.sampled_from([0.01, 0.05, 0.1]))
def test_rate_search_brackets_the_limit_within_the_precision(
    limit: float, start: float, precision: float
) -> None:
    found = search(
        lambda load: 1.0 if load <= limit else 0.5,
        kind="rate",
        start=start,
        target=0.95,
        slo_ms=SLO,
        precision=precision,
    )
    if found.held is None:  # the start was over the limit: halving found no load that held before 1e-6
        pytest.fail(f"no load held: {found}")
    assert found.held <= limit and found.stopped in ("precision", "limit")
    if found.failed is not None:
        assert found.failed > limit and (found.failed - found.held) / found.held <= precision


@given(st.integers(1, 3000), st.integers(1, 64))
def test_concurrency_search_finds_the_exact_integer(limit: int, start: int) -> None:
    found = search(
        lambda c: 1.0 if c <= limit else 0.0,
        kind="concurrency",
        start=start,
        target=0.9,
        slo_ms=SLO,
        precision=0.0,
    )
    assert found.held == limit and found.failed == limit + 1


def test_stops_on_the_budget_and_on_an_interruption_and_reads_back() -> None:
    ticks = iter(range(100))
    found = search(
        lambda load: 1.0,
        kind="rate",
        start=1.0,
        target=0.9,
        slo_ms=SLO,
        budget_s=3,
        clock=lambda: float(next(ticks)),
    )
    assert found.stopped == "budget" and found.failed is None and len(found.tried) == 3
    interrupted = search(
        lambda load: None if load > 2 else 1.0, kind="rate", start=1.0, target=0.9, slo_ms=SLO
    )
    assert interrupted.stopped == "interrupted" and interrupted.held == 2.0
    assert Capacity.from_dict(found.as_dict()) == found
    nothing = search(lambda load: 0.0, kind="concurrency", start=4, target=0.9, slo_ms=SLO)
    assert nothing.held is None and nothing.stopped == "floor" and "not even 4" in nothing.text
