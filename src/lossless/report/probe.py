"""probe's result for people and files: the terminal table and probe.json."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from lossless.client.endpoints import public_url
from lossless.probe.run import ProbeResult
from lossless.rundir import PROBE, emit_json

VERDICT_STYLE = {"honoured": "green", "ignored": "red", "rejected": "yellow", "unsupported": "dim"}


def emit(result: ProbeResult, console: Console, as_json: bool, out_dir: Path | None) -> None:
    """The table for people (stderr under --json), the JSON on stdout, probe.json under --out."""
    render(result, console)
    emit_json(result, as_json, out_dir, PROBE)


def render(result: ProbeResult, console: Console) -> None:
    e = result.endpoint
    table = Table(title=f"probe: {e.name} ({public_url(e.base_url)}, model {e.model})", title_justify="left")
    table.add_column("parameter")
    table.add_column("verdict")
    table.add_column("evidence")
    table.add_column("note")
    for c in result.checks:
        evidence = ", ".join(f"{k}={v}" for k, v in c.evidence.items())
        style = VERDICT_STYLE[c.verdict]
        table.add_row(c.name, f"[{style}]{c.verdict}[/{style}]", evidence, c.note)
    console.print(table)
