"""``lossless demo``: the embedded model, served plainly and with speculative decoding, benchmarked,
verified and reported in one command.

Served as every command serves the embedded model (``provision``): weights in the fastest exact dtype
for the CPU (bfloat16 where it computes it natively), and for the speculative server the trained DSpark
head (with prompt lookup beside it); n-gram drafting for any other model, which the head was not trained
for.

Steps: pull the model (a progress bar the first time) -> load it once -> two embedded servers on the same
weights -> bench both (short, long and input-grounded prompts, one request at a time, taking turns) ->
verify that the speculative server serves the same model -> ``report.html`` from what both wrote in one
folder -> ``DemoResult``, which ``report.demo.summary_lines`` turns into the few lines on stdout.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from lossless import models, rundir
from lossless.client.endpoints import Endpoint
from lossless.console import people_console
from lossless.demo.options import DemoOptions, demo_options
from lossless.provision import embedded
from lossless.report.demo import DemoResult

if TYPE_CHECKING:
    from lossless.analyze import Comparison, Summary

__all__ = ["DemoOptions", "DemoResult", "demo_options", "run"]

Pair = tuple[Endpoint, ...]  # (plain, speculative)

SUITE = "short+long+grounded"  # grounded: answers that copy the prompt, where n-gram drafting pays
STEPS = 5


def run(options: DemoOptions, console: Console | None = None) -> DemoResult:
    """Every step, with progress on ``console`` (stderr); the files land in ``options.out_dir``."""
    from lossless.report import html

    console = console or people_console(stderr=True)
    started = time.monotonic()
    _step(console, 1, "the model (pulled on first use)")
    models.resolve(options.embedded.model, pull_missing=True)
    with ExitStack() as stack:
        with console.status("loading the model", spinner="dots"):
            served = stack.enter_context(embedded.serve_embedded(options.embedded, speculative=True))
        _step(
            console,
            2,
            f"serving {served.model} ({served.dtype_reason}): plain and speculative "
            f"decoding ({embedded.drafter_name(options.drafter)}), one copy of the weights",
        )
        summary = _bench(served.endpoints, options, console)
        verdict = _verify(served.endpoints, options, console)
    _step(console, 5, "the report")
    report = html.write_page(options.out_dir / rundir.REPORT, html.build(options.out_dir))
    seconds = time.monotonic() - started
    return _result(summary, served.model, options.drafter, verdict, report.resolve(), seconds)


def _bench(pair: Pair, options: DemoOptions, console: Console) -> Summary:
    from lossless.bench.options import BenchOptions
    from lossless.bench.phases import Window
    from lossless.bench.run import plan, run_plan
    from lossless.report import terminal

    parts = SUITE.count("+") + 1
    suites = SUITE.replace("+", ", ")
    _step(
        console,
        3,
        f"benchmark: {options.requests} requests per suite ({suites}), {options.max_tokens} "
        f"tokens, temperature {options.temperature:g}, one at a time, taking turns",
    )
    bench_options = BenchOptions(
        urls=tuple(e.base_url for e in pair),
        model=pair[0].model,
        suite=SUITE,
        max_tokens=options.max_tokens,
        concurrency=(1,),
        requests=options.requests * parts,
        warmup=Window(options.warmup),
        seed=options.seed,
        out_dir=options.out_dir,
    )
    # Two servers on one CPU: one request at a time over both, so neither slows the other down.
    body = {"temperature": options.temperature}
    endpoints = tuple(replace(e, body=body) for e in pair)
    planned = plan(bench_options)
    # each prompt class on its own too (by_class): copying prompts are where n-gram drafting pays, and a
    # p50 over all classes hides them
    schedule = replace(planned.run, endpoints=endpoints, serial=True)
    summary, _ = run_plan(replace(planned, run=schedule, by_class=True))
    rundir.write(summary, options.out_dir)
    terminal.render(summary, console)
    return summary


def _verify(pair: Pair, options: DemoOptions, console: Console) -> str:
    from lossless.report import verify as show
    from lossless.verify.result import VerifyConfig
    from lossless.verify.run import verify

    b = options.budget
    _step(
        console,
        4,
        f"verify: is speculative decoding the same model? ({b.prompts} prompts x up to "
        f"{b.samples} samples x {b.max_tokens} tokens, {b.tasks} tasks)",
    )
    # One request at a time here too: the two servers share one engine.
    config = VerifyConfig(b, seed=options.seed, concurrency=1)
    with console.status("verifying (sampling both servers, then testing)", spinner="dots"):
        result = asyncio.run(verify(pair[0], pair[1], config))
    rundir.emit_json(result, False, options.out_dir, rundir.VERIFY)
    show.render(result, console)
    return result.verdict


def _result(
    summary: Summary, model: str, drafter: str, verdict: str, report: Path, seconds: float
) -> DemoResult:
    def comparison(metric: str) -> Comparison | None:
        found = [c for c in summary.comparisons if c.metric == metric and c.stat == "p50"]
        return found[0] if found else None

    spec = next((e for e in summary.endpoints if e.name == "speculative"), None)
    by_class = {
        c.prompt_class: c
        for c in summary.class_comparisons or ()
        if c.metric == "output_tps" and c.stat == "p50"
    }
    acceptance = None if spec is None or spec.speculative is None else spec.speculative.acceptance_rate
    n = 0 if spec is None else spec.overall.requests.ok
    speedup, ttft = comparison("output_tps"), comparison("ttft_ms")
    return DemoResult(model, drafter, n, speedup, ttft, by_class, acceptance, verdict, report, seconds)


def _step(console: Console, n: int, text: str) -> None:
    console.print(f"[bold][{n}/{STEPS}][/bold] {text}", highlight=False)
