"""``lossless inspect``: what is behind an endpoint, told by its behaviour (issue #23). Flags ->
``InspectOptions`` (``inspect/options.py``, where the defaults live) -> ``inspect.run.run`` -> a card
per endpoint -> ``report/inspect.py``."""

from __future__ import annotations

from typing import Any

import click

from lossless.cli.common import (
    SECONDS,
    SEED,
    SEED_HELP,
    api_flag,
    endpoint_flags,
    examples,
    friendly_errors,
    output_flags,
    outputs,
    renamed,
    wrote,
)
from lossless.client.api_names import CHAT_APIS
from lossless.inspect.options import InspectOptions
from lossless.rundir import INSPECT, INSPECT_PAGE

DEFAULTS = InspectOptions()


@click.command(
    "inspect",
    epilog=examples(
        "lossless inspect https://api.example.com/v1 --model m --api-key-env KEY --out cards/",
        "lossless inspect URL --model m --reference ref=http://127.0.0.1:8000/v1 --no-precision",
        "lossless inspect URL --model m --context --max-time 300",
        "lossless inspect          # the embedded model, served plainly",
    ),
)
@endpoint_flags
@api_flag(DEFAULTS.api, CHAT_APIS, "Precision's scoring asks /completions whatever this is.")
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
@click.option(
    "--min-rounds",
    default=DEFAULTS.min_rounds,
    show_default=True,
    type=click.IntRange(4, 100),
    help="Rounds of the four speculation requests at least, before the verdict may settle.",
)
@click.option(
    "--max-rounds",
    default=DEFAULTS.max_rounds,
    show_default=True,
    type=click.IntRange(4, 100),
    help="Rounds of the four speculation requests at most; fewer when the verdict settles.",
)
@click.option(
    "--max-time",
    "budget_s",
    default=DEFAULTS.budget_s,
    show_default=True,
    type=SECONDS,
    help="Seconds per endpoint after which no further round of speculation requests starts.",
)
@renamed("--budget", "--max-time", "budget_s", type=SECONDS)
@click.option("--seed", default=DEFAULTS.seed, show_default=True, type=SEED, help=SEED_HELP)
@output_flags("Cards", "inspect.json and inspect.html", html=False)
@friendly_errors
def inspect(
    urls: tuple[str, ...],
    tokenizers: tuple[str, ...],
    references: tuple[str, ...],
    overwrite: bool,
    **opts: Any,
) -> None:
    """What is behind each endpoint, told by its behaviour: is it decoding speculatively (and with what
    drafter), at what precision, with which tokenizer and model; a card per endpoint.

    With no URL: the embedded model, served plainly."""
    from lossless.console import people_console
    from lossless.inspect.run import run as inspect_endpoints
    from lossless.report import inspect as report

    options = InspectOptions(urls=urls, tokenizers=tokenizers, references=references, **opts)
    outputs(options.out_dir, (INSPECT, INSPECT_PAGE), overwrite=overwrite)
    result = inspect_endpoints(options)
    wrote(report.emit(result, people_console(stderr=options.as_json), options.as_json, options.out_dir))
