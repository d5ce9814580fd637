"""What ``lossless advise`` returns: frozen, typed, complete when made; ``as_dict`` is the JSON edge.

Times are in ms. A latency of inf means "no answer": more simulated requests failed than the percentile
leaves room for; the JSON writer (``rundir.strict_json``) writes it as null.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Estimate:
    """A predicted number and, when resampling gave one, its bootstrap 95% interval."""

    value: float
    lo: float | None = None
    hi: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "ci95": None if self.lo is None else [self.lo, self.hi]}


@dataclass(frozen=True)
class Prediction:
    """One policy, simulated from the measured attempts of its endpoints at one load level."""

    policy: str  # "single" (one attempt, the baseline) | "hedge" | "failover"
    load: str  # the records' load level label, e.g. "c=4"
    endpoints: tuple[str, ...]  # the endpoint; for failover the chain, first choice first
    delay_ms: float | None  # hedge: when the 2nd attempt goes out; failover: wait for a first token
    label: str  # the policy in words, e.g. "a, then b after 300 ms without a first token or on 429/5xx"
    p50: Estimate  # ms to a successful answer, over all requests (inf: no answer)
    p95: Estimate
    p99: Estimate
    error_rate: Estimate  # share of requests that got no answer
    attempts_per_request: Estimate  # requests sent for one: 1 + the extra load
    attempts_per_success: Estimate
    usd_per_success: Estimate | None  # None: no prices in the runs' summary.json
    assumptions: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        stats = ("p50", "p95", "p99", "error_rate", "attempts_per_request", "attempts_per_success")
        out: dict[str, Any] = {
            "policy": self.policy,
            "load": self.load,
            "endpoints": list(self.endpoints),
            "delay_ms": self.delay_ms,
            "label": self.label,
        }
        out |= {name: getattr(self, name).as_dict() for name in stats}
        out["extra_requests"] = self.attempts_per_request.value - 1.0
        out["usd_per_success"] = None if self.usd_per_success is None else self.usd_per_success.as_dict()
        return out | {"assumptions": list(self.assumptions)}


@dataclass(frozen=True)
class Timeout:
    """A recommended time-out for one phase of a request, and what it would have done to the records."""

    phase: str  # "connect" | "first_token" | "total"
    timeout_ms: Estimate | None  # rounded up, as is its interval. None: no attempt got there
    rule: str  # how it was chosen, in words
    cut: Estimate  # share of attempts that got there later: the time-out would have cut them
    saved: Estimate  # share of attempts that failed anyway after it: it ends their wait sooner
    wait_saved_ms: float  # mean wait it takes off each of those
    reached: int  # attempts that got there (the rule's sample)
    censored: int  # attempts that bench's own time-out of this phase ended: their times are longer

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "timeout_ms": None if self.timeout_ms is None else self.timeout_ms.as_dict(),
            "rule": self.rule,
            "cut": self.cut.as_dict(),
            "saved": self.saved.as_dict(),
            "wait_saved_ms": self.wait_saved_ms,
            "reached": self.reached,
            "censored": self.censored,
        }


@dataclass(frozen=True)
class GroupAdvice:
    """One endpoint at one load level: its attempts, time-outs and hedging trade-off."""

    endpoint: str
    load: str
    attempts: int  # measured attempts (warm-up and cancelled ones apart)
    ok: int
    errors: Mapping[str, int]  # error kind -> attempts
    timeouts: tuple[Timeout, ...]
    hedging: tuple[Prediction, ...]  # the single attempt first, then each hedge delay

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "load": self.load,
            "attempts": self.attempts,
            "ok": self.ok,
            "errors": dict(self.errors),
            "timeouts": [t.as_dict() for t in self.timeouts],
            "hedging": [p.as_dict() for p in self.hedging],
        }


@dataclass(frozen=True)
class Executed:
    """A policy bench executed (--hedge-after, --failover), measured request by request."""

    endpoint: str  # the first attempts' endpoint
    load: str
    policy: str  # "hedge" | "failover"
    chain: tuple[str, ...]  # the endpoints it sends to, in order
    delay_ms: float | None  # the hedge delay, or the wait for a first token before failing over
    label: str  # in words
    requests: int
    latency_ms: Mapping[str, float | None]  # p50, p95, p99; None: no answer at that percentile
    error_rate: float
    attempts_per_request: float
    predicted: Prediction | None = None  # the same policy, simulated from plain runs given with it

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "load": self.load,
            "policy": self.policy,
            "label": self.label,
            "chain": list(self.chain),
            "delay_ms": self.delay_ms,
            "requests": self.requests,
            **dict(self.latency_ms),
            "error_rate": self.error_rate,
            "attempts_per_request": self.attempts_per_request,
            "predicted": None if self.predicted is None else self.predicted.as_dict(),
        }


@dataclass(frozen=True)
class AdviseResult:
    runs: tuple[str, ...]  # the RUN_DIRs read
    groups: tuple[GroupAdvice, ...]
    failover: tuple[Prediction, ...]  # per load level with two or more endpoints
    assumptions: tuple[str, ...]  # what every prediction assumes
    settings: Mapping[str, Any]  # draws, resamples, seed, the time-out rule
    notes: tuple[str, ...] = field(default=())  # what reading the runs found
    executed: tuple[Executed, ...] = field(default=())  # runs made under a policy: what it measured

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": list(self.runs),
            "settings": dict(self.settings),
            "assumptions": list(self.assumptions),
            "groups": [g.as_dict() for g in self.groups],
            "failover": [p.as_dict() for p in self.failover],
            "notes": list(self.notes),
            "executed": [e.as_dict() for e in self.executed],
        }
