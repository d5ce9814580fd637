"""The saturation tests, between-run intervals and the Pareto front, on records whose answer is known."""

from __future__ import annotations

import random

import numpy as np
import pytest
from sample_records import make

from lossless.analyze.pareto import OperatingPoint, front
from lossless.analyze.repeats import ratio_over_runs, spread
from lossless.analyze.saturation import judge_saturation
from lossless.records import RequestRecord

MS = 1_000_000


def _open_loop(n: int, rate: float, service_s: float, seed: int = 0) -> list[RequestRecord]:
    """A one-slot server of ``service_s`` per request under Poisson arrivals at ``rate``: a queue."""
    rng, t, free, out = random.Random(seed), 0.0, 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        start = max(t, free)
        free = start + service_s
        first = int((start + service_s * 0.5) * 1e9)
        at = int(t * 1e9)
        out.append(
            make(
                request_index=i,
                load=f"rate={rate:g}",
                scheduled_ns=at,
                sent_ns=at,
                event_ns=(first, int(free * 1e9)),
                event_kinds="cc",
                event_tokens=(-1, -1),
                end_ns=int(free * 1e9),
                n_out=2,
            )
        )
    return out


def test_an_open_loop_past_capacity_is_saturated_and_below_it_is_not() -> None:
    over = judge_saturation(_open_loop(40, rate=30.0, service_s=0.05))  # 20 a second served, 30 offered
    assert over is not None and over.saturated and "rose by" in over.reason
    assert over.trend_p is not None and over.trend_p < 0.01 and over.growth is not None and over.growth > 1
    for seed in range(20):  # below capacity: no false alarm in 20 runs (each test's rate is 1%)
        under = judge_saturation(_open_loop(40, rate=5.0, service_s=0.05, seed=seed))
        assert under is not None and not under.saturated, under.reason


def test_a_shortfall_alone_is_saturation() -> None:
    # completions at half the arrival rate, the wait flat (no trend): fewer served than offered
    records = [
        make(
            request_index=i,
            load="rate=20",
            scheduled_ns=i * 50 * MS,
            sent_ns=i * 50 * MS,
            event_ns=(i * 50 * MS + 5 * MS, i * 100 * MS + 9 * MS),
            event_kinds="cc",
            event_tokens=(-1, -1),
            end_ns=i * 100 * MS + 10 * MS,
        )
        for i in range(30)
    ]
    verdict = judge_saturation(records)
    assert verdict is not None and verdict.saturated and "requests/s offered were served" in verdict.reason
    assert verdict.achieved_rps == pytest.approx(10, rel=0.05) and verdict.offered_rps == pytest.approx(20)


def _closed(c: int, e2e_ms: float, n: int = 30, seed: int = 0) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i, e in enumerate(rng.normal(e2e_ms, e2e_ms * 0.05, n)):
        sent = i * 10 * MS
        end = sent + int(e * MS)
        out.append(
            make(
                request_index=i,
                load=f"c={c}",
                scheduled_ns=sent,
                sent_ns=sent,
                event_ns=(sent + MS,),
                event_kinds="c",
                event_tokens=(-1,),
                end_ns=end,
            )
        )
    return out


def test_a_closed_loop_that_buys_no_throughput_is_saturated() -> None:
    plateau = judge_saturation(
        _closed(8, 200.0), _closed(4, 100.0, seed=1), (4, 8)
    )  # twice the wait: no gain
    assert plateau is not None and plateau.saturated and plateau.gain == pytest.approx(1.0, abs=0.05)
    scaling = judge_saturation(_closed(8, 110.0), _closed(4, 100.0, seed=1), (4, 8))  # 1.8x the throughput
    assert scaling is not None and not scaling.saturated and scaling.gain == pytest.approx(1.8, abs=0.1)


def test_between_run_intervals() -> None:
    """The mean's interval, and the wider one a single further run falls in (a prediction interval)."""
    s = spread([10.0, 12.0, 14.0])  # positive: on the log scale
    logs = np.log([10.0, 12.0, 14.0])
    half = 4.303 * logs.std(ddof=1) / 3**0.5
    assert s.mean == pytest.approx(np.exp(logs.mean()))
    assert s.ci95 == pytest.approx((np.exp(logs.mean() - half), np.exp(logs.mean() + half)), rel=1e-3)
    rerun = half * 2  # a further run's interval: sqrt(1 + 1/3) over 1/sqrt(3), twice the mean's at 3 runs
    assert s.rerun95 == pytest.approx((np.exp(logs.mean() - rerun), np.exp(logs.mean() + rerun)), rel=1e-3)
    assert spread([1.0, 30.0, 2.0]).ci95[0] > 0  # a busier run multiplies the times: no negative bound
    signed = spread([-1.0, 0.0, 1.0])
    assert signed.mean == 0.0 and signed.ci95 == pytest.approx((-4.303 / 3**0.5, 4.303 / 3**0.5), rel=1e-3)
    assert signed.rerun95 == pytest.approx((-4.303 * (4 / 3) ** 0.5, 4.303 * (4 / 3) ** 0.5), rel=1e-3)
    found = ratio_over_runs([10.0, 11.0, 9.0], [20.0, 22.0, 18.0])
    assert found is not None and found[0] == pytest.approx(2.0, rel=0.01) and found[1][0] > 1.5
    assert ratio_over_runs([10.0], [20.0, 21.0]) is None


def test_pareto_front() -> None:
    pts = [
        OperatingPoint("a", "r1", 100, 50),
        OperatingPoint("a", "r2", 200, 40),
        OperatingPoint("b", "r1", 150, 30),
        OperatingPoint("b", "r2", 250, 45),
    ]
    assert [(p.config, p.load) for p in front(pts)] == [("a", "r1"), ("b", "r2")]
    ttft = [
        OperatingPoint("a", "r1", 100, 50),
        OperatingPoint("b", "r1", 100, 80),
        OperatingPoint("b", "r2", 300, 90),
    ]
    assert [(p.config, p.load) for p in front(ttft, higher_is_better=False)] == [("a", "r1"), ("b", "r2")]
