"""How bench's plan runs: its levels in this process or on workers (``execute``); the whole run N times
(``repeated``, --repeat); level by level until the servers cannot keep up (``until_saturated``); or as a
search for capacity (``search_capacity``, --find-capacity).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lossless.analyze.saturation import judge_saturation
from lossless.analyze.summarize import attainment
from lossless.analyze.summary import Capacity
from lossless.bench.capacity import search
from lossless.bench.config import BenchConfig, LoadLevel, RunResult
from lossless.bench.loop import OnRecord, run_bench
from lossless.bench.runtime import loop_factory
from lossless.validate import MAX_CONCURRENCY


@dataclass(frozen=True)
class CapacitySpec:
    target: float  # share of requests meeting every objective
    precision: float  # relative
    budget_s: float


@dataclass(frozen=True)
class BenchPlan:
    """What one bench run does (``run``: the schedule) and how its records are summarized."""

    run: BenchConfig
    slo: Mapping[str, float]  # goodput objectives, parsed
    stall_s: float  # a longer inter-chunk gap is a stall
    tokenizer: str | None  # --tokenizer, which counts N_out when a server sends no usage
    settings: Mapping[str, Any]  # as the user gave them, for summary.json's config block (no secrets)
    by_class: bool = False  # also compare the endpoints prompt class by prompt class (demo)
    workers: int | None = None  # load processes: None or 1 in this one, unless ray is given
    capacity: CapacitySpec | None = None  # --find-capacity: search instead of running ``run.loads``
    ray: str | None = None  # a Ray cluster's address, or "local": the workers run as Ray tasks
    repeat: int = 1  # --repeat: whole runs, one after another, on fresh connections
    until_saturated: bool = False  # stop a sweep after the first level every endpoint could not keep up


def execute(bench_plan: BenchPlan, config: BenchConfig, on_record: OnRecord | None) -> RunResult:
    """``config``'s load levels, in this process or on workers."""
    if (bench_plan.workers or 1) > 1 or bench_plan.ray is not None:
        from lossless.bench.workers import driver

        return driver.run_on_workers(config, bench_plan.workers, bench_plan.ray, on_record)
    with asyncio.Runner(loop_factory=loop_factory()[1]) as runner:
        return runner.run(stoppable(config, on_record))


def search_capacity(bench_plan: BenchPlan, on_record: OnRecord | None) -> tuple[RunResult, Capacity]:
    """--find-capacity: one level at a time, each next load chosen from the attainment of the last."""
    config, spec = bench_plan.run, bench_plan.capacity
    assert spec is not None
    first = config.loads[0]
    kind = "rate" if first.rate is not None else "concurrency"
    merged = RunResult()

    def probe(load: float) -> float | None:
        level = replace(first, rate=load) if kind == "rate" else LoadLevel(concurrency=int(load))
        found = execute(bench_plan, replace(config, loads=(level,)), on_record)
        if accumulate(merged, found).interrupted:
            return None
        final = [r for r in found.records if r.measured]
        return attainment(final, bench_plan.slo).get("all", 0.0)

    start = first.rate if first.rate is not None else float(first.concurrency or 1)
    most = 1e6 if kind == "rate" else float(MAX_CONCURRENCY)
    capacity = search(
        probe,
        kind=kind,
        start=start,
        target=spec.target,
        slo_ms=bench_plan.slo,
        precision=spec.precision,
        budget_s=spec.budget_s,
        most=most,
    )
    return merged, capacity


async def stoppable(config: BenchConfig, on_record: OnRecord | None) -> RunResult:
    """``run_bench``, which Ctrl-C ends by cancelling it; SIGTERM (what ``timeout``, a CI cancellation
    and ``docker stop`` send) ends it the same way, so the requests that finished are summarized and
    the summary is marked interrupted instead of the process dying with nothing written."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    try:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
        return await run_bench(config, on_record=on_record)
    try:
        return await run_bench(config, on_record=on_record)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def accumulate(into: RunResult, found: RunResult) -> RunResult:
    """``found`` added to ``into`` (records, counters, load processes, notes), which is returned."""
    into.records += found.records
    into.spec |= found.spec
    into.clients += found.clients
    into.notes += found.notes
    into.interrupted = into.interrupted or found.interrupted
    return into


def repeated(bench_plan: BenchPlan, on_record: OnRecord | None) -> tuple[RunResult, str | None]:
    """The whole run ``repeat`` times: each on fresh connections (a new run, new sessions), the endpoints
    in reverse order every other time (who goes first alternates), idle probes before the first only.
    With ``until_saturated``, the loads of every run stop where the first run's did."""
    config, merged, stopped = bench_plan.run, RunResult(), None
    for k in range(bench_plan.repeat):
        endpoints = config.endpoints[::-1] if k % 2 else config.endpoints
        run = replace(config, repeat=k, endpoints=endpoints, probe_idle=config.probe_idle if k == 0 else 0)
        if bench_plan.until_saturated and k == 0:
            found, stopped, last = until_saturated(bench_plan, run, on_record)
            config = replace(config, loads=config.loads[: config.loads.index(last) + 1])
        else:
            found = execute(bench_plan, run, on_record)
        accumulate(merged, found)
        if found.interrupted:
            break
    return merged, stopped


def until_saturated(
    bench_plan: BenchPlan, config: BenchConfig, on_record: OnRecord | None
) -> tuple[RunResult, str | None, LoadLevel]:
    """The loads one at a time, in the order given; after each, every endpoint judged
    (``analyze.saturation``); the sweep stops after the first load none could keep up with. Returns what
    was measured, the sentence saying where it stopped and why (None: it never did), and the last load."""
    merged = RunResult()
    for n, level in enumerate(config.loads):
        probe_idle = config.probe_idle if n == 0 else 0
        found = execute(bench_plan, replace(config, loads=(level,), probe_idle=probe_idle), on_record)
        accumulate(merged, found)
        if found.interrupted:
            return merged, None, level
        verdicts = [_verdict(merged, e.name, config.loads[: n + 1]) for e in config.endpoints]
        if verdicts and all(v is not None and v.saturated for v in verdicts):
            why = "; ".join(
                f"{e.name}: {v.reason}" for e, v in zip(config.endpoints, verdicts, strict=True) if v
            )
            return merged, f"stopped at {level.label}, where no endpoint kept up ({why})", level
    return merged, None, config.loads[-1]


def _verdict(result: RunResult, name: str, loads: tuple[LoadLevel, ...]) -> Any:
    """``judge_saturation`` (``analyze.saturation``) of endpoint ``name``'s last load, as the summary will."""
    mine = [r for r in result.records if r.endpoint == name]
    last, before = loads[-1], loads[-2] if len(loads) > 1 else None
    now = [r for r in mine if r.load == last.label]
    c, c_prev = last.concurrency, None if before is None else before.concurrency
    if c is not None and c_prev is not None and c > c_prev and before is not None:
        previous = [r for r in mine if r.load == before.label]
        return judge_saturation(now, previous, (c_prev, c))
    return judge_saturation(now)
