"""The commands that read saved runs: report (one HTML page of any command's --out folder) and compare
(two bench runs as ratios)."""

from __future__ import annotations

from pathlib import Path

import click

from lossless import validate
from lossless.atomic import atomic_path
from lossless.cli.common import examples, friendly_errors, json_flag, outputs, renamed, wrote
from lossless.errors import UsageError
from lossless.rundir import BENCH_FILES, REPORT

PAGE = click.Path(path_type=Path)


@click.command(
    "report",
    epilog=examples(
        "lossless report run/                       # run/report.html",
        "lossless report run/ --html ~/reports/run.html",
        "lossless report host-a/ host-b/ --out merged/   # runs made at once on several machines",
    ),
)
@click.argument(
    "run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True, file_okay=False)
)
@click.option("--html", "output", type=PAGE, help="Write the page here [default: RUN_DIR/report.html].")
@renamed(("-o", "--output"), "--html", "output", type=PAGE)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="With several RUN_DIRs (bench runs made at the same time on several machines): write the merged "
    "records.jsonl, summary.json, summary.csv and report.html here.",
)
@click.option(
    "--overwrite", is_flag=True, help="Replace a run already in --out (its files are removed first)."
)
@friendly_errors
def report(run_dirs: tuple[Path, ...], output: Path | None, out_dir: Path | None, overwrite: bool) -> None:
    """One self-contained HTML report (plots, tables) of what a command's --out wrote in RUN_DIR: bench,
    verify, probe, tasks, inspect. Its path is printed on stdout.

    A run stopped before it wrote summary.json is summarized from its records. Several RUN_DIRs (with
    --out): one summary of them all, every percentile from all their records."""
    from lossless.report import html
    from lossless.rundir import read_run

    if len(run_dirs) > 1 or out_dir is not None:
        _merge(list(run_dirs), output, out_dir, overwrite)
        return
    run_dir = run_dirs[0]
    target = output or run_dir / REPORT
    validate.writable_file(target, "--html" if output else "the report")
    run, inspected = html.with_links(read_run(run_dir), run_dir, target.parent)
    path = html.write_page(target, html.render_saved(run, run_dir, inspected))
    for note in run.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(str(path))  # stdout is data: where the report is


def _merge(run_dirs: list[Path], output: Path | None, out_dir: Path | None, overwrite: bool) -> None:
    from lossless import rundir
    from lossless.console import people_console
    from lossless.report import html, terminal
    from lossless.report.merge import merge

    if out_dir is None:
        raise UsageError("several RUN_DIRs are merged into a new run: give --out DIR for it")
    outputs(out_dir, (*BENCH_FILES, REPORT), output, overwrite=overwrite)
    merged = merge(run_dirs)
    with atomic_path(out_dir / rundir.RECORDS) as tmp:
        rundir.write_jsonl(tmp, merged.records)
    written = [out_dir / rundir.RECORDS, *rundir.write(merged.summary, out_dir)]
    terminal.render(merged.summary, people_console(stderr=True))  # stdout: where the report is
    path = html.write_page(output or out_dir / REPORT, html.render_run(merged.summary, merged.records))
    wrote(written)
    click.echo(str(path))


@click.command(
    epilog=examples(
        "lossless compare before/ after/",
        "lossless compare before/ after/ --html compare.html --json > ratios.json",
    )
)
@click.argument("run_a", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.argument("run_b", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--html", "output", type=PAGE, help="Also write an HTML page here.")
@renamed(("-o", "--output"), "--html", "output", type=PAGE)
@json_flag("Ratios")
@friendly_errors
def compare(run_a: Path, run_b: Path, output: Path | None, as_json: bool) -> None:
    """Two saved runs (bench --out folders): B's latency and speed as ratios of A's, with 95% CIs; a
    claim the requests cannot support (too few for a tail) is withheld and said so."""
    from lossless.console import people_console
    from lossless.report import compare as comparison

    if output is not None:
        validate.writable_file(output, "--html")
    result = comparison.load(run_a, run_b)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    comparison.emit(result, people_console(stderr=as_json), as_json, output)
    wrote([output])
