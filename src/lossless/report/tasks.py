"""tasks' result for people and files: the terminal tables, tasks.json and the HTML page (``--html``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lossless.atomic import write_atomic
from lossless.report import svg
from lossless.report.page import page, section, table
from lossless.rundir import TASKS, emit_json
from lossless.tasks.result import EndpointTasks, Interval, TasksComparison, TasksResult

COLUMNS = (
    "endpoint",
    "success",
    "pass@k",
    "time/success p50 | p95",
    "cost/success",
    "model | tools | retries | checks",
    "steps",
    "retries",
    "bad args: JSON | schema",
    "speed",
)
VERDICT_STYLE = {"equivalent": "green", "different": "red", "inconclusive": "yellow"}


def emit(
    result: TasksResult, console: Console, as_json: bool, out_dir: Path | None, html: Path | None = None
) -> list[Path | None]:
    """The tables for people (stderr under --json), the JSON on stdout, tasks.json under --out, the page
    under --html; the files written."""
    render(result, console)
    return [emit_json(result, as_json, out_dir, TASKS), html and write_atomic(html, render_html(result))]


def render(result: TasksResult, console: Console) -> None:
    s = result.settings
    title = f"tasks: {result.task_set} ({s['tasks']} tasks x {s['samples']} samples, {s['repairs']} repairs)"
    table = Table(title=title, title_justify="left")
    for column in COLUMNS:
        table.add_column(column)
    for e in result.endpoints:
        table.add_row(*_row(e))
    console.print(table)
    for c in result.comparisons:
        _comparison(c, console)


def _row(e: EndpointTasks) -> list[str]:
    p = e.mean_parts_s
    t = e.time_per_success
    times = f"{_s(t.p50)} | {_s(t.p95)}" if t.n else "-"
    parts = f"{_s(p['model'])} | {_s(p['tool'])} | {_s(p['retry'])} | {_s(p['check'])}"
    pass_at = ", ".join(f"@{k} {v:.0%}" for k, v in e.pass_at.items()) or "-"
    bad, schema = e.invalid_arguments.value, e.schema_invalid.value
    bad_args = (
        f"{bad:.0%} | {schema:.0%} of {e.tool_calls}" if bad is not None and schema is not None else "-"
    )
    return [
        e.name,
        f"{e.successes}/{e.runs} {_pct(e.success_rate)}",
        pass_at,
        times,
        _usd(e.cost_per_success),
        parts,
        f"{e.mean_steps:.1f}",
        str(e.retries),
        bad_args,
        f"{e.output_speed:.1f} tok/s" if e.output_speed else "-",
    ]


def _comparison(c: TasksComparison, console: Console) -> None:
    style = VERDICT_STYLE[c.verdict]
    lo, hi = c.ci90
    console.print(
        f"{c.candidate} vs {c.baseline}: [{style}]{c.verdict}[/{style}] success "
        f"{c.difference:+.1%} (90% CI {lo:+.1%} to {hi:+.1%}, margin +-{c.margin:.0%}; "
        f"McNemar p={c.p_mcnemar:.3g}, "
        f"{c.only_baseline} solved by {c.baseline} only, {c.only_candidate} by {c.candidate} only)"
    )
    console.print(
        f"  {c.candidate} / {c.baseline}: time per task both solved {_ratio(c.task_time_ratio)}, "
        f"cost per success {_ratio(c.cost_ratio)}"
    )
    console.print(f"  [bold]speed-ups: {c.line}[/bold]")


def _pct(i: Interval) -> str:
    if i.value is None:
        return "-"
    return f"{i.value:.0%}" + (f" ({i.ci95[0]:.0%}-{i.ci95[1]:.0%})" if i.ci95 else "")


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _usd(i: Interval) -> str:
    if i.value is None:
        return "-"
    return f"${i.value:.4g}" + (f" ({i.ci95[0]:.4g}-{i.ci95[1]:.4g})" if i.ci95 else "")


def _ratio(i: Interval) -> str:
    if i.value is None:
        return "n/a"
    return f"{i.value:.2f}x" + (f" (95% CI {i.ci95[0]:.2f}-{i.ci95[1]:.2f})" if i.ci95 else "")


# --- the HTML page ---------------------------------------------------------------------------------------


def render_html(result: TasksResult) -> str:
    from lossless import __version__

    s = result.settings
    subtitle = (
        f"tasks: {result.task_set}, {s['tasks']} tasks x {s['samples']} samples, {s['repairs']} repairs"
        f" · lossless {__version__}"
    )
    sections = [
        _endpoints_section(result),
        *(_comparison_section(i, c) for i, c in enumerate(result.comparisons)),
    ]
    sections.append(_per_task_section(result))
    nav = [("endpoints", "Endpoints")]
    nav += [(f"compare-{i}", f"{c.candidate} vs {c.baseline}") for i, c in enumerate(result.comparisons)]
    return page("lossless tasks", subtitle, sections, [*nav, ("per-task", "Per task")])


def _endpoints_section(result: TasksResult) -> str:
    rows = [
        _interval_row(e.name, e.success_rate) for e in result.endpoints if e.success_rate.value is not None
    ]
    chart = svg.intervals(
        "Success rate per endpoint", "share of runs that passed their check (Wilson 95%)", rows
    )
    numbers = table(COLUMNS, [_row(e) for e in result.endpoints])
    about = (
        "Time per success counts every model call, tool call, retry and check of a successful task; cost "
        "per success divides all cost, failed tasks' included, by the successes."
    )
    body = f'<div class="figure">{chart}<div class="numbers">{numbers}</div></div>'
    return section("endpoints", "Success, time and cost per task", body, about)


def _comparison_section(i: int, c: TasksComparison) -> str:
    lo, hi = c.ci90
    head = (
        f'<p><span class="badge {escape(c.verdict)}">{escape(c.verdict)}</span> success '
        f"{c.difference:+.1%} (90% CI {lo:+.1%} to {hi:+.1%}, margin &plusmn;{c.margin:.0%}; McNemar "
        f"p={c.p_mcnemar:.3g}); {c.both} solved by both, {c.only_baseline} by {escape(c.baseline)} only, "
        f"{c.only_candidate} by {escape(c.candidate)} only</p><p><b>speed-ups: {escape(c.line)}</b></p>"
    )
    rows = [
        _interval_row(label, i)
        for label, i in (("time per task both solved", c.task_time_ratio), ("cost per success", c.cost_ratio))
        if i.value is not None
    ]
    if c.output_speed_ratio:
        rows.append(svg.Row("output speed", c.output_speed_ratio))
    chart = svg.intervals(
        f"{c.candidate} / {c.baseline}", "ratio (95% bootstrap CI)", rows, refs=[(1.0, "same")]
    )
    return section(
        f"compare-{i}", f"{c.candidate} against {c.baseline}", head + f'<div class="figure">{chart}</div>'
    )


def _per_task_section(result: TasksResult) -> str:
    names = [e.name for e in result.endpoints]
    cells: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
    for r in result.runs:
        mark = "pass" if r.success else f"fail: {r.end}" if r.end != "answer" else "fail"
        cells[(r.task, r.sample)][r.endpoint] = f"{mark}, {r.task_s:.2f} s, {r.steps} steps"
    rows = [
        [f"{task} #{sample}" if result.settings["samples"] > 1 else task, *(by.get(n, "-") for n in names)]
        for (task, sample), by in cells.items()
    ]
    about = "Each run's outcome (how it ended when it did not pass), its time and its model calls."
    return section("per-task", "Per task", table(["task", *names], rows), about)


def _interval_row(label: str, i: Interval) -> svg.Row:
    lo, hi = i.ci95 if i.ci95 else (None, None)
    return svg.Row(label, i.value or 0.0, lo, hi)


def tasks_section(doc: Mapping[str, Any]) -> str:
    """tasks.json read back (``lossless report``): success, time and cost per endpoint as one section."""

    def interval(i: Any, fmt: str) -> str:
        value = i.get("value") if isinstance(i, Mapping) else None
        return "-" if value is None else format(value, fmt)

    rows = [
        (
            str(e.get("name", "?")),
            f"{e.get('successes', '?')}/{e.get('runs', '?')}",
            interval(e.get("success_rate"), ".0%"),
            interval(e.get("mean_time_per_success"), ".2f"),
            interval(e.get("cost_per_success"), ".4f"),
        )
        for e in doc.get("endpoints") or []
    ]
    heads = ("endpoint", "succeeded", "success rate", "mean s per success", "USD per success")
    return section("tasks", "Tasks", table(heads, rows), f"task set {doc.get('task_set', '?')}: tasks.json")
