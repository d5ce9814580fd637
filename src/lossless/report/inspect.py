"""inspect's result for people and files: one card per endpoint in the terminal, inspect.json and
inspect.html (``inspect_html``) under --out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lossless.atomic import write_atomic
from lossless.client.endpoints import public_url
from lossless.inspect.run import Card, InspectResult
from lossless.report import inspect_html
from lossless.rundir import INSPECT, INSPECT_PAGE, emit_json

STYLE = {"evident": "green", "not evident": "red", "inconclusive": "yellow"}


def emit(result: InspectResult, console: Console, as_json: bool, out_dir: Path | None) -> list[Path | None]:
    """The cards for people (stderr under --json), the JSON on stdout, inspect.json and inspect.html
    under --out; the files written."""
    for c in result.cards:
        render(c, console)
    written = [emit_json(result, as_json, out_dir, INSPECT)]
    if out_dir is not None:  # beside inspect.json: a bench report in the folder links its cards
        written.append(write_atomic(out_dir / INSPECT_PAGE, inspect_html.render(result.as_dict())))
    return written


def _word(verdict: str) -> str:
    return f"[{STYLE[verdict]}]{verdict}[/{STYLE[verdict]}]"


def render(card: Card, console: Console) -> None:
    e = card.endpoint
    title = f"inspect: {e.name} ({public_url(e.base_url)}, model {e.model}) - {card.wall_s:.0f} s"
    table = Table(title=title, title_justify="left")
    for column in ("claim", "verdict", "evidence"):
        table.add_column(column)
    s = card.speculation
    drafter = f"; likely drafter: {s.drafter}" if s.drafter else ""
    length = f"{s.accepted_length:.2f}" if s.accepted_length is not None else "-"
    table.add_row("1 speculative decoding", _word(s.verdict), f"{s.note}{drafter}")
    for r in s.ratios:
        ci = f"{r.ratio:.2f}x (95% CI {r.ci95[0]:.2f}-{r.ci95[1]:.2f}), {r.rounds} rounds"
        table.add_row(f"  {r.arm} / free-t1, {r.of}", r.sped_up, ci)
    for a in s.arms:
        speed = f"{a.speed_tps:.1f} tok/s" if a.speed_tps is not None else "no speed"
        burst = f"{a.tokens_per_burst:.2f} tokens/burst" if a.tokens_per_burst is not None else "uncounted"
        gaps = f"gap p50 {a.gap_ms_p50:.1f} ms" if a.gap_ms_p50 is not None else "no gaps"
        table.add_row(f"  arm {a.arm}", "", f"{a.requests} requests, {speed}, {burst}, {gaps}")
    table.add_row("  mean accepted length", "", f"{length} tokens per burst (estimate)")
    table.add_row("  server counters", "", _counters(card))
    _precision(table, card.as_dict()["precision"])
    i = card.identity
    table.add_row(
        "3 identity: tokenizer", _word(i.verdict), (i.family or "-") + (f" ({i.note})" if i.note else "")
    )
    declared = ", ".join(card.served.get("declared_model", [])) or "-"
    prints = ", ".join(card.served.get("system_fingerprint", [])) or "-"
    said = card.as_dict()["identity"]
    limit = inspect_html.context_text(said.get("context") or said.get("context_limit"))
    table.add_row("  declared model", "", declared)
    table.add_row("  system_fingerprint", "", prints)
    table.add_row("  context limit", "", limit)
    headers = card.served.get("headers") or {}
    shown = "; ".join(f"{name}: {', '.join(values)}" for name, values in headers.items())
    table.add_row("  server headers", "", shown or "-")
    table.add_row("budget", "", f"{card.rounds} rounds ({card.stopped}), {card.output_tokens} output tokens")
    console.print(table)


def _counters(card: Card) -> str:
    s = card.speculation
    why = str(s.evidence.get("counters", ""))
    if not s.counters:
        return why or "-"
    parts = [f"{k.replace('_', ' ')} {v:.3g}" for k, v in s.counters.items()]
    return ", ".join(parts) + (f" ({why})" if why else "")


def _precision(table: Table, p: dict[str, Any]) -> None:
    """The claim as the card's JSON has it: a bare note, or the nearest reference against the floor."""
    verdict = str(p.get("verdict")) if p.get("verdict") in STYLE else "inconclusive"
    table.add_row("2 precision / variant", _word(verdict), str(p.get("note") or ""))
    if p.get("nearest") is None and p.get("floor") is None:
        return  # not measured, or no reference placed: the note says why
    floor = p.get("floor")
    nearest = next((d for d in p.get("distances") or [] if d.get("reference") == p.get("nearest")), None)
    distance = (
        f", distance {nearest['distance']:.3g}" if nearest and nearest.get("distance") is not None else ""
    )
    shown = f"{p.get('nearest') or 'none'}{distance}; A/A floor " + (
        f"{floor:.3g}" if floor is not None else "-"
    )
    table.add_row("  nearest reference", "", shown)
    if p.get("method"):
        same = {True: "bit-identical", False: "differ", None: "-"}[p.get("bit_identical")]
        said = f"{p['method']}, {p.get('texts')} texts / {p.get('tokens')} tokens; repeats {same}"
        table.add_row("  scored", "", said)
