"""Small inline-SVG charts for the HTML report: scales, nice ticks, lines, step CDFs, scatter, interval rows
and legends. Hover text is an SVG ``<title>``, so the page needs no script; colours and fonts come from the
page's CSS classes where they can, so one stylesheet themes every chart.

    svg = render(Chart("TTFT", "ms", "share of requests", [ChartSeries("a", cdf(values), kind="step")]))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

# Colour-blind-safe-ish, distinct on white (Tableau 10, reordered so the first two differ in lightness too).
PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
)
_CHAR_W = 6.6  # estimated width of one 12px character: legends and labels are laid out without a browser


@dataclass(frozen=True)
class ChartSeries:
    label: str  # legend text; series with the same label share one legend entry and colour
    points: Sequence[tuple[float, float]]
    kind: str = "line"  # line | step (a step CDF from cdf()) | points
    tips: Sequence[str] = ()  # hover text per point (points only)
    color: str | None = None  # default: the palette, in order of first appearance of the label
    opacity: float = 1.0


@dataclass(frozen=True)
class Chart:
    title: str
    x_label: str  # with its unit: "time to first token (ms)"
    y_label: str
    series: Sequence[ChartSeries]
    x_log: bool = False
    y_from_zero: bool = True
    refs: Sequence[tuple[str, float, str]] = ()  # reference lines: ("x" | "y", value, label)
    width: int = 640
    height: int = 340


@dataclass(frozen=True)
class Row:
    """One row of an interval chart: a value and, when known, its interval."""

    label: str
    value: float
    lo: float | None = None
    hi: float | None = None
    group: str = ""  # colour and legend entry
    tip: str = ""


@dataclass
class Scale:
    """Maps a data interval onto a pixel interval; ``nice()`` widens the data interval to round ticks."""

    lo: float
    hi: float
    a: float  # pixel of lo
    b: float  # pixel of hi
    log: bool = False
    _ticks: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.log:
            self.lo = max(self.lo, 1e-9)
            self.hi = max(self.hi, self.lo * 10)
        elif self.hi <= self.lo:  # one value: centre it in a unit-wide interval
            span = abs(self.lo) * 0.1 or 1.0
            self.lo, self.hi = self.lo - span, self.hi + span

    def nice(self, n: int = 5) -> Scale:
        if self.log:
            self._ticks = log_ticks(self.lo, self.hi)
            self.lo, self.hi = self._ticks[0], self._ticks[-1]
        else:
            self._ticks = nice_ticks(self.lo, self.hi, n)
            self.lo, self.hi = min(self.lo, self._ticks[0]), max(self.hi, self._ticks[-1])
        return self

    def ticks(self) -> list[float]:
        return self._ticks or nice_ticks(self.lo, self.hi)

    def __call__(self, v: float) -> float:
        if self.log:
            lo, hi, v = math.log10(self.lo), math.log10(self.hi), math.log10(max(v, self.lo))
        else:
            lo, hi = self.lo, self.hi
        return self.a + (v - lo) / (hi - lo) * (self.b - self.a)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About n round ticks (steps of 1, 2, 2.5 or 5 times a power of ten) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"ticks of a non-finite interval [{lo}, {hi}]")
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(n, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [_clean(i * step) for i in range(first, last + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten covering [lo, hi]; with 2 and 5 between them when it spans under three decades."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    b = max(b, a + 1)
    mults = (1, 2, 5) if b - a < 3 else (1,)
    ticks = [m * 10.0**e for e in range(a, b) for m in mults] + [10.0**b]
    # trim to the data, keeping one tick beyond each end
    inside = [i for i, t in enumerate(ticks) if lo <= t <= hi]
    first = max(0, (inside[0] if inside else 0) - (0 if inside and ticks[inside[0]] == lo else 1))
    last = min(len(ticks) - 1, (inside[-1] if inside else len(ticks) - 1) + 1)
    if inside and ticks[inside[-1]] == hi:
        last = inside[-1]
    return [_clean(t) for t in ticks[first : last + 1]]


def _clean(v: float) -> float:
    return float(f"{v:.12g}")  # 0.30000000000000004 -> 0.3


def fmt(v: float) -> str:
    """A tick label: 0.05, 12.5, 250, 1500, 25k."""
    if v == 0:
        return "0"
    if abs(v) >= 10_000:
        return f"{v / 1000:g}k"
    return f"{v:.4g}" if abs(v) >= 0.001 else f"{v:.1e}"


def cdf(values: Sequence[float]) -> list[tuple[float, float]]:
    """Points of the empirical CDF: (i-th smallest value, i/n); draw with ``kind="step"``."""
    xs = sorted(v for v in values if math.isfinite(v))
    n = len(xs)
    return [(x, (i + 1) / n) for i, x in enumerate(xs)]


def colors(labels: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for label in labels:
        out.setdefault(label, PALETTE[len(out) % len(PALETTE)])
    return out


# --- drawing ------------------------------------------------------------------------------------------


def _svg(width: int, height: int, body: list[str], title: str, empty: bool = False) -> str:
    cls = "plot empty" if empty else "plot"
    return (
        f'<svg class="{cls}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(title)}</title>" + "".join(body) + "</svg>"
    )


def _no_data(title: str, width: int, height: int) -> str:
    body = [
        f'<text class="title" x="12" y="20">{escape(title)}</text>',
        f'<text class="note" x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text>',
    ]
    return _svg(width, height, body, title, empty=True)


def _legend(entries: dict[str, str], width: int, y: float) -> tuple[list[str], float]:
    """Swatches and labels, wrapped over as many rows as they need; returns the elements and the height."""
    out, x, row_h = [], 12.0, 18
    for label, color in entries.items():
        w = 22 + len(label) * _CHAR_W + 14
        if x + w > width - 8 and x > 12:
            x, y = 12.0, y + row_h
        out.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="14" height="10" rx="2" fill="{color}"/>')
        out.append(f'<text class="legend" x="{x + 19:.1f}" y="{y:.1f}">{escape(label)}</text>')
        x += w
    return out, (y + row_h) if entries else y


def _axes(
    x: Scale, y: Scale, x_ticks: list[float], y_ticks: list[float], labels: tuple[str, str]
) -> list[str]:
    top, bottom, left, right = y.b, y.a, x.a, x.b
    out = [f'<rect class="frame" x="{left}" y="{top}" width="{right - left}" height="{bottom - top}"/>']
    for t in y_ticks:
        py = y(t)
        out.append(f'<line class="grid" x1="{left}" x2="{right}" y1="{py:.1f}" y2="{py:.1f}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{py + 4:.1f}" text-anchor="end">{fmt(t)}</text>')
    for t in x_ticks:
        px = x(t)
        out.append(f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{bottom}"/>')
        out.append(f'<text class="tick" x="{px:.1f}" y="{bottom + 16}" text-anchor="middle">{fmt(t)}</text>')
    mid_x, mid_y = (left + right) / 2, (top + bottom) / 2
    out.append(
        f'<text class="axis" x="{mid_x:.1f}" y="{bottom + 36}" text-anchor="middle">'
        f"{escape(labels[0])}</text>"
    )
    out.append(
        f'<text class="axis" transform="translate(16 {mid_y:.1f}) rotate(-90)" '
        f'text-anchor="middle">{escape(labels[1])}</text>'
    )
    return out


def _path(s: ChartSeries, x: Scale, y: Scale, color: str) -> list[str]:
    pts = [(x(px), y(py)) for px, py in s.points]
    if s.kind == "points":
        tips = list(s.tips) + [""] * (len(pts) - len(s.tips))
        return [
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{color}" fill-opacity="{0.75 * s.opacity:.2f}">'
            + (f"<title>{escape(tip)}</title>" if tip else "")
            + "</circle>"
            for (cx, cy), tip in zip(pts, tips, strict=True)
        ]
    if s.kind == "step":  # up at each value: from (x_i, F(x_{i-1})) to (x_i, F(x_i))
        prev, d = y.a, []
        for cx, cy in pts:
            d.append(f"{cx:.1f},{prev:.1f} {cx:.1f},{cy:.1f}")
            prev = cy
    else:
        d = [f"{cx:.1f},{cy:.1f}" for cx, cy in pts]
    marker = "".join(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{color}"/>' for cx, cy in pts)
    line = (
        f'<path d="M{" L".join(d)}" fill="none" stroke="{color}" stroke-width="2" '
        f'stroke-opacity="{s.opacity:.2f}"><title>{escape(s.label)}</title></path>'
    )
    return [line, marker] if s.kind == "line" and len(pts) < 12 else [line]


def render(chart: Chart) -> str:
    """The chart as one ``<svg class="plot">``; with no finite point, a "no data" note instead."""
    pts = [p for s in chart.series for p in s.points if math.isfinite(p[0]) and math.isfinite(p[1])]
    if chart.x_log:
        pts = [p for p in pts if p[0] > 0]
    if not pts:
        return _no_data(chart.title, chart.width, 120)
    palette = colors([s.label for s in chart.series])
    entries = {s.label: s.color or palette[s.label] for s in chart.series}
    legend, top = _legend(entries if len(entries) > 1 else {}, chart.width, 40)
    xs = [p[0] for p in pts] + [v for axis, v, _ in chart.refs if axis == "x"]
    ys = [p[1] for p in pts] + [v for axis, v, _ in chart.refs if axis == "y"]
    y_lo = min(0.0, *ys) if chart.y_from_zero else min(ys)
    x = Scale(min(xs), max(xs), 64, chart.width - 16, log=chart.x_log).nice()
    y = Scale(y_lo, max(ys), chart.height - 48, top + 4).nice()
    body = [f'<text class="title" x="12" y="20">{escape(chart.title)}</text>', *legend]
    body += _axes(x, y, x.ticks(), y.ticks(), (chart.x_label, chart.y_label))
    for axis, v, label in chart.refs:
        body += _ref(axis, v, label, x, y)
    for s in chart.series:
        body += _path(s, x, y, s.color or palette[s.label])
    return _svg(chart.width, chart.height, body, chart.title)


def _ref(axis: str, v: float, label: str, x: Scale, y: Scale) -> list[str]:
    if axis == "x":
        p = x(v)
        line = f'<line class="ref" x1="{p:.1f}" x2="{p:.1f}" y1="{y.b}" y2="{y.a}"/>'
        side = 'text-anchor="end"' if p > x.b - 60 else ""  # near the right edge: write it on the left
        at = f'x="{p - 4 if side else p + 4:.1f}" y="{y.b + 12:.1f}" {side}'
        text = f'<text class="ref-label" {at}>{escape(label)}</text>'
    else:
        p = y(v)
        line = f'<line class="ref" x1="{x.a}" x2="{x.b}" y1="{p:.1f}" y2="{p:.1f}"/>'
        at = f'x="{x.b - 4:.1f}" y="{p - 4:.1f}" text-anchor="end"'
        text = f'<text class="ref-label" {at}>{escape(label)}</text>'
    return [line, text]


def intervals(
    title: str, x_label: str, rows: Sequence[Row], refs: Sequence[tuple[float, str]] = (), width: int = 640
) -> str:
    """A forest plot: one row per label, a dot at the value and a bar over [lo, hi]; vertical reference
    lines (1.0 for ratios, a margin for differences)."""
    values = [v for r in rows for v in (r.value, r.lo, r.hi) if v is not None and math.isfinite(v)]
    if not values:
        return _no_data(title, width, 120)
    palette = colors([r.group for r in rows])
    legend, top = _legend(palette if len(palette) > 1 else {}, width, 40)
    left = min(300.0, 36 + max(len(r.label) for r in rows) * 7.2)
    row_h, height = 24, int(top + 24 * len(rows) + 52)
    x = Scale(min(*values, *(v for v, _ in refs)), max(*values, *(v for v, _ in refs)), left, width - 24)
    x.nice()
    y = Scale(0, len(rows), top + 4 + row_h * len(rows), top + 4)
    body = [f'<text class="title" x="12" y="20">{escape(title)}</text>', *legend]
    body += _axes(x, y, x.ticks(), [], (x_label, ""))
    for v, label in refs:
        body += _ref("x", v, label, x, y)
    for i, r in enumerate(rows):
        cy, color = y(len(rows) - i - 0.5), palette[r.group]
        body.append(
            f'<text class="tick" x="{left - 8}" y="{cy + 4:.1f}" text-anchor="end">{escape(r.label)}</text>'
        )
        tip = f"<title>{escape(r.tip or r.label)}</title>"
        if r.lo is not None and r.hi is not None:
            body.append(
                f'<line x1="{x(r.lo):.1f}" x2="{x(r.hi):.1f}" y1="{cy:.1f}" y2="{cy:.1f}" stroke="{color}" '
                f'stroke-width="3" stroke-linecap="round">{tip}</line>'
            )
        body.append(f'<circle cx="{x(r.value):.1f}" cy="{cy:.1f}" r="5" fill="{color}">{tip}</circle>')
    return _svg(width, height, body, title)
