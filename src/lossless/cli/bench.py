"""``lossless bench``: its flags -> ``BenchOptions`` (``bench/options.py``, where the defaults live) ->
``bench.run.run`` -> a summary -> ``report/bench.py``. watch takes the same flags (``bench_options``)."""

from __future__ import annotations

import sys
from typing import Any

import click

from lossless.bench.options import DEFAULT_REQUESTS, MAX_REPEAT, MAX_WORKERS, BenchOptions
from lossless.bench.phases import parse_window
from lossless.bench.workload.synthetic import parse_lengths
from lossless.cli.common import (
    APIS,
    SECONDS,
    SEED,
    SEED_HELP,
    Decorator,
    FiniteFloat,
    api_flag,
    endpoint_flags,
    examples,
    exit_interrupted,
    friendly_errors,
    output_flags,
    outputs,
    renamed,
    wrote,
)
from lossless.rundir import BENCH_FILES, REPORT
from lossless.validate import float_list, int_list

B = BenchOptions()
MS = FiniteFloat(0, 3_600_000)  # a millisecond delay, at most an hour


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


def workload_flags(fn: Any) -> Any:
    """What is sent: the suite, the API, the answer's length, token-exact lengths."""
    flags: list[Decorator] = [
        click.option(
            "--suite", default=B.suite, show_default=True,
            help="short, long, mixed, lengths, grounded, prefix:TOKENS[,K], file:PATH.jsonl, sharegpt:PATH; "
            "conversations (--requests counts them): chat:TURNS[,THINK_S], conversations:PATH[,THINK_S]; "
            "a timestamped trace replayed at its own times: trace:PATH; A+B takes turns.",
        ),
        api_flag(B.api, APIS),
        click.option(
            "--stream", "stream_way", default="on" if B.stream else "off", show_default=True,
            is_flag=False, flag_value="on",
            type=click.Choice(["on", "off", "both"]),
            help="Streamed answers (time to first token, per-token times), whole ones (off: end-to-end "
            "only), or both: each endpoint twice, the same prompts each way, taking turns, with ratios.",
        ),
        click.option("--no-stream", "no_stream", is_flag=True, hidden=True),  # --stream off's old name
        click.option(
            "--max-tokens", default=B.max_tokens, show_default=True, type=click.IntRange(1),
            help="Output tokens asked for per request (a prompt of a file may ask its own).",
        ),
        click.option(
            "--input-tokens", default=None,
            help="Token-exact prompts instead of --suite: N, normal:MEAN,SD, uniform:LOW,HIGH, or aa "
            "(100/1k/10k/100k in turn), counted with the model's tokenizer.",
        ),
        click.option(
            "--output-tokens", default=None,
            help="With --input-tokens: output lengths (as above), forced with ignore_eos where the server "
            "takes it.",
        ),
        click.option(
            "--tokenizer", default=None,
            help="Counts output tokens when a server sends no usage (and builds token-exact prompts): a "
            "tokenizer.json, a GGUF or an embedded model's name [default: the endpoint's own, when found].",
        ),
    ]  # fmt: skip
    for flag in reversed(flags):
        fn = flag(fn)
    return fn


def load_flags(fn: Any) -> Any:
    """How much and how hard: the load levels, how many requests, for how long."""
    flags: list[Decorator] = [
        click.option(
            "--concurrency", default=None, show_default="1",
            help="Closed loop: requests in flight per endpoint; a list (1,4,16) sweeps.",
        ),
        # an arrival in 11 days to a million a second; outside, a typo (and 1e-300 overflowed the schedule)
        click.option("--rate", default=None, help="Open loop: arrivals per second; a list (1,2,4) sweeps."),
        click.option(
            "--burstiness", default=B.burstiness, show_default=True, type=FiniteFloat(1e-3, 1e3),
            help="Open loop: the gamma shape of the gaps between arrivals (1: Poisson; below 1: bursts).",
        ),
        click.option(
            "--replay-speed", default=None, show_default="1",
            help="With --suite trace:PATH: replay the trace's arrivals this many times faster; a list (1,2) "
            "sweeps.",
        ),
        click.option(
            "--requests", default=None, type=click.IntRange(1), show_default=str(DEFAULT_REQUESTS),
            help="Measured requests per endpoint and load level.",
        ),
        click.option(
            "--duration", default=None, type=SECONDS,
            help="Or: seconds of sending per load level (what is in flight then finishes).",
        ),
        click.option(
            "--take-turns", is_flag=True,
            help="One request at a time over all endpoints, prompt by prompt, taking turns to go first: for "
            "endpoints sharing one machine, which side by side would slow each other.",
        ),
        click.option(
            "--slo", default=None,
            help="Goodput objectives in ms, e.g. ttft=500,tpot=50,e2e=5000: the share of requests meeting "
            "every one.",
        ),
        click.option(
            "--workers", default=None, type=click.IntRange(1, MAX_WORKERS), show_default="1",
            help="Load-generating processes sharing the load (with --ray: one per cluster CPU).",
        ),
        click.option(
            "--ray", default=None, is_flag=False, flag_value="local", metavar="[ADDRESS]",
            help="Run the workers as Ray tasks on the cluster at ADDRESS (host:6379, ray://host:10001, "
            "auto), or on a Ray started for the run when no address is given. Needs lossless[ray].",
        ),
    ]  # fmt: skip
    for flag in reversed(flags):
        fn = flag(fn)
    return fn


def window_flags(fn: Any) -> Any:
    """A level's shape: unmeasured windows, a ramp, a cap; a sweep's stop, repeated runs, probes."""
    flags: list[Decorator] = [
        click.option(
            "--warmup", default=B.warmup.label, show_default=True, metavar="N|SECONDSs",
            help="Unmeasured requests per endpoint and level, sent first: a count (5) or seconds (10s).",
        ),
        click.option(
            "--cooldown", default=B.cooldown.label, show_default=True, metavar="N|SECONDSs",
            help="Unmeasured requests after the measured ones, keeping the load up while those finish: a "
            "count (5) or seconds (10s).",
        ),
        click.option(
            "--ramp", default=B.ramp, show_default=True, type=FiniteFloat(0, 86_400),
            help="Seconds over which each level's concurrency (slot by slot) or rate rises linearly to its "
            "full value (give --warmup as long to measure the full load only).",
        ),
        click.option(
            "--max-concurrency", default=None, type=click.IntRange(1), show_default="1024",
            help="With --rate: requests in flight per endpoint at most; later arrivals wait in the client, "
            "and the wait is their queue delay (never hidden in their latency).",
        ),
        click.option(
            "--until-saturated", is_flag=True,
            help="Stop a sweep of rising loads (--rate 1,2,4,8 or --concurrency) after the first one no "
            "endpoint keeps up with, tested: the wait for the first token growing, fewer served than "
            "offered, or more concurrency buying no throughput.",
        ),
        click.option(
            "--repeat", default=B.repeat, show_default=True, type=click.IntRange(1, MAX_REPEAT),
            help="Run the whole measurement this many times (fresh connections, the endpoints' order "
            "alternating): each statistic gets a between-run 95% CI.",
        ),
        click.option(
            "--probe-rate", default=None, type=FiniteFloat(1e-3, 100), metavar="PER_S",
            help="Light probe requests per second beside each level's load, reported apart against the "
            f"same probe on the idle server ({B.probe_idle} sent first): what a lone user meets.",
        ),
    ]  # fmt: skip
    for flag in reversed(flags):
        fn = flag(fn)
    return fn


def capacity_flags(fn: Any) -> Any:
    """--find-capacity and its search's bounds."""
    flags: list[Decorator] = [
        click.option(
            "--find-capacity", default=None, type=FiniteFloat(1, 100), metavar="PERCENT",
            help="Search for the highest load (from --rate, or --concurrency) at which PERCENT of requests "
            "meet every --slo objective: doubling, then bisecting.",
        ),
        click.option(
            "--capacity-precision", default=B.capacity_precision, show_default=True,
            type=FiniteFloat(0.001, 1),
            help="--find-capacity stops when the loads that held and missed are this close (relative).",
        ),
        click.option(
            "--capacity-budget", default=B.capacity_budget, show_default=True, type=SECONDS,
            help="--find-capacity searches this many seconds at most.",
        ),
    ]  # fmt: skip
    for flag in reversed(flags):
        fn = flag(fn)
    return fn


def client_flags(fn: Any) -> Any:
    """How each request is made: time-outs, retries, hedging and failover, stalls, the seed."""
    flags: list[Decorator] = [
        click.option(
            "--timeout", "timeout_total", default=B.timeout_total, show_default=True, type=SECONDS,
            help="Seconds for one request, from sending to its last byte; a slower one is a time-out.",
        ),
        renamed("--timeout-total", "--timeout", "timeout_total", type=SECONDS),
        click.option(
            "--timeout-connect", default=B.timeout_connect, show_default=True, type=SECONDS,
            help="Seconds to open a connection.",
        ),
        click.option(
            "--timeout-first-token", default=B.timeout_first_token, show_default=True, type=FiniteFloat(0),
            help="Seconds from sending to the first token (0: no limit of its own).",
        ),
        # backoff doubles per attempt: 2**1024 overflows a float
        click.option(
            "--retries", default=B.retries, show_default=True, type=click.IntRange(0, 100),
            help="Further attempts after a retryable failure (bench measures failures, so none by default; "
            "each attempt is recorded).",
        ),
        click.option(
            "--hedge-after", type=MS,
            help="ms: send a 2nd attempt when the 1st has not answered by then; the first answer wins "
            "(lossless advise predicts what it buys).",
        ),
        click.option(
            "--failover", help="A URL to send a request to when its endpoint fails with a retryable error."
        ),
        click.option(
            "--failover-after", type=MS,
            help="ms: with --failover, also fail over when no first token has come by then.",
        ),
        click.option(
            "--stall-threshold", default=B.stall_threshold, show_default=True, type=SECONDS,
            help="Seconds: a longer gap between two events of a stream is counted as a stall.",
        ),
        click.option("--seed", default=B.seed, show_default=True, type=SEED, help=SEED_HELP),
    ]  # fmt: skip
    for flag in reversed(flags):
        fn = flag(fn)
    return fn


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
@window_flags
@capacity_flags
@client_flags
@output_flags("Summary", "records.jsonl, summary.json and summary.csv")
@click.option(
    "--resume", is_flag=True,
    help="Continue the run in --out that was killed: its finished requests are kept, the rest sent.",
)  # fmt: skip
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
