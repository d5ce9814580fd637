"""``lossless demo``: the embedded model, served plainly and with speculative decoding, benchmarked,
verified and reported in one command.

Served as it runs fastest on a CPU: bfloat16 weights, and the trained DSpark head (with prompt lookup
beside it) as the drafter; n-gram drafting for any other model, which the head was not trained for.

Steps: pull the model (a progress bar the first time) -> load it once -> two embedded servers on the same
weights -> bench both (short, long and input-grounded prompts, one request at a time, taking turns) ->
verify that the speculative server serves the same model -> ``report.html`` from what both wrote in one
folder -> ``DemoResult``, which ``summary_lines`` turns into the few lines printed on stdout.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from lossless import models
from lossless.analyze import compare_classes
from lossless.console import people_console
from lossless.verify.stage import Budget, parse_budget

if TYPE_CHECKING:
    from lossless.endpoints import Endpoint

Pair = tuple["Endpoint", "Endpoint"]  # (plain, speculative)

SUITE = "short+long+grounded"  # grounded: answers that copy the prompt, where n-gram drafting pays
# --quick (CI): the smallest run that still exercises every step and gives the statistics two samples
QUICK_BUDGET = Budget(prompts=3, samples=4, max_tokens=12, tasks=8, permutations=500)
# The demo's: "small" said "inconclusive, about 2x the samples and 1.4x the tasks would settle it" against
# the embedded model on 2 cores (float32, n-gram). In bfloat16 with the DSpark head, 5 x 12 said
# "inconclusive, about 1.1x the samples"; this is 1.4x that, and the whole demo takes ~3 minutes there.
DEMO_BUDGET = Budget(prompts=6, samples=14, max_tokens=16, tasks=18)
STEPS = 5


@dataclass(frozen=True)
class DemoOptions:
    out_dir: Path = Path("lossless-demo")  # bench files, verify.json and report.html
    requests: int = 6  # measured requests per suite (short, long, grounded) and endpoint
    max_tokens: int = 64  # per benchmark request
    budget: Budget = DEMO_BUDGET  # the verification's
    warmup: int = 1  # unmeasured requests per endpoint first (the first forward pass is slow)
    # benchmark requests' temperature: 0 (greedy) by default, so both modes write the same answers (in
    # bfloat16 they part on some prompts, see ``dtype``) and are timed on equal work; verification samples
    # at its own temperatures either way
    temperature: float = 0.0
    model: str | None = None  # embedded model name or checkpoint path; None -> the default model
    # the speculative server's drafter (`engine.drafts`); None -> dspark for the default model (the shipped
    # head was trained for it), ngram for any other
    speculative: str | None = None
    # bfloat16: plain decoding 2.3x float32's speed here (55 against 25 tok/s), and drafts pay off more (a
    # forward over several tokens costs little more than over one; in float32 1.5-1.7x). Its greedy texts
    # can part from plain decoding's: a forward over several tokens rounds differently from one over one.
    dtype: str = "bfloat16"
    seed: int = 0

    @property
    def drafter(self) -> str:
        if self.speculative is not None:
            return self.speculative
        return "dspark" if self.model in (None, models.DEFAULT_MODEL) else "ngram"


@dataclass(frozen=True)
class DemoResult:
    model: str
    drafter: str  # the speculative server's, as `--speculative` names it
    requests: int  # measured per endpoint
    speedup: dict[str, Any] | None  # speculative/plain p50 output speed: ratio, ci95
    ttft: dict[str, Any] | None  # speculative/plain p50 TTFT: ratio, ci95
    by_class: dict[str, dict[str, Any]]  # prompt class -> speculative/plain p50 output speed: ratio, ci95
    acceptance: float | None  # share of drafted tokens accepted (the server's /metrics)
    verdict: str  # equivalent | different | inconclusive
    report: Path
    seconds: float


def demo_options(
    out_dir: Path,
    quick: bool = False,
    *,
    requests: int | None = None,
    max_tokens: int | None = None,
    verify_budget: str | None = None,
    model: str | None = None,
    speculative: str | None = None,
    dtype: str = "bfloat16",
    seed: int = 0,
    temperature: float = 0.0,
) -> DemoOptions:
    """The CLI's options -> DemoOptions: ``--quick`` lowers the defaults; explicit options win."""
    base = DemoOptions(requests=4, max_tokens=24, budget=QUICK_BUDGET) if quick else DemoOptions()
    return replace(
        base,
        out_dir=out_dir,
        requests=requests or base.requests,
        max_tokens=max_tokens or base.max_tokens,
        budget=base.budget if verify_budget is None else parse_budget(verify_budget),
        model=model,
        speculative=speculative,
        dtype=dtype,
        seed=seed,
        temperature=temperature,
    )


def run(options: DemoOptions, console: Console | None = None) -> DemoResult:
    """Every step, with progress on ``console`` (stderr); the files land in ``options.out_dir``."""
    from lossless.config import ServeConfig
    from lossless.endpoints import Endpoint
    from lossless.engine.drafts import parse_drafter_spec
    from lossless.report import html
    from lossless.server.launch import start_embedded
    from lossless.server.main import load_model

    console = console or people_console(stderr=True)
    started = time.monotonic()
    _step(console, 1, "the model (pulled on first use)")
    models.resolve(options.model, pull_missing=True)
    plain = ServeConfig(port=0, model=options.model, dtype=options.dtype, speculative="none")
    spec = replace(plain, speculative=options.drafter)
    parse_drafter_spec(spec.speculative)  # a bad spec fails before the model loads
    with console.status("loading the model", spinner="dots"):
        loaded = load_model(plain)
    _step(console, 2, f"serving {loaded.name} ({options.dtype}): plain and speculative decoding "
          f"({_drafter_name(spec.speculative)}), one copy of the weights")  # fmt: skip
    with start_embedded(plain, loaded=loaded) as plain_url, start_embedded(spec, loaded=loaded) as spec_url:
        pair = (Endpoint("plain", plain_url, loaded.name), Endpoint("speculative", spec_url, loaded.name))
        summary = _bench(pair, options, console)
        verdict = _verify(pair, options, console)
    _step(console, 5, "the report")
    report = html.write(options.out_dir / "report.html", html.build(options.out_dir))
    seconds = time.monotonic() - started
    return _result(summary, loaded.name, spec.speculative, verdict, report.resolve(), seconds)


def _bench(pair: Pair, options: DemoOptions, console: Console) -> dict[str, Any]:
    from lossless import bench
    from lossless.report import files, terminal

    parts = SUITE.count("+") + 1
    suites = SUITE.replace("+", ", ")
    _step(console, 3, f"benchmark: {options.requests} requests per suite ({suites}), {options.max_tokens} "
          f"tokens, temperature {options.temperature:g}, one at a time, taking turns")  # fmt: skip
    bench_options = bench.BenchOptions(
        urls=tuple(e.base_url for e in pair), model=pair[0].model, suite=SUITE,
        max_tokens=options.max_tokens, concurrency="1", requests=options.requests * parts,
        warmup=options.warmup, seed=options.seed, out_dir=options.out_dir,
    )  # fmt: skip
    # Two servers on one CPU: one request at a time over both, so neither slows the other down.
    body = {"temperature": options.temperature}
    endpoints = tuple(replace(e, body=body) for e in pair)
    config = replace(bench.plan(bench_options), endpoints=endpoints, serial=True)
    summary, records = bench.measure(config, bench_options)
    # each prompt class on its own too: copying prompts are where n-gram drafting pays, and a p50 over
    # all classes hides them
    summary["class_comparisons"] = compare_classes(records, [e.name for e in pair], options.seed)
    files.write(summary, options.out_dir)
    terminal.render(summary, console)
    return summary


def _verify(pair: Pair, options: DemoOptions, console: Console) -> str:
    from lossless.verify import stage

    b = options.budget
    _step(console, 4, f"verify: is speculative decoding the same model? ({b.prompts} prompts x {b.samples} "
          f"samples x {b.max_tokens} tokens, {b.tasks} tasks)")  # fmt: skip
    # One request at a time here too: the two servers share one engine's weights and KV cache.
    config = stage.VerifyConfig(pair, b, seed=options.seed, concurrency=1)
    with console.status("verifying (sampling both servers, then testing)", spinner="dots"):
        result = asyncio.run(stage.verify(*pair, config))
    stage.write(result, options.out_dir)
    stage.render(result, console)
    return result.verdict


def _result(
    summary: dict[str, Any], model: str, drafter: str, verdict: str, report: Path, seconds: float
) -> DemoResult:
    def comparison(metric: str) -> dict[str, Any] | None:
        found = [c for c in summary["comparisons"] if c["metric"] == metric and c["stat"] == "p50"]
        return found[0] if found else None

    spec: dict[str, Any] = next((e for e in summary["endpoints"] if e["name"] == "speculative"), {})
    by_class = {
        c["class"]: c
        for c in summary.get("class_comparisons", [])
        if c["metric"] == "output_tps" and c["stat"] == "p50"
    }
    acceptance = (spec.get("speculative") or {}).get("acceptance_rate")
    n = spec.get("requests", {}).get("ok", 0)
    speedup, ttft = comparison("output_tps"), comparison("ttft_ms")
    return DemoResult(model, drafter, n, speedup, ttft, by_class, acceptance, verdict, report, seconds)


def summary_lines(r: DemoResult) -> list[str]:
    """What stdout gets: the figures a person came for, and where the rest is."""
    lines = [f"lossless demo: {r.model}, plain against speculative decoding ({_drafter_name(r.drafter)}), "
             f"{r.requests} requests each, {r.seconds:.0f} s"]  # fmt: skip
    if r.speedup is not None:
        lines.append(
            f"speed-up (output speed p50, speculative / plain): {_ratio(r.speedup)} over all prompts"
        )
        for cls, c in sorted(r.by_class.items(), key=lambda kv: -kv[1]["ratio"]):
            lines.append(f"  {cls} prompts: {_ratio(c)}")
    else:
        lines.append("speed-up: not measured (too few successful requests)")
    if r.ttft is not None:
        lo, hi = r.ttft["ci95"]
        change = (r.ttft["ratio"] - 1) * 100
        lines.append(f"TTFT (p50): {change:+.0f}% with speculative decoding (95% CI {lo:.2f}x-{hi:.2f}x)")
    if r.acceptance is not None:
        lines.append(f"drafts: {r.acceptance:.0%} of drafted tokens accepted")
    lines.append(f"verify: {r.verdict} (is speculative decoding the same model as plain decoding?)")
    lines.append(f"report: {r.report}")
    return lines


# --- helpers ----------------------------------------------------------------------------------------


def _drafter_name(spec: str) -> str:
    kind, _, path = spec.partition(":")
    names = {"dspark": "the DSpark draft head, prompt lookup beside it", "ngram": "n-gram prompt lookup",
             "draft": f"draft model {path}", "none": "no drafter"}  # fmt: skip
    return names.get(kind, spec)


def _ratio(c: dict[str, Any]) -> str:
    lo, hi = c["ci95"]
    return f"{c['ratio']:.2f}x (95% CI {lo:.2f}-{hi:.2f})"


def _step(console: Console, n: int, text: str) -> None:
    console.print(f"[bold][{n}/{STEPS}][/bold] {text}", highlight=False)
