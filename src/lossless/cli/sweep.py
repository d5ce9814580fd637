"""``lossless sweep``: server configurations x loads -> ``SweepOptions`` (``sweep/options.py``) ->
``sweep.run.run`` -> ``report/sweep.py``. It takes bench's options for what is measured at each
configuration, less those a sweep sets itself (the outputs, --until-saturated, --resume, --endpoints)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from lossless.cli.bench import bench as bench_command, bench_options
from lossless.cli.common import SECONDS, examples, friendly_errors, json_flag, unrenamed, wrote
from lossless.sweep.options import SweepOptions

S = SweepOptions.__dataclass_fields__
_OWN = {
    "as_json",
    "out_dir",
    "html",
    "overwrite",
    "resume",
    "until_saturated",
    "endpoints_file",
    "find_capacity",
    "capacity_precision",
    "capacity_budget",
    "take_turns",
}


@click.command(
    epilog=examples(
        "lossless sweep --config '--speculative none' --config '--speculative ngram' --config '' "
        "--rate 0.5,1,2,4,8 --requests 20 --out sweep/",
        "lossless sweep --command 'llama-server -m m.gguf --port {port} {flags}' --config '-np 1' "
        "--config '-np 4' --concurrency 1,2,4,8,16 --out sweep/",
        "lossless sweep http://a:8000/v1 http://b:8000/v1 --rate 1,2,4,8 --out sweep/",
    )
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="FLAGS",
    help="One server configuration: lossless serve's flags ('--speculative ngram --dtype bfloat16'), or "
    "with --command the words for its {flags}; repeat for each. [default: one, the defaults]",
)
@click.option(
    "--command",
    default=None,
    help="Start each configuration with this command instead of lossless serve: a template with {port} "
    "(and {flags}, else the flags go at its end), run on 127.0.0.1.",
)
@click.option(
    "--startup-timeout",
    default=S["startup_timeout"].default,
    show_default=True,
    type=SECONDS,
    help="Seconds for a started server to answer /models.",
)
@click.option(
    "--all-loads",
    is_flag=True,
    help="Measure every load, even after a configuration saturated (by default a configuration stops at "
    "the first load it cannot keep up with, as bench --until-saturated).",
)
@click.option(
    "--out",
    "out_dir",
    default=str(S["out_dir"].default),
    show_default=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="The sweep's folder: sweep.json, sweep.html, and each configuration's bench run folder.",
)
@json_flag("sweep.json")
@friendly_errors
def sweep(
    configs: tuple[str, ...],
    command: str | None,
    startup_timeout: float,
    all_loads: bool,
    out_dir: Path,
    as_json: bool,
    **bench_args: Any,
) -> None:
    """Sweep server configurations x loads: each configuration served (or given as a URL), benched from
    the lowest load up until it saturates, then one page with the Pareto front of per-request speed and
    TTFT against total throughput, and the table behind it.

    Exit 0; 2 on a mistake, or when no configuration could be measured."""
    from lossless.console import people_console
    from lossless.report import sweep as show
    from lossless.sweep.run import run

    urls = bench_args.pop("urls")
    bench = bench_options((), find_capacity=None, **unrenamed(bench_args))
    options = SweepOptions(
        bench, configs or ("",), command, urls, startup_timeout, all_loads, out_dir, as_json
    )
    result = run(options)
    wrote(show.emit(result, people_console(stderr=as_json), as_json, out_dir))
    if all(c.summary is None for c in result.configs):
        click.echo(f"error: no configuration was measured: {result.configs[0].error}", err=True)
        sys.exit(2)


sweep.params[:0] = [p for p in bench_command.params if p.name not in _OWN]
