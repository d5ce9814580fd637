"""``lossless inspect``: InspectOptions -> per endpoint a card of claims told by behaviour -> an
``InspectResult`` (``report/inspect.py`` renders it).

Claims, each with its evidence and a word (`evident`, `not evident`, `inconclusive`):
    1. speculative decoding  (``speculation``: the arms' paired speed and burst ratios; the server's
       own counters beside them)
    2. precision / variant   not measured yet: always `inconclusive`, "not measured"
    3. identity              the tokenizer family from prompt-token counts (``identity``), with the
       declared model, system_fingerprint and the context limit /v1/models declares, where it does
Endpoints are inspected one after another, never at once: each one's timings must have the machine
(and the network) to themselves.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from lossless import endpoints as ep, provision
from lossless.analyze.server import served_by, spec_stats
from lossless.client.http import Session
from lossless.client.prometheus import COUNTERS
from lossless.client.wire import Wire
from lossless.endpoints import Endpoint, api_key, public_url
from lossless.inspect import identity, speculation
from lossless.inspect.collect import Collected, Plan, collect
from lossless.inspect.identity import Identity
from lossless.inspect.speculation import Speculation
from lossless.options import InspectOptions
from lossless.records import RequestRecord
from lossless.tokens import fill_n_out

PRECISION_NOTE = "not measured (teacher-forced log-probabilities against references: not built yet)"
# what /v1/models may say of the context: vLLM and ours say max_model_len; others one of the rest
CONTEXT_FIELDS = ("max_model_len", "context_length", "context_window", "max_context_length", "n_ctx")


@dataclass(frozen=True)
class Listing:
    ids: tuple[str, ...] = ()  # the model ids /v1/models lists
    context: int | None = None  # the context limit it declares for the model asked for


@dataclass(frozen=True)
class Card:
    endpoint: Endpoint
    speculation: Speculation
    identity: Identity
    context_limit: int | None  # declared on /v1/models; None: not declared (not measured)
    rounds: int  # of the four speculation arms
    stopped: str  # why the rounds stopped: "settled", "max rounds", "time budget"
    output_tokens: int  # generated over the speculation requests
    wall_s: float  # the whole card
    precision: str = PRECISION_NOTE
    served: dict[str, Any] = field(default_factory=dict)  # model, fingerprint, identifying headers

    def as_dict(self) -> dict[str, Any]:
        e = self.endpoint
        return {
            "endpoint": {"name": e.name, "base_url": public_url(e.base_url), "model": e.model},
            "speculative_decoding": asdict(self.speculation),
            "precision": {"verdict": "inconclusive", "note": self.precision},
            "identity": {**asdict(self.identity), "context_limit": self.context_limit, **self.served},
            "budget": {"rounds": self.rounds, "requests": self.speculation.evidence.get("requests"),
                       "output_tokens": self.output_tokens, "stopped": self.stopped,
                       "wall_s": round(self.wall_s, 1)},
        }  # fmt: skip


@dataclass(frozen=True)
class InspectResult:
    cards: tuple[Card, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"cards": [c.as_dict() for c in self.cards]}


def run(options: InspectOptions) -> InspectResult:
    """Inspect each URL, or the embedded server started for the occasion; a missing key or an unreadable
    tokenizer fails first, before any request."""
    given = ep.from_urls(options.urls, options.model, options.api_key_env) if options.urls else ()
    for endpoint in given:
        api_key(endpoint)
    refs = identity.references(options.tokenizers)
    plan = Plan(options.max_tokens, options.min_rounds, options.max_rounds, options.budget_s)
    with provision.endpoints(given, options.embedded) as found:
        return InspectResult(tuple(card(e, plan, refs, options.seed) for e in found))


def card(endpoint: Endpoint, plan: Plan, refs: Mapping[str, identity.Counts], seed: int = 0) -> Card:
    start = time.monotonic()
    listing, measured, got = asyncio.run(_measure(endpoint, plan))
    records = _counted(got.records, endpoint, listing)
    spec = _with_counters(speculation.judge(records, seed=seed), got)
    who = identity.judge(measured, refs)
    served = {"declared_model": list(measured.models), "system_fingerprint": list(measured.fingerprints),
              "headers": served_by(records).headers}  # fmt: skip
    tokens = sum(r.n_out or 0 for r in records if r.ok)
    return Card(endpoint, spec, who, listing.context, got.rounds, got.stopped, tokens,
                time.monotonic() - start, served=served)  # fmt: skip


async def _measure(endpoint: Endpoint, plan: Plan) -> tuple[Listing, identity.Measured, Collected]:
    listing = await _listing(endpoint)
    async with Wire(endpoint) as w:
        measured = await identity.measure(w)

    def settled(records: Sequence[RequestRecord]) -> bool:
        return speculation.settled(_counted(records, endpoint, listing))

    return listing, measured, await collect(endpoint, plan, settled)


def _counted(records: Sequence[RequestRecord], endpoint: Endpoint, listing: Listing) -> list[RequestRecord]:
    # a server that streams no usage: its text through the tokenizer it lists, as bench counts it
    return fill_n_out(list(records), (endpoint,), None, lambda _: list(listing.ids))


async def _listing(endpoint: Endpoint) -> Listing:
    session = Session(endpoint.base_url, dict(endpoint.headers), api_key(endpoint), 10.0)
    try:
        text = await session.get_text(endpoint.base_url.rstrip("/") + "/models", timeout=5.0, limit=1 << 20)
    finally:
        await session.aclose()
    try:
        data = json.loads(text or "null")
    except (ValueError, RecursionError):
        return Listing()
    rows = data.get("data") if isinstance(data, dict) else None
    rows = (
        [m for m in rows if isinstance(m, dict) and isinstance(m.get("id"), str)]
        if isinstance(rows, list)
        else []
    )
    ids = tuple(m["id"] for m in rows)
    mine = [m for m in rows if m["id"] == endpoint.model] or (rows if len(rows) == 1 else [])
    limits = [v for m in mine for k in CONTEXT_FIELDS if isinstance(v := m.get(k), int) and v > 0]
    return Listing(ids, limits[0] if limits else None)


def _with_counters(spec: Speculation, got: Collected) -> Speculation:
    """The server's own counters over the measurement beside the behaviour's word. Accepted drafts there
    make the claim `evident` whatever the timings say (the server says so itself); the behaviour's
    word stays in the evidence."""
    evidence = {**spec.evidence, "behaviour": spec.verdict, "stopped": got.stopped}
    if got.counters_before is None or got.counters_after is None:
        return replace(spec, evidence={**evidence, "counters": "no /metrics"})
    moved = spec_stats(got.counters_before, got.counters_after)
    if moved is None:
        known = any(name in COUNTERS for name in got.counters_after)
        why = "no drafts counted" if known else "no speculative-decoding counters on /metrics"
        counters = {"drafted_tokens": 0.0} if known else None
        return replace(spec, counters=counters, evidence={**evidence, "counters": why})
    counters = moved.as_dict()
    if moved.accepted_tokens > 0 and spec.verdict != "evident":
        note = f"the server's counters: {moved.accepted_tokens:.0f} drafted tokens accepted ({spec.note})"
        return replace(spec, verdict="evident", drafter="unknown", counters=counters, note=note,
                       evidence=evidence)  # fmt: skip
    return replace(spec, counters=counters, evidence=evidence)
