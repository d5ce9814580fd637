"""``lossless compare DIR_A DIR_B``: two saved runs side by side - ratios of B to A with bootstrap 95% CIs
(``analyze.compare_runs``), a table for people, JSON for programs, and an HTML page with the overlaid
distributions."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lossless.analyze import METRIC, Metric, RunComparison, compare_runs, timing
from lossless.analyze.metrics import PLOTTED, SHOWN_RATIOS
from lossless.errors import UsageError
from lossless.records import RequestRecord
from lossless.report import html, plots, svg
from lossless.rundir import read_run


@dataclass(frozen=True)
class SavedSide:
    dir: Path
    environment: Mapping[str, Any] | None  # from its summary.json, when it has one
    records: Sequence[RequestRecord]


@dataclass(frozen=True)
class Compared:
    a: SavedSide
    b: SavedSide
    comparisons: tuple[RunComparison, ...]
    notes: tuple[str, ...]  # what reading the runs found (a torn last line, a rebuilt summary)

    def as_dict(self) -> dict[str, Any]:
        side = lambda s: {"dir": str(s.dir), "environment": s.environment}  # noqa: E731
        return {
            "a": side(self.a),
            "b": side(self.b),
            "comparisons": [c.as_dict() for c in self.comparisons],
            "notes": list(self.notes),
        }


def load(dir_a: Path, dir_b: Path) -> Compared:
    """Both runs' records and their comparison."""
    sides: list[SavedSide] = []
    notes: list[str] = []
    for d in (dir_a, dir_b):
        run = read_run(d, rebuild=False)  # the records are compared; a summary would go unused
        if not run.records:
            raise UsageError(f"{d} holds no bench records (records.jsonl) to compare")
        env = None if run.summary is None or run.summary.run is None else dict(run.summary.run.environment)
        sides.append(SavedSide(d, env or None, run.records))
        notes += run.notes
    a, b = sides
    return Compared(a, b, tuple(compare_runs(a.records, b.records)), tuple(notes))


def emit(result: Compared, console: Console, as_json: bool, page: Path | None) -> None:
    """The table for people (stderr under --json), the JSON on stdout, the HTML page under -o."""
    render_terminal(result, console)
    if as_json:
        print(to_json(result), flush=True)
    if page is not None:
        html.write_page(page, render_html(result))


def to_json(result: Compared) -> str:
    return json.dumps(result.as_dict(), indent=2)


def _verdict(c: RunComparison) -> str:
    if not c.supported:
        return f"too few to tell ({c.n[0]} and {c.n[1]})" if c.n else "too few to tell"
    lo, hi = c.ci95
    if lo <= 1.0 <= hi:
        return "no clear difference"
    faster = (lo > 1.0) == METRIC[c.metric].higher_is_better
    return "B better" if faster else "B worse"


def render_terminal(result: Compared, console: Console) -> None:
    table = Table(
        title=f"lossless compare: B = {result.b.dir} against A = {result.a.dir}", title_justify="left"
    )
    for header in ("endpoint load", "metric", "stat", "B / A", "95% CI", "reading"):
        table.add_column(header, justify="right" if header in ("B / A", "95% CI") else "left")
    for c in result.comparisons:
        reading = _verdict(c)
        style = {"B better": "green", "B worse": "red"}.get(reading, "")
        lo, hi = c.ci95
        table.add_row(
            c.label,
            METRIC[c.metric].words,
            c.stat,
            f"{c.ratio:.2f}x",
            f"{lo:.2f}-{hi:.2f}",
            f"[{style}]{reading}[/{style}]" if style else reading,
        )
    console.print(table)
    if not result.comparisons:
        console.print("no endpoint and load level with two or more successful requests in both runs")


def _overlay(records: tuple[Sequence[RequestRecord], Sequence[RequestRecord]], m: Metric) -> str:
    series = []
    for run, recs in zip("AB", records, strict=True):
        for label, group in plots.groups(recs).items():
            series.append(
                svg.ChartSeries(f"{run}: {label}", svg.cdf(m.values(map(timing, group))), kind="step")
            )
    return plots.cdf_chart(m, series)


def render_html(result: Compared) -> str:
    comps = result.comparisons
    rows = [
        svg.Row(
            f"{c.label} {METRIC[c.metric].words} {c.stat}",
            c.ratio,
            c.ci95[0],
            c.ci95[1],
            group=METRIC[c.metric].words,
            tip=c.text,
        )
        for c in comps
        if c.stat in SHOWN_RATIOS
    ]
    forest = svg.intervals(
        "B / A with 95% bootstrap intervals", "ratio of B to A", rows, refs=[(1.0, "same")]
    )
    table_rows = [
        (
            c.label,
            METRIC[c.metric].words,
            c.stat,
            f"{c.ratio:.2f}x",
            f"{c.ci95[0]:.2f}-{c.ci95[1]:.2f}",
            _verdict(c),
        )
        for c in comps
    ]
    numbers = html.table(("endpoint load", "metric", "stat", "B / A", "95% CI", "reading"), table_rows)
    about = (
        "Each row is B's statistic divided by A's, with a bootstrap 95% interval (both runs resampled). An "
        "interval that crosses 1 is no clear difference. For output speed above 1 is better; for times, "
        "below."
    )
    sections = [
        html.section(
            "ratios",
            "Ratios",
            f'<div class="figure">{forest}<div class="numbers">{numbers}</div></div>',
            about,
        )
    ]
    for m in PLOTTED:
        sections.append(html.section(m.key, m.words, _overlay((result.a.records, result.b.records), m)))
    env_a, env_b = result.a.environment or {}, result.b.environment or {}
    env_rows = [(k, str(env_a.get(k, "-")), str(env_b.get(k, "-"))) for k in dict.fromkeys([*env_a, *env_b])]
    sections.append(html.section("setup", "Environment", html.table(("", "A", "B"), env_rows, cls="kv")))
    subtitle = f"A = {result.a.dir} · B = {result.b.dir}"
    nav = [
        ("ratios", "Ratios"),
        *((m.key, m.words) for m in PLOTTED),
        ("setup", "Environment"),
    ]
    return html.page("lossless compare", subtitle, sections, nav)
