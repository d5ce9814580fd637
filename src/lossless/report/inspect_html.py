"""inspect's cards as one self-contained page (inspect.html, written beside inspect.json), and what a
bench report needs to link an inspected endpoint to its card: the card's anchor and its three words.

Everything here reads the cards as JSON (``Card.as_dict()``, or inspect.json read back), so a bench
report links cards without importing inspect.run, and a card written by another version (the
precision claim as a bare note, or with its distances) still renders.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from lossless.report.page import page, section
from lossless.rundir import INSPECT

# the card's keys for the three claims, as the page names them
CLAIMS = {
    "speculative_decoding": "speculative decoding",
    "precision": "precision / variant",
    "identity": "identity",
}
VERDICTS = ("evident", "not evident", "inconclusive")
PRECISION_FACTS = {
    "nearest": "nearest reference",
    "floor": "A/A floor (repeat noise)",
    "bit_identical": "repeats bit-identical",
    "method": "method",
    "texts": "texts",
    "tokens": "tokens scored",
}


def anchors(cards: Sequence[Mapping[str, Any]]) -> list[str]:
    """One id per card, from its endpoint's name (``card-NAME``, ``-2`` on a repeat): the same for the
    page and for every link to it."""
    seen: dict[str, int] = {}
    out = []
    for c in cards:
        e = c.get("endpoint")
        name = str((e.get("name") if isinstance(e, Mapping) else None) or "endpoint")
        slug = "card-" + (re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "endpoint")
        seen[slug] = seen.get(slug, 0) + 1
        out.append(slug if seen[slug] == 1 else f"{slug}-{seen[slug]}")
    return out


def words(card: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(claim, its word) for the three claims, in order; a claim missing is `inconclusive`."""
    out = []
    for key, claim in CLAIMS.items():
        part = card.get(key)
        verdict = part.get("verdict") if isinstance(part, Mapping) else None
        out.append((claim, verdict if isinstance(verdict, str) else "inconclusive"))
    return out


def badge(verdict: str) -> str:
    cls = verdict.replace(" ", "-") if verdict in VERDICTS else "inconclusive"
    return f'<span class="badge {cls}">{escape(verdict)}</span>'


def grid(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """``page.table`` for cells that are HTML already (badges, links): every text in them is escaped
    by whoever made the cell."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _kv(pairs: Iterable[tuple[str, Any]]) -> str:
    rows = [(escape(k), f'<span class="text">{escape(_text(v))}</span>') for k, v in pairs]
    return grid(("", ""), rows, cls="kv")


def _text(v: Any) -> str:
    if v is None or v == "" or v == [] or v == {}:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, list | tuple):
        return ", ".join(_text(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_text(x)}" for k, x in v.items())
    return str(v)


def _num(v: Any, fmt: str = ".2f", unit: str = "") -> str:
    ok = isinstance(v, int | float) and not isinstance(v, bool)
    return f"{v:{fmt}}{unit}" if ok else "-"


def _ci(ci: Any, fmt: str = ".2f") -> str:
    ok = isinstance(ci, list | tuple) and len(ci) == 2
    return f"{_num(ci[0], fmt)}-{_num(ci[1], fmt)}" if ok else "-"


def _why(card: Mapping[str, Any], key: str) -> str:
    """A claim's note; the identity's names the family when its note is empty (an exact match)."""
    part = card.get(key)
    if key == "identity" and isinstance(part, Mapping) and not part.get("note") and part.get("family"):
        return f"tokenizer: {part['family']}"
    return _note(part)


def _note(part: Any) -> str:
    return str(part.get("note") or "") if isinstance(part, Mapping) else str(part or "")


# --- the page ----------------------------------------------------------------------------------------


def render(doc: Mapping[str, Any]) -> str:
    """inspect.json's document -> the page: one section per card, under the nav."""
    cards = list(doc.get("cards") or [])
    ids = anchors(cards)
    sections = [_card(c, key) for c, key in zip(cards, ids, strict=True)]
    names = [str((c.get("endpoint") or {}).get("name", "")) for c in cards]
    if not sections:
        sections = [section("none", "No cards", "<p>No endpoint was inspected.</p>")]
    subtitle = f"{', '.join(names) or 'no endpoint'} · three claims per endpoint, told by behaviour"
    return page("lossless inspect", subtitle, sections, list(zip(ids, names, strict=True)))


def _card(card: Mapping[str, Any], key: str) -> str:
    e = card.get("endpoint") or {}
    title = f"{e.get('name', '?')} · {e.get('base_url', '?')} · model {e.get('model', '?')}"
    claims = [
        (escape(claim), badge(word), f'<span class="text">{escape(_why(card, k))}</span>')
        for (claim, word), k in zip(words(card), CLAIMS, strict=True)
    ]
    parts = [
        _speculation(card.get("speculative_decoding") or {}),
        _precision(card.get("precision")),
        _identity(card.get("identity") or {}),
    ]
    b = card.get("budget") or {}
    budget = (
        f"{_text(b.get('rounds'))} rounds ({_text(b.get('stopped'))}), {_text(b.get('requests'))} requests, "
        f"{_text(b.get('output_tokens'))} output tokens, {_num(b.get('wall_s'), '.0f', ' s')}"
    )
    body = (
        grid(("claim", "word", "why"), claims, cls="claims")
        + f'<div class="cols" style="margin-top:14px">{"".join(parts)}</div>'
        + f'<p class="about">Budget: {escape(budget)}</p>'
    )
    return section(key, title, body)


def _speculation(s: Mapping[str, Any]) -> str:
    ratios = [
        (
            escape(f"{r.get('arm')} / free-t1"),
            escape(str(r.get("of"))),
            _num(r.get("ratio"), ".2f", "x"),
            _ci(r.get("ci95")),
            _num(r.get("rounds"), "d"),
            escape(str(r.get("sped_up"))),
        )
        for r in s.get("ratios") or []
    ]
    arms = [
        (
            escape(str(a.get("arm"))),
            _num(a.get("requests"), "d"),
            _num(a.get("speed_tps"), ".1f"),
            _num(a.get("tokens_per_chunk")),
            _num(a.get("tokens_per_burst")),
            _num(a.get("gap_ms_p50"), ".1f"),
            _num(a.get("gap_ms_p90"), ".1f"),
        )
        for a in s.get("arms") or []
    ]
    evidence = s.get("evidence") or {}
    facts = [
        ("likely drafter", s.get("drafter")),
        ("mean accepted length (estimate)", s.get("accepted_length")),
        ("timings and bursts alone", evidence.get("behaviour")),
        ("server counters", s.get("counters")),
        ("counters", evidence.get("counters")),
    ]
    body = _kv(facts)
    if ratios:
        body += grid(("arm", "of", "ratio", "95% CI", "rounds", "sped up"), ratios)
    if arms:
        body += grid(("arm", "requests", "tok/s", "tok/chunk", "tok/burst", "gap p50 ms", "gap p90 ms"), arms)
    return f"<div><h2>1 Speculative decoding {badge(_verdict(s))}</h2>{body}</div>"


def _verdict(part: Any) -> str:
    v = part.get("verdict") if isinstance(part, Mapping) else None
    return v if isinstance(v, str) else "inconclusive"


def _precision(p: Any) -> str:
    """Today's {verdict, note}, or with the distances to references against the A/A floor."""
    p = p if isinstance(p, Mapping) else {"note": _note(p)}
    # a claim not measured carries its fields empty (None, 0 texts): shown only when they say something
    facts = [
        (label, v)
        for k, label in PRECISION_FACTS.items()
        if (v := p.get(k)) is not None and v != "" and not (k in ("texts", "tokens") and v == 0)
    ]
    body = _kv([("note", p.get("note")), *facts])
    rows = [
        (
            escape(str(d.get("reference")))
            + (" (nearest)" if d.get("reference") == p.get("nearest") else ""),
            _num(d.get("distance"), ".4g"),
            _ci(d.get("ci"), ".4g"),
        )
        for d in p.get("distances") or []
        if isinstance(d, Mapping)
    ]
    if rows:
        body += grid(("reference", "distance", "95% CI"), rows)
    return f"<div><h2>2 Precision / variant {badge(_verdict(p))}</h2>{body}</div>"


def _identity(i: Mapping[str, Any]) -> str:
    near = f"{_text(i.get('nearest'))} ({_text(i.get('distance'))} tokens away)"
    runner = f"{_text(i.get('runner_up'))} ({_text(i.get('runner_up_distance'))} tokens away)"
    headers = i.get("headers") or {}
    shown = "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in headers.items())
    facts = [
        ("tokenizer family", i.get("family")),
        ("nearest", near),
        ("runner-up", runner),
        ("declared model", i.get("declared_model")),
        ("system_fingerprint", i.get("system_fingerprint")),
        ("context limit", context_text(i.get("context") or i.get("context_limit"))),
        ("server headers", shown),
    ]
    evidence = i.get("evidence") or {}
    counts, nearest = evidence.get("counts") or {}, evidence.get("nearest_counts") or {}
    rows = [(escape(str(k)), _num(v, "d"), _num(nearest.get(k), "d")) for k, v in counts.items()]
    table = grid(("string", "tokens beyond baseline", "nearest's"), rows) if rows else ""
    if table:  # long, and read only when the word is in doubt: folded (no script needed)
        table = f"<details><summary>prompt tokens per crafted string ({len(rows)})</summary>{table}</details>"
    return f"<div><h2>3 Identity {badge(_verdict(i))}</h2>{_kv(facts)}{table}</div>"


def context_text(c: Any) -> str:
    """The context limit: a number /v1/models declared, or a measurement (``ContextLimit.as_dict``)."""
    if isinstance(c, bool) or c is None:
        return "not declared (not measured)"
    if isinstance(c, int):
        return f"{c:,} tokens (declared)"
    if not isinstance(c, Mapping):
        return str(c)
    status, limit = str(c.get("status") or "not measured"), c.get("limit")
    head = f"{limit:,} tokens ({status})" if isinstance(limit, int) else status
    return f"{head}: {c['note']}" if c.get("note") else head


# --- links from a bench report ------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    endpoint: str  # the bench report's endpoint
    words: tuple[tuple[str, str], ...]  # (claim, word) x 3
    href: str | None  # inspect.html#anchor relative to the report; None: no inspect.html beside


def links(
    endpoints: Sequence[Mapping[str, Any]], folders: Sequence[Path], page_dir: Path
) -> tuple[list[Link], list[str]]:
    """The bench endpoints (summary.json's ``config.endpoints``) that the first inspect.json found in
    ``folders`` holds a card of - same base URL and model, or both the embedded model, served on a
    port of its own each time - and notes for a person (an unreadable inspect.json)."""
    for folder in dict.fromkeys(folders):
        path = folder / INSPECT
        if not path.is_file():
            continue
        try:
            cards = json.loads(path.read_text(encoding="utf-8"))["cards"]
            ids = anchors(cards)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            return [], [f"{path} was not read, so no endpoint links its card ({type(exc).__name__})"]
        page_file = folder / "inspect.html"
        href = Path(os.path.relpath(page_file, page_dir)).as_posix() if page_file.is_file() else None
        found = []
        for e in (e for e in endpoints if isinstance(e, Mapping)):
            mine = [(c, k) for c, k in zip(cards, ids, strict=True) if _same(c.get("endpoint"), e)]
            if mine:
                card, key = mine[-1]  # inspected twice: the last card
                found.append(Link(str(e.get("name")), tuple(words(card)), href and f"{href}#{key}"))
        return found, []
    return [], []


def _same(inspected: Any, benched: Mapping[str, Any]) -> bool:
    if not isinstance(inspected, Mapping) or inspected.get("model") != benched.get("model"):
        return False
    if inspected.get("name") == benched.get("name") == "embedded":
        return True
    url = str(inspected.get("base_url") or "").rstrip("/")
    return bool(url) and url == str(benched.get("base_url") or "").rstrip("/")


def bench_section(found: Sequence[Link]) -> str:
    """The bench report's section: per inspected endpoint, its three words and a link to its card."""
    rows = []
    for link in found:
        card = f'<a href="{escape(link.href)}">card</a>' if link.href else "inspect.html not found beside"
        rows.append((escape(link.endpoint), *(badge(w) for _, w in link.words), card))
    headers = ("endpoint", *CLAIMS.values(), "inspect")
    about = "What lossless inspect told of these endpoints by behaviour (inspect.json beside this report)."
    return section("inspected", "Inspected", grid(headers, rows), about)


def summary_section(doc: Mapping[str, Any]) -> str:
    """inspect.json read back (``lossless report``): each card's three words as one section (the cards
    whole are inspect.html's)."""
    cards = [c for c in doc.get("cards") or [] if isinstance(c, Mapping)]
    rows = [
        (escape(str((c.get("endpoint") or {}).get("name", "?"))), *(badge(word) for _, word in words(c)))
        for c in cards
    ]
    heads = ("endpoint", *CLAIMS.values())
    return section("inspect", "Inspected", grid(heads, rows), "inspect.json; the whole cards: inspect.html")
