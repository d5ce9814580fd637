"""``lossless inspect``: what is behind an endpoint, told by its behaviour (issue #23). Flags ->
``InspectOptions`` (``inspect/options.py``, where the defaults live) -> ``inspect.run.run`` -> a card
per endpoint -> ``report/inspect.py``."""

from __future__ import annotations

from typing import Any

import click

from lossless.cli.common import SECONDS, SEED, friendly_errors, output_flags, outputs
from lossless.inspect.options import InspectOptions
from lossless.rundir import INSPECT, INSPECT_PAGE

DEFAULTS = InspectOptions()


@click.command("inspect")
@click.argument("urls", nargs=-1)
@click.option("--model", default=None, help="Model name sent to the URLs (the embedded model without URLs).")
@click.option("--api-key-env", default=None, help="Environment variable holding the URLs' API key.")
@click.option(
    "--tokenizer",
    "tokenizers",
    multiple=True,
    help="A tokenizer to tell apart besides the bundled ones: tokenizer.json, a GGUF or a model name "
    "(repeatable).",
)
@click.option(
    "--reference",
    "references",
    multiple=True,
    help="Precision: a reference to place the endpoints against, [NAME=]URL (same --model and "
    "--api-key-env) or float32 / bfloat16 / int4 (the embedded model served so); repeatable. Default: "
    "float32 and bfloat16 where the tokenizer is SmolLM2's.",
)
@click.option(
    "--precision/--no-precision",
    default=DEFAULTS.precision,
    show_default=True,
    help="Measure precision (teacher-forced log-probabilities against the references).",
)
@click.option(
    "--context",
    "measure_context",
    is_flag=True,
    help="Measure the context limit by behaviour: prompts up to it, one token answered (each a full "
    "prefill: minutes on a CPU, input tokens to pay for on an API).",
)
@click.option(
    "--max-tokens",
    default=DEFAULTS.max_tokens,
    show_default=True,
    type=click.IntRange(8, 4096),
    help="Output tokens per speculation request.",
)
@click.option("--min-rounds", default=DEFAULTS.min_rounds, show_default=True, type=click.IntRange(4, 100))
@click.option(
    "--max-rounds",
    default=DEFAULTS.max_rounds,
    show_default=True,
    type=click.IntRange(4, 100),
    help="Rounds of the four speculation requests at most; fewer when the verdict settles.",
)
@click.option(
    "--budget",
    "budget_s",
    default=DEFAULTS.budget_s,
    show_default=True,
    type=SECONDS,
    help="Seconds per endpoint after which no further round starts.",
)
@click.option("--seed", default=DEFAULTS.seed, show_default=True, type=SEED)
@output_flags("Cards", "inspect.json and inspect.html", html=False)
@friendly_errors
def inspect(
    urls: tuple[str, ...], tokenizers: tuple[str, ...], references: tuple[str, ...], **opts: Any
) -> None:
    """What is behind each endpoint: speculative decoding, precision, identity - told by behaviour.

    With no URL: the embedded model, served plainly."""
    from lossless.console import people_console
    from lossless.inspect.run import run as inspect_endpoints
    from lossless.report import inspect as report

    options = InspectOptions(urls=urls, tokenizers=tokenizers, references=references, **opts)
    outputs(options.out_dir, (INSPECT, INSPECT_PAGE))
    result = inspect_endpoints(options)
    report.emit(result, people_console(stderr=options.as_json), options.as_json, options.out_dir)
