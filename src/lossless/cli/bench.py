"""``lossless bench``: its flags -> ``BenchOptions`` (``bench/options.py``, where the defaults live) ->
``bench.run.run`` -> a summary -> ``report/bench.py``. The flags are ``bench_flags``'; watch and sweep take
them from this command and read them as bench does (``bench_options``)."""

from __future__ import annotations

import sys
from typing import Any

import click

from lossless.bench.options import BenchOptions
from lossless.bench.phases import parse_window
from lossless.bench.workload.synthetic import parse_lengths
from lossless.cli.bench_flags import (
    capacity_flags,
    client_flags,
    load_flags,
    process_flags,
    run_flags,
    timeout_flags,
    window_flags,
    workload_flags,
)
from lossless.cli.common import (
    endpoint_flags,
    examples,
    exit_interrupted,
    friendly_errors,
    output_flags,
    outputs,
    wrote,
)
from lossless.rundir import BENCH_FILES, REPORT
from lossless.validate import float_list, int_list


def bench_options(
    urls: tuple[str, ...],
    concurrency: str | None,
    rate: str | None,
    replay_speed: str | None,
    find_capacity: float | None,
    input_tokens: str | None,
    output_tokens: str | None,
    stream_way: str = "on",
    no_stream: bool = False,
    warmup: str = "0",
    cooldown: str = "0",
    **opts: Any,
) -> BenchOptions:
    """bench's flags -> BenchOptions (bench and watch)."""
    way = "off" if no_stream else stream_way
    return BenchOptions(
        urls=urls,
        warmup=parse_window(warmup, "--warmup"),
        cooldown=parse_window(cooldown, "--cooldown"),
        stream=way != "off",
        stream_both=way == "both",
        concurrency=None if concurrency is None else int_list(concurrency, "--concurrency"),
        rate=None if rate is None else float_list(rate, "--rate"),
        replay_speed=None if replay_speed is None else float_list(replay_speed, "--replay-speed"),
        find_capacity=None if find_capacity is None else find_capacity / 100,
        input_tokens=None if input_tokens is None else parse_lengths(input_tokens, "--input-tokens"),
        output_tokens=None if output_tokens is None else parse_lengths(output_tokens, "--output-tokens"),
        **opts,
    )


@click.command(
    epilog=examples(
        "lossless bench https://api.example.com/v1 --model m --api-key-env EXAMPLE_KEY --out run/",
        "lossless bench URL_A URL_B --model m --concurrency 1,4,16 --requests 50",
        "lossless bench --endpoints endpoints.toml --rate 2 --duration 60 --slo ttft=500,e2e=5000",
        "lossless bench URL --model m --input-tokens 1000 --output-tokens 200 --tokenizer model.gguf",
        "lossless bench URL --model m --rate 1,2,4,8,16 --until-saturated --warmup 10s --cooldown 5",
        "lossless bench URL --model m --concurrency 8 --repeat 3 --probe-rate 0.5 --out run/",
        "lossless bench --out run/ --resume        # finish a run that was killed",
    )
)
@endpoint_flags
@workload_flags
@load_flags
@process_flags
@window_flags
@run_flags
@capacity_flags
@timeout_flags
@client_flags
@output_flags("Summary", "records.jsonl, summary.json and summary.csv")
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the run in --out that was killed: its finished requests are kept, the rest sent.",
)
@friendly_errors
def bench(overwrite: bool, **flags: Any) -> None:
    """Benchmark OpenAI-compatible endpoints side by side: time to first token, output speed, end-to-end
    time, their tails, stalls and errors (no URL: the embedded model, served for the run).

    Exit 0; 2 on a mistake, or when every request of an endpoint failed (its dominant cause is said);
    130 when interrupted (what finished is written)."""
    from lossless.analyze.failed import total_failures
    from lossless.bench.run import run as run_bench
    from lossless.console import people_console
    from lossless.report import bench as show

    options = bench_options(**flags)
    # a report.html beside the run is made from its files: stale once they are replaced
    owned = (*BENCH_FILES, REPORT)
    outputs(options.out_dir, owned, options.html, overwrite=overwrite, resume=options.resume)
    summary, records = run_bench(options)
    console = people_console(stderr=options.as_json)
    wrote(show.emit(summary, records, console, options.as_json, options.out_dir, options.html))
    if summary.interrupted:
        exit_interrupted()
    failed = total_failures(records)
    if failed:  # everything is written first: a run that measured nothing still keeps its records
        for failure in failed:
            click.echo(f"error: {failure.text}", err=True)
        sys.exit(2)
