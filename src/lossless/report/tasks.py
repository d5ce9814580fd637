"""tasks' result for people and files: the terminal tables and tasks.json."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from lossless.atomic import write_atomic
from lossless.report.files import strict_json
from lossless.tasks.result import EndpointTasks, Interval, TasksComparison, TasksResult

COLUMNS = ("endpoint", "success", "pass@k", "time/success p50 | p95", "cost/success",
           "model | tools | retries | checks", "steps", "retries", "bad args: JSON | schema",
           "speed")  # fmt: skip
VERDICT_STYLE = {"equivalent": "green", "different": "red", "inconclusive": "yellow"}


def emit(result: TasksResult, console: Console, as_json: bool, out_dir: Path | None) -> None:
    """The tables for people (stderr under --json), the JSON on stdout, tasks.json under --out."""
    render(result, console)
    if as_json:
        print(to_json(result), flush=True)
    if out_dir is not None:
        write(result, out_dir)


def to_json(result: TasksResult) -> str:
    return strict_json(result.as_dict())


def write(result: TasksResult, out_dir: Path) -> Path:
    return write_atomic(out_dir / "tasks.json", to_json(result) + "\n")


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
