"""A watch's history for people and programs: one line per run as it finishes, the runs table with its
flags, JSON, and the HTML trend page (TTFT, output speed, E2E and error rate over time per endpoint)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape as html_escape
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lossless.report import page, svg
from lossless.rundir import strict_json
from lossless.watch.run import Outcome
from lossless.watch.store import KEY, KEYS, Key, Run
from lossless.watch.trends import Flag, Series, Shift, Trends

_P50, _P99, _FLAGGED = svg.PALETTE[0], svg.PALETTE[2], "#d62728"
_CHARTS = (  # title, y axis, the keys drawn
    ("Time to first token", "ms", ("ttft_p50_ms", "ttft_p99_ms")),
    ("Output speed", "tokens/s", ("output_tps_p50",)),
    ("End-to-end time", "ms", ("e2e_p50_ms", "e2e_p99_ms")),
    ("Error rate", "share of requests failed", ("error_rate",)),
)


def value_text(key: Key, v: float | None) -> str:
    if v is None:
        return "-"
    if key.metric is None:
        return f"{v:.1%}"
    digits = 1 if key.unit == "tok/s" or abs(v) < 100 else 0
    return f"{v:,.{digits}f} {key.unit}"


def when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def flag_text(f: Flag, unit: bool = False) -> str:
    key = KEY[f.key]
    side = "high" if f.value > f.band.hi else "low"
    band = f" {value_text(key, f.value)}, band {value_text(key, f.band.lo)} to {value_text(key, f.band.hi)}"
    return f"{key.label} {side}" + (band if unit else "") + (" (worse)" if f.worse else " (better)")


def shift_text(series: Series, s: Shift) -> str:
    key, c = KEY[s.key], s.change
    ratio = f" ({c.after / c.before:.2f}x)" if c.before and key.metric is not None else ""
    return (
        f"{series.label}: {key.label} moved from {value_text(key, c.before)} to "
        f"{value_text(key, c.after)}{ratio}, {'worse' if s.worse else 'better'}, from run #{s.run} on "
        f"(Pettitt's test, p = {c.p:.3f})"
    )


# --- the watch, run by run --------------------------------------------------------------------------


def run_lines(outcome: Outcome, total: int | None) -> list[str]:
    """What a person watching stderr reads when a run ends."""
    of = f"/{total}" if total is not None else ""
    head = f"run {outcome.index + 1}{of} {outcome.run_id}"
    if outcome.interrupted:
        return [f"{head}: interrupted; not added to the history (its records: {outcome.folder})"]
    run = outcome.run
    assert run is not None and outcome.trends is not None
    if run.error is not None:
        return [f"{head} (#{run.number}): measured nothing: {run.error}"]
    lines = []
    for r in run.results:
        figures = ", ".join(f"{k.label} {value_text(k, r.values.get(k.column))}" for k in KEYS)
        lines.append(f"{head} (#{run.number}) {r.endpoint} {r.load}: {r.ok} ok, {r.failed} failed; {figures}")
    for series, f in outcome.trends.flags_of(run.number):
        lines.append(f"  flag: {series.label}: {flag_text(f, unit=True)}")
    for series in outcome.trends.series:
        lines += [f"  change point: {shift_text(series, s)}" for s in series.shifts if s.run == run.number]
    return lines


# --- the history -------------------------------------------------------------------------------------


def render_terminal(trends: Trends, console: Console, last: int, notes: Sequence[str] = ()) -> None:
    if not trends.runs:
        console.print("no runs in the history yet")
    runs = trends.runs[-last:] if last else trends.runs
    table = Table(title="lossless history", title_justify="left")
    headers = ("#", "started (UTC)", "endpoint load", "ok/failed", *(k.label for k in KEYS), "flags")
    for h in headers:
        right = h in ("#", "ok/failed") or h in _LABELS
        table.add_column(h, justify="right" if right else "left", no_wrap=h != "flags")
    for run in runs:
        _rows(table, run, trends)
    if runs:
        console.print(table)
    if len(runs) < len(trends.runs):
        console.print(f"(the last {len(runs)} of {len(trends.runs)} runs; --last 0 shows them all)")
    for series in trends.series:
        for s in series.shifts:
            console.print(escape("change point: " + shift_text(series, s)))
    if not any(s.flags or s.shifts for s in trends.series):
        console.print("no run outside its band and no change point")
    for rule in trends.rules:
        console.print(escape(f"rule: {rule}"))
    for note in notes:
        console.print(escape(f"note: {note}"))


_LABELS = {k.label for k in KEYS}


def _rows(table: Table, run: Run, trends: Trends) -> None:
    first = (str(run.number), when(run.started_s))
    if run.error is not None:
        table.add_row(*first, "-", "-", *("-" for _ in KEYS), escape(f"measured nothing: {run.error}"))
        return
    by_series = {s.label: [f for f in s.flags if f.run == run.number] for s in trends.series}
    for i, r in enumerate(run.results):
        label = next(
            s.label
            for s in trends.series
            if (s.endpoint, s.load, s.workload) == (r.endpoint, r.load, r.workload)
        )
        flags = by_series.get(label, [])
        text = escape(", ".join(flag_text(f) for f in flags)) or "-"
        if any(f.worse for f in flags):
            text = f"[red]{text}[/red]"
        cells = (value_text(k, r.values.get(k.column)) for k in KEYS)
        table.add_row(*(first if i == 0 else ("", "")), escape(label), f"{r.ok}/{r.failed}", *cells, text)


def to_json(trends: Trends, notes: Sequence[str] = ()) -> str:
    return strict_json({**trends.as_dict(), "notes": list(notes)})


# --- the HTML trend page -----------------------------------------------------------------------------


def render_html(trends: Trends, db: Path, notes: Sequence[str] = ()) -> str:
    runs = trends.runs
    span = f"{when(runs[0].started_s)} to {when(runs[-1].started_s)} UTC" if runs else "no runs yet"
    sections = [_changes(trends, notes)]
    sections += [_series(trends, s, i) for i, s in enumerate(trends.series)]
    sections.append(_runs(runs, db))
    nav = [
        ("changes", "Changes"),
        *((f"s{i}", s.label) for i, s in enumerate(trends.series)),
        ("runs", "Runs"),
    ]
    return page.page("lossless history", f"{db} · {len(runs)} runs · {span}", sections, nav)


def _changes(trends: Trends, notes: Sequence[str]) -> str:
    rows = [
        (f"#{s.run}", series.label, KEY[s.key].label, "change point", shift_text(series, s))
        for series in trends.series
        for s in series.shifts
    ]
    started = {r.number: r for r in trends.runs}
    rows += [
        (
            f"#{f.run}",
            series.label,
            KEY[f.key].label,
            "outside band",
            f"{when(started[f.run].started_s)}: {flag_text(f, unit=True)}",
        )
        for series in trends.series
        for f in series.flags
    ]
    body = (
        page.table(("run", "endpoint load", "figure", "rule", "reading"), rows)
        if rows
        else ("<p>No run outside its band and no change point.</p>")
    )
    rules = "".join(f"<li>{html_escape(r)}</li>" for r in (*trends.rules, *notes))
    return page.section(
        "changes",
        "Changes",
        body + f'<ul class="tight">{rules}</ul>',
        "Flagged runs and change points, by these rules:",
    )


def _axis(trends: Trends) -> tuple[float, float, str]:
    """(time zero, seconds per unit, the x axis' label): the unit suits the history's span."""
    t0 = trends.runs[0].started_s if trends.runs else 0.0
    span = trends.runs[-1].started_s - t0 if trends.runs else 0.0
    for unit, seconds in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if span >= 2 * seconds:
            return t0, seconds, f"{unit} since {when(t0)} UTC"
    return t0, 1.0, f"seconds since {when(t0)} UTC"


def _series(trends: Trends, series: Series, i: int) -> str:
    t0, per, x_label = _axis(trends)
    x = {r.number: (r.started_s - t0) / per for r in trends.runs}
    charts = []
    for title, y_label, keys in _CHARTS:
        lines = [
            svg.ChartSeries(
                KEY[k].label,
                [(x[p.run], p.value) for p in series.points[k]],
                color=_P50 if KEY[k].stat == "p50" else _P99,
            )
            for k in keys
        ]
        flagged = [f for f in series.flags if f.key in keys]
        if flagged:
            lines.append(
                svg.ChartSeries(
                    "outside band",
                    [(x[f.run], f.value) for f in flagged],
                    kind="points",
                    tips=[f"#{f.run}: {flag_text(f, unit=True)}" for f in flagged],
                    color=_FLAGGED,
                )
            )
        refs = _change_refs([s for s in series.shifts if s.key in keys], x)
        if keys == ("error_rate",):
            refs.append(("y", 1.0, "all failed"))  # the axis spans 0 to 1 even when nothing failed
        charts.append(svg.render(svg.Chart(f"{title} · {series.label}", x_label, y_label, lines, refs=refs)))
    numbers = _numbers(trends, series)
    about = (
        f"Per run: {', '.join(k.label for k in KEYS)}. Red dots: runs outside their band; dashed "
        "lines: change points (the first run after the change)."
    )
    body = f'<div class="figure">{"".join(charts)}<div class="numbers">{numbers}</div></div>'
    return page.section(f"s{i}", series.label, body, about)


def _change_refs(shifts: Sequence[Shift], x: dict[int, float]) -> list[tuple[str, float, str]]:
    """One dashed line at each run where a drawn figure changed (their labels would overlap), with the
    smallest p-value there."""
    at: dict[int, list[Shift]] = {}
    for s in shifts:
        at.setdefault(s.run, []).append(s)
    return [("x", x[run], f"change (p={min(s.change.p for s in found):.3f})") for run, found in at.items()]


def _numbers(trends: Trends, series: Series) -> str:
    rows = []
    for run in trends.runs:
        for r in run.results:
            if (r.endpoint, r.load, r.workload) == (series.endpoint, series.load, series.workload):
                flags = [flag_text(f) for f in series.flags if f.run == run.number]
                cells = (value_text(k, r.values.get(k.column)) for k in KEYS)
                rows.append(
                    (f"#{run.number}", when(run.started_s), f"{r.ok}/{r.failed}", *cells, ", ".join(flags))
                )
    return page.table(("run", "started (UTC)", "ok/failed", *(k.label for k in KEYS), "flags"), rows)


def _runs(runs: Sequence[Run], db: Path) -> str:
    """Folders as seen from the database's folder, where the history and its runs move together."""
    base = db.absolute().parent
    rows = [
        (
            f"#{r.number}",
            r.run_id,
            when(r.started_s),
            f"{r.finished_s - r.started_s:.1f} s",
            "-" if r.folder is None else os.path.relpath(r.folder, base),
            r.error or "",
        )
        for r in runs
    ]
    headers = ("#", "run", "started (UTC)", "took", "files", "error")
    return page.section(
        "runs",
        "Runs",
        page.table(headers, rows),
        "Each run's records.jsonl and summary.json are in its folder: lossless report, "
        "lossless compare and lossless advise read them.",
    )
