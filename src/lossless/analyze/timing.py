"""One record -> its times (``Timing``), and the objectives (SLOs) a request's times may meet.

Per request (successful attempts only):
    TTFB = headers - sent; TTFT = first content/reasoning/tool event - sent; TTFC = first content event - sent
    TPOT = (last token event - first token event) / (N_out - tokens in the first event); speed = 1/TPOT
    E2E = end - sent; queue delay = sent - scheduled; latency from schedule = end - scheduled
    a new connection's DNS lookup, TCP connect and TLS handshake, as the client timed them
Gaps between token events are inter-chunk latencies; they become per-token ITL only when the server says
how many tokens each chunk holds (cumulative usage per chunk).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from lossless.errors import UsageError
from lossless.records import CONTENT, TOKEN_KINDS, RequestRecord

SLO_METRICS = ("ttft", "tpot", "e2e", "ttfb")


@dataclass(frozen=True)
class Timing:
    """What one successful record says, in ms (None where undefined)."""

    ttfb: float | None
    ttft: float | None
    ttfc: float | None
    tpot: float | None
    e2e: float
    queue: float
    from_schedule: float
    gaps: tuple[float, ...]  # inter-chunk gaps between token events
    itl: tuple[float, ...]  # per-token gaps, only when per-chunk token counts are known
    n_out: int | None  # output tokens, as the record counted them
    connection: str | None = None  # "new", "reused" or None (not known)
    dns: float | None = None  # a new connection's phases (None: cached lookup, plain HTTP, reused)
    connect: float | None = None
    tls: float | None = None

    @property
    def speed(self) -> float | None:
        """Output speed in tokens/s: 1/TPOT."""
        return 1000.0 / self.tpot if self.tpot else None


def timing(r: RequestRecord) -> Timing:
    ms = 1e-6
    token_idx = [i for i, k in enumerate(r.event_kinds) if k in TOKEN_KINDS]
    t_tok = [r.event_ns[i] for i in token_idx]
    content = next((r.event_ns[i] for i, k in enumerate(r.event_kinds) if k == CONTENT), None)
    assert r.end_ns is not None
    gaps = tuple((b - a) * ms for a, b in itertools.pairwise(t_tok))
    counts = [r.event_tokens[i] for i in token_idx]
    known = bool(counts) and all(c >= 0 for c in counts)
    first_tokens = counts[0] if known else 1
    tpot = None
    if r.n_out is not None and len(t_tok) >= 2 and r.n_out - first_tokens > 0:
        tpot = (t_tok[-1] - t_tok[0]) * ms / (r.n_out - first_tokens)
    itl: tuple[float, ...] = ()
    if known:
        per_chunk = [b - a for a, b in itertools.pairwise(counts)]
        itl = tuple(g / n for g, n in zip(gaps, per_chunk, strict=True) for _ in range(n) if n > 0)
    return Timing(
        ttfb=None if r.headers_ns is None else (r.headers_ns - r.sent_ns) * ms,
        ttft=(t_tok[0] - r.sent_ns) * ms if t_tok else None,
        ttfc=None if content is None else (content - r.sent_ns) * ms,
        tpot=tpot,
        e2e=(r.end_ns - r.sent_ns) * ms,
        queue=(r.sent_ns - r.scheduled_ns) * ms,
        from_schedule=(r.end_ns - r.scheduled_ns) * ms,
        gaps=gaps,
        itl=itl,
        n_out=r.n_out,
        connection=r.connection,
        dns=None if r.dns_ns is None else r.dns_ns * ms,
        connect=None if r.connect_ns is None else r.connect_ns * ms,
        tls=None if r.tls_ns is None else r.tls_ns * ms,
    )


def parse_slo(text: str | None) -> dict[str, float]:
    """``ttft=500,tpot=50ms,e2e=5s`` -> {"ttft": 500.0, "tpot": 50.0, "e2e": 5000.0} (milliseconds)."""
    if not text:
        return {}
    slo: dict[str, float] = {}
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\w+)\s*=\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*", part)
        if not m or m.group(1) not in SLO_METRICS:
            raise UsageError(
                f"bad --slo item {part.strip()!r}: expected NAME=VALUE[ms|s], NAME in {SLO_METRICS}"
            )
        slo[m.group(1)] = float(m.group(2)) * (1000.0 if m.group(3) == "s" else 1.0)
    return slo


def meets(t: Timing, slo: Mapping[str, float]) -> bool:
    # An undefined value (no TPOT for a one-token answer) does not fail its objective.
    return all((v := getattr(t, name)) is None or v <= limit for name, limit in slo.items())
