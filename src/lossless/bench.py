"""The bench stage: options -> a plan (endpoints, loads, workload) -> the run -> a summary -> table and files.

``cli.bench`` only parses options into ``BenchOptions`` and calls ``run`` and ``report``. Everything here
that can fail on user input fails before the first request is sent.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lossless import endpoints as ep
from lossless.analyze import parse_slo, summarize
from lossless.client.call import CallOptions
from lossless.errors import EndpointError, UsageError
from lossless.records import RequestRecord, read_jsonl, write_jsonl
from lossless.run import BenchConfig, LoadLevel, OnRecord, RunResult, loop_factory, run_bench
from lossless.tokens import TokenCounter, fill_n_out, listed_models, load_token_counter
from lossless.workload.prompts import prompts

Summary = dict[str, Any]


@dataclass(frozen=True)
class BenchOptions:
    urls: tuple[str, ...] = ()  # base URLs; none (and no endpoints_file): the embedded server
    model: str | None = None  # "model" sent to the URLs; the embedded model's name or path without URLs
    endpoints_file: Path | None = None  # TOML of [[endpoint]] tables, instead of urls
    api_key_env: str | None = None  # environment variable holding the URLs' API key
    suite: str = "short"  # short|long|mixed|lengths|file:PATH.jsonl
    api: str = "chat"  # chat|completions
    stream: bool = True
    max_tokens: int = 128
    concurrency: str | None = None  # "1,4,16": closed-loop levels run one after another
    rate: float | None = None  # open loop: arrivals per second (exclusive with concurrency)
    burstiness: float = 1.0  # gamma shape of the open-loop gaps; 1 = Poisson
    requests: int | None = None  # measured requests per endpoint and level (default 20 without duration)
    duration: float | None = None  # or: seconds of dispatching per level
    warmup: int = 0  # unmeasured requests first
    retries: int = 0
    timeout_connect: float = 10.0  # seconds
    timeout_first_token: float = 60.0  # seconds; 0 = none
    timeout_total: float = 600.0  # seconds
    slo: str | None = None  # goodput objectives, "ttft=500,tpot=50,e2e=5s"
    stall_threshold: float = 1.0  # seconds: a longer inter-chunk gap is a stall
    seed: int = 0
    tokenizer: str | None = None  # counts N_out when a server sends no usage: tokenizer.json, GGUF or name
    as_json: bool = False  # summary JSON on stdout, table on stderr
    out_dir: Path | None = None  # records.jsonl, summary.json, summary.csv
    html: Path | None = None  # a self-contained HTML report with plots


def run(options: BenchOptions) -> Summary:
    """Measure, then summarize. Without URLs, against the embedded server started for the occasion."""
    return run_records(options)[0]


def run_records(options: BenchOptions) -> tuple[Summary, list[RequestRecord]]:
    """``run``, also returning the records (the HTML report plots them)."""
    slo = parse_slo(options.slo)
    count = load_token_counter(options.tokenizer) if options.tokenizer else None
    if options.urls or options.endpoints_file:
        return _measure(plan(options), options, slo, count)
    from lossless.config import ServeConfig
    from lossless.server.launch import start_embedded
    from lossless.server.main import load_model

    serve = ServeConfig(port=0, model=options.model)
    loaded = load_model(serve)  # its name is what the server answers to (it rejects any other)
    with start_embedded(serve, loaded=loaded) as base_url:
        embedded = ep.Endpoint("embedded", base_url, loaded.name)
        return _measure(plan(options, embedded=embedded), options, slo, count)


def plan(options: BenchOptions, embedded: ep.Endpoint | None = None) -> BenchConfig:
    """Check every option against the others and build the run's config; no traffic yet."""
    o = options
    if o.urls and o.endpoints_file:
        raise UsageError("give endpoint URLs or --endpoints FILE, not both")
    if embedded is not None:
        found: tuple[ep.Endpoint, ...] = (embedded,)
    elif o.endpoints_file:
        found = ep.load_toml(o.endpoints_file)
    else:
        found = ep.from_urls(o.urls, o.model, o.api_key_env)
    for endpoint in found:
        ep.api_key(endpoint)  # fail now, naming the variable, if a key is missing
        if endpoint.tokenizer:
            load_token_counter(endpoint.tokenizer)  # a file that is no tokenizer fails before any traffic
    prompts(o.suite, random.Random(0))  # an unknown suite fails before any traffic
    if o.rate is not None and o.concurrency is not None:
        raise UsageError("choose --concurrency (closed loop) or --rate (open loop), not both")
    if o.rate is not None:
        loads: tuple[LoadLevel, ...] = (LoadLevel(rate=o.rate, burstiness=o.burstiness),)
    else:
        loads = tuple(LoadLevel(concurrency=c) for c in _int_list(o.concurrency or "1", "--concurrency"))
    call = CallOptions(o.api, o.stream, o.max_tokens, o.timeout_first_token or None, o.timeout_total)
    return BenchConfig(
        endpoints=found, call=call, suite=o.suite, loads=loads,
        requests=o.requests if o.requests or o.duration else 20, duration=o.duration, warmup=o.warmup,
        retries=o.retries, connect_timeout=o.timeout_connect, seed=o.seed,
        records_path=None if o.out_dir is None else o.out_dir / "records.jsonl",
    )  # fmt: skip


def measure(config: BenchConfig, options: BenchOptions) -> tuple[Summary, list[RequestRecord]]:
    """Run a config built by ``plan`` and adjusted by the caller (demo: named endpoints, serial)."""
    count = load_token_counter(options.tokenizer) if options.tokenizer else None
    return _measure(config, options, parse_slo(options.slo), count)


def _measure(
    config: BenchConfig, options: BenchOptions, slo: dict[str, float], count: TokenCounter | None
) -> tuple[Summary, list[RequestRecord]]:
    started = time.time()
    _reachable(config)
    if config.records_path is not None and config.records_path.exists():
        config.records_path.unlink()  # a fresh run; records are appended as they finish
    total = None
    if config.requests is not None:
        total = (config.warmup + config.requests) * len(config.endpoints) * len(config.loads)
    loop_name, factory = loop_factory()
    with _progress(total) as on_record, asyncio.Runner(loop_factory=factory) as runner:
        result = runner.run(_stoppable(config, on_record))
    given = None if count is None or not options.tokenizer else (options.tokenizer, count)
    records = fill_n_out(
        result.records, config.endpoints, given, lambda e: listed_models(e, config.connect_timeout)
    )
    if config.records_path is not None and records != result.records:
        write_jsonl_replacing(config.records_path, records)
    prices = {e.name: (e.price_in, e.price_out) for e in config.endpoints}
    summary = summarize(records, prices, spec=result.spec, slo=slo, stall_s=options.stall_threshold)
    summary["tokenizer"] = options.tokenizer
    summary["event_loop"] = loop_name
    summary["interrupted"] = result.interrupted
    summary["config"] = config_block(config, options)
    summary["environment"] = environment(started, loop_name)
    return summary, records


async def _stoppable(config: BenchConfig, on_record: OnRecord | None) -> RunResult:
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


def _reachable(config: BenchConfig) -> None:
    """Every endpoint takes a TCP connection, or the run does not start: a wrong host or port is one
    line and exit 2, not a table of connection errors."""
    from lossless.client.http import unreachable

    async def check() -> list[str | None]:
        return list(
            await asyncio.gather(*(unreachable(e.base_url, config.connect_timeout) for e in config.endpoints))
        )

    for e, why in zip(config.endpoints, asyncio.run(check()), strict=True):
        if why is not None:
            raise EndpointError(f"endpoint {e.name!r} ({ep.public_url(e.base_url)}): cannot connect: {why}")


def report(summary: Summary, options: BenchOptions, records: list[RequestRecord] | None = None) -> None:
    """The table for people (stderr under --json), the JSON on stdout, files under --out, --html."""
    from lossless.console import people_console
    from lossless.report import files, terminal

    console = people_console(stderr=options.as_json)
    terminal.render(summary, console)
    if options.as_json:
        sys.stdout.write(files.to_json(summary) + "\n")
        sys.stdout.flush()
    if options.out_dir is not None:
        files.write(summary, options.out_dir)
    if options.html is not None:
        from lossless.report import html

        if records is None and options.out_dir is not None:
            records = list(read_jsonl(options.out_dir / "records.jsonl"))
        html.write(options.html, html.render_run(summary, records or []))


# --- what the run was: configuration and environment, for reports ------------------------------------


def config_block(config: BenchConfig, options: BenchOptions) -> dict[str, Any]:
    """The run's settings as summary.json keeps them. Endpoints appear without secrets: the API key's
    variable name but never its value, header names without values (one may be an Authorization
    header), base URLs without user info or query (some providers put a key there)."""
    return {
        "endpoints": [
            {"name": e.name, "base_url": ep.public_url(e.base_url), "model": e.model,
             "api_key_env": e.api_key_env, "headers": sorted(e.headers), "body": dict(e.body),
             "price_usd_per_million": [e.price_in, e.price_out]}
            for e in config.endpoints
        ],
        "suite": config.suite, "api": config.call.api, "stream": config.call.stream,
        "max_tokens": config.call.max_tokens, "loads": [lv.label for lv in config.loads],
        "requests": config.requests, "duration_s": config.duration, "warmup": config.warmup,
        "retries": config.retries, "seed": config.seed, "slo": options.slo,
        "timeouts_s": {"connect": options.timeout_connect, "first_token": options.timeout_first_token,
                       "total": options.timeout_total},
    }  # fmt: skip


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


def write_jsonl_replacing(path: Path, records: list[RequestRecord]) -> None:
    tmp = path.with_suffix(".jsonl.tmp")
    write_jsonl(tmp, records)
    tmp.replace(path)


@contextmanager
def _progress(total: int | None) -> Iterator[OnRecord | None]:
    """A progress bar on stderr while requests run; none when stderr is not a terminal (CI, pipes, files),
    so logs stay clean. It redraws 4 times a second from its own thread, briefly holding the GIL."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    columns = (TextColumn("requests"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, refresh_per_second=4) as bar:
        task = bar.add_task("requests", total=total)

        def on_record(record: RequestRecord) -> None:
            if not record.retried:  # a retried attempt is followed by another of the same request
                bar.advance(task)

        yield on_record


def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{option} wants integers like 1,4,16, got {text!r}") from None
    if not values or min(values) < 1:
        raise UsageError(f"{option} wants positive integers like 1,4,16, got {text!r}")
    return values
