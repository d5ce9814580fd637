"""watch (a bench configuration on a schedule, each run kept in a history) and history (the runs, the
flagged changes, the trend page, two runs compared). watch takes every bench option: its parameters are
bench's own, less the outputs a watch manages itself (--json, --out, --html)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lossless import validate
from lossless.cli.bench import bench as bench_command, bench_options
from lossless.cli.common import examples, exit_interrupted, friendly_errors, json_flag, unrenamed, wrote
from lossless.errors import EndpointError, UsageError
from lossless.watch.store import DEFAULT_DB

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from lossless.watch.store import Run

# bench's outputs: a watch writes each run into the history
_MANAGED = {"as_json", "out_dir", "html", "overwrite", "resume"}
_DB = click.option(
    "--db",
    type=click.Path(path_type=Path, dir_okay=False),
    default=str(DEFAULT_DB),
    show_default=True,
    help="The history: a SQLite database; each run's files go in the folder DB.runs/ beside it.",
)


@click.command(
    epilog=examples(
        "lossless watch https://api.example.com/v1 --model m --api-key-env KEY     # one run now (cron)",
        "lossless watch URL --model m --every 30m --until 24h --db history.sqlite",
        "lossless history --db history.sqlite --html trend.html",
    )
)
@click.option(
    "--every", metavar="DURATION", help="Start a run every 5s, 30m, 3h, 1h30m... [default: one run]."
)
@click.option("--runs", type=click.IntRange(1), help="With --every: stop after this many runs.")
@click.option(
    "--until", metavar="DURATION", help="With --every: start no run later than this after the first."
)
@_DB
@friendly_errors
def watch(every: str | None, runs: int | None, until: str | None, db: Path, **bench_args: Any) -> None:
    """Run a bench configuration now (for cron) or on a schedule, adding each finished run to a history;
    `lossless history` lists the runs and flags changes. Takes every `lossless bench` option.

    Ctrl-C or SIGTERM keeps every finished run; a run it cuts short is left out of the history (its
    files stay in DB.runs/ID.partial) and the watch exits 130."""
    from lossless.report import trend
    from lossless.watch.options import WatchOptions
    from lossless.watch.run import run as run_watch
    from lossless.watch.schedule import Schedule, parse_duration

    schedule = Schedule(
        every=None if every is None else parse_duration(every, "--every"),
        runs=runs,
        until=None if until is None else parse_duration(until, "--until"),
    )
    options = WatchOptions(bench_options(**unrenamed(bench_args)), schedule, db)
    outcomes = run_watch(
        options,
        on_run=lambda o: click.echo("\n".join(trend.run_lines(o, runs)), err=True),
        on_start=lambda: click.echo(f"watch: {schedule.text}; history {db}", err=True),
    )
    if any(o.interrupted or o.stop for o in outcomes):
        exit_interrupted("interrupted: the finished runs are in the history")
    failed = [o.run.error for o in outcomes if o.run is not None and o.run.error is not None]
    if failed:
        raise EndpointError(f"{len(failed)} of {len(outcomes)} runs measured nothing: {failed[-1]}")
    click.echo(str(db))  # stdout is data: where the history is


watch.params[:0] = [p for p in bench_command.params if p.name not in _MANAGED]


@click.command(
    epilog=examples(
        "lossless history                           # the default history's runs and flagged changes",
        "lossless history --db history.sqlite --last 0 --html trend.html",
        "lossless history --compare 3 7             # run #3 against run #7, as ratios",
    )
)
@_DB
@click.option(
    "--last", default=20, show_default=True, type=click.IntRange(0), help="Runs in the table (0: all)."
)
@click.option(
    "--compare",
    nargs=2,
    metavar="RUN_A RUN_B",
    help="Two runs (#number, id or the id's start): B's latency and speed as ratios of A's, with 95% CIs.",
)
@click.option(
    "--html",
    type=click.Path(path_type=Path),
    help="Write the HTML trend report here (with --compare: the comparison's page).",
)
@json_flag("The history")
@friendly_errors
def history(db: Path, last: int, compare: tuple[str, str] | None, html: Path | None, as_json: bool) -> None:
    """A watch's runs with their key figures, runs outside their history's band and change points
    (the rules are printed with the table); --html plots them over time."""
    from lossless.console import people_console
    from lossless.report import trend
    from lossless.watch import store
    from lossless.watch.trends import trends

    if html is not None:
        validate.writable_file(html, "--html")
    path = db.absolute()
    connection = store.open_db(db, create=False)
    try:
        runs = store.read(connection, path.parent)
    finally:
        connection.close()
    console = people_console(stderr=as_json)
    if compare is not None:
        _compare([_run_folder(runs, ref) for ref in compare], console, as_json, html)
        return
    found, notes = trends(runs), _left_out(path, runs)
    trend.render_terminal(found, console, last, notes)
    if as_json:
        click.echo(trend.to_json(found, notes))
    if html is not None:
        from lossless.atomic import write_atomic

        wrote([write_atomic(html, trend.render_html(found, db, notes))])


def _run_folder(runs: Sequence[Run], ref: str) -> Path:
    """A run named by its number ("3" or "#3"), its id, or the start of its id, unambiguously."""
    number = ref.removeprefix("#")
    found = [r for r in runs if (number.isdigit() and r.number == int(number)) or r.run_id == ref]
    found = found or [r for r in runs if r.run_id.startswith(ref)]
    if len(found) != 1:
        why = "no run" if not found else f"{len(found)} runs"
        raise UsageError(f"--compare {ref}: {why} in the history by that number or id")
    if found[0].folder is None or not found[0].folder.is_dir():
        raise UsageError(
            f"--compare {ref}: run #{found[0].number} has no files to compare ({found[0].error})"
        )
    return found[0].folder


def _compare(folders: list[Path], console: Console, as_json: bool, page: Path | None) -> None:
    from lossless.report import compare

    result = compare.load(folders[0], folders[1])
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    compare.emit(result, console, as_json, page)
    wrote([page])


def _left_out(db: Path, runs: Sequence[Run]) -> list[str]:
    """Run folders the history has no row for: cut short by Ctrl-C or SIGTERM (``.partial``), or killed
    before their row was written."""
    from lossless.watch.store import runs_folder

    folder = runs_folder(db)
    if not folder.is_dir():
        return []
    stored = {r.run_id for r in runs}
    partial = sorted(p.name for p in folder.glob("*.partial"))
    orphans = sorted(
        p.name for p in folder.iterdir() if p.is_dir() and p.suffix != ".partial" and p.name not in stored
    )
    notes = (
        [
            f"{len(partial)} run(s) cut short or killed, not in the history (records kept): "
            f"{folder / partial[-1]}{' ...' if len(partial) > 1 else ''}"
        ]
        if partial
        else []
    )
    if orphans:
        notes.append(
            f"{len(orphans)} finished run folder(s) with no row (killed while being recorded): "
            f"{', '.join(orphans)}"
        )
    return notes
