"""``lossless advise`` for people and programs: tables (rich; on stderr under --json), the JSON on stdout,
and an HTML page with the trade-off curves (hedge delay against p99 and against extra requests; failover
policies as intervals)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path

from rich.console import Console
from rich.markup import escape as markup
from rich.table import Table

from lossless import rundir
from lossless.advise.result import AdviseResult, Estimate, GroupAdvice, Prediction, Timeout
from lossless.advise.simulate import QUANTILES
from lossless.atomic import write_atomic
from lossless.report import svg
from lossless.report.page import page, section, table

PHASE_WORDS = {"connect": "connect", "first_token": "first token", "total": "total"}


def emit(result: AdviseResult, console: Console, as_json: bool, output: Path | None) -> None:
    """The tables for people (stderr under --json), the JSON on stdout, the HTML page under -o."""
    render_terminal(result, console)
    if as_json:
        sys.stdout.write(rundir.strict_json(result.as_dict()) + "\n")
        sys.stdout.flush()
    if output is not None:
        write_atomic(output, render_html(result))


# --- numbers as text ----------------------------------------------------------------------------------


def ms(v: float | None) -> str:
    if v is None:
        return "-"
    if math.isinf(v):
        return "no answer"
    return f"{v:,.1f} ms" if v < 10 else f"{v:,.0f} ms"


def share(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.1%}"


def usd(e: Estimate | None) -> str:
    return "-" if e is None or not math.isfinite(e.value) else f"${e.value:.6f}"


def ci(e: Estimate | None, as_share: bool = False) -> str:
    """A 95% interval as "lo - hi" in the value's format; "-" without one."""
    if e is None or e.lo is None or e.hi is None:
        return "-"
    f = share if as_share else ms
    return f"{f(e.lo)} - {f(e.hi)}"


def delay(p: Prediction) -> str:
    if p.policy == "single":
        return "no hedge"
    return "errors only" if p.delay_ms is None else f"{p.delay_ms:g} ms"


def _timeout_row(t: Timeout) -> tuple[str, ...]:
    limit = "-" if t.timeout_ms is None else ms(t.timeout_ms.value)
    return (
        PHASE_WORDS[t.phase],
        limit,
        ci(t.timeout_ms),
        share(t.cut.value),
        ci(t.cut, as_share=True),
        share(t.saved.value),
        ms(t.wait_saved_ms) if t.saved.value else "-",
        t.rule,
    )


def _prediction_row(p: Prediction, first: str) -> tuple[str, ...]:
    return (
        first,
        ms(p.p50.value),
        ms(p.p95.value),
        ms(p.p99.value),
        ci(p.p99),
        share(p.error_rate.value),
        share(p.attempts_per_request.value - 1),
        usd(p.usd_per_success),
    )


TIMEOUT_HEADERS = ("phase", "time-out", "95% CI", "cuts", "cuts 95% CI", "saves", "wait saved", "rule")
PREDICTION_HEADERS = (
    "policy",
    "p50",
    "p95",
    "p99",
    "p99 95% CI",
    "no answer",
    "extra requests",
    "$ per answer",
)


# --- terminal -----------------------------------------------------------------------------------------


def _table(title: str, headers: Sequence[str], rows: Iterable[Sequence[str]]) -> Table:
    t = Table(title=markup(title), title_justify="left")
    for i, h in enumerate(headers):
        t.add_column(h, justify="left" if i == 0 or h == "rule" else "right")
    for row in rows:
        t.add_row(*(markup(c) for c in row))
    return t


def _assumes(console: Console, predictions: Sequence[Prediction]) -> None:
    for text in dict.fromkeys(a for p in predictions for a in p.assumptions):
        console.print(f"  assumes: {markup(text)}", highlight=False)


def _group(g: GroupAdvice, console: Console) -> None:
    errors = ", ".join(f"{k} {v}" for k, v in g.errors.items())
    head = f"{g.endpoint} at {g.load}: {g.ok} of {g.attempts} attempts answered" + (
        f" ({errors})" if errors else ""
    )
    console.print(_table(f"{head} - time-outs", TIMEOUT_HEADERS, map(_timeout_row, g.timeouts)))
    censored = [f"{PHASE_WORDS[t.phase]} {t.censored}" for t in g.timeouts if t.censored]
    if censored:
        console.print(
            f"  bench's own time-outs ended some attempts ({', '.join(censored)}): their "
            "true times are longer than recorded",
            highlight=False,
        )
    rows = [_prediction_row(p, delay(p)) for p in g.hedging]
    console.print(
        _table(
            f"{g.endpoint} at {g.load} - hedging (a 2nd attempt after the delay, first answer wins)",
            PREDICTION_HEADERS,
            rows,
        )
    )
    _assumes(console, g.hedging)


def render_terminal(result: AdviseResult, console: Console) -> None:
    console.print(f"lossless advise: {', '.join(result.runs)}", highlight=False)
    for g in result.groups:
        _group(g, console)
    for load in dict.fromkeys(p.load for p in result.failover):
        here = [p for p in result.failover if p.load == load]
        base = [g.hedging[0] for g in result.groups if g.load == load]
        rows = [*(_prediction_row(p, p.label) for p in base), *(_prediction_row(p, p.label) for p in here)]
        console.print(_table(f"failover at {load}", PREDICTION_HEADERS, rows))
        _assumes(console, here)
    said = {
        a for p in (*(p for g in result.groups for p in g.hedging), *result.failover) for a in p.assumptions
    }
    for text in result.assumptions:
        if text not in said:  # printed under a table already
            console.print(f"assumes: {markup(text)}", highlight=False)
    for note in result.notes:
        console.print(f"note: {markup(note)}", highlight=False)
    if result.executed:
        console.print(_table(EXECUTED, EXECUTED_HEADERS, _executed_rows(result)))


EXECUTED = "measured under its policy (first send to first answer)"
EXECUTED_HEADERS = (
    "policy",
    "load",
    "requests",
    *QUANTILES,
    "predicted p99",
    "no answer",
    "attempts/request",
)


def _executed_rows(result: AdviseResult) -> list[tuple[str, ...]]:
    return [
        (
            e.label,
            e.load,
            str(e.requests),
            *(ms(e.latency_ms[q]) for q in QUANTILES),
            "-" if e.predicted is None else f"{ms(e.predicted.p99.value)} ({ci(e.predicted.p99)})",
            f"{e.error_rate:.1%}",
            f"{e.attempts_per_request:.2f}",
        )
        for e in result.executed
    ]


# --- HTML ---------------------------------------------------------------------------------------------


def _finite(points: Iterable[tuple[float | None, float | None]]) -> list[tuple[float, float]]:
    return [
        (x, y) for x, y in points if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
    ]


def _hedge_charts(groups: Sequence[GroupAdvice]) -> str:
    p99, extra, refs = [], [], []
    for g in groups:
        hedges = [p for p in g.hedging if p.policy == "hedge"]
        label = g.endpoint
        p99.append(svg.ChartSeries(label, _finite((p.delay_ms, p.p99.value) for p in hedges)))
        for bound in ("lo", "hi"):  # the interval as two faint lines in the endpoint's colour
            pts = _finite((p.delay_ms, getattr(p.p99, bound)) for p in hedges)
            p99.append(svg.ChartSeries(label, pts, opacity=0.3))
        extra.append(
            svg.ChartSeries(
                label, _finite((p.delay_ms, 100 * (p.attempts_per_request.value - 1)) for p in hedges)
            )
        )
        if math.isfinite(g.hedging[0].p99.value):
            refs.append(("y", g.hedging[0].p99.value, f"{g.endpoint}: no hedge"))
    a = svg.Chart(
        "Predicted p99 E2E against hedge delay (faint: 95% CI)",
        "hedge delay (ms)",
        "p99 time to an answer (ms)",
        p99,
        refs=refs,
    )
    b = svg.Chart("Extra requests against hedge delay", "hedge delay (ms)", "extra requests (%)", extra)
    return svg.render(a) + svg.render(b)


def _hedging_section(load: str, groups: Sequence[GroupAdvice]) -> str:
    rows = [(g.endpoint, *_prediction_row(p, delay(p))) for g in groups for p in g.hedging]
    numbers = table(("endpoint", *PREDICTION_HEADERS), rows)
    about = (
        "A second attempt goes out when the first has not answered after the delay; the first answer wins. "
        "A shorter delay lowers the tail and costs more requests. Assumes: "
        + " ".join(dict.fromkeys(a for g in groups for p in g.hedging for a in p.assumptions))
    )
    body = f'<div class="figure">{_hedge_charts(groups)}</div><div class="numbers">{numbers}</div>'
    return section(f"hedging-{_slug(load)}", f"Hedging at {load}", body, about)


def _short(p: Prediction) -> str:
    """A chart row's label: "a alone", "a > b after 300 ms", "a > b on errors"."""
    if p.policy == "single":
        return f"{p.endpoints[0]} alone"
    when = "on errors" if p.delay_ms is None else f"after {p.delay_ms:g} ms"
    return f"{' > '.join(p.endpoints)} {when}"


def _failover_section(load: str, predictions: Sequence[Prediction], base: Sequence[Prediction]) -> str:
    shown = [*base, *predictions]
    rows = []
    for p in shown:
        lo, hi = (p.p99.lo, p.p99.hi) if p.p99.hi is not None and math.isfinite(p.p99.hi) else (None, None)
        if math.isfinite(p.p99.value):
            rows.append(svg.Row(_short(p), p.p99.value, lo, hi, group=" > ".join(p.endpoints), tip=p.label))
    chart = svg.intervals("Predicted p99 E2E with 95% intervals", "p99 time to an answer (ms)", rows)
    numbers = table(PREDICTION_HEADERS, [_prediction_row(p, p.label) for p in shown])
    about = (
        "The first endpoint's attempt; when its first token has not come after the delay, or it fails with "
        "an error a client retries (429, 408, 5xx, network, time-out), the next endpoint's attempt starts "
        "then. A policy whose p99 is no answer (over 1% of requests unanswered) is left out of the chart. "
        "Assumes: " + " ".join(dict.fromkeys(a for p in predictions for a in p.assumptions))
    )
    body = f'<div class="figure">{chart}</div><div class="numbers">{numbers}</div>'
    return section(f"failover-{_slug(load)}", f"Failover at {load}", body, about)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text)


def render_html(result: AdviseResult) -> str:
    rows = [(f"{g.endpoint} at {g.load}", *_timeout_row(t)) for g in result.groups for t in g.timeouts]
    about = (
        "Shares are of all measured attempts: cuts, those that got there after the time-out; saves, those "
        "that failed anyway after it, whose wait it shortens. Connect is judged on the time to the response "
        "headers, which bounds the connect time from above: a connect time-out cuts at most that share."
    )
    sections = [section("timeouts", "Time-outs", table(("endpoint", *TIMEOUT_HEADERS), rows), about)]
    nav = [("timeouts", "Time-outs")]
    for load in dict.fromkeys(g.load for g in result.groups):
        sections.append(_hedging_section(load, [g for g in result.groups if g.load == load]))
        nav.append((f"hedging-{_slug(load)}", f"Hedging {load}"))
    for load in dict.fromkeys(p.load for p in result.failover):
        here = [p for p in result.failover if p.load == load]
        base = [g.hedging[0] for g in result.groups if g.load == load]
        sections.append(_failover_section(load, here, base))
        nav.append((f"failover-{_slug(load)}", f"Failover {load}"))
    if result.executed:
        body = table(EXECUTED_HEADERS, _executed_rows(result))
        sections.append(section("executed", "Measured under its policy", body, EXECUTED.capitalize() + "."))
        nav.append(("executed", "Executed"))
    items = "".join(f"<li>{escape(t)}</li>" for t in (*result.assumptions, *result.notes))
    sections.append(section("assumptions", "Assumptions and notes", f'<ul class="tight">{items}</ul>'))
    nav.append(("assumptions", "Assumptions"))
    settings = ", ".join(f"{k} {v}" for k, v in result.settings.items() if v is not None)
    return page("lossless advise", f"{', '.join(result.runs)} · {settings}", sections, nav)
