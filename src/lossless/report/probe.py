"""probe's result for people and files: the terminal table and probe.json."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lossless.client.endpoints import public_url
from lossless.probe.run import ProbeResult
from lossless.report.page import section, table
from lossless.rundir import PROBE, emit_json

VERDICT_STYLE = {
    "honoured": "green",
    "ignored": "red",
    "rejected": "yellow",
    "unsupported": "dim",
    "inconclusive": "cyan",
}


def emit(result: ProbeResult, console: Console, as_json: bool, out_dir: Path | None) -> list[Path | None]:
    """The table for people (stderr under --json), the JSON on stdout, probe.json under --out; the file
    written."""
    render(result, console)
    return [emit_json(result, as_json, out_dir, PROBE)]


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


def probe_section(doc: Mapping[str, Any]) -> str:
    """probe.json read back (``lossless report``): its checks as one section of the run's page."""
    e = doc.get("endpoint") or {}
    rows = [
        (
            str(c.get("name", "?")),
            str(c.get("verdict", "?")),
            ", ".join(f"{k}={v}" for k, v in (c.get("evidence") or {}).items()),
            str(c.get("note", "")),
        )
        for c in doc.get("checks") or []
    ]
    about = f"{e.get('name', '?')} ({e.get('base_url', '?')}, model {e.get('model', '?')}): probe.json"
    return section("probe", "Parameters", table(("parameter", "verdict", "evidence", "note"), rows), about)
