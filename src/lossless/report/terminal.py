"""The summary as a table for people (rich); its columns are the metric table's ``terminal`` and
``by_class`` statistics."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lossless.analyze import METRIC, METRICS, GroupStats, Metric, Summary
from lossless.analyze.metrics import SHOWN_RATIOS, thin
from lossless.analyze.repeats import SPREAD
from lossless.report.notes import endpoint_notes, served_by_note

_COLUMNS = tuple((m, stat) for m in METRICS for stat in m.terminal)
_CLASS_COLUMNS = tuple((m, stat) for m in METRICS for stat in m.by_class)


REPEAT_INTERVALS = "between-run 95% CI; where 95% of further runs fall"  # Spread's ci95; rerun95
THIN_NOTE = "~ fewer requests than the percentile is read from (p90: 10, p99: 100): a rough figure"


def _cell(g: GroupStats, m: Metric, stat: str) -> str:
    value = g.stat(m.key, stat)
    mark = "~" if value is not None and thin(stat, int(g.stat(m.key, "n") or 0)) else ""
    if value is not None and m.key == "output_tps" and set(g.n_out_sources) == {"chunks"}:
        return f"{mark}{value:.{m.digits}f} chunk/s"  # no usage and no tokenizer: chunks, not tokens
    return mark + m.fmt(value, unit=True)


def _thin_shown(summary: Summary) -> bool:
    groups = [g for e in summary.endpoints for g in (e.overall, *e.classes.values())]
    return any(
        thin(s, int(g.stat(m.key, "n") or 0))
        for g in groups
        for m, s in _COLUMNS + _CLASS_COLUMNS
        if g.stat(m.key, s) is not None
    )


def _classes(summary: Summary, console: Console) -> None:
    """One compact row per prompt class, only when some endpoint saw more than one class."""
    if all(len(e.classes) < 2 for e in summary.endpoints):
        return
    table = Table(title="by prompt class", title_justify="left")
    for header in ("endpoint", "load", "class", "ok", *(m.header(s, unit=False) for m, s in _CLASS_COLUMNS)):
        table.add_column(header, justify="left" if header in ("endpoint", "load", "class") else "right")
    for e in summary.endpoints:
        for cls, c in e.classes.items():
            row = (_cell(c, m, s) for m, s in _CLASS_COLUMNS)
            table.add_row(e.name, e.load, cls, str(c.requests.ok), *row)
    console.print(table)


def repeat_rows(summary: Summary) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """bench --repeat: per endpoint and load, each overview statistic's mean over the runs, its
    between-run 95% CI and the 95% interval of one more run ("12 (11-13; 10-14)"); the headers, and the
    rows."""
    shown = [k for k in SPREAD if any(e.repeats and k in e.repeats.stats for e in summary.endpoints)]
    rows = []
    for e in summary.endpoints:
        if e.repeats is None:
            continue
        cells = []
        for key in shown:
            s = e.repeats.stats.get(key)
            digits = METRIC[key.split()[0]].digits if " " in key else 1
            if s is None:
                cells.append("-")
                continue
            intervals = [s.ci95] if s.rerun95 is None else [s.ci95, s.rerun95]
            within = "; ".join(f"{lo:,.{digits}f}-{hi:,.{digits}f}" for lo, hi in intervals)
            cells.append(f"{s.mean:,.{digits}f} ({within})")
        rows.append((e.name, e.load, str(e.repeats.runs), *cells))
    headers = tuple(METRIC[k.split()[0]].header(k.split()[1]) if " " in k else k for k in shown)
    return ("endpoint", "load", "runs", *headers), rows


def _repeats(summary: Summary, console: Console) -> None:
    headers, rows = repeat_rows(summary)
    if not rows:
        return
    table = Table(title=f"over the runs: mean ({REPEAT_INTERVALS})", title_justify="left")
    for header in headers:
        table.add_column(header, justify="left" if header in ("endpoint", "load") else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def render(summary: Summary, console: Console) -> None:
    table = Table(title="lossless bench", title_justify="left")
    columns = (m.header(s, unit=False) for m, s in _COLUMNS)
    headers = ("endpoint", "load", "ok/failed", *columns, "tok/s total", "errors")
    for header in headers:
        table.add_column(header, justify="left" if header in ("endpoint", "load", "errors") else "right")
    for e in summary.endpoints:
        req = e.overall.requests
        errors = ", ".join(f"{k}:{v}" for k, v in req.errors.items()) or "-"
        tput = e.overall.throughput.output_tokens_per_s
        table.add_row(
            e.name,
            e.load,
            f"{req.ok}/{req.failed}",
            *(_cell(e.overall, m, s) for m, s in _COLUMNS),
            "-" if tput is None else f"{tput:.1f}",
            errors,
        )
    console.print(table)
    _classes(summary, console)
    if _thin_shown(summary):
        console.print(escape(THIN_NOTE))
    for e in summary.endpoints:
        notes = endpoint_notes(e)
        if notes:
            console.print(escape(f"{e.name} [{e.load}]: " + "; ".join(notes)))
        if who := served_by_note(e.overall):
            console.print(escape(f"{e.name} [{e.load}]: {who}"))
    for c in summary.comparisons:
        if c.stat in SHOWN_RATIOS:
            console.print(escape(f"[{c.load}] {c.text}"))  # "[c=1]" is not a style
    _repeats(summary, console)
    if summary.capacity is not None:
        console.print(escape(summary.capacity.text))
    if summary.stopped is not None:
        console.print(escape(summary.stopped))
    if summary.interrupted:
        console.print("[bold]interrupted[/bold]: results cover the requests that finished")
    for warning in summary.run.warnings if summary.run is not None else ():
        console.print("[bold]warning[/bold]: " + escape(warning))
