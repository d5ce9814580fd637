"""Task runs -> per-endpoint summaries and paired comparisons (pure numbers; ``report`` shows them).

Per endpoint: the success rate with its Wilson 95% interval (over runs: with several samples per task
the runs of one task are not independent, and the interval is then too narrow), unbiased pass@k (Chen
et al. 2021) when there are several samples, the time of successful runs (p50 and p95 with bootstrap
CIs; their mean with a bootstrap CI over tasks), and cost per successful task: all cost, failed runs'
included, over successes, with a bootstrap CI that resamples tasks.

Side by side, runs pair by (task, sample): the success difference with McNemar's exact test and a TOST
interval (``analyze.paired.paired_accuracy``), the ratio of mean task time over the pairs both solved and
the ratio of cost per success, each with a paired bootstrap CI, beside the ratio of output speeds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

from lossless.analyze.distribution import describe
from lossless.analyze.paired import paired_accuracy
from lossless.client.endpoints import Endpoint, public_url
from lossless.tasks.result import ENDS, EndpointTasks, Interval, TaskRun, TasksComparison

BOOT = 2000  # bootstrap resamples
ALPHA = 0.05  # McNemar's level for "different"


def wilson(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (honest near 0 and 1, where Wald's collapses)."""
    if n == 0:
        return (0.0, 1.0)
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k samples drawn from n (c of them correct) is correct, unbiased."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _by_task(runs: Sequence[TaskRun]) -> dict[str, list[TaskRun]]:
    out: dict[str, list[TaskRun]] = {}
    for r in runs:
        out.setdefault(r.task, []).append(r)
    return out


def _boot(
    groups: int, statistic: Callable[[np.ndarray], float | None], seed: int
) -> tuple[float, float] | None:
    """Bootstrap 95% interval of ``statistic(indices)``, resampling ``groups`` indices with replacement."""
    if groups < 2:
        return None
    rng = np.random.default_rng(seed)
    values = [statistic(rng.integers(0, groups, groups)) for _ in range(BOOT)]
    kept = np.asarray([v for v in values if v is not None and math.isfinite(v)])
    if kept.size < BOOT // 2:  # mostly undefined (no success in most resamples): no honest interval
        return None
    return (float(np.percentile(kept, 2.5)), float(np.percentile(kept, 97.5)))


def tally_endpoint(endpoint: Endpoint, runs: Sequence[TaskRun], samples: int, seed: int = 0) -> EndpointTasks:
    tasks = _by_task(runs)
    ok = [r for r in runs if r.success]
    names = list(tasks)
    # per task: (successes, summed time of the successful runs, summed cost)
    succ = np.asarray([sum(r.success for r in tasks[t]) for t in names], dtype=float)
    time_ok = np.asarray([sum(r.task_s for r in tasks[t] if r.success) for t in names])
    priced = bool(runs) and all(r.cost_usd is not None for r in runs)
    cost = np.asarray([sum(r.cost_usd or 0.0 for r in tasks[t]) for t in names])

    def ratio(num: np.ndarray, den: np.ndarray) -> Callable[[np.ndarray], float | None]:
        return lambda idx: float(num[idx].sum() / den[idx].sum()) if den[idx].sum() > 0 else None

    n_calls = sum(r.tool_calls for r in runs)
    n_bad = sum(r.invalid_arguments for r in runs)
    n_schema = sum(r.schema_invalid for r in runs)
    speeds = [c.speed for r in runs for c in r.calls if c.speed is not None]
    parts = ("task", "model", "ttft", "generation", "tool", "retry", "check")
    return EndpointTasks(
        name=endpoint.name,
        base_url=public_url(endpoint.base_url),
        model=endpoint.model,
        tasks=len(tasks),
        samples=samples,
        runs=len(runs),
        successes=len(ok),
        success_rate=Interval(len(ok) / len(runs) if runs else None, wilson(len(ok), len(runs))),
        pass_at=_pass_at(tasks, samples),
        time_per_success=describe([r.task_s for r in ok], seed=seed),
        mean_time_per_success=Interval(
            _safe(time_ok.sum(), succ.sum()), _boot(len(names), ratio(time_ok, succ), seed)
        ),
        cost_per_success=Interval(
            float(cost.sum() / succ.sum()) if priced and succ.sum() else None,
            _boot(len(names), ratio(cost, succ), seed + 1) if priced else None,
        ),
        total_cost_usd=float(cost.sum()) if priced else None,
        mean_parts_s={p: float(np.mean([getattr(r, f"{p}_s") for r in runs] or [0.0])) for p in parts},
        mean_steps=float(np.mean([r.steps for r in runs])) if runs else 0.0,
        attempts=sum(len(r.calls) for r in runs),
        retries=sum(r.retries for r in runs),
        tool_calls=n_calls,
        invalid_arguments=Interval(_safe(n_bad, n_calls), wilson(n_bad, n_calls) if n_calls else None),
        schema_invalid=Interval(_safe(n_schema, n_calls), wilson(n_schema, n_calls) if n_calls else None),
        output_speed=float(np.median(speeds)) if speeds else None,
        ends={e: n for e in ENDS if (n := Counter(r.end for r in runs)[e])},
    )


def _pass_at(tasks: dict[str, list[TaskRun]], samples: int) -> dict[int, float]:
    if samples < 2 or not tasks:
        return {}
    ks = sorted({1, min(5, samples), samples} if samples >= 5 else {1, samples})
    return {
        k: float(np.mean([pass_at_k(len(rs), sum(r.success for r in rs), k) for rs in tasks.values()]))
        for k in ks
    }


def compare_tasks(
    baseline: EndpointTasks,
    candidate: EndpointTasks,
    runs: tuple[Sequence[TaskRun], Sequence[TaskRun]],
    margin: float,
    seed: int = 0,
) -> TasksComparison:
    """``candidate`` against ``baseline`` over the (task, sample) pairs both ran."""
    by_b = {(r.task, r.sample): r for r in runs[0]}
    by_c = {(r.task, r.sample): r for r in runs[1]}
    keys = [k for k in by_b if k in by_c]
    x = [by_b[k].success for k in keys]
    y = [by_c[k].success for k in keys]
    paired = paired_accuracy(x, y, margin)
    verdict = (
        "different" if paired.p_mcnemar < ALPHA else "equivalent" if paired.equivalent else "inconclusive"
    )
    both = [k for k in keys if by_b[k].success and by_c[k].success]
    tb = np.asarray([by_b[k].task_s for k in both])
    tc = np.asarray([by_c[k].task_s for k in both])
    time_ratio = Interval(
        float(tc.mean() / tb.mean()) if both and tb.mean() > 0 else None,
        _boot(len(both), lambda i: _safe(tc[i].sum(), tb[i].sum()), seed + 2),
    )
    cost_ratio = _cost_ratio([by_b[k] for k in keys], [by_c[k] for k in keys], seed + 3)
    speed = (
        candidate.output_speed / baseline.output_speed
        if candidate.output_speed and baseline.output_speed
        else None
    )
    return TasksComparison(
        baseline=baseline.name,
        candidate=candidate.name,
        pairs=len(keys),
        both=paired.both,
        only_baseline=paired.only_x,
        only_candidate=paired.only_y,
        difference=paired.difference,
        ci90=paired.ci90,
        p_mcnemar=paired.p_mcnemar,
        margin=margin,
        verdict=verdict,
        task_time_ratio=time_ratio,
        cost_ratio=cost_ratio,
        output_speed_ratio=speed,
        line=_line(speed, time_ratio.value),
    )


def _safe(num: float, den: float) -> float | None:
    return float(num / den) if den > 0 else None


def _cost_ratio(b: list[TaskRun], c: list[TaskRun], seed: int) -> Interval:
    if not b or any(r.cost_usd is None for r in b + c):
        return Interval(None)
    cb = np.asarray([r.cost_usd or 0.0 for r in b])
    cc = np.asarray([r.cost_usd or 0.0 for r in c])
    sb = np.asarray([float(r.success) for r in b])
    sc = np.asarray([float(r.success) for r in c])

    def ratio(idx: np.ndarray) -> float | None:
        base, cand = _safe(cb[idx].sum(), sb[idx].sum()), _safe(cc[idx].sum(), sc[idx].sum())
        return None if base is None or cand is None or base == 0 else cand / base

    return Interval(ratio(np.arange(len(b))), _boot(len(b), ratio, seed))


def _line(speed: float | None, time_ratio: float | None) -> str:
    """Both as speed-ups (the candidate's advantage): output speed c/b, task time b/c."""
    out = f"output speed {speed:.2f}x" if speed else "output speed n/a"
    return out + (f", task time {1 / time_ratio:.2f}x" if time_ratio else ", task time n/a")
