"""Task statistics (Wilson, pass@k, cost per success, paired comparison), prices, back-off and tool-call
assembly from stream deltas: the pure parts of ``lossless tasks``."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from lossless.client.endpoints import Endpoint
from lossless.client.turn import Turn
from lossless.tasks.result import TaskRun
from lossless.tasks.runner import backoff
from lossless.tasks.spent import Prices
from lossless.tasks.tally import compare_tasks, pass_at_k, tally_endpoint, wilson

E = Endpoint("e", "http://127.0.0.1:1/v1", "m")


def _run(task: str, success: bool, task_s: float = 1.0, cost: float | None = 1.0, sample: int = 0) -> TaskRun:
    return TaskRun(
        endpoint="e",
        task=task,
        sample=sample,
        success=success,
        end="answer",
        reason="",
        attempts=1,
        steps=1,
        retries=0,
        tool_calls=0,
        tool_errors=0,
        invalid_arguments=0,
        schema_invalid=0,
        prompt_tokens=0,
        completion_tokens=0,
        cached_tokens=None,
        usage_missing=0,
        task_s=task_s,
        model_s=task_s,
        ttft_s=0.0,
        generation_s=0.0,
        tool_s=0.0,
        retry_s=0.0,
        check_s=0.0,
        cost_usd=cost,
        retry_cost_usd=None,
        tool_cost_usd=None,
    )


def test_wilson_matches_the_published_interval_and_stays_honest_at_zero() -> None:
    assert wilson(8, 10) == pytest.approx((0.4902, 0.9433), abs=1e-4)  # Newcombe (1998), table I
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - 21 / 45)
    assert pass_at_k(10, 3, 8) == 1.0 and pass_at_k(10, 0, 5) == 0.0


def test_cost_per_success_counts_the_failed_tasks_cost_and_pass_at_k_needs_samples() -> None:
    runs = [_run(f"t{i}", i < 2, task_s=float(i + 1)) for i in range(4)]
    s = tally_endpoint(E, runs, samples=1)
    assert (s.successes, s.cost_per_success.value, s.total_cost_usd) == (2, 2.0, 4.0)
    assert s.mean_time_per_success.value == pytest.approx(1.5) and s.pass_at == {}
    assert tally_endpoint(E, [replace(r, cost_usd=None) for r in runs], 1).cost_per_success.value is None
    sampled = [_run("a", k < 1, sample=k) for k in range(4)] + [_run("b", False, sample=k) for k in range(4)]
    at = tally_endpoint(E, sampled, samples=4).pass_at
    assert at == {1: pytest.approx(0.125), 4: pytest.approx(0.5)}


def test_paired_comparison_ratios_and_verdicts() -> None:
    base = [_run(f"t{i}", True, task_s=2.0) for i in range(60)]
    faster = [replace(r, task_s=1.0, cost_usd=0.5) for r in base]
    worse = [replace(r, success=i % 2 == 0) for i, r in enumerate(base)]
    sb, sf, sw = (tally_endpoint(E, rs, 1) for rs in (base, faster, worse))
    c = compare_tasks(sb, sf, (base, faster), margin=0.1)
    assert c.verdict == "equivalent" and c.task_time_ratio.value == pytest.approx(0.5)
    assert c.cost_ratio.value == pytest.approx(0.5) and c.line == "output speed n/a, task time 2.00x"
    d = compare_tasks(sb, sw, (base, worse), margin=0.1)
    assert d.verdict == "different" and d.only_baseline == 30 and d.difference == pytest.approx(-0.5)
    assert d.cost_ratio.value == pytest.approx(2.0)  # same spend, half the successes


def test_prices_and_backoff() -> None:
    p = Prices(input=2.0, output=10.0, cached_input=1.0)
    assert p.call(1000, 100, 400) == pytest.approx((600 * 2 + 400 * 1 + 100 * 10) / 1e6)
    assert Prices(input=2.0).call(1000, None, 400) == pytest.approx(2000 / 1e6)
    assert not Prices().any and Prices(tool=0.0).any
    turn = Turn(sent_ns=0, end_ns=1, error_kind="http_429", server_headers=(("retry-after", "1.5"),))
    rng = random.Random(0)
    assert backoff(turn, 3, 0.5, rng) == 1.5
    plain = replace(turn, server_headers=())
    assert all(0.25 <= backoff(plain, 0, 0.5, rng) <= 0.75 for _ in range(50))
    assert backoff(plain, 30, 0.5, rng) <= 90.0
