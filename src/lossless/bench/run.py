"""bench's run: options -> a plan (endpoints, loads, workload) -> the run -> a summary.

``cli.bench`` parses flags into ``BenchOptions``, calls ``run`` and hands the summary to ``report.bench``.
Everything here that can fail on user input fails before the first request is sent (and before the
embedded model is loaded).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from lossless.analyze import RunInfo, Summary, parse_slo, summarize
from lossless.analyze.clients import client_table, saturation_warnings
from lossless.atomic import atomic_path
from lossless.bench.config import BenchConfig, LoadLevel, RunResult
from lossless.bench.execute import BenchPlan, CapacitySpec, execute, repeated, search_capacity
from lossless.bench.loop import OnRecord
from lossless.bench.options import DEFAULT_REQUESTS, BenchOptions
from lossless.bench.phases import Window
from lossless.bench.policies import Policy
from lossless.bench.resume import resume as resumed
from lossless.bench.runtime import loop_factory
from lossless.bench.token_exact import calibrate, synthetic_settings, tokenizer_for
from lossless.bench.workload.conversation import source
from lossless.bench.workload.synthetic import Synthetic
from lossless.client import endpoints as ep
from lossless.client.call import CallOptions
from lossless.console import progress_bar
from lossless.errors import EndpointError, UsageError
from lossless.provision import embedded, given
from lossless.provision.counting import fill_n_out, listed_models, load_token_counter
from lossless.records import RequestRecord
from lossless.rundir import RECORDS, write_jsonl

__all__ = ["BenchPlan", "CapacitySpec", "both_ways", "plan", "run", "run_plan"]


def run(options: BenchOptions) -> tuple[Summary, list[RequestRecord]]:
    """Measure, then summarize. Without URLs, against the embedded server started for the occasion; with
    them, after one request to each that a wrong URL, model or key fails in one line."""
    bench_plan = plan(options)
    if bench_plan.run.endpoints:
        every = bench_plan.run.policy.with_backup(bench_plan.run.endpoints)
        answered = given.checked(every, options.api, options.stream, options.timeout_total)
        # usage in every chunk where it was taken: inter-token times per token, not per chunk
        running = tuple(replace(e, running_usage=answered[e.name].running) for e in bench_plan.run.endpoints)
        bench_plan = replace(bench_plan, run=replace(bench_plan.run, endpoints=running))
    with embedded.endpoints(bench_plan.run.endpoints, options.embedded) as found:
        run = replace(bench_plan.run, endpoints=found)
        if options.stream_both:
            run = both_ways(run)
        return run_plan(replace(bench_plan, run=run), resume=options.resume)


def both_ways(run: BenchConfig) -> BenchConfig:
    """Each endpoint as two, "NAME stream" and "NAME whole", so the same prompts go both ways and the
    comparisons give their ratios with CIs; one request at a time, taking turns, where the load is one
    request at a time (the two ways never share the server then), else side by side."""
    twice = tuple(
        replace(e, name=f"{e.name} {way}", stream=way == "stream")
        for e in run.endpoints
        for way in ("stream", "whole")
    )
    serial = all(level.concurrency == 1 for level in run.loads)
    return replace(run, endpoints=twice, serial=serial)


def plan(options: BenchOptions) -> BenchPlan:
    """Check every option against the others and build the run's plan; no traffic yet. No URLs: the plan
    has no endpoints, and the caller provisions them."""
    o = options
    found, policy = _endpoints(o)
    for endpoint in policy.with_backup(found):
        ep.api_key(endpoint)  # fail now, naming the variable, if a key is missing
        if endpoint.tokenizer:
            load_token_counter(endpoint.tokenizer)  # a file that is no tokenizer fails before any traffic
    if o.tokenizer:
        load_token_counter(o.tokenizer)
    synthetic, requests = _workload(o, found)
    call = CallOptions(o.api, o.stream, o.max_tokens, o.timeout_first_token or None, o.timeout_total)
    schedule = BenchConfig(
        endpoints=found,
        call=call,
        suite=o.suite,
        loads=_loads(o, synthetic),
        requests=requests,
        duration=o.duration,
        warmup=o.warmup,
        cooldown=o.cooldown,
        ramp=o.ramp,
        retries=o.retries,
        connect_timeout=o.timeout_connect,
        seed=o.seed,
        records_path=None if o.out_dir is None else o.out_dir / RECORDS,
        synthetic=synthetic,
        policy=policy,
        serial=o.take_turns,
        probe_rate=o.probe_rate,
        probe_idle=o.probe_idle,
    )
    if o.max_concurrency is not None:
        schedule = replace(schedule, max_in_flight=o.max_concurrency)
    settings, capacity = _settings(o)
    return BenchPlan(
        schedule,
        parse_slo(o.slo),
        o.stall_threshold,
        o.tokenizer,
        settings,
        workers=o.workers,
        ray=o.ray,
        capacity=capacity,
        repeat=o.repeat,
        until_saturated=o.until_saturated,
    )


def _workload(o: BenchOptions, found: tuple[ep.Endpoint, ...]) -> tuple[Synthetic | None, int | None]:
    """What is sent: token-exact prompts (--input-tokens, a trace) or none, and the measured requests."""
    # an unknown suite, or an unreadable file, fails before any traffic
    workload = source(o.suite, random.Random(0))
    synthetic, requests = None, o.requests if o.requests or o.duration else DEFAULT_REQUESTS
    if o.input_tokens is not None:
        synthetic = Synthetic(o.input_tokens, o.output_tokens, tokenizer_for(o, found))
    elif o.suite.startswith("trace:"):
        requests = _trace_requests(o, sum(1 for _ in workload))
        tokenizer = tokenizer_for(o, found, "--suite trace:")
        synthetic = Synthetic(None, None, tokenizer, trace=o.suite[len("trace:") :])
    return synthetic, requests


def _loads(o: BenchOptions, synthetic: Synthetic | None) -> tuple[LoadLevel, ...]:
    """The load levels, in the order given: a trace's own times (sped up), rates, or concurrencies."""
    if o.rate is None and o.concurrency is None and synthetic is not None and synthetic.trace is not None:
        return tuple(LoadLevel(replay=s) for s in o.replay_speed or (1.0,))
    if o.rate is not None:
        return tuple(LoadLevel(rate=r, burstiness=o.burstiness) for r in o.rate)
    return tuple(LoadLevel(concurrency=c) for c in o.concurrency or (1,))


def _settings(o: BenchOptions) -> tuple[dict[str, Any], CapacitySpec | None]:
    """The settings summary.json keeps beside the schedule's, and --find-capacity's search, if asked."""
    timeouts = {"connect": o.timeout_connect, "first_token": o.timeout_first_token, "total": o.timeout_total}
    settings: dict[str, Any] = {"slo": o.slo, "timeouts_s": timeouts}
    settings |= {"workers": o.workers or 1, "ray": o.ray} if o.workers or o.ray else {}
    capacity = None
    if o.find_capacity is not None:
        capacity = CapacitySpec(o.find_capacity, o.capacity_precision, o.capacity_budget)
        settings["find_capacity"] = {
            "target": o.find_capacity,
            "precision": o.capacity_precision,
            "budget_s": o.capacity_budget,
        }
    return settings, capacity


def _endpoints(o: BenchOptions) -> tuple[tuple[ep.Endpoint, ...], Policy]:
    """The endpoints to measure, and the policy requests follow (--hedge-after, --failover)."""
    if o.endpoints_file:
        found = ep.load_toml(o.endpoints_file)
    else:
        found = (
            given.from_urls((*o.urls, *([o.failover] if o.failover else [])), o.model, o.api_key_env)
            if o.urls
            else ()
        )
    backup = None
    if o.failover is not None and o.endpoints_file:  # a name in the file; the other endpoint is backed up
        backup = next((e for e in found if o.failover in (e.name, e.base_url)), None)
        if backup is None or len(found) != 2:
            raise UsageError(f"--failover {o.failover!r}: with --endpoints, the name of one of two endpoints")
        found = tuple(e for e in found if e is not backup)
    elif o.failover is not None:
        found, backup = found[:-1], found[-1]
    hedge = None if o.hedge_after is None else o.hedge_after / 1000
    after = None if o.failover_after is None else o.failover_after / 1000
    return found, Policy(hedge, backup, after)


def _trace_requests(o: BenchOptions, lines: int) -> int:
    """A trace is replayed whole, or its first --requests lines; it is not cycled."""
    if o.find_capacity is not None and o.rate is None and o.concurrency is None:
        raise UsageError("--find-capacity with a trace searches a --rate or --concurrency: give one")
    unmeasured = o.warmup.requests + o.cooldown.requests
    if unmeasured + (o.requests or 0) > lines:
        raise UsageError(f"the trace has {lines} requests: --requests, --warmup and --cooldown ask for more")
    return o.requests or lines - unmeasured


def run_plan(bench_plan: BenchPlan, resume: bool = False) -> tuple[Summary, list[RequestRecord]]:
    """Run a plan made by ``plan`` (and adjusted by the caller: demo names its endpoints, runs serially);
    with ``resume``, the requests the killed run in records.jsonl did not finish."""
    config = bench_plan.run
    prior: list[RequestRecord] = []
    notes: list[str] = []
    if resume:
        assert config.records_path is not None  # BenchOptions checked --out
        prior, done, notes = resumed(config.records_path, config.endpoints, config.loads)
        config = replace(config, done=done)
    count = load_token_counter(bench_plan.tokenizer) if bench_plan.tokenizer else None
    started = time.time()
    _reachable(config)
    if config.synthetic is not None:
        config, calibrated = calibrate(config)
        notes += calibrated
        bench_plan = replace(bench_plan, run=config)
    if config.records_path is not None and config.records_path.exists() and not resume:
        config.records_path.unlink()  # a fresh run; records are appended as they finish
    loop_name, _ = loop_factory()
    capacity, stopped = None, None
    total = None if bench_plan.capacity or bench_plan.until_saturated else _total(config, bench_plan.repeat)
    with _progress(total) as on_record:
        if bench_plan.capacity is not None:
            result, capacity = search_capacity(bench_plan, on_record)
        elif bench_plan.repeat > 1 or bench_plan.until_saturated:
            result, stopped = repeated(bench_plan, on_record)
        else:
            result = execute(bench_plan, config, on_record)
    declared = None if count is None or not bench_plan.tokenizer else (bench_plan.tokenizer, count)
    measured = prior + result.records
    records = fill_n_out(
        measured, config.endpoints, declared, lambda e: listed_models(e, config.connect_timeout)
    )
    if config.records_path is not None and records != measured:
        with atomic_path(config.records_path) as tmp:
            write_jsonl(tmp, records)
    every = config.policy.with_backup(config.endpoints)
    prices = {e.name: (e.price_in, e.price_out, e.price_cached_in) for e in every}
    summary = summarize(
        records,
        prices,
        spec=result.spec,
        slo=bench_plan.slo,
        stall_s=bench_plan.stall_s,
        run=_run_info(bench_plan, result, notes, started, loop_name),
        class_seed=config.seed if bench_plan.by_class else None,
    )
    return replace(summary, capacity=capacity, stopped=stopped), records


def _total(config: BenchConfig, repeat: int) -> int | None:
    """The requests the progress bar counts to; None where windows in seconds leave it open."""
    if config.requests is None or config.warmup.seconds is not None or config.cooldown.seconds is not None:
        return None
    per_level = config.warmup.requests + config.requests + config.cooldown.requests
    return per_level * len(config.endpoints) * len(config.loads) * repeat - len(config.done)


def _run_info(
    bench_plan: BenchPlan, result: RunResult, notes: list[str], started: float, loop_name: str
) -> RunInfo:
    """How the run was made: its settings, environment and load processes, and what went wrong with it."""
    workers = len({c.worker for c in result.clients}) or 1
    warnings = (*notes, *result.notes, *saturation_warnings(result.clients))
    return RunInfo(
        bench_plan.tokenizer,
        loop_name,
        result.interrupted,
        config_block(bench_plan),
        environment(started, loop_name),
        workers,
        client_table(result.clients),
        warnings,
    )


def _reachable(config: BenchConfig) -> None:
    """Every endpoint takes a TCP connection, or the run does not start: a wrong host or port is one
    line and exit 2, not a table of connection errors."""
    from lossless.client.http import unreachable

    every = config.policy.with_backup(config.endpoints)

    async def check() -> list[str | None]:
        return list(await asyncio.gather(*(unreachable(e.base_url, config.connect_timeout) for e in every)))

    for e, why in zip(every, asyncio.run(check()), strict=True):
        if why is not None:
            raise EndpointError(f"endpoint {e.name!r} ({ep.public_url(e.base_url)}): cannot connect: {why}")


# --- what the run was: configuration and environment, for reports ------------------------------------


def config_block(bench_plan: BenchPlan) -> dict[str, Any]:
    """The run's settings as summary.json keeps them. Endpoints appear without secrets: the API key's
    variable name but never its value, header names without values (one may be an Authorization
    header), base URLs without user info or query (some providers put a key there)."""
    config = bench_plan.run
    return {
        "endpoints": [
            {
                "name": e.name,
                "base_url": ep.public_url(e.base_url),
                "model": e.model,
                "api_key_env": e.api_key_env,
                "headers": sorted(e.headers),
                "body": dict(e.body),
                "price_usd_per_million": [e.price_in, e.price_out, e.price_cached_in],
            }
            for e in config.policy.with_backup(config.endpoints)
        ],
        "suite": config.suite,
        "api": config.call.api,
        "stream": "both" if any(e.stream is not None for e in config.endpoints) else config.call.stream,
        "max_tokens": config.call.max_tokens,
        "loads": [lv.label for lv in config.loads],
        "requests": config.requests,
        "duration_s": config.duration,
        "warmup": _window(config.warmup),
        **({"cooldown": _window(config.cooldown)} if not config.cooldown.empty else {}),
        **({"ramp_s": config.ramp} if config.ramp else {}),
        **({"max_concurrency": config.max_in_flight} if any(lv.rate for lv in config.loads) else {}),
        **({"probe_rate": config.probe_rate} if config.probe_rate else {}),
        **({"repeat": bench_plan.repeat} if bench_plan.repeat > 1 else {}),
        **({"until_saturated": True} if bench_plan.until_saturated else {}),
        "retries": config.retries,
        "seed": config.seed,
        **bench_plan.settings,
        **({"synthetic": synthetic_settings(config.synthetic)} if config.synthetic else {}),
        **({"policy": config.policy.describe()} if config.policy.active else {}),
    }


def _window(w: Window) -> int | str:
    """A window as summary.json has always said a warm-up: a count of requests; or "10s"."""
    return w.requests if w.seconds is None else w.label


def environment(started: float, event_loop: str) -> dict[str, Any]:
    import os
    import platform

    from lossless import __version__

    return {
        "lossless_version": __version__,
        "started_utc": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "event_loop": event_loop,
    }


# --- helpers ----------------------------------------------------------------------------------------


@contextmanager
def _progress(total: int | None) -> Iterator[OnRecord | None]:
    """A progress bar of requests on stderr (a line at the start and one at the end when stderr is not a
    terminal)."""
    with progress_bar("bench: requests", total) as advance:
        if advance is None:
            yield None
            return

        def on_record(record: RequestRecord) -> None:
            # a retried attempt is followed by another of the same request; probes are not the load's
            if not record.retried and not record.probe:
                advance()

        yield on_record
