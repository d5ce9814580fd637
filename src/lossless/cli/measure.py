"""The commands that check endpoints by behaviour: probe (which parameters it honours) and verify (the
same model or not). Each parses its flags into its frozen options (the command's ``options.py``, where
every default lives), calls its ``run`` and hands the result to ``report``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from lossless.cli.common import (
    ENDPOINTS_HELP,
    MODEL_HELP,
    SECONDS,
    SEED,
    SEED_HELP,
    api_flag,
    examples,
    friendly_errors,
    output_flags,
    outputs,
    renamed,
    wrote,
)
from lossless.client.api_names import CHAT_APIS
from lossless.probe.options import ProbeOptions
from lossless.rundir import PROBE, VERIFY
from lossless.verify.budget import ALONE_PAIR, BUDGETS, Criteria, alone_by_budget, describe_budget
from lossless.verify.options import VerifyOptions

P, V = ProbeOptions(), VerifyOptions()
KEY_HELP = "The environment variable holding the API key (its name; the key stays in the environment)."
SETS = "humaneval, arithmetic, tools, bfcl-simple, bfcl-multiple, bfcl-irrelevance, or a task file"


@click.command(
    epilog=examples(
        "lossless probe https://api.example.com/v1 --model m --api-key-env EXAMPLE_KEY",
        "lossless probe http://127.0.0.1:8080/v1 --json > probe.json",
        "lossless probe            # the embedded model, served for the run",
    )
)
@click.argument("url", required=False)
@click.option("--model", default=None, help=MODEL_HELP)
@click.option("--api-key-env", default=None, metavar="VAR", help=KEY_HELP)
@click.option(
    "--endpoints",
    "endpoints_file",
    type=click.Path(path_type=Path),
    help=ENDPOINTS_HELP + " probe checks one: a file of one [[endpoint]].",
)
@api_flag(P.api, CHAT_APIS, "The checks' requests are chat's, put in that API's own words.")
@click.option(
    "--repeats",
    default=P.repeats,
    show_default=True,
    type=click.IntRange(2, 50),
    help="Requests per arm where a check compares two (on against off, two seeds).",
)
@click.option(
    "--max-tokens",
    default=P.max_tokens,
    show_default=True,
    type=click.IntRange(8),
    help="Output tokens for answers that must be long enough to show a difference; an answer cut at "
    "this length is asked again with more room before it counts.",
)
@output_flags("Checks", "probe.json", html=False)
@friendly_errors
def probe(url: str | None, overwrite: bool, **opts: Any) -> None:
    """Which request parameters does an endpoint really honour? Each check sends a few requests and
    judges what came back: honoured, ignored, rejected, unsupported, or inconclusive (no URL: the
    embedded model, served for the run)."""
    from lossless.console import people_console
    from lossless.probe.run import run as run_probe
    from lossless.report import probe as show

    options = ProbeOptions(url=url, **opts)
    outputs(options.out_dir, (PROBE,), overwrite=overwrite)
    result = run_probe(options)
    wrote(show.emit(result, people_console(stderr=options.as_json), options.as_json, options.out_dir))


def _budgets() -> str:
    return "; ".join(f"{name} {describe_budget(b, Criteria())}" for name, b in BUDGETS.items())


@click.command(
    epilog=examples(
        "lossless verify https://a.example.com/v1 https://b.example.com/v1 --model m --api-key-env KEY",
        "lossless verify --endpoints pair.toml --budget large --out verify/ --html verify.html",
        "lossless verify URL_A URL_B --model m --api chat --set arithmetic --limit 20",
        "lossless verify           # the embedded model: speculative against plain decoding",
    )
)
@click.argument("baseline", required=False)
@click.argument("candidate", required=False)
@click.option("--model", default=None, help="Model name sent to both. " + MODEL_HELP)
@click.option("--candidate-model", default=None, help="Model name sent to CANDIDATE [default: --model].")
@click.option("--api-key-env", default=None, metavar="VAR", help="BASELINE's. " + KEY_HELP)
@click.option(
    "--candidate-api-key-env", default=None, metavar="VAR", help="CANDIDATE's [default: --api-key-env]."
)
@click.option(
    "--endpoints",
    "endpoints_file",
    type=click.Path(path_type=Path),
    help="A TOML file of two [[endpoint]] tables, the baseline first (or a [baseline] and a [candidate] "
    "table), instead of URLs.",
)
@click.option(
    "--budget",
    default="default",
    show_default=True,
    help=f"The most the run spends, prompts x samples x tokens per sample, drawn in looks until one settles "
    f"it, and what each can show (a score difference in sd of one sample's score, 80% power): {_budgets()}; "
    "or PxSxT.",
)
@api_flag(
    V.api,
    ("completions", *CHAT_APIS),
    "completions can score a text token by token (teacher forcing) where the server echoes "
    "log-probabilities; the others compare sampled answers alone.",
)
@click.option(
    "--tolerance",
    default=V.tolerance,
    show_default=True,
    metavar="NATS",
    type=click.FloatRange(0, min_open=True),
    help="The largest log-probability distance still called the same model: the same tokens scored by "
    "both, nats a token apart on average, beyond the baseline's own. Above it (at 1%) is different; below "
    "it (at 5%) is part of equivalent. Servers of the same weights measured 0.04-0.06 apart, requantizations "
    "0.23 or more.",
)
@click.option(
    "--no-logprobs",
    "logprobs",
    flag_value=False,
    default=True,
    help="Ask for no log-probabilities: the sampled texts alone decide, as against a server that returns "
    f"none. They called {ALONE_PAIR} different in {alone_by_budget()} calibration runs (docs/verify.md).",
)
@click.option("--seed", default=V.seed, show_default=True, type=SEED, help=SEED_HELP)
@click.option(
    "--timeout",
    default=V.timeout,
    show_default=True,
    type=SECONDS,
    help="Seconds for one request; a slower one counts as failed and the run goes on.",
)
@click.option(
    "--set",
    "task_set",
    default=None,
    help=f"A task set ({SETS}) run greedily on both, in place of the bundled questions; with tools, "
    "tool-call parity too.",
)
@renamed("--tasks", "--set", "task_set")
@click.option(
    "--limit", "tasks_limit", default=None, type=click.IntRange(1), help="Only --set's first N tasks."
)
@renamed("--tasks-limit", "--limit", "tasks_limit", type=click.IntRange(1))
@output_flags("Verdict", "verify.json")
@friendly_errors
def verify(baseline: str | None, candidate: str | None, budget: str, overwrite: bool, **opts: Any) -> None:
    """Does CANDIDATE serve the same model as BASELINE? Sampled answers, their log-probabilities and
    task accuracy, compared with the baseline against itself: equivalent, different or inconclusive,
    with the evidence. Exit 0 equivalent, 1 different, 3 inconclusive, 2 on a mistake.

    With no URLs: the embedded engine's speculative decoding against its plain decoding."""
    from lossless.console import people_console
    from lossless.report import verify as show
    from lossless.verify.budget import parse_budget
    from lossless.verify.run import EXIT_CODES, run as run_verify

    options = VerifyOptions(baseline=baseline, candidate=candidate, budget=parse_budget(budget), **opts)
    outputs(options.out_dir, (VERIFY,), options.html, overwrite=overwrite)
    result = run_verify(options)
    console = people_console(stderr=options.as_json)
    wrote(show.emit(result, console, options.as_json, options.out_dir, options.html))
    sys.exit(EXIT_CODES[result.verdict])
