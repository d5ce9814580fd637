"""bench's summary for people and files: the table, the JSON on stdout, summary.json and .csv, HTML."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from lossless import rundir
from lossless.analyze import Summary
from lossless.atomic import write_atomic
from lossless.records import RequestRecord
from lossless.report import html, inspect_html, terminal


def emit(
    summary: Summary,
    records: Sequence[RequestRecord],
    console: Console,
    as_json: bool,
    out_dir: Path | None,
    html_path: Path | None,
) -> list[Path]:
    """The table for people (stderr under --json), the JSON on stdout, files under --out, --html; the
    files of the run folder and the page, as written."""
    terminal.render(summary, console)
    if as_json:
        sys.stdout.write(rundir.to_json(summary) + "\n")
        sys.stdout.flush()
    wrote = []
    if out_dir is not None:
        wrote += [out_dir / rundir.RECORDS, *rundir.write(summary, out_dir)]  # records: as they finished
    if html_path is not None:
        # a card of an endpoint inspected into the same folder (lossless inspect --out) is linked
        config = summary.run.config if summary.run is not None else {}
        folders = [html_path.parent, *([out_dir] if out_dir is not None else [])]
        found, notes = inspect_html.links(config.get("endpoints") or [], folders, html_path.parent)
        wrote.append(write_atomic(html_path, html.render_run(summary, records, notes=notes, inspected=found)))
    return wrote
