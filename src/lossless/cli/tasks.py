"""``lossless tasks``: success, time and cost per completed task (flags -> TasksOptions -> tasks.run ->
TasksResult -> report/tasks.py)."""

from __future__ import annotations

from typing import Any

import click

from lossless.cli.common import (
    SECONDS,
    SEED,
    SEED_HELP,
    FiniteFloat,
    api_flag,
    endpoint_flags,
    examples,
    friendly_errors,
    output_flags,
    outputs,
    wrote,
)
from lossless.client.api_names import CHAT_APIS
from lossless.rundir import TASKS
from lossless.tasks.options import TasksOptions
from lossless.validate import MAX_CONCURRENCY

T = TasksOptions()
PRICE = FiniteFloat(0, 1e9)


@click.command(
    epilog=examples(
        "lossless tasks https://api.example.com/v1 --model m --api-key-env KEY --set humaneval --limit 20",
        "lossless tasks URL_A URL_B --model m --set tools --samples 3 --out tasks/ --html tasks.html",
        "lossless tasks --endpoints priced.toml --set bfcl-simple --concurrency 4",
        "lossless tasks            # the embedded model, plain and speculative",
    )
)
@endpoint_flags
@click.option(
    "--set",
    "task_set",
    default=T.task_set,
    show_default=True,
    help="humaneval, arithmetic, tools, bfcl-simple, bfcl-multiple, bfcl-irrelevance, or a task file (JSON "
    "Lines).",
)
@click.option("--limit", default=None, type=click.IntRange(1), help="Only the set's first N tasks.")
@api_flag(T.api, CHAT_APIS, "An agent's turns, tool calls and results in that API's own items.")
@click.option(
    "--samples",
    default=T.samples,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Runs per task (pass@k).",
)
@click.option(
    "--repairs",
    default=T.repairs,
    show_default=True,
    type=click.IntRange(0, 20),
    help="Attempts after a failed check, with its reason (failing tests' output) fed back.",
)
@click.option(
    "--concurrency",
    default=T.concurrency,
    show_default=True,
    type=click.IntRange(1, MAX_CONCURRENCY),
    help="Tasks in flight per endpoint.",
)
@click.option(
    "--stream/--no-stream",
    default=T.stream,
    show_default=True,
    help="Model calls streamed (time to first token per call) or whole.",
)
@click.option(
    "--max-tokens", default=None, type=click.IntRange(1), help="Per model call [default: the task's]."
)
@click.option("--temperature", default=None, type=FiniteFloat(0, 2), help="[default: the endpoint's]")
@click.option(
    "--tool-choice",
    default=None,
    type=click.Choice(["auto", "required", "none", "required-first"]),
    help="Sent with a task's tools [default: not sent, which servers read as auto]; required-first: "
    "required on an attempt's first model call, auto after it.",
)
@click.option(
    "--retries",
    default=T.retries,
    show_default=True,
    type=click.IntRange(0, 100),
    help="Further attempts at a model call after a retryable failure, as an agent's client makes them "
    "(their time and cost count in the task's).",
)
@click.option(
    "--retry-wait",
    default=T.retry_wait,
    show_default=True,
    type=FiniteFloat(0, 60),
    help="Seconds before the first retry without Retry-After, doubling (jittered).",
)
@click.option(
    "--timeout", default=T.timeout, show_default=True, type=SECONDS, help="Seconds for one model call."
)
@click.option("--price-in", default=None, type=PRICE, help="USD per million input tokens.")
@click.option("--price-out", default=None, type=PRICE, help="USD per million output tokens.")
@click.option("--price-cached-in", default=None, type=PRICE, help="USD per million cached input tokens.")
@click.option("--price-tool", default=None, type=PRICE, help="USD per tool call.")
@click.option(
    "--margin",
    default=T.margin,
    show_default=True,
    type=FiniteFloat(0, 1, min_open=True, max_open=True),
    help="Equivalence margin of the paired success difference.",
)
@click.option("--seed", default=T.seed, show_default=True, type=SEED, help=SEED_HELP)
@output_flags("Results", "tasks.json")
@friendly_errors
def tasks(urls: tuple[str, ...], overwrite: bool, **opts: Any) -> None:
    """Run a task set on endpoints: success, time and cost per completed task (agent loops with tool
    calls, code run against its tests). No URL: the embedded model, served plainly and speculatively.

    Several endpoints run the same tasks one after another, each compared with the first."""
    from lossless.console import people_console
    from lossless.report import tasks as show
    from lossless.tasks.run import run as run_tasks

    options = TasksOptions(urls=urls, **opts)
    outputs(options.out_dir, (TASKS,), options.html, overwrite=overwrite)
    result = run_tasks(options)
    console = people_console(stderr=options.as_json)
    wrote(show.emit(result, console, options.as_json, options.out_dir, options.html))
