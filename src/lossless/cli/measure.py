"""The commands that measure endpoints: bench, probe, verify. Each parses its flags into its frozen
options (the command's ``options.py``, where every default lives), calls its ``run`` and hands the
result to ``report``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from lossless.bench.options import MAX_WORKERS, BenchOptions
from lossless.bench.workload.synthetic import parse_lengths
from lossless.cli.common import (
    SECONDS,
    SEED,
    FiniteFloat,
    endpoint_flags,
    exit_interrupted,
    friendly_errors,
    output_flags,
    outputs,
)
from lossless.probe.options import ProbeOptions
from lossless.rundir import BENCH_FILES, PROBE, VERIFY
from lossless.validate import float_list, int_list
from lossless.verify.options import VerifyOptions

B, P, V = BenchOptions(), ProbeOptions(), VerifyOptions()


def bench_options(
    urls: tuple[str, ...],
    concurrency: str | None,
    rate: str | None,
    replay_speed: str | None,
    find_capacity: float | None,
    input_tokens: str | None,
    output_tokens: str | None,
    **opts: Any,
) -> BenchOptions:
    """bench's flags -> BenchOptions (bench and watch)."""
    return BenchOptions(
        urls=urls,
        concurrency=None if concurrency is None else int_list(concurrency, "--concurrency"),
        rate=None if rate is None else float_list(rate, "--rate"),
        replay_speed=None if replay_speed is None else float_list(replay_speed, "--replay-speed"),
        find_capacity=None if find_capacity is None else find_capacity / 100,
        input_tokens=None if input_tokens is None else parse_lengths(input_tokens, "--input-tokens"),
        output_tokens=None if output_tokens is None else parse_lengths(output_tokens, "--output-tokens"),
        **opts,
    )


@click.command()
@endpoint_flags
@click.option(
    "--suite",
    default=B.suite,
    show_default=True,
    help="short, long, mixed, lengths, grounded, prefix:TOKENS[,K], file:PATH.jsonl, sharegpt:PATH; "
    "conversations (--requests counts them): chat:TURNS[,THINK_S], conversations:PATH[,THINK_S]; a "
    "timestamped trace replayed at its own times: trace:PATH",
)
@click.option("--api", default=B.api, show_default=True, type=click.Choice(["chat", "completions"]))
@click.option("--stream/--no-stream", default=B.stream, show_default=True)
@click.option("--max-tokens", default=B.max_tokens, show_default=True, type=click.IntRange(1))
@click.option("--concurrency", default=None, help="Requests in flight per endpoint; a list (1,4,16) sweeps.")
# an arrival in 11 days to a million a second; outside, a typo (and 1e-300 overflowed the schedule)
@click.option("--rate", default=None, help="Open loop: arrivals/s; a list (1,2,4) sweeps.")
@click.option(
    "--hedge-after",
    type=FiniteFloat(0, 3_600_000),
    help="ms: send a 2nd attempt when the 1st "
    "has not answered by then; the first answer wins (lossless advise predicts what it buys).",
)
@click.option("--failover", help="A URL to send a request to when its endpoint fails with a retryable error.")
@click.option(
    "--failover-after",
    type=FiniteFloat(0, 3_600_000),
    help="ms: with --failover, also fail over when no first token has come by then.",
)
@click.option(
    "--replay-speed",
    default=None,
    help="With --suite trace:PATH: replay the trace's arrivals this many times faster; a list (1,2) sweeps "
    "[default: 1].",
)
@click.option("--burstiness", default=B.burstiness, show_default=True, type=FiniteFloat(1e-3, 1e3))
@click.option("--requests", default=None, type=click.IntRange(1), help="Measured requests [default: 20].")
@click.option("--duration", default=None, type=SECONDS, help="Or: seconds.")
@click.option(
    "--warmup", default=B.warmup, show_default=True, type=click.IntRange(0), help="Unmeasured requests."
)
# backoff doubles per attempt: 2**1024 overflows a float
@click.option("--retries", default=B.retries, show_default=True, type=click.IntRange(0, 100))
@click.option("--timeout-connect", default=B.timeout_connect, show_default=True, type=SECONDS)
@click.option(
    "--timeout-first-token",
    default=B.timeout_first_token,
    show_default=True,
    type=FiniteFloat(0),
    help="0 = none.",
)
@click.option("--timeout-total", default=B.timeout_total, show_default=True, type=SECONDS)
@click.option("--slo", default=None, help="Goodput objectives in ms, e.g. ttft=500,tpot=50,e2e=5000.")
@click.option("--stall-threshold", default=B.stall_threshold, show_default=True, type=SECONDS)
@click.option("--seed", default=B.seed, show_default=True, type=SEED)
@click.option(
    "--input-tokens",
    default=None,
    help="Token-exact prompts instead of --suite: N, normal:MEAN,SD, uniform:LOW,HIGH, or aa "
    "(100/1k/10k/100k in turn), counted with the model's tokenizer.",
)
@click.option(
    "--output-tokens",
    default=None,
    help="With --input-tokens: output lengths (as above), forced with ignore_eos where the server takes it.",
)
@click.option(
    "--find-capacity",
    default=None,
    type=FiniteFloat(1, 100),
    metavar="PERCENT",
    help="Search for the highest load (from --rate, or --concurrency) at which PERCENT of requests meet "
    "every --slo objective: doubling, then bisecting.",
)
@click.option(
    "--capacity-precision", default=B.capacity_precision, show_default=True, type=FiniteFloat(0.001, 1)
)
@click.option("--capacity-budget", default=B.capacity_budget, show_default=True, type=SECONDS)
@click.option(
    "--workers",
    default=None,
    type=click.IntRange(1, MAX_WORKERS),
    help="Load-generating processes sharing the load [default: 1; with --ray, one per cluster CPU].",
)
@click.option(
    "--ray",
    default=None,
    is_flag=False,
    flag_value="local",
    metavar="[ADDRESS]",
    help="Run the workers as Ray tasks on the cluster at ADDRESS (host:6379, ray://host:10001, auto), "
    "or on a Ray started for the run when no address is given. Needs lossless[ray].",
)
@click.option(
    "--tokenizer",
    default=None,
    help="Count output tokens when a server sends no usage: tokenizer.json, GGUF or embedded model name.",
)
@output_flags("Summary", "records and summaries")
@friendly_errors
def bench(**flags: Any) -> None:
    """Benchmark OpenAI-compatible endpoints (none given: the embedded server)."""
    from lossless.bench.run import run as run_bench
    from lossless.console import people_console
    from lossless.report import bench as show

    options = bench_options(**flags)
    outputs(options.out_dir, BENCH_FILES, options.html)
    summary, records = run_bench(options)
    console = people_console(stderr=options.as_json)
    show.emit(summary, records, console, options.as_json, options.out_dir, options.html)
    if summary.interrupted:
        exit_interrupted()


@click.command()
@click.argument("url", required=False)
@click.option("--model", default=None, help="Model name sent to URL (the embedded model without a URL).")
@click.option("--api-key-env", default=None, help="Environment variable holding URL's API key.")
@click.option(
    "--repeats", default=P.repeats, show_default=True, type=click.IntRange(2, 50), help="Requests per arm."
)
@click.option("--max-tokens", default=P.max_tokens, show_default=True, type=click.IntRange(8))
@output_flags("Checks", "probe.json", html=False)
@friendly_errors
def probe(url: str | None, **opts: Any) -> None:
    """Which request parameters does an endpoint honour? (none given: the embedded server)"""
    from lossless.console import people_console
    from lossless.probe.run import run as run_probe
    from lossless.report import probe as show

    options = ProbeOptions(url=url, **opts)
    outputs(options.out_dir, (PROBE,))
    result = run_probe(options)
    show.emit(result, people_console(stderr=options.as_json), options.as_json, options.out_dir)


@click.command()
@click.argument("baseline", required=False)
@click.argument("candidate", required=False)
@click.option("--model", default=None, help="Model name sent to both (the embedded model without URLs).")
@click.option("--candidate-model", default=None, help="Model name sent to CANDIDATE (default: --model).")
@click.option("--api-key-env", default=None, help="Environment variable holding BASELINE's API key.")
@click.option("--candidate-api-key-env", default=None, help="CANDIDATE's (default: --api-key-env).")
@click.option(
    "--endpoints",
    "endpoints_file",
    type=click.Path(path_type=Path),
    help="TOML with a [baseline] and a [candidate] table (URL, model, key, body, headers), instead of URLs.",
)
@click.option("--budget", default="default", show_default=True, help="small|default|large or PxSxT.")
@click.option("--api", default=V.api, show_default=True, type=click.Choice(["completions", "chat"]))
@click.option("--seed", default=V.seed, show_default=True, type=SEED)
@click.option(
    "--timeout",
    default=V.timeout,
    show_default=True,
    type=SECONDS,
    help="Seconds for one request; a slower one counts as failed and the run goes on.",
)
@click.option(
    "--tasks",
    "task_set",
    default=None,
    help="A task set (humaneval, arithmetic, tools, bfcl-simple, bfcl-multiple, bfcl-irrelevance) or task "
    "file, run greedily on both, in place of the bundled questions; with tools, tool-call parity too.",
)
@click.option("--tasks-limit", default=None, type=click.IntRange(1), help="Only --tasks' first N tasks.")
@output_flags("Verdict", "verify.json")
@friendly_errors
def verify(baseline: str | None, candidate: str | None, budget: str, **opts: Any) -> None:
    """Does CANDIDATE serve the same model as BASELINE? Exit 0 equivalent, 1 different, 3 inconclusive.

    With no URLs: the embedded engine's speculative decoding against its plain decoding."""
    from lossless.console import people_console
    from lossless.report import verify as show
    from lossless.verify.budget import parse_budget
    from lossless.verify.run import EXIT_CODES, run as run_verify

    options = VerifyOptions(baseline=baseline, candidate=candidate, budget=parse_budget(budget), **opts)
    outputs(options.out_dir, (VERIFY,), options.html)
    result = run_verify(options)
    console = people_console(stderr=options.as_json)
    show.emit(result, console, options.as_json, options.out_dir, options.html)
    sys.exit(EXIT_CODES[result.verdict])
