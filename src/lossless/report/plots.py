"""A run's records and summary -> the report's figures: one chart and the numbers beside it, each.

Per-request values come from ``analyze.timing`` and the tables from the summary, so the report shows the
numbers ``analyze`` computed, never a second computation of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from lossless import analyze
from lossless.analyze import METRIC, EndpointStats, Metric, Summary, timing
from lossless.analyze.metrics import PLOTTED
from lossless.records import TOKEN_KINDS, RequestRecord, on_one_timeline
from lossless.report import svg

Groups = dict[str, list[RequestRecord]]
_STALL_COLOR = "#111111"


@dataclass(frozen=True)
class Figure:
    key: str  # HTML anchor
    title: str
    about: str  # how to read it, one or two sentences
    svg: str
    headers: tuple[str, ...]
    rows: Sequence[Sequence[str]]


def groups(records: Sequence[RequestRecord]) -> Groups:
    """Successful final attempts, warm-up excluded, by "endpoint load" (or just one of the two when the
    other never varies), in the order the run first sent them."""
    keep = [r for r in on_one_timeline(list(records)) if r.measured and r.ok and not r.retried]
    many_loads = len({r.load for r in keep}) > 1
    many_endpoints = len({r.endpoint for r in keep}) > 1
    out: Groups = {}
    for r in keep:
        parts = [r.endpoint] if many_endpoints or not many_loads else []
        out.setdefault(" ".join([*parts, r.load] if many_loads else parts), []).append(r)
    return out


def entry_label(e: EndpointStats, entries: Sequence[EndpointStats]) -> str:
    many_loads = len({x.load for x in entries}) > 1
    many_endpoints = len({x.name for x in entries}) > 1
    if many_loads:
        return f"{e.name} {e.load}" if many_endpoints else e.load
    return e.name


def num(v: float | None, digits: int = 0) -> str:
    """A number that is not one metric's statistic (a throughput, a total), for a table cell."""
    return "-" if v is None else f"{v:,.{digits}f}"


def _stat_rows(entries: Sequence[EndpointStats], m: Metric) -> list[Sequence[str]]:
    rows: list[Sequence[str]] = []
    for e in entries:
        d = e.overall.metrics[m.key]
        ci = d.ci95.get("p50")
        ci_text = f"{m.fmt(ci[0])}-{m.fmt(ci[1])}" if ci else "-"
        p50, p90, p99, most = (m.fmt(d.get(stat)) for stat in ("p50", "p90", "p99", "max"))
        rows.append((entry_label(e, entries), str(d.n), p50, ci_text, p90, p99, most))
    return rows


_STAT_HEADERS = ("", "n", "p50", "p50 95% CI", "p90", "p99", "max")


def cdf_chart(m: Metric, series: list[svg.ChartSeries]) -> str:
    """Share of requests at or below each value of a metric: one step line per series."""
    axis = f"{m.title} ({m.axis_unit or m.unit})"
    return svg.render(svg.Chart(m.title, axis, "share of requests at or below", series))


def distribution(key: str, g: Groups, summary: Summary, m: Metric, about: str) -> Figure:
    series = [
        svg.ChartSeries(label, svg.cdf(m.values(map(timing, recs))), kind="step") for label, recs in g.items()
    ]
    rows = _stat_rows(summary.endpoints, m)
    return Figure(key, m.title, about, cdf_chart(m, series), _STAT_HEADERS, rows)


def e2e_vs_tokens(g: Groups, summary: Summary) -> Figure:
    series = []
    for label, recs in g.items():
        pts, tips = [], []
        for r in recs:
            if r.n_out is not None:
                e2e = timing(r).e2e
                pts.append((float(r.n_out), e2e))
                tips.append(f"{label} #{r.request_index}: {r.n_out} tokens in {e2e:,.0f} ms")
        series.append(svg.ChartSeries(label, pts, kind="points", tips=tips))
    chart = svg.Chart("E2E against output tokens", "output tokens", "end-to-end time (ms)", series)
    entries = summary.endpoints
    shown = [METRIC[k] for k in ("n_out", "e2e_ms", "tpot_ms", "ttft_ms")]
    rows = [(entry_label(e, entries), *(m.fmt(e.overall.stat(m.key, "p50")) for m in shown)) for e in entries]
    about = (
        "Each dot is one request. The slope is the time per output token; the height where it meets the "
        "left edge is the fixed cost (queueing, prefill, first token)."
    )
    headers = ("", *(m.header("p50") for m in shown))
    return Figure("e2e-tokens", "E2E against output tokens", about, svg.render(chart), headers, rows)


def _cumulative(r: RequestRecord) -> list[tuple[float, float]]:
    """(ms since sent, tokens so far) at each token event: the server's counts when it sends them,
    else one per event (then the axis counts chunks)."""
    pts, n = [], 0
    for t, kind, tokens in zip(r.event_ns, r.event_kinds, r.event_tokens, strict=True):
        if kind in TOKEN_KINDS:
            n = tokens if tokens >= 0 else n + 1
            pts.append(((t - r.sent_ns) / 1e6, float(n)))
    return pts


def _sample(recs: list[RequestRecord], k: int, stall_ms: float) -> list[RequestRecord]:
    """Up to k requests: those with stalls first (they are the story), then evenly spread over the run."""
    stalled = [r for r in recs if any(g > stall_ms for g in timing(r).gaps)][:k]
    rest = [r for r in recs if r not in stalled]
    room = k - len(stalled)
    step = max(1, len(rest) // room) if room > 0 else len(rest) + 1
    return stalled + rest[::step][:room]


def timelines(g: Groups, summary: Summary) -> Figure:
    stall_ms = summary.stall_threshold_s * 1000.0
    per_group = max(4, 36 // max(1, len(g)))
    series, stalls, tips = [], [], []
    for label, recs in g.items():
        for r in _sample(recs, per_group, stall_ms):
            pts = _cumulative(r)
            series.append(svg.ChartSeries(label, pts, kind="step", opacity=0.65))
            for (t0, _), (t1, n1) in itertools.pairwise(pts):
                if t1 - t0 > stall_ms:
                    stalls.append((t1, n1))
                    tips.append(f"{label} #{r.request_index}: {t1 - t0:,.0f} ms without a token")
    if stalls:
        stall_label = f"stall (gap > {stall_ms / 1000:g} s)"
        series.append(svg.ChartSeries(stall_label, stalls, kind="points", tips=tips, color=_STALL_COLOR))
    chart = svg.Chart(
        "Token arrival per request", "time since the request was sent (ms)", "tokens received", series
    )
    entries, gap = summary.endpoints, METRIC["inter_chunk_ms"]
    rows = [
        (
            entry_label(e, entries),
            str(e.overall.stalls.count),
            str(e.overall.stalls.requests_with_stalls),
            num(e.overall.stalls.total_s, 1),
            gap.fmt(e.overall.stat(gap.key, "p50")),
            gap.fmt(e.overall.stat(gap.key, "p99")),
            num(e.overall.stat(gap.key, "max")),
        )  # whole ms
        for e in entries
    ]
    about = (
        f"One line per request (a sample of up to {per_group} per group, stalled ones first): tokens "
        "received against time. A flat stretch is a wait between chunks; a steep line is fast decoding."
    )
    headers = (
        "",
        "stalls",
        "requests stalled",
        "stalled (s)",
        *(gap.header(s) for s in ("p50", "p99", "max")),
    )
    return Figure("timelines", "Token arrival per request", about, svg.render(chart), headers, rows)


def over_time(g: Groups, records: Sequence[RequestRecord]) -> Figure:
    t0 = min((r.sent_ns for recs in g.values() for r in recs), default=0)
    series = []
    for label, recs in g.items():
        pts = [((r.sent_ns - t0) / 1e9, timing(r).e2e) for r in recs]
        tips = [f"{label} #{r.request_index}: {e2e:,.0f} ms" for r, (_, e2e) in zip(recs, pts, strict=True)]
        series.append(svg.ChartSeries(label, pts, kind="points", tips=tips))
    chart = svg.Chart(
        "Latency over the run", "time since the run started (s)", "end-to-end time (ms)", series
    )
    rows = []
    for d in analyze.drift(records):
        ratio = "-" if d.ratio is None else f"{d.ratio:.2f}x"
        rows.append(
            (f"{d.name} {d.load}", str(d.n), num(d.first_half_p50_ms), num(d.second_half_p50_ms), ratio)
        )
    about = (
        "Each dot is one request, at the time it was sent. A rising cloud means the endpoint slowed during "
        "the run (throttling, a queue filling); the table compares the first and second halves."
    )
    headers = ("", "n", "E2E p50, 1st half (ms)", "E2E p50, 2nd half (ms)", "change")
    return Figure("drift", "Latency over the run", about, svg.render(chart), headers, rows)


def throughput_latency(summary: Summary) -> Figure | None:
    """The throughput-latency curve: only when an endpoint ran at more than one load."""
    entries = summary.endpoints
    by_name: dict[str, list[EndpointStats]] = {}
    for e in entries:
        by_name.setdefault(e.name, []).append(e)
    if all(len(v) < 2 for v in by_name.values()):
        return None
    series = []
    for name, es in by_name.items():
        pts = [
            (e.overall.throughput.output_tokens_per_s, e.overall.stat("e2e_ms", "p50"), e.load) for e in es
        ]
        kept = sorted((x, y, load) for x, y, load in pts if x is not None and y is not None)  # a search's
        keep = [(x, y) for x, y, _ in kept]  # levels come in the order tried: draw them by throughput
        tips = [f"{name} {load}: {x:,.1f} tok/s, {y:,.0f} ms" for x, y, load in kept]
        series.append(svg.ChartSeries(name, keep, kind="line"))
        series.append(svg.ChartSeries(name, keep, kind="points", tips=tips))
    chart = svg.Chart(
        "Throughput against latency", "output tokens per second (all requests)", "E2E p50 (ms)", series
    )
    ttft, e2e = METRIC["ttft_ms"], METRIC["e2e_ms"]
    rows = [
        (
            e.name,
            e.load,
            num(e.overall.throughput.output_tokens_per_s, 1),
            num(e.overall.throughput.requests_per_s, 2),
            ttft.fmt(e.overall.stat(ttft.key, "p50")),
            e2e.fmt(e.overall.stat(e2e.key, "p50")),
            e2e.fmt(e.overall.stat(e2e.key, "p99")),
            _met(e.overall.slo_attainment.get("all")),
        )
        for e in entries
    ]
    about = (
        "One point per load level. Moving right is more work done; moving up is each request waiting "
        "longer. Where the line turns upward the endpoint is saturated."
    )
    if summary.capacity is not None:
        about += f" The search's answer: {summary.capacity.text.removeprefix('capacity: ')}."
    headers = (
        "endpoint",
        "load",
        "tok/s",
        "req/s",
        ttft.header("p50"),
        e2e.header("p50"),
        e2e.header("p99"),
        "SLO met",
    )
    return Figure("sweep", "Throughput against latency", about, svg.render(chart), headers, rows)


def _met(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


_DISTRIBUTIONS = {  # PLOTTED metric -> the figure's anchor, and how to read it
    "ttft_ms": (
        "ttft",
        "Share of requests whose first token came within a given time: further left is "
        "better; a long tail to the right is what users notice.",
    ),
    "e2e_ms": ("e2e", "Share of requests finished within a given time, from sending to the stream's end."),
    "output_tps": ("speed", "Tokens per second after the first chunk (1/TPOT): further right is better."),
}


def figures(summary: Summary, records: Sequence[RequestRecord]) -> list[Figure]:
    g = groups(records)
    out = []
    for m in PLOTTED:
        key, about = _DISTRIBUTIONS[m.key]
        out.append(distribution(key, g, summary, m, about))
    out += [e2e_vs_tokens(g, summary), timelines(g, summary), over_time(g, records)]
    curve = throughput_latency(summary)
    return [curve, *out] if curve else out
