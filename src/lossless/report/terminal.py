"""The summary as a table for people (rich); its columns are the metric table's ``terminal`` and
``by_class`` statistics."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lossless.analyze import METRIC, METRICS, EndpointStats, GroupStats, Metric, Summary
from lossless.analyze.metrics import SHOWN_RATIOS
from lossless.analyze.result import SessionStats

_COLUMNS = tuple((m, stat) for m in METRICS for stat in m.terminal)
_CLASS_COLUMNS = tuple((m, stat) for m in METRICS for stat in m.by_class)


def _cell(g: GroupStats, m: Metric, stat: str) -> str:
    value = g.stat(m.key, stat)
    if value is not None and m.key == "output_tps" and set(g.n_out_sources) == {"chunks"}:
        return f"{value:.{m.digits}f} chunk/s"  # no usage and no tokenizer: chunks, not tokens
    return m.fmt(value, unit=True)


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


def _notes(e: EndpointStats) -> list[str]:
    notes, g = [], e.overall
    if sp := e.speculative:
        length = sp.mean_accepted_length
        tail = f", mean accepted length {length:.2f}" if length else ""
        notes.append(f"acceptance {sp.acceptance_rate:.1%}{tail}")
    if g.throughput.goodput_requests_per_s is not None:
        notes.append(f"goodput {g.throughput.goodput_requests_per_s:.2f} req/s")
    if met := g.slo_attainment:
        each = ", ".join(f"{k} {v:.0%}" for k, v in met.items() if k != "all")
        notes.append(f"SLO met by {met['all']:.0%} of requests ({each})")
    if c := g.prompt_cache:
        share = (
            f", {c.cached_tokens / c.prompt_tokens:.0%} of prompt tokens cached" if c.prompt_tokens else ""
        )
        hit, miss = (METRIC["ttft_ms"].fmt(d.p50, unit=True) for d in (c.ttft_hit, c.ttft_miss))
        notes.append(
            f"prompt cache: {c.hits}/{c.reporting} requests hit{share}; TTFT p50 {hit} on a hit, {miss} "
            "on a miss"
        )
    if n := g.lengths:
        outputs = f"; {n.output_exact}/{n.output_asked} outputs at the asked length" if n.output_asked else ""
        notes.append(f"token-exact: {n.input_exact}/{n.requests} prompts counted as asked by the server "
                     f"(largest difference {n.input_off_most}){outputs}")  # fmt: skip
    if s := g.sessions:
        notes.append(_sessions(s))
    if g.cost_per_ok_request_usd is not None:
        notes.append(f"${g.cost_per_ok_request_usd:.6f} per successful request")
    if g.stalls.count:
        notes.append(f"{g.stalls.count} stalls")
    if chunks := g.n_out_sources.get("chunks", 0):
        notes.append(
            f"{chunks} requests counted in chunks, not tokens (no usage from the server and no tokenizer "
            "found: --tokenizer, or tokenizer = ... in the endpoint file, counts tokens), so their TPOT is "
            "time per chunk and their speed chunks/s"
        )
    if uncounted := g.n_out_sources.get("none", 0):
        notes.append(
            f"output tokens unknown for {uncounted} requests (no usage from the server; --tokenizer counts "
            "the text), so no TPOT or output speed for them"
        )
    return notes


def _sessions(s: SessionStats) -> str:
    said = f"conversations: {s.completed}/{s.sessions} completed, {s.turns_ok} turns answered"
    if s.task_s.p50 is None or s.model_s.p50 is None:
        return said
    task, model = s.task_s, s.model_s
    return (f"{said}; task time p50 {task.p50:.2f} s, p95 {task.p95:.2f} s, of which waiting for answers "
            f"p50 {model.p50:.2f} s")  # fmt: skip


def _served_by(g: GroupStats) -> str | None:
    """ "served by: model M; system_fingerprint F; server S", with counts where there are several."""

    def values(counts: Mapping[str, int]) -> str:
        if len(counts) == 1:
            return next(iter(counts))
        return ", ".join(f"{v} ({n})" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))

    who = g.served_by
    found = [("model", who.model), ("system_fingerprint", who.system_fingerprint), *who.headers.items()]
    parts = [f"{key} {values(counts)}" for key, counts in found if counts]
    return "served by: " + "; ".join(parts) if parts else None


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
            e.name, e.load, f"{req.ok}/{req.failed}", *(_cell(e.overall, m, s) for m, s in _COLUMNS),
            "-" if tput is None else f"{tput:.1f}", errors,
        )  # fmt: skip
    console.print(table)
    _classes(summary, console)
    for e in summary.endpoints:
        notes = _notes(e)
        if notes:
            console.print(escape(f"{e.name} [{e.load}]: " + "; ".join(notes)))
        if who := _served_by(e.overall):
            console.print(escape(f"{e.name} [{e.load}]: {who}"))
    for c in summary.comparisons:
        if c.stat in SHOWN_RATIOS:
            console.print(escape(f"[{c.load}] {c.text}"))  # "[c=1]" is not a style
    if summary.capacity is not None:
        console.print(escape(summary.capacity.text))
    if summary.interrupted:
        console.print("[bold]interrupted[/bold]: results cover the requests that finished")
    for warning in summary.run.warnings if summary.run is not None else ():
        console.print("[bold]warning[/bold]: " + escape(warning))
