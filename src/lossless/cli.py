"""The ``lossless`` command: parse options into a frozen config, call a stage. Nothing else lives here."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from lossless import __version__, checks
from lossless.errors import LosslessError, UsageError


def _friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """User mistakes and unreachable things become one line on stderr and exit code 2, no traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LosslessError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper


class FiniteFloat(click.FloatRange):
    """A FloatRange that also refuses nan and inf. Every comparison with nan is false, so FloatRange lets
    it through: ``--duration nan`` never stopped sending and ``--burstiness nan`` spun a core at 100%."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


SEED = click.IntRange(0, 2**32 - 1)  # numpy's generators refuse negative seeds; torch's overflow past 2**64
THREADS = click.IntRange(1, 4096)  # torch's thread count; a huge one overflowed after the model loaded
SECONDS = FiniteFloat(0, min_open=True)
BENCH_FILES = ("records.jsonl", "summary.json", "summary.csv")  # what bench --out writes
MAX_SAMPLES, MAX_VERIFY_TOKENS = 10_000, 4096  # verify's budget: far past "large" (16 x 32 tokens)
MAX_CONCURRENCY = 100_000  # in flight per endpoint, each a task and a socket: past this, memory runs out


def _outputs(folder: Path | None, files: tuple[str, ...], page: Path | None = None) -> None:
    """--out and --html can be written: checked before the run, so that no result is lost to a late
    failure (a file where a folder should be, a read-only disk)."""
    if folder is not None:
        checks.writable_dir(folder, "--out", files)
    if page is not None:
        checks.writable_file(page, "--html")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lossless")
def main() -> None:
    """Measure and verify LLM endpoints; serve a real model with lossless speculative decoding."""


# --- models -----------------------------------------------------------------------------------------


@main.group()
def models() -> None:
    """Manage the embedded model cache ($LOSSLESS_HOME/models)."""


@models.command("pull")
@click.argument("name", required=False)
@_friendly_errors
def models_pull(name: str | None) -> None:
    """Fetch an embedded model (default: smollm2-135m-instruct) into the cache."""
    from lossless import models as cache

    model = cache.EMBEDDED.get(name or cache.DEFAULT_MODEL)
    if model is None:
        raise LosslessError(f"unknown model {name!r}; embedded models: {', '.join(sorted(cache.EMBEDDED))}")
    if not cache.cached_path(model).is_file():  # $LOSSLESS_HOME may name a file or a read-only place
        checks.writable_dir(cache.models_dir(), "the model cache ($LOSSLESS_HOME/models)")
    path = cache.pull(model)
    click.echo(str(path))


@models.command("list")
@_friendly_errors
def models_list() -> None:
    """Show the cached models."""
    from lossless import models as cache

    cached = cache.list_cached()
    if not cached:
        click.echo(f"no models cached in {cache.models_dir()} (run `lossless models pull`)", err=True)
    for m in cached:
        click.echo(f"{m.name}\t{m.size_bytes / 1e6:.1f} MB\t{m.path}")


# --- serve ------------------------------------------------------------------------------------------


@main.command()
@click.option("--model", default=None, help="Embedded model name or checkpoint path (GGUF or HF folder).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--dtype", default="float32", show_default=True, type=click.Choice(["float32", "bfloat16"]))
@click.option(
    "--max-queue", default=64, show_default=True, type=click.IntRange(1), help="Queue size before 429."
)
@click.option("--threads", default=None, type=THREADS, help="Torch threads (default: torch's).")
@click.option(
    "--speculative",
    default="none",
    show_default=True,
    help="Lossless drafter: ngram, draft:PATH, dspark (the trained head; dspark:DIR) or none.",
)
@click.option("--spec-k", default=None, type=int, help="Longest draft per step [ngram 8, draft 4, dspark 7].")
@click.option(
    "--spec-threshold",
    default=None,
    type=FiniteFloat(),
    help="draft:PATH stops after a token below this [0.3]; dspark below this predicted survival "
    "[0.1 with bfloat16 weights, 0.3 with float32].",
)
@click.option(
    "--spec-tree",
    default=None,
    type=int,
    help="dspark: verify a tree of up to this many candidate tokens per step [4]; 0: one chain.",
)
@_friendly_errors
def serve(
    model: str | None,
    host: str,
    port: int,
    dtype: str,
    max_queue: int,
    threads: int | None,
    speculative: str,
    spec_k: int | None,
    spec_threshold: float | None,
    spec_tree: int | None,
) -> None:
    """Serve a model behind an OpenAI-compatible HTTP API."""
    from lossless.config import ServeConfig
    from lossless.engine.drafts import parse_drafter_spec
    from lossless.server.main import serve as run_server

    parse_drafter_spec(speculative, spec_k, spec_threshold, spec_tree)  # a bad spec fails before loading
    config = ServeConfig(
        model=model, host=host, port=port, dtype=dtype, max_queue=max_queue, threads=threads,
        speculative=speculative, spec_k=spec_k, spec_threshold=spec_threshold, spec_tree=spec_tree,
    )  # fmt: skip
    run_server(config)


# --- draft ------------------------------------------------------------------------------------------


@main.group()
def draft() -> None:
    """Draft heads for speculative decoding."""


@draft.command("train")
@click.option(
    "--out", "out_dir", default="lossless-draft", show_default=True, type=click.Path(path_type=Path)
)
@click.option("--model", default=None, help="Embedded model name or checkpoint path [smollm2-135m-instruct].")
@click.option("--seed", default=0, show_default=True, type=SEED)
@click.option("--steps", default=None, type=click.IntRange(1), help="Optimizer steps [the recipe's].")
@click.option("--prompts", default=None, type=click.IntRange(1), help="Only the first N bundled prompts.")
@click.option(
    "--written", default=None, type=click.IntRange(0), help="Prompts the model writes itself [2400]."
)
@click.option(  # the engine is loaded for training with a 1024-token context
    "--max-new", default=None, type=click.IntRange(1, 1024), help="Answer tokens at most [192]."
)
@click.option("--threads", default=None, type=THREADS, help="Torch threads (default: torch's).")
@_friendly_errors
def draft_train(out_dir: Path, model: str | None, threads: int | None, **changes: int | None) -> None:
    """Self-distil a DSpark-style draft head from the model's own answers to the bundled prompts and
    to prompts it writes itself.

    Writes head.safetensors, head.json (with its sha256), recipe.json and train_log.jsonl into --out,
    and prints the held-out evaluation; `lossless serve --speculative dspark:OUT` uses the head.
    """
    from lossless.console import stderr_console
    from lossless.draft import train as stage

    train_files = ("head.safetensors", "head.json", "recipe.json", "train_log.jsonl", "data.pt")
    checks.writable_dir(out_dir, "--out", train_files)
    console = stderr_console()
    given = {k: v for k, v in changes.items() if v is not None}
    evaluation = stage.main(out_dir, model, threads, given, console.print)
    click.echo(json.dumps(evaluation, indent=2))


# --- bench ------------------------------------------------------------------------------------------


@main.command()
@click.argument("urls", nargs=-1)
@click.option("--model", default=None, help="Model name sent to the URLs (the embedded model without URLs).")
@click.option("--endpoints", "endpoints_file", type=click.Path(path_type=Path), help="TOML of [[endpoint]].")
@click.option("--api-key-env", default=None, help="Environment variable holding the URLs' API key.")
@click.option("--suite", default="short", show_default=True, help="short|long|mixed|lengths|file:PATH.jsonl")
@click.option("--api", default="chat", show_default=True, type=click.Choice(["chat", "completions"]))
@click.option("--stream/--no-stream", default=True, show_default=True)
@click.option("--max-tokens", default=128, show_default=True, type=click.IntRange(1))
@click.option("--concurrency", default=None, help="Requests in flight per endpoint; a list (1,4,16) sweeps.")
# an arrival in 11 days to a million a second; outside, a typo (and 1e-300 overflowed the schedule)
@click.option("--rate", default=None, type=FiniteFloat(1e-6, 1e6), help="Open loop: arrivals/s.")
@click.option("--burstiness", default=1.0, show_default=True, type=FiniteFloat(1e-3, 1e3))
@click.option("--requests", default=None, type=click.IntRange(1), help="Measured requests [default: 20].")
@click.option("--duration", default=None, type=SECONDS, help="Or: seconds.")
@click.option("--warmup", default=0, show_default=True, type=click.IntRange(0), help="Unmeasured requests.")
# backoff doubles per attempt: 2**1024 overflows a float
@click.option("--retries", default=0, show_default=True, type=click.IntRange(0, 100))
@click.option("--timeout-connect", default=10.0, show_default=True, type=SECONDS)
@click.option("--timeout-first-token", default=60.0, show_default=True, type=FiniteFloat(0), help="0 = none.")
@click.option("--timeout-total", default=600.0, show_default=True, type=SECONDS)
@click.option("--slo", default=None, help="Goodput objectives in ms, e.g. ttft=500,tpot=50,e2e=5000.")
@click.option("--stall-threshold", default=1.0, show_default=True, type=SECONDS)
@click.option("--seed", default=0, show_default=True, type=SEED)
@click.option(
    "--tokenizer",
    default=None,
    help="Count output tokens when a server sends no usage: tokenizer.json, GGUF or embedded model name.",
)
@click.option("--json", "as_json", is_flag=True, help="Summary as JSON on stdout (the table goes to stderr).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Write records and summaries here.")
@click.option("--html", type=click.Path(path_type=Path), help="Write a self-contained HTML report here.")
@_friendly_errors
def bench(urls: tuple[str, ...], **opts: Any) -> None:
    """Benchmark OpenAI-compatible endpoints (none given: the embedded server)."""
    from lossless import bench as stage

    _check_concurrency(opts["concurrency"])
    if opts["tokenizer"] == "":
        raise UsageError("--tokenizer: give a tokenizer.json, a GGUF file or an embedded model's name")
    _outputs(opts["out_dir"], BENCH_FILES, opts["html"])
    options = stage.BenchOptions(urls=urls, **opts)
    summary, records = stage.run_records(options)
    stage.report(summary, options, records)
    if summary["interrupted"]:
        sys.exit(130)


def _check_concurrency(text: str | None) -> None:
    # bench parses the list again; here it is also bounded
    try:
        levels = [int(v) for v in (text or "1").split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--concurrency wants integers like 1,4,16, got {text!r}") from None
    if not levels or min(levels) < 1 or max(levels) > MAX_CONCURRENCY:
        raise UsageError(
            f"--concurrency wants positive integers up to {MAX_CONCURRENCY:,} like 1,4,16, got {text!r}"
        )


# --- probe ------------------------------------------------------------------------------------------


@main.command()
@click.argument("url", required=False)
@click.option("--model", default=None, help="Model name sent to URL (the embedded model without a URL).")
@click.option("--api-key-env", default=None, help="Environment variable holding URL's API key.")
@click.option("--repeats", default=4, show_default=True, type=click.IntRange(2, 50), help="Requests per arm.")
@click.option("--max-tokens", default=64, show_default=True, type=click.IntRange(8))
@click.option("--json", "as_json", is_flag=True, help="Checks as JSON on stdout (the table goes to stderr).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Write probe.json here.")
@_friendly_errors
def probe(url: str | None, **opts: Any) -> None:
    """Which request parameters does an endpoint honour? (none given: the embedded server)"""
    from lossless.console import people_console
    from lossless.probe import stage

    _outputs(opts["out_dir"], ("probe.json",))
    config = stage.probe_config(url, opts)
    result = stage.run_probe(config)
    stage.render(result, people_console(stderr=opts["as_json"]))
    if opts["as_json"]:
        click.echo(stage.to_json(result))
    if config.out_dir is not None:
        stage.write(result, config.out_dir)


# --- verify -----------------------------------------------------------------------------------------


@main.command()
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
@click.option("--api", default="completions", show_default=True, type=click.Choice(["completions", "chat"]))
@click.option("--seed", default=0, show_default=True, type=SEED)
@click.option(
    "--timeout",
    default=120.0,
    show_default=True,
    type=SECONDS,
    help="Seconds for one request; a slower one counts as failed and the run goes on.",
)
@click.option("--json", "as_json", is_flag=True, help="Verdict as JSON on stdout (the table goes to stderr).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Write verify.json here.")
@click.option("--html", type=click.Path(path_type=Path), help="Write a self-contained HTML report here.")
@_friendly_errors
def verify(baseline: str | None, candidate: str | None, **opts: Any) -> None:
    """Does CANDIDATE serve the same model as BASELINE? Exit 0 equivalent, 1 different, 3 inconclusive.

    With no URLs: the embedded engine's speculative decoding against its plain decoding."""
    from lossless.console import people_console
    from lossless.verify import stage

    _outputs(opts["out_dir"], ("verify.json",), opts["html"])
    _check_budget(opts["budget"], "--budget")
    config = stage.verify_config(baseline, candidate, opts)
    result = stage.run_verify(config)
    stage.render(result, people_console(stderr=opts["as_json"]))
    if opts["as_json"]:
        click.echo(stage.to_json(result))
    if opts["out_dir"] is not None:
        stage.write(result, opts["out_dir"])
    if opts["html"] is not None:
        from lossless.report import html

        html.write(opts["html"], html.render_run(None, [], result.as_dict()))
    sys.exit(stage.EXIT_CODES[result.verdict])


def _check_budget(text: str | None, option: str) -> None:
    """verify's budget, bounded: its sample and token counts size arrays only after all the traffic
    (numpy refused 1x2x10**30 there, with a traceback)."""
    from lossless.verify.result import parse_budget

    budget = None if text is None else parse_budget(text)
    if budget is not None and (budget.samples > MAX_SAMPLES or budget.max_tokens > MAX_VERIFY_TOKENS):
        raise UsageError(
            f"{option}: at most {MAX_SAMPLES:,} samples of {MAX_VERIFY_TOKENS:,} tokens, got {text!r}"
        )


# --- demo -------------------------------------------------------------------------------------------


@main.command()
@click.option("--out", "out_dir", default="lossless-demo", show_default=True, type=click.Path(path_type=Path))
@click.option("--quick", is_flag=True, help="A reduced budget for CI: 4 requests per suite, 24 tokens.")
@click.option("--requests", default=None, type=click.IntRange(1), help="Per suite and mode [6; quick: 4].")
@click.option("--max-tokens", default=None, type=click.IntRange(1), help="Per request [64; quick: 24].")
@click.option("--verify-budget", default=None, help="small|default|large or PxSxT [6x14x16; quick: 3x4x12].")
@click.option("--model", default=None, help="Embedded model name or checkpoint path (GGUF or HF folder).")
@click.option(
    "--speculative",
    default=None,
    help="The speculative server's drafter: dspark, ngram or draft:PATH [dspark for the embedded model, "
    "whose head it is; ngram for another].",
)
@click.option("--dtype", default="bfloat16", show_default=True, type=click.Choice(["float32", "bfloat16"]))
@click.option(  # the embedded server's range
    "--temperature", default=0.0, show_default=True, type=FiniteFloat(0, 2), help="Benchmark's."
)
@click.option("--seed", default=0, show_default=True, type=SEED)
@_friendly_errors
def demo(out_dir: Path, quick: bool, **opts: Any) -> None:
    """Serve the embedded model plainly and speculatively, benchmark, verify and report both.

    Exit 0, or 1 when verification finds the speculative mode different."""
    from lossless import demo as stage

    _check_budget(opts["verify_budget"], "--verify-budget")
    options = stage.demo_options(out_dir, quick, **opts)
    _outputs(out_dir, (*BENCH_FILES, "verify.json", "report.html"))
    from lossless.engine.drafts import parse_drafter_spec  # torch: the demo needs it anyway

    parse_drafter_spec(options.drafter)  # before the model is pulled and loaded
    result = stage.run(options)
    click.echo("\n".join(stage.summary_lines(result)))
    sys.exit(1 if result.verdict == "different" else 0)


# --- report -----------------------------------------------------------------------------------------


@main.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), help="HTML file [default: RUN_DIR/report.html]."
)
@_friendly_errors
def report_cmd(run_dir: Path, output: Path | None) -> None:
    """One self-contained HTML report (plots, tables) of what bench/verify --out wrote in RUN_DIR.

    A run stopped before it wrote summary.json is summarized from its records."""
    from lossless.report import html

    target = output or run_dir / "report.html"
    checks.writable_file(target, "--output" if output else "the report")
    run = html.read_run(run_dir)
    path = html.write(target, html.render_saved(run, run_dir))
    for note in run.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(str(path))  # stdout is data: where the report is


# --- compare ----------------------------------------------------------------------------------------


@main.command()
@click.argument("run_a", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.argument("run_b", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Also write an HTML page here.")
@click.option("--json", "as_json", is_flag=True, help="Ratios as JSON on stdout (the table goes to stderr).")
@_friendly_errors
def compare(run_a: Path, run_b: Path, output: Path | None, as_json: bool) -> None:
    """Two saved runs (bench --out dirs): B's latency and speed as ratios of A's, with 95% CIs."""
    from lossless.console import people_console
    from lossless.report import compare as stage
    from lossless.report import html

    if output is not None:
        checks.writable_file(output, "--output")
    result = stage.load(run_a, run_b)
    for note in result["notes"]:
        click.echo(f"note: {note}", err=True)
    console = people_console(stderr=as_json)
    stage.render_terminal(result, console)
    if as_json:
        click.echo(stage.to_json(result))
    if output is not None:
        html.write(output, stage.render_html(result))
        click.echo(f"wrote {output}", err=True)


if __name__ == "__main__":
    main()
