"""The one table of metrics: what ``analyze`` computes per endpoint and load, and how every report shows it.

summary.json and summary.csv hold every metric with every statistic of ``STATS``; the terminal, the HTML
overview and the comparisons read which statistics they show from here, so a metric is added, renamed or
re-labelled in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from lossless.analyze.timing import Timing

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p99.9": 99.9}
STATS = ("n", "mean", "std", "min", *PERCENTILES, "max", "cv")  # summary.json's and the CSV's, in order
CI_STATS = ("p50", "p90", "p99")  # statistics given a bootstrap 95% CI, and compared between endpoints
SHOWN_RATIOS = ("p50", "p99")  # the comparisons people read: centre and tail (summary.json has p90 too)
# The fewest values a percentile is read from: one value at least beyond it (n * (1 - q) >= 1), else the
# "p99" of 4 requests is their largest. A thinner one is marked in tables, listed as "thin" in
# summary.json, and never the ground of a comparison's claim.
MIN_N = {"p50": 2, "p90": 10, "p95": 20, "p99": 100, "p99.9": 1000}


def thin(stat: str, n: int) -> bool:
    """Too few values for this statistic (a percentile of fewer than MIN_N)."""
    return n < MIN_N.get(stat, 0)


@dataclass(frozen=True)
class Metric:
    key: str  # summary.json's and the CSV's name
    label: str  # a table's column header ("TTFT p50")
    words: str  # in sentences: "b's p50 output speed is 0.25x a's"
    title: str  # a chart's title
    unit: str  # in table cells and headers
    digits: int  # decimals shown
    higher_is_better: bool
    of: Callable[[Timing], float | tuple[float, ...] | None]  # a request's value(s); None: undefined
    per_request: bool = True  # False: several correlated values per request, so no bootstrap CI
    terminal: tuple[str, ...] = ()  # statistics in bench's table
    by_class: tuple[str, ...] = ()  # statistics in the by-prompt-class table
    overview: tuple[str, ...] = ()  # statistics in the HTML report's overview
    axis_unit: str = ""  # on a chart's axis, where the cells' short unit would puzzle (default: unit)

    def values(self, timings: Iterable[Timing]) -> list[float]:
        """The defined values over the requests, in order: several per request for gaps."""
        out: list[float] = []
        for t in timings:
            v = self.of(t)
            if isinstance(v, tuple):
                out += v
            elif v is not None:
                out.append(float(v))
        return out

    def header(self, stat: str, unit: bool = True) -> str:
        """A column header: "TTFT p50 (ms)"; a count of tokens needs no unit after it ("tokens p50")."""
        return (
            f"{self.label} {stat} ({self.unit})"
            if unit and self.unit != self.label
            else f"{self.label} {stat}"
        )

    def fmt(self, value: float | None, unit: bool = False) -> str:
        """A table cell: "-" for no value; thousands separated except in the terminal (``unit``)."""
        if value is None:
            return "-"
        return f"{value:.{self.digits}f} {self.unit}" if unit else f"{value:,.{self.digits}f}"


METRICS = (
    Metric(
        "ttfb_ms", "TTFB", "TTFB", "Time to first byte", "ms", 0, False, lambda t: t.ttfb, terminal=("p50",)
    ),
    Metric(
        "ttft_ms",
        "TTFT",
        "TTFT",
        "Time to first token",
        "ms",
        0,
        False,
        lambda t: t.ttft,
        terminal=("p50", "p99"),
        by_class=("p50", "p99"),
        overview=("p50", "p99"),
    ),
    Metric("ttfc_ms", "TTFC", "TTFC", "Time to first answer content", "ms", 0, False, lambda t: t.ttfc),
    Metric(
        "tpot_ms",
        "TPOT",
        "TPOT",
        "Time per output token",
        "ms",
        1,
        False,
        lambda t: t.tpot,
        terminal=("p50",),
        by_class=("p50",),
        overview=("p50",),
    ),
    Metric(
        "output_tps",
        "speed",
        "output speed",
        "Output speed",
        "tok/s",
        1,
        True,
        lambda t: t.speed,
        terminal=("p50",),
        overview=("p50",),
        axis_unit="tokens/s",
    ),
    Metric(
        "e2e_ms",
        "E2E",
        "E2E",
        "End-to-end time",
        "ms",
        0,
        False,
        lambda t: t.e2e,
        terminal=("p50", "p99"),
        by_class=("p50", "p99"),
        overview=("p50", "p99"),
    ),
    Metric(
        "e2e_from_schedule_ms",
        "E2E from schedule",
        "E2E from schedule",
        "End-to-end time from schedule",
        "ms",
        0,
        False,
        lambda t: t.from_schedule,
    ),
    Metric("queue_delay_ms", "queue", "queue delay", "Queue delay", "ms", 0, False, lambda t: t.queue),
    Metric(
        "inter_chunk_ms",
        "gap",
        "inter-chunk gap",
        "Inter-chunk latency",
        "ms",
        1,
        False,
        lambda t: t.gaps,
        per_request=False,
    ),
    Metric("itl_ms", "ITL", "ITL", "Inter-token latency", "ms", 1, False, lambda t: t.itl, per_request=False),
    Metric("n_out", "tokens", "output tokens", "Output tokens", "tokens", 0, False, lambda t: t.n_out),
    # a new connection's cost, apart from a reused one's (none when every connection was reused)
    Metric("dns_ms", "DNS", "DNS lookup", "DNS lookup", "ms", 2, False, lambda t: t.dns),
    Metric("connect_ms", "TCP", "TCP connect", "TCP connect", "ms", 2, False, lambda t: t.connect),
    Metric("tls_ms", "TLS", "TLS handshake", "TLS handshake", "ms", 2, False, lambda t: t.tls),
    Metric(
        "ttfb_new_ms",
        "TTFB new",
        "TTFB on a new connection",
        "Time to first byte, new connection",
        "ms",
        1,
        False,
        lambda t: t.ttfb if t.connection == "new" else None,
    ),
    Metric(
        "ttfb_reused_ms",
        "TTFB reused",
        "TTFB on a reused connection",
        "Time to first byte, reused connection",
        "ms",
        1,
        False,
        lambda t: t.ttfb if t.connection == "reused" else None,
    ),
)
METRIC = {m.key: m for m in METRICS}
COMPARED = tuple(METRIC[k] for k in ("output_tps", "ttft_ms", "e2e_ms"))  # between endpoints, in this order
PLOTTED = tuple(METRIC[k] for k in ("ttft_ms", "e2e_ms", "output_tps"))  # distributions, in this order
