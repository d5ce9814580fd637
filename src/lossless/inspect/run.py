"""``lossless inspect``: InspectOptions -> per endpoint a card of claims told by behaviour -> an
``InspectResult`` (``report/inspect.py`` renders it).

Claims, each with its evidence and a word (`evident`, `not evident`, `inconclusive`):
    1. speculative decoding  (``speculation``: the arms' paired speed and burst ratios; the server's
       own counters beside them)
    2. precision / variant   the nearest reference by teacher-forced log-probabilities (``precision``);
       references are scored once per run, named ones before any card, the default ones (the
       embedded model in float32 and bfloat16) when a card first finds SmolLM2's tokenizer
    3. identity              the tokenizer family from prompt-token counts (``identity``), with the
       declared model, system_fingerprint and the context limit /v1/models declares, where it does;
       with ``measure_context``, the longest prompt answered (``context``), after the timed requests
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

from lossless.analyze.server_side import served_by, spec_stats
from lossless.client import endpoints as ep
from lossless.client.endpoints import Endpoint, api_key, public_url
from lossless.client.http import Session
from lossless.client.prometheus import COUNTERS
from lossless.client.wire import Wire
from lossless.console import phase
from lossless.errors import UsageError
from lossless.inspect import identity, precision, speculation
from lossless.inspect.collect import Collected, Plan, collect
from lossless.inspect.context import ContextLimit, measure as measure_context
from lossless.inspect.identity import Identity
from lossless.inspect.options import REFERENCE_WORDS, InspectOptions, reference_parts
from lossless.inspect.precision import Precision, Scores
from lossless.inspect.speculation import Speculation
from lossless.provision import embedded, given
from lossless.provision.counting import fill_n_out
from lossless.provision.embedded import Embedded
from lossless.records import RequestRecord

NOT_MEASURED = Precision("inconclusive", "not measured (--no-precision)")
DEFAULT_REFERENCES = (("float32", "float32"), ("bfloat16", "bfloat16"))  # (name, word)
CONTEXT_TIMEOUT_S = 180.0  # one long prompt's prefill: 8k tokens took ~150 s on this 2-core CPU
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
    precision: Precision = NOT_MEASURED
    served: dict[str, Any] = field(default_factory=dict)  # model, fingerprint, identifying headers
    context: ContextLimit | None = None  # measured by behaviour (--context); None: not measured
    api: str = "chat"  # the API the identity and speculation requests were made in

    def as_dict(self) -> dict[str, Any]:
        e = self.endpoint
        return {
            "endpoint": {"name": e.name, "base_url": public_url(e.base_url), "model": e.model},
            "api": self.api,
            "speculative_decoding": asdict(self.speculation),
            "precision": self.precision.as_dict(),
            "identity": {
                **asdict(self.identity),
                "context_limit": self.context_limit,
                "context": self.context.as_dict() if self.context else None,
                **self.served,
            },
            "budget": {
                "rounds": self.rounds,
                "requests": self.speculation.evidence.get("requests"),
                "output_tokens": self.output_tokens,
                "stopped": self.stopped,
                "wall_s": round(self.wall_s, 1),
            },
        }


@dataclass(frozen=True)
class InspectResult:
    cards: tuple[Card, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"cards": [c.as_dict() for c in self.cards]}


def run(options: InspectOptions) -> InspectResult:
    """Inspect each URL, or the embedded server started for the occasion; a missing key or an unreadable
    tokenizer fails first, then a URL, model or key that one request shows wrong."""
    named_urls = _named(options)
    named = _references(options)
    refs = identity.references(options.tokenizers)
    plan = Plan(options.max_tokens, options.min_rounds, options.max_rounds, options.budget_s, api=options.api)
    scored: dict[str, Scores] = {}  # references scored so far: once per run, shared by every card
    given.checked([e for _, e in named if isinstance(e, Endpoint)])  # references, whatever --api: chat
    given.checked(named_urls, options.api)
    if options.precision:  # named ones first: an unreachable one fails before any card
        _score_references(named, scored, options)
    cards = []
    with embedded.endpoints(named_urls, options.embedded) as found:
        for e in found:
            one = card(e, plan, refs, options.seed, options.measure_context)
            if options.precision:
                phase(f"inspect {e.name}: precision, against the references")
                start = time.monotonic()
                placed = _precision(e, one.identity, named, scored, options)
                one = replace(one, precision=placed, wall_s=one.wall_s + time.monotonic() - start)
            cards.append(one)
    return InspectResult(tuple(cards))


def _named(options: InspectOptions) -> tuple[Endpoint, ...]:
    if options.endpoints_file is not None:
        if options.urls:
            raise UsageError("give endpoint URLs or --endpoints FILE, not both")
        return ep.load_toml(options.endpoints_file)
    return given.from_urls(options.urls, options.model, options.api_key_env) if options.urls else ()


def _references(options: InspectOptions) -> tuple[tuple[str, str | Endpoint], ...]:
    """--reference as (name, word or Endpoint), keys checked before any request."""
    out: list[tuple[str, str | Endpoint]] = []
    for ref in options.references:
        name, target = reference_parts(ref)
        if target in REFERENCE_WORDS:
            out.append((name or target, target))
            continue
        (endpoint,) = given.from_urls([target], options.model, options.api_key_env)
        api_key(endpoint)
        out.append((name or endpoint.name, replace(endpoint, name=name or endpoint.name)))
    names = [n for n, _ in out]
    if len(set(names)) < len(names):
        raise UsageError(f"--reference: names must differ, got {names} (name them NAME=URL)")
    return tuple(out)


def _score_references(
    named: Sequence[tuple[str, str | Endpoint]], scored: dict[str, Scores], options: InspectOptions
) -> None:
    for name, target in named:
        if name in scored:
            continue
        if isinstance(target, Endpoint):
            scored[name] = asyncio.run(precision.score(target))[0]
            continue
        # the embedded model (or the checkpoint --model names when no URL is given) served as asked
        model = None if options.urls else options.model
        with embedded.serve_embedded(Embedded(model=model, dtype=target)) as served:
            scored[name] = asyncio.run(precision.score(served.endpoints[0]))[0]


def _precision(
    endpoint: Endpoint,
    who: Identity,
    named: Sequence[tuple[str, str | Endpoint]],
    scored: dict[str, Scores],
    options: InspectOptions,
) -> Precision:
    if not named:
        if who.verdict != "evident" or who.family != "smollm2":
            why = "no reference for this tokenizer: name references with --reference"
            return Precision("inconclusive", why)
        named = DEFAULT_REFERENCES
    first, second = asyncio.run(precision.score(endpoint, repeats=2))
    if first.method is None:
        return precision.judge(first, second, {}, options.seed)
    _score_references(named, scored, options)
    return precision.judge(first, second, {n: scored[n] for n, _ in named}, options.seed)


def card(
    endpoint: Endpoint, plan: Plan, refs: Mapping[str, identity.Counts], seed: int = 0, context: bool = False
) -> Card:
    start = time.monotonic()
    listing, measured, got, limit = asyncio.run(_measure(endpoint, plan, context))
    records = _counted(got.records, endpoint, listing)
    spec = _with_counters(speculation.judge(records, seed=seed), got)
    who = identity.judge(measured, refs)
    served = {
        "declared_model": list(measured.models),
        "system_fingerprint": list(measured.fingerprints),
        "headers": served_by(records).headers,
    }
    tokens = sum(r.n_out or 0 for r in records if r.ok)
    return Card(
        endpoint,
        spec,
        who,
        listing.context,
        got.rounds,
        got.stopped,
        tokens,
        time.monotonic() - start,
        served=served,
        context=limit,
        api=plan.api,
    )


async def _measure(
    endpoint: Endpoint, plan: Plan, context: bool
) -> tuple[Listing, identity.Measured, Collected, ContextLimit | None]:
    listing = await _listing(endpoint)
    phase(f"inspect {endpoint.name}: identity (token counts of crafted strings)")
    async with Wire(endpoint, api=plan.api) as w:
        measured = await identity.measure(w)
    phase(f"inspect {endpoint.name}: speculative decoding, {plan.min_rounds}-{plan.max_rounds} rounds")

    def settled(records: Sequence[RequestRecord]) -> bool:
        return speculation.settled(_counted(records, endpoint, listing))

    got = await collect(endpoint, plan, settled)
    if not context:
        return listing, measured, got, None
    # after the timed requests: a long prefill must not land among them
    phase(f"inspect {endpoint.name}: the context limit, by behaviour")
    async with Wire(endpoint, timeout_s=CONTEXT_TIMEOUT_S, api=plan.api) as w:
        return listing, measured, got, await measure_context(w, listing.context)


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
        return replace(
            spec, verdict="evident", drafter="unknown", counters=counters, note=note, evidence=evidence
        )
    return replace(spec, counters=counters, evidence=evidence)
