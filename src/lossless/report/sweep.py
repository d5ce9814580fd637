"""``lossless sweep``'s result for people and files: a table per configuration and load, sweep.json, each
configuration's run folder (summary.json, report.html) and the sweep's page with the Pareto fronts."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

from rich.console import Console
from rich.markup import escape as rich_escape
from rich.table import Table

from lossless import rundir
from lossless.analyze import METRIC
from lossless.analyze.pareto import OperatingPoint
from lossless.atomic import write_atomic
from lossless.report import html, svg
from lossless.report.page import page, section, table
from lossless.report.plots import num
from lossless.sweep.run import SweepResult

SWEEP_JSON, SWEEP_PAGE = "sweep.json", "sweep.html"
_FRONT_COLOR = "#111111"
HEADERS = (
    "config",
    "load",
    "tok/s",
    "req/s",
    "speed p50 (tok/s)",
    "TTFT p50 (ms)",
    "E2E p50 (ms)",
    "server",
    "front",
)


def rows(result: SweepResult) -> list[tuple[str, ...]]:
    """The table behind the charts: each configuration at each load, and whether it is on a front."""
    speed, ttft = result.fronts()
    on = {(p.config, p.load) for p in (*speed, *ttft)}
    out: list[tuple[str, ...]] = []
    for c in result.configs:
        if c.summary is None:
            out.append((c.name, "-", "-", "-", "-", "-", "-", f"not measured: {c.error}", ""))
            continue
        for e in c.summary.endpoints:
            g, sat = e.overall, e.saturation
            verdict = "-" if sat is None else "saturated" if sat.saturated else "keeps up"
            p50 = [METRIC[k].fmt(g.stat(k, "p50")) for k in ("output_tps", "ttft_ms", "e2e_ms")]
            out.append(
                (
                    c.name,
                    e.load,
                    num(g.throughput.output_tokens_per_s, 1),
                    num(g.throughput.requests_per_s, 2),
                    *p50,
                    verdict,
                    "yes" if (c.name, e.load) in on else "",
                )
            )
    return out


def render_terminal(result: SweepResult, console: Console) -> None:
    t = Table(title="lossless sweep", title_justify="left")
    for h in HEADERS:
        t.add_column(h, justify="left" if h in ("config", "load", "server", "front") else "right")
    for row in rows(result):
        t.add_row(*(rich_escape(cell) for cell in row))
    console.print(t)
    for c in result.configs:
        if c.summary is not None and c.summary.stopped:
            console.print(rich_escape(f"{c.name}: {c.summary.stopped}"))


def _chart(
    result: SweepResult,
    points: Sequence[OperatingPoint],
    on_front: Sequence[OperatingPoint],
    y: str,
    title: str,
) -> str:
    series = []
    for name in dict.fromkeys(p.config for p in points):
        mine = sorted((p for p in points if p.config == name), key=lambda p: p.throughput)
        xy = [(p.throughput, p.per_user) for p in mine]
        tips = [f"{name} {p.load}: {p.throughput:,.1f} tok/s, {p.per_user:,.1f}" for p in mine]
        series += [
            svg.ChartSeries(name, xy, kind="line"),
            svg.ChartSeries(name, xy, kind="points", tips=tips),
        ]
    if on_front:
        front_xy = [(p.throughput, p.per_user) for p in on_front]
        series.append(svg.ChartSeries("Pareto front", front_xy, kind="line", color=_FRONT_COLOR, opacity=0.5))
    return svg.render(svg.Chart(title, "output tokens per second, all requests", y, series))


def render_html(result: SweepResult) -> str:
    pairs = result.both()
    speed_front, ttft_front = result.fronts()
    speed = _chart(
        result,
        [s for s, _ in pairs],
        speed_front,
        "output speed p50 per request (tokens/s)",
        "Per-request speed against total throughput",
    )
    ttft = _chart(result, [t for _, t in pairs], ttft_front, "TTFT p50 (ms)", "TTFT against total throughput")
    numbers = table(HEADERS, rows(result))
    about = (
        "One point per configuration and load. Up and to the right is better in the first chart (each "
        "user faster, more served in all); down and to the right in the second. The black line joins the "
        "points no other point beats on both counts: the configurations worth choosing from."
    )
    stops = [f"{c.name}: {c.summary.stopped}" for c in result.configs if c.summary and c.summary.stopped]
    stops += [f"{c.name}: not measured: {c.error}" for c in result.configs if c.summary is None]
    notes = f'<ul class="tight">{"".join(f"<li>{escape(s)}</li>" for s in stops)}</ul>' if stops else ""
    links = "".join(
        f'<li><a href="{escape(c.name)}/{rundir.REPORT}">{escape(c.name)}</a>: '
        f"{escape(c.flags or 'the defaults')}</li>"
        for c in result.configs
    )
    sections = [
        section("pareto", "Pareto front", f'<div class="figure">{speed}{ttft}</div>', about),
        section("table", "Every configuration and load", numbers + notes),
        section(
            "configs",
            "Configurations",
            f'<ul class="tight">{links}</ul>',
            "Each configuration's own report: every plot and table of its bench run.",
        ),
    ]
    subtitle = f"{len(result.configs)} configurations ({result.kind})"
    return page(
        "lossless sweep",
        subtitle,
        sections,
        [("pareto", "Pareto"), ("table", "Table"), ("configs", "Configurations")],
    )


def emit(result: SweepResult, console: Console, as_json: bool, out_dir: Path) -> list[Path]:
    """The table (stderr under --json), sweep.json, each configuration's run folder and the page."""
    render_terminal(result, console)
    wrote = [p for p in (rundir.emit_json(result, as_json, out_dir, SWEEP_JSON),) if p is not None]
    for c in result.configs:
        if c.summary is not None:
            folder = out_dir / c.name
            wrote += [folder / rundir.RECORDS, *rundir.write(c.summary, folder)]
            wrote.append(write_atomic(folder / rundir.REPORT, html.render_run(c.summary, c.records)))
    wrote.append(write_atomic(out_dir / SWEEP_PAGE, render_html(result)))
    return wrote
