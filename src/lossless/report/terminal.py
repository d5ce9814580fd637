"""The summary as a table for people (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

_COLUMNS = (
    ("TTFB p50", "ttfb_ms", "p50", "{:.0f} ms"),
    ("TTFT p50", "ttft_ms", "p50", "{:.0f} ms"),
    ("TTFT p99", "ttft_ms", "p99", "{:.0f} ms"),
    ("TPOT p50", "tpot_ms", "p50", "{:.1f} ms"),
    ("speed p50", "output_tps", "p50", "{:.1f} tok/s"),
    ("E2E p50", "e2e_ms", "p50", "{:.0f} ms"),
    ("E2E p99", "e2e_ms", "p99", "{:.0f} ms"),
)


def _cell(entry: dict[str, Any], metric: str, stat: str, fmt: str) -> str:
    value = entry.get(metric, {}).get(stat)
    return "-" if value is None else fmt.format(value)


_CLASS_COLUMNS = (
    ("TTFT p50", "ttft_ms", "p50", "{:.0f} ms"),
    ("TTFT p99", "ttft_ms", "p99", "{:.0f} ms"),
    ("TPOT p50", "tpot_ms", "p50", "{:.1f} ms"),
    ("E2E p50", "e2e_ms", "p50", "{:.0f} ms"),
    ("E2E p99", "e2e_ms", "p99", "{:.0f} ms"),
)
_COMPARED_STATS = ("p50", "p99")  # summary.json also holds p90; the terminal keeps to the centre and tail


def _classes(summary: dict[str, Any], console: Console) -> None:
    """One compact row per prompt class, only when some endpoint saw more than one class."""
    if all(len(e.get("classes", {})) < 2 for e in summary["endpoints"]):
        return
    table = Table(title="by prompt class", title_justify="left")
    for header in ("endpoint", "load", "class", "ok", *(c[0] for c in _CLASS_COLUMNS)):
        table.add_column(header, justify="left" if header in ("endpoint", "load", "class") else "right")
    for e in summary["endpoints"]:
        for cls, c in e.get("classes", {}).items():
            row = (_cell(c, m, s, f) for _, m, s, f in _CLASS_COLUMNS)
            table.add_row(e["name"], e["load"], cls, str(c["requests"]["ok"]), *row)
    console.print(table)


def _notes(e: dict[str, Any]) -> list[str]:
    notes = []
    if e.get("speculative"):
        sp = e["speculative"]
        length = sp.get("mean_accepted_length")
        notes.append(
            f"acceptance {sp['acceptance_rate']:.1%}"
            + (f", mean accepted length {length:.2f}" if length else "")
        )
    if e["throughput"].get("goodput_requests_per_s") is not None:
        notes.append(f"goodput {e['throughput']['goodput_requests_per_s']:.2f} req/s")
    if e.get("cost_per_ok_request_usd") is not None:
        notes.append(f"${e['cost_per_ok_request_usd']:.6f} per successful request")
    if e["stalls"]["count"]:
        notes.append(f"{e['stalls']['count']} stalls")
    chunks = e.get("n_out_sources", {}).get("chunks", 0)
    if chunks:
        notes.append(
            f"{chunks} requests counted in chunks, not tokens (no usage from the server and no tokenizer "
            "found: --tokenizer, or tokenizer = ... in the endpoint file, counts tokens), so their TPOT is "
            "time per chunk and their speed chunks/s"
        )
    uncounted = e.get("n_out_sources", {}).get("none", 0)
    if uncounted:
        notes.append(
            f"output tokens unknown for {uncounted} requests (no usage from the server; --tokenizer counts "
            "the text), so no TPOT or output speed for them"
        )
    return notes


def _served_by(e: dict[str, Any]) -> str | None:
    """ "served by: model M; system_fingerprint F; server S", with counts where there are several."""

    def values(counts: dict[str, int]) -> str:
        if len(counts) == 1:
            return next(iter(counts))
        return ", ".join(f"{v} ({n})" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))

    who = e.get("served_by") or {}
    parts = [f"{key} {values(who[key])}" for key in ("model", "system_fingerprint") if who.get(key)]
    parts += [f"{name} {values(c)}" for name, c in (who.get("headers") or {}).items() if c]
    return "served by: " + "; ".join(parts) if parts else None


def _speed_cell(e: dict[str, Any]) -> str:
    value = e.get("output_tps", {}).get("p50")
    if value is None:
        return "-"
    chunks_only = set(e.get("n_out_sources") or {}) == {"chunks"}
    return f"{value:.1f} chunk/s" if chunks_only else f"{value:.1f} tok/s"


def render(summary: dict[str, Any], console: Console) -> None:
    table = Table(title="lossless bench", title_justify="left")
    for header in ("endpoint", "load", "ok/failed", *(c[0] for c in _COLUMNS), "tok/s total", "errors"):
        table.add_column(header, justify="left" if header in ("endpoint", "load", "errors") else "right")
    for e in summary["endpoints"]:
        req = e["requests"]
        errors = ", ".join(f"{k}:{v}" for k, v in req["errors"].items()) or "-"
        tput = e["throughput"]["output_tokens_per_s"]
        table.add_row(
            e["name"],
            e["load"],
            f"{req['ok']}/{req['failed']}",
            *(_speed_cell(e) if m == "output_tps" else _cell(e, m, s, f) for _, m, s, f in _COLUMNS),
            "-" if tput is None else f"{tput:.1f}",
            errors,
        )
    console.print(table)
    _classes(summary, console)
    for e in summary["endpoints"]:
        notes = _notes(e)
        if notes:
            console.print(escape(f"{e['name']} [{e['load']}]: " + "; ".join(notes)))
        if who := _served_by(e):
            console.print(escape(f"{e['name']} [{e['load']}]: {who}"))
    for c in summary["comparisons"]:
        if c.get("stat", "p50") in _COMPARED_STATS:
            console.print(escape(f"[{c['load']}] {c['text']}"))  # "[c=1]" is not a style
    if summary.get("interrupted"):
        console.print("[bold]interrupted[/bold]: results cover the requests that finished")
