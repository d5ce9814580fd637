"""The commands that run the embedded model: models, serve, draft train and demo."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from lossless import validate
from lossless.cli.common import SEED, SEED_HELP, THREADS, FiniteFloat, examples, friendly_errors, outputs
from lossless.demo.options import QUICK_DEMO, DemoOptions
from lossless.draft.recipe import Recipe
from lossless.engine.speculate.spec import DEFAULT_K, DEFAULT_THRESHOLD, DSPARK_THRESHOLD, DSPARK_TREE
from lossless.engine.weights.dtype import DTYPES
from lossless.errors import LosslessError
from lossless.rundir import BENCH_FILES, REPORT, VERIFY
from lossless.server.options import COMPILE_MODES, ServeOptions

S, D, Q, R = ServeOptions(), DemoOptions(), QUICK_DEMO, Recipe()


@click.group()
def models() -> None:
    """Manage the embedded model cache ($LOSSLESS_HOME/models)."""


@models.command(
    "pull",
    epilog=examples(
        "lossless models pull",
        "lossless models pull --compile",
        "LOSSLESS_HOME=/data/lossless lossless models pull",
    ),
)
@click.argument("name", required=False)
@click.option(
    "--compile",
    "compile_",
    is_flag=True,
    help="Also compile what `lossless serve` serves by default into $LOSSLESS_HOME/compiled (minutes on "
    "a small CPU, once): the server then swaps compiled graphs in within seconds of starting.",
)
@friendly_errors
def models_pull(name: str | None, compile_: bool) -> None:
    """Fetch an embedded model (default: smollm2-135m-instruct) into the cache."""
    from lossless import models as cache

    model = cache.EMBEDDED.get(name or cache.DEFAULT_MODEL)
    if model is None:
        raise LosslessError(f"unknown model {name!r}; embedded models: {', '.join(sorted(cache.EMBEDDED))}")
    if not cache.cached_path(model).is_file():  # $LOSSLESS_HOME may name a file or a read-only place
        validate.writable_dir(cache.models_dir(), "the model cache ($LOSSLESS_HOME/models)")
    path = cache.pull(model)
    click.echo(str(path))
    if compile_:
        from lossless.server.main import prepare_compiled

        click.echo("lossless: compiling the forward passes for lossless serve's defaults", err=True)
        folder, seconds = prepare_compiled(model.name)
        done = "complete already" if seconds is None else f"compiled in {seconds:.0f} s"
        click.echo(f"lossless: {done}: {folder}", err=True)


@models.command("list", epilog=examples("lossless models list"))
@friendly_errors
def models_list() -> None:
    """Show the cached models."""
    from lossless import models as cache

    cached = cache.list_cached()
    if not cached:
        click.echo(f"no models cached in {cache.models_dir()} (run `lossless models pull`)", err=True)
    for m in cached:
        click.echo(f"{m.name}\t{m.size_bytes / 1e6:.1f} MB\t{m.path}")


def _k_help() -> str:
    return ", ".join(f"{kind} {k}" for kind, k in DEFAULT_K.items() if k)


def _per_dtype(defaults: dict[str, float] | dict[str, int]) -> str:
    return ", ".join(f"{v:g} with {dtype} weights" for dtype, v in defaults.items())


def _threshold_help() -> str:
    return (
        f"draft:PATH stops after a token below this [{DEFAULT_THRESHOLD['draft']:g}]; dspark below this "
        f"predicted survival [{_per_dtype(DSPARK_THRESHOLD)}]."
    )


@click.command(
    epilog=examples(
        "lossless serve                             # the embedded model on 127.0.0.1:8000 (int4 + dspark)",
        "lossless serve --speculative none --dtype bfloat16   # plain decoding, a baseline",
        "lossless serve --model ./model.gguf --port 8080 --speculative ngram",
        "lossless serve --max-batch 16                 # up to 16 requests decoded together",
        'curl -s 127.0.0.1:8000/v1/chat/completions -d \'{"messages": [{"role": "user", "content": "Hi"}]}\'',
    )
)
@click.option("--model", default=None, help="Embedded model name or checkpoint path (GGUF or HF folder).")
@click.option("--host", default=S.host, show_default=True, help="Address to bind (loopback by default).")
@click.option(
    "--port",
    default=S.port,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on (0: any free one, announced on stderr).",
)
@click.option(
    "--dtype",
    default=S.dtype,
    show_default=True,
    type=click.Choice(DTYPES),
    help="The weights' numerics. auto: a GGUF's own Q4 blocks (int4) where the file stores them, else "
    "bfloat16 where the CPU computes it natively, else float32; what it chose and why is printed.",
)
@click.option(
    "--int4-kernel",
    default=None,
    type=click.Choice(["auto", "q8", "torch"]),
    show_default="auto",
    help="What multiplies int4 layers: q8, ours (llama.cpp's Q4 x Q8 product, activations rounded to "
    "int8 per block of 32), or torch (bfloat16 activations); auto: ours where it builds. The variable "
    "LOSSLESS_INT4_KERNEL says the same.",
)
@click.option(
    "--max-queue",
    default=S.max_queue,
    show_default=True,
    type=click.IntRange(1),
    help="Queue size before 429.",
)
@click.option(
    "--max-batch",
    default=S.max_batch,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Requests decoded together in a continuous batch (each joins and leaves at any step, with a KV "
    "cache slot of its own; greedy output the same as the request alone). Each request drafts inside the "
    "batch with a drafter of its own while few decode (ngram, dspark; a draft:PATH model keeps one request "
    "at a time); the batch runs eagerly, so above 1 --compile is off. The default, 1, serves one request at "
    "a time, compiled as --compile says; where our int4 kernels run a step's layers in one call, the batch "
    "measured faster for a lone user too (docs/serve.md).",
)
@click.option(
    "--context",
    "max_context",
    default=None,
    type=click.IntRange(1),
    help="Tokens per request, prompt and output (each batch slot's KV cache) [the model's: 8192 for "
    "SmolLM2].",
)
@click.option("--threads", default=None, type=THREADS, help="Torch threads (default: torch's).")
@click.option(
    "--compile",
    type=click.Choice(COMPILE_MODES),
    default=S.compile,
    is_flag=False,
    flag_value="wait",
    show_default=True,
    help="torch.compile the forward passes: background serves eagerly at once and swaps the compiled "
    "graphs in when they are ready (minutes the first time on a small CPU, then cached under "
    "LOSSLESS_HOME); wait compiles before serving (also what a bare --compile means); off never does.",
)
@click.option("--no-compile", is_flag=True, hidden=True)  # what it said before --compile took a mode: off
@click.option(
    "--speculative",
    default=S.speculative,
    show_default=True,
    help="Lossless drafter: ngram, draft:PATH, dspark (the trained head; dspark:DIR) or none.",
)
@click.option("--spec-k", default=None, type=int, help=f"Longest draft per step [{_k_help()}].")
@click.option("--spec-threshold", default=None, type=FiniteFloat(), help=_threshold_help())
@click.option(
    "--spec-tree",
    default=None,
    type=int,
    help=f"dspark: verify a tree of up to this many candidate tokens per step [{_per_dtype(DSPARK_TREE)}]; "
    "0: one chain.",
)
@friendly_errors
def serve(**opts: Any) -> None:
    """Serve a model behind an OpenAI-compatible HTTP API."""
    from lossless.engine.speculate.spec import parse_drafter_spec, resolve_drafter
    from lossless.server.main import serve as run_server

    if opts.pop("no_compile"):
        opts["compile"] = "off"
    config = ServeOptions(**opts)
    drafter = resolve_drafter(config.speculative, config.model)
    parse_drafter_spec(drafter, config.spec_k, config.spec_threshold, config.spec_tree)
    run_server(config)  # a bad spec failed above, before the model loads


@click.group()
def draft() -> None:
    """Draft heads for speculative decoding."""


@draft.command(
    "train",
    epilog=examples(
        "lossless draft train --out my-head/",
        "lossless draft train --steps 200 --prompts 50 --out quick-head/   # a short run, to try it",
        "lossless serve --speculative dspark:my-head/",
    ),
)
@click.option(
    "--out",
    "out_dir",
    default="lossless-draft",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Where the head, its recipe and its training log go.",
)
@click.option("--model", default=None, help="Embedded model name or checkpoint path [smollm2-135m-instruct].")
@click.option("--seed", default=R.seed, show_default=True, type=SEED, help=SEED_HELP)
@click.option("--steps", default=None, type=click.IntRange(1), help=f"Optimizer steps [{R.steps}].")
@click.option("--prompts", default=None, type=click.IntRange(1), help="Only the first N bundled prompts.")
@click.option(
    "--written", default=None, type=click.IntRange(0), help=f"Prompts the model writes itself [{R.written}]."
)
@click.option(  # the engine is loaded for training with a 1024-token context
    "--max-new", default=None, type=click.IntRange(1, 1024), help=f"Answer tokens at most [{R.max_new}]."
)
@click.option(
    "--dtype",
    "gen_dtype",
    default=None,
    type=click.Choice(("bfloat16", "float32")),
    help=f"The model's weights while it answers [{R.gen_dtype}]; float32 prefills 4-6x faster on a CPU "
    "without bfloat16 instructions.",
)
@click.option("--threads", default=None, type=THREADS, help="Torch threads (default: torch's).")
@friendly_errors
def draft_train(out_dir: Path, model: str | None, threads: int | None, **changes: int | str | None) -> None:
    """Self-distil a DSpark-style draft head from the model's own answers to the bundled prompts and
    to prompts it writes itself.

    Writes head.safetensors, head.json (with its sha256), recipe.json and train_log.jsonl into --out,
    and prints the held-out evaluation; `lossless serve --speculative dspark:OUT` uses the head.
    """
    from lossless.console import stderr_console
    from lossless.draft import train

    train_files = ("head.safetensors", "head.json", "recipe.json", "train_log.jsonl", "data.pt")
    validate.writable_dir(out_dir, "--out", train_files)
    console = stderr_console()
    given = {k: v for k, v in changes.items() if v is not None}
    evaluation = train.train_head(out_dir, model, threads, given, console.print)
    click.echo(json.dumps(evaluation, indent=2))


@click.command(
    epilog=examples(
        "lossless demo",
        "lossless demo --quick --out /tmp/demo      # a smaller budget, as CI runs it",
        "lossless demo --speculative ngram --dtype float32",
    )
)
@click.option(
    "--out",
    "out_dir",
    default=str(D.out_dir),
    show_default=True,
    type=click.Path(path_type=Path),
    help="Where the bench files, verify.json and report.html go.",
)
@click.option(
    "--quick",
    is_flag=True,
    help=f"A reduced budget for CI: {Q.requests} requests per suite, {Q.max_tokens} tokens.",
)
@click.option(
    "--requests",
    default=None,
    type=click.IntRange(1),
    help=f"Per suite and mode [{D.requests}; quick: {Q.requests}].",
)
@click.option(
    "--max-tokens",
    default=None,
    type=click.IntRange(1),
    help=f"Per request [{D.max_tokens}; quick: {Q.max_tokens}].",
)
@click.option(
    "--verify-budget",
    default=None,
    help=f"small|default|large or PxSxT [{D.budget.label}; quick: {Q.budget.label}]; PxSxT keeps the "
    "demo's task count.",
)
@click.option("--model", default=None, help="Embedded model name or checkpoint path (GGUF or HF folder).")
@click.option(
    "--speculative",
    default=None,
    help="The speculative server's drafter: auto, dspark, ngram or draft:PATH [auto: dspark for the "
    "embedded model, whose head it is; ngram for another].",
)
@click.option(
    "--dtype",
    default=D.embedded.dtype,
    show_default=True,
    type=click.Choice(DTYPES),
    help="The weights' dtype, as serve's --dtype.",
)
@click.option(  # the embedded server's range
    "--temperature", default=D.temperature, show_default=True, type=FiniteFloat(0, 2), help="Benchmark's."
)
@click.option("--seed", default=D.seed, show_default=True, type=SEED, help=SEED_HELP)
@click.option(
    "--overwrite", is_flag=True, help="Replace a demo already in --out (its files are removed first)."
)
@friendly_errors
def demo(out_dir: Path, quick: bool, overwrite: bool, **opts: Any) -> None:
    """Serve the embedded model plainly and speculatively, benchmark, verify and report both.

    Exit 0, or 1 when verification finds the speculative mode different."""
    from lossless.demo.options import demo_options
    from lossless.demo.run import run as run_demo
    from lossless.engine.speculate.spec import parse_drafter_spec
    from lossless.report.demo import summary_lines

    options = demo_options(out_dir, quick, **opts)
    outputs(out_dir, (*BENCH_FILES, VERIFY, REPORT), overwrite=overwrite)
    parse_drafter_spec(options.drafter)  # before the model is pulled and loaded
    result = run_demo(options)
    click.echo("\n".join(summary_lines(result)))
    sys.exit(1 if result.verdict == "different" else 0)
