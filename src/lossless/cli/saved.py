"""The commands that read saved runs: report (one HTML page) and compare (two runs as ratios)."""

from __future__ import annotations

from pathlib import Path

import click

from lossless import checks
from lossless.cli.common import friendly_errors, json_flag


@click.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), help="HTML file [default: RUN_DIR/report.html]."
)
@friendly_errors
def report(run_dir: Path, output: Path | None) -> None:
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


@click.command()
@click.argument("run_a", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.argument("run_b", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Also write an HTML page here.")
@json_flag("Ratios")
@friendly_errors
def compare(run_a: Path, run_b: Path, output: Path | None, as_json: bool) -> None:
    """Two saved runs (bench --out dirs): B's latency and speed as ratios of A's, with 95% CIs."""
    from lossless.console import people_console
    from lossless.report import compare as stage

    if output is not None:
        checks.writable_file(output, "--output")
    result = stage.load(run_a, run_b)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    stage.emit(result, people_console(stderr=as_json), as_json, output)
    if output is not None:
        click.echo(f"wrote {output}", err=True)
