"""``lossless advise``: what time-outs to set, and what hedging or failover would do, from saved runs.
Its defaults are ``AdviseOptions``' fields (``advise/options.py``, which imports no numpy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from lossless import validate
from lossless.advise.options import AdviseOptions, ms_list
from lossless.cli.common import (
    SEED,
    SEED_HELP,
    FiniteFloat,
    examples,
    friendly_errors,
    json_flag,
    renamed,
    wrote,
)

A = AdviseOptions()


@click.command(
    epilog=examples(
        "lossless advise run/                       # time-outs and hedging for each endpoint",
        "lossless advise run_a/ run_b/ --html advice.html",
        "lossless advise hedged/ plain/             # a run under --hedge-after checked against plain",
    )
)
@click.argument(
    "run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True, file_okay=False)
)
@click.option(
    "--hedge-delays",
    default=None,
    metavar="MS,...",
    help="Hedge delays to simulate, e.g. 200,500,1s [default: quantiles p25-p99 of each endpoint's E2E].",
)
@click.option(
    "--failover-delays",
    default=None,
    metavar="MS,...",
    help="Waits for a first token before failing over [default: quantiles p50-p99 of the first choice's "
    "TTFT]; failing over on errors only is always simulated too.",
)
@click.option(
    "--timeout-quantile",
    default=A.timeout_quantile,
    show_default=True,
    type=FiniteFloat(0, 1, min_open=True, max_open=True),
    help="Time-out rule: MARGIN x this quantile of the phase's measured times, rounded up.",
)
@click.option(
    "--timeout-margin",
    default=A.timeout_margin,
    show_default=True,
    type=FiniteFloat(1, 100),
    help="Time-out rule: this MARGIN times the quantile.",
)
@click.option(
    "--draws",
    default=A.draws,
    show_default=True,
    type=click.IntRange(1000, 10_000_000),
    help="Simulated requests per policy.",
)
@click.option(
    "--resamples",
    default=A.resamples,
    show_default=True,
    type=click.IntRange(0, 10_000),
    help="Bootstrap resamples of the records for the 95% intervals (0: none, faster).",
)
@click.option("--seed", default=A.seed, show_default=True, type=SEED, help=SEED_HELP)
@click.option("--html", "output", type=click.Path(path_type=Path), help="Also write an HTML page here.")
@renamed(("-o", "--output"), "--html", "output", type=click.Path(path_type=Path))
@json_flag("The advice")
@friendly_errors
def advise(
    run_dirs: tuple[Path, ...], hedge_delays: str | None, failover_delays: str | None, **opts: Any
) -> None:
    """Time-outs, hedging and failover for endpoints measured by bench --out RUN_DIR, predicted per
    endpoint and load level by resampling their records, each with its 95% interval and assumptions."""
    from lossless.advise.run import run as advise_runs
    from lossless.console import people_console
    from lossless.report import advise as show

    options = AdviseOptions(
        run_dirs=run_dirs,
        hedge_delays=ms_list(hedge_delays, "--hedge-delays"),
        failover_delays=ms_list(failover_delays, "--failover-delays"),
        **opts,
    )
    if options.output is not None:
        validate.writable_file(options.output, "--html")
    result = advise_runs(options)
    show.emit(result, people_console(stderr=options.as_json), options.as_json, options.output)
    wrote([options.output])
