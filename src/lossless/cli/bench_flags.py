"""bench's flags, by what they set: the decorators that give ``lossless bench`` its options (watch and
sweep take them from bench's command). Every default is ``BenchOptions``' own (``B``), shown by --help."""

from __future__ import annotations

from typing import Any

import click

from lossless.bench.options import DEFAULT_REQUESTS, MAX_REPEAT, MAX_WORKERS, BenchOptions
from lossless.cli.common import SECONDS, SEED, SEED_HELP, Decorator, FiniteFloat, api_flag, renamed
from lossless.client.api_names import APIS

B = BenchOptions()
MS = FiniteFloat(0, 3_600_000)  # a millisecond delay, at most an hour


def _stacked(fn: Any, flags: list[Decorator]) -> Any:
    """``fn`` with ``flags``, which --help lists in the order given."""
    for flag in reversed(flags):
        fn = flag(fn)
    return fn


def workload_flags(fn: Any) -> Any:
    """What is sent: the suite, the API, the answer's length, token-exact lengths."""
    flags: list[Decorator] = [
        click.option(
            "--suite",
            default=B.suite,
            show_default=True,
            help="short, long, mixed, lengths, grounded, prefix:TOKENS[,K], file:PATH.jsonl, sharegpt:PATH; "
            "conversations (--requests counts them): chat:TURNS[,THINK_S], conversations:PATH[,THINK_S]; "
            "a timestamped trace replayed at its own times: trace:PATH; A+B takes turns.",
        ),
        api_flag(B.api, APIS),
        click.option(
            "--stream",
            "stream_way",
            default="on" if B.stream else "off",
            show_default=True,
            is_flag=False,
            flag_value="on",
            type=click.Choice(["on", "off", "both"]),
            help="Streamed answers (time to first token, per-token times), whole ones (off: end-to-end "
            "only), or both: each endpoint twice, the same prompts each way, taking turns, with ratios.",
        ),
        click.option("--no-stream", "no_stream", is_flag=True, hidden=True),  # --stream off's old name
        click.option(
            "--max-tokens",
            default=B.max_tokens,
            show_default=True,
            type=click.IntRange(1),
            help="Output tokens asked for per request (a prompt of a file may ask its own).",
        ),
        click.option(
            "--input-tokens",
            default=None,
            help="Token-exact prompts instead of --suite: N, normal:MEAN,SD, uniform:LOW,HIGH, or aa "
            "(100/1k/10k/100k in turn), counted with the model's tokenizer.",
        ),
        click.option(
            "--output-tokens",
            default=None,
            help="With --input-tokens: output lengths (as above), forced with ignore_eos where the server "
            "takes it.",
        ),
        click.option(
            "--tokenizer",
            default=None,
            help="Counts output tokens when a server sends no usage (and builds token-exact prompts): a "
            "tokenizer.json, a GGUF or an embedded model's name [default: the endpoint's own, when found].",
        ),
    ]
    return _stacked(fn, flags)


def load_flags(fn: Any) -> Any:
    """How much and how hard: the load levels, how many requests, for how long."""
    flags: list[Decorator] = [
        click.option(
            "--concurrency",
            default=None,
            show_default="1",
            help="Closed loop: requests in flight per endpoint; a list (1,4,16) sweeps.",
        ),
        # an arrival in 11 days to a million a second; outside, a typo (and 1e-300 overflowed the schedule)
        click.option("--rate", default=None, help="Open loop: arrivals per second; a list (1,2,4) sweeps."),
        click.option(
            "--burstiness",
            default=B.burstiness,
            show_default=True,
            type=FiniteFloat(1e-3, 1e3),
            help="Open loop: the gamma shape of the gaps between arrivals (1: Poisson; below 1: bursts).",
        ),
        click.option(
            "--replay-speed",
            default=None,
            show_default="1",
            help="With --suite trace:PATH: replay the trace's arrivals this many times faster; a list (1,2) "
            "sweeps.",
        ),
        click.option(
            "--requests",
            default=None,
            type=click.IntRange(1),
            show_default=str(DEFAULT_REQUESTS),
            help="Measured requests per endpoint and load level.",
        ),
        click.option(
            "--duration",
            default=None,
            type=SECONDS,
            help="Or: seconds of sending per load level (what is in flight then finishes).",
        ),
        click.option(
            "--take-turns",
            is_flag=True,
            help="One request at a time over all endpoints, prompt by prompt, taking turns to go first: for "
            "endpoints sharing one machine, which side by side would slow each other.",
        ),
        click.option(
            "--slo",
            default=None,
            help="Goodput objectives in ms, e.g. ttft=500,tpot=50,e2e=5000: the share of requests meeting "
            "every one.",
        ),
    ]
    return _stacked(fn, flags)


def process_flags(fn: Any) -> Any:
    """Who makes the load: this process, local worker processes, or Ray tasks."""
    flags: list[Decorator] = [
        click.option(
            "--workers",
            default=None,
            type=click.IntRange(1, MAX_WORKERS),
            show_default="1",
            help="Load-generating processes sharing the load (with --ray: one per cluster CPU).",
        ),
        click.option(
            "--ray",
            default=None,
            is_flag=False,
            flag_value="local",
            metavar="[ADDRESS]",
            help="Run the workers as Ray tasks on the cluster at ADDRESS (host:6379, ray://host:10001, "
            "auto), or on a Ray started for the run when no address is given. Needs lossless[ray].",
        ),
    ]
    return _stacked(fn, flags)


def window_flags(fn: Any) -> Any:
    """A level's shape: unmeasured windows, a ramp, a cap on requests in flight."""
    flags: list[Decorator] = [
        click.option(
            "--warmup",
            default=B.warmup.label,
            show_default=True,
            metavar="N|SECONDSs",
            help="Unmeasured requests per endpoint and level, sent first: a count (5) or seconds (10s).",
        ),
        click.option(
            "--cooldown",
            default=B.cooldown.label,
            show_default=True,
            metavar="N|SECONDSs",
            help="Unmeasured requests after the measured ones, keeping the load up while those finish: a "
            "count (5) or seconds (10s).",
        ),
        click.option(
            "--ramp",
            default=B.ramp,
            show_default=True,
            type=FiniteFloat(0, 86_400),
            help="Seconds over which each level's concurrency (slot by slot) or rate rises linearly to its "
            "full value (give --warmup as long to measure the full load only).",
        ),
        click.option(
            "--max-concurrency",
            default=None,
            type=click.IntRange(1),
            show_default="1024",
            help="With --rate: requests in flight per endpoint at most; later arrivals wait in the client, "
            "and the wait is their queue delay (never hidden in their latency).",
        ),
    ]
    return _stacked(fn, flags)


def run_flags(fn: Any) -> Any:
    """Over the levels: a sweep's stop, repeated runs, probes beside each level's load."""
    flags: list[Decorator] = [
        click.option(
            "--until-saturated",
            is_flag=True,
            help="Stop a sweep of rising loads (--rate 1,2,4,8 or --concurrency) after the first one no "
            "endpoint keeps up with, tested: the wait for the first token growing, fewer served than "
            "offered, or more concurrency buying no throughput.",
        ),
        click.option(
            "--repeat",
            default=B.repeat,
            show_default=True,
            type=click.IntRange(1, MAX_REPEAT),
            help="Run the whole measurement this many times (fresh connections, the endpoints' order "
            "alternating): each statistic gets a between-run 95% CI, and the 95% interval one more "
            "run falls in.",
        ),
        click.option(
            "--probe-rate",
            default=None,
            type=FiniteFloat(1e-3, 100),
            metavar="PER_S",
            help="Light probe requests per second beside each level's load, reported apart against the "
            f"same probe on the idle server ({B.probe_idle} sent first): what a lone user meets.",
        ),
    ]
    return _stacked(fn, flags)


def capacity_flags(fn: Any) -> Any:
    """--find-capacity and its search's bounds."""
    flags: list[Decorator] = [
        click.option(
            "--find-capacity",
            default=None,
            type=FiniteFloat(1, 100),
            metavar="PERCENT",
            help="Search for the highest load (from --rate, or --concurrency) at which PERCENT of requests "
            "meet every --slo objective: doubling, then bisecting.",
        ),
        click.option(
            "--capacity-precision",
            default=B.capacity_precision,
            show_default=True,
            type=FiniteFloat(0.001, 1),
            help="--find-capacity stops when the loads that held and missed are this close (relative).",
        ),
        click.option(
            "--capacity-budget",
            default=B.capacity_budget,
            show_default=True,
            type=SECONDS,
            help="--find-capacity searches this many seconds at most.",
        ),
    ]
    return _stacked(fn, flags)


def timeout_flags(fn: Any) -> Any:
    """How long a request may take: to connect, to its first token, to its end."""
    flags: list[Decorator] = [
        click.option(
            "--timeout",
            "timeout_total",
            default=B.timeout_total,
            show_default=True,
            type=SECONDS,
            help="Seconds for one request, from sending to its last byte; a slower one is a time-out.",
        ),
        renamed("--timeout-total", "--timeout", "timeout_total", type=SECONDS),
        click.option(
            "--timeout-connect",
            default=B.timeout_connect,
            show_default=True,
            type=SECONDS,
            help="Seconds to open a connection.",
        ),
        click.option(
            "--timeout-first-token",
            default=B.timeout_first_token,
            show_default=True,
            type=FiniteFloat(0),
            help="Seconds from sending to the first token (0: no limit of its own).",
        ),
    ]
    return _stacked(fn, flags)


def client_flags(fn: Any) -> Any:
    """How each request is made: retries, hedging and failover, stalls, the seed."""
    flags: list[Decorator] = [
        # backoff doubles per attempt: 2**1024 overflows a float
        click.option(
            "--retries",
            default=B.retries,
            show_default=True,
            type=click.IntRange(0, 100),
            help="Further attempts after a retryable failure (bench measures failures, so none by default; "
            "each attempt is recorded).",
        ),
        click.option(
            "--hedge-after",
            type=MS,
            help="ms: send a 2nd attempt when the 1st has not answered by then; the first answer wins "
            "(lossless advise predicts what it buys).",
        ),
        click.option(
            "--failover",
            help="A URL to send a request to when its endpoint fails with a retryable error.",
        ),
        click.option(
            "--failover-after",
            type=MS,
            help="ms: with --failover, also fail over when no first token has come by then.",
        ),
        click.option(
            "--stall-threshold",
            default=B.stall_threshold,
            show_default=True,
            type=SECONDS,
            help="Seconds: a longer gap between two events of a stream is counted as a stall.",
        ),
        click.option("--seed", default=B.seed, show_default=True, type=SEED, help=SEED_HELP),
    ]
    return _stacked(fn, flags)
