"""What a run made under a policy measured (``bench --hedge-after``, ``--failover``): each request's latency
from its first attempt's send to its first answer, over all requests, as ``simulate`` predicts it, so a
prediction from a plain run can be checked against the policy's own run.

A request is its attempts (one ``request_index`` and turn at one load); the endpoint it is counted under
is its first attempt's (a failover's second attempt goes to another). Its outcome is the attempt bench
marked final (``retried`` false); a request whose outcome failed, or that the run's end cut, never
answered (inf: it counts in the percentiles as "no answer", as in the predictions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lossless.advise.result import Executed
from lossless.advise.simulate import QUANTILES
from lossless.records import RequestRecord


def executed(records: Sequence[RequestRecord], policy: Mapping[str, Any]) -> list[Executed]:
    """Per endpoint (of the first attempts) and load: the requests' measured latency percentiles.
    ``policy``: summary.json's ``config.policy``."""
    backup, hedge = policy.get("failover"), policy.get("hedge_after_ms")
    requests: dict[tuple[str, int, int | None], list[RequestRecord]] = {}
    for r in records:
        if r.measured:
            requests.setdefault((r.load, r.request_index, r.turn), []).append(r)
    groups: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for (load, _, _), attempts in requests.items():
        by_endpoint: dict[str, list[RequestRecord]] = {}
        first = min(attempts, key=lambda r: r.attempt).endpoint if backup is not None else None
        for r in attempts:  # a failover's attempts are one request; a hedge's, one per endpoint
            by_endpoint.setdefault(first or r.endpoint, []).append(r)
        for endpoint, mine in by_endpoint.items():
            groups.setdefault((endpoint, load), []).append((_latency(mine), len(mine)))
    out = []
    for (endpoint, load), found in groups.items():
        latency = np.array([t for t, _ in found])
        qs = np.quantile(latency, list(QUANTILES.values()), method="inverted_cdf")
        kind, chain, delay = (
            ("hedge", (endpoint,), hedge)
            if hedge is not None
            else ("failover", (endpoint, str(backup)), policy.get("failover_after_ms"))
        )
        label = (
            f"{endpoint}, hedged after {delay:g} ms"
            if kind == "hedge"
            else chain_label(chain, math.inf if delay is None else delay)
        )
        out.append(
            Executed(
                endpoint,
                load,
                kind,
                chain,
                delay,
                label,
                len(found),
                {name: float(q) if np.isfinite(q) else None for name, q in zip(QUANTILES, qs, strict=True)},
                float(np.mean(~np.isfinite(latency))),
                float(np.mean([n for _, n in found])),
            )
        )
    return out


def chain_label(chain: Sequence[str], delay: float) -> str:
    """A failover chain in words; ``delay`` inf: on errors only."""
    errors = "on 429/5xx/network errors"
    when = errors if math.isinf(delay) else f"{delay:g} ms without a first token or {errors}"
    return ", then ".join(chain) + f" ({when})"


def _latency(attempts: Sequence[RequestRecord]) -> float:
    """ms from the first send to the outcome's end; inf when the outcome is no answer."""
    final = [r for r in attempts if not r.retried]
    outcome = max(final, key=lambda r: r.attempt) if final else None
    if outcome is None or not outcome.ok or outcome.end_ns is None:
        return float("inf")
    return (outcome.end_ns - min(r.sent_ns for r in attempts)) / 1e6
