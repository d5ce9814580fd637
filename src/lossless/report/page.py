"""The HTML page every report shares: inline CSS, sections, tables, figures. No script, no font, no
request of any kind (a Content-Security-Policy says so to the browser too)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from lossless.report import plots

CSS = """
:root { --fg: #1d2433; --muted: #5b6476; --line: #d9dee7; --bg: #f6f7f9; --card: #fff; --accent: #1f77b4; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1320px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 0 0 6px; }
.sub { color: var(--muted); margin: 0 0 18px; }
nav a { color: var(--accent); margin-right: 14px; text-decoration: none; font-size: 13px; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 16px 18px;
  margin: 16px 0; }
.about { color: var(--muted); margin: 0 0 10px; max-width: 90ch; }
.figure { display: flex; flex-wrap: wrap; gap: 18px; align-items: flex-start; }
.figure > svg { flex: 1 1 560px; max-width: 720px; height: auto; }
.figure > .numbers { flex: 1 1 500px; overflow-x: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 13px; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th { color: var(--muted); font-weight: 600; background: #fafbfc; }
th:first-child, td:first-child { text-align: left; }
td.text { text-align: left; white-space: normal; }
.kv td:first-child { color: var(--muted); }
.badge { display: inline-block; padding: 2px 10px; border-radius: 12px; font-weight: 700; color: #fff; }
.equivalent { background: #2ca02c; } .different { background: #d62728; }
.inconclusive { background: #c98a00; }
.evident { background: #2ca02c; } .not-evident { background: #6b7588; }
span.text { display: block; text-align: left; white-space: normal; max-width: 80ch; }
td a { color: var(--accent); } table.claims th, table.claims td { text-align: left; }
details > summary { cursor: pointer; color: var(--muted); margin: 8px 0 4px; }
ul.tight { margin: 6px 0; padding-left: 20px; }
.cols { display: flex; flex-wrap: wrap; gap: 28px; }
svg.plot { background: #fff; font-family: inherit; }
svg .title { font-size: 14px; font-weight: 700; fill: var(--fg); }
svg .tick, svg .legend { font-size: 12px; fill: #3c4454; }
svg .axis { font-size: 12px; fill: var(--muted); }
svg .note { font-size: 14px; fill: var(--muted); font-style: italic; }
svg .frame { fill: none; stroke: #b8c0cc; }
svg .grid { stroke: #eceff3; }
svg .ref { stroke: #555; stroke-dasharray: 4 3; }
svg .ref-label { font-size: 11px; fill: #555; }
footer { color: var(--muted); font-size: 12px; margin-top: 24px; }
"""


def page(title: str, subtitle: str, sections: Iterable[str], nav: Sequence[tuple[str, str]] = ()) -> str:
    links = "".join(f'<a href="#{escape(k)}">{escape(t)}</a>' for k, t in nav)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # no request of any kind, even one a future edit adds by mistake: the page is self-contained
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>"
        f'<h1>{escape(title)}</h1><p class="sub">{escape(subtitle)}</p>'
        + (f"<nav>{links}</nav>" if links else "")
        + "".join(sections)
        + "<footer>Written by lossless. Self-contained: no scripts, fonts or network requests.</footer>"
        "</main></body></html>\n"
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def section(key: str, title: str, body: str, about: str = "") -> str:
    intro = f'<p class="about">{escape(about)}</p>' if about else ""
    return f'<section id="{escape(key)}"><h2>{escape(title)}</h2>{intro}{body}</section>'


def figure(f: plots.Figure) -> str:
    numbers = f'<div class="numbers">{table(f.headers, f.rows)}</div>'
    return section(f.key, f.title, f'<div class="figure">{f.svg}{numbers}</div>', f.about)
