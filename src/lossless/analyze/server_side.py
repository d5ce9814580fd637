"""What the server says about itself: timing headers, draft counters from /metrics, who served; the
summary's parts that hold it (``ServedBy``, ``Speculative``, ``ServerMetrics``) are defined here, where
they are made."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lossless.analyze.shapes import (
    counts_ as _counts,
    num_ as _num,
    obj_ as _obj,
    opt_ as _opt,
    plain_ as _plain,
)
from lossless.records import IDENTITY_HEADERS, RequestRecord

Counts = Mapping[str, int]  # a value -> how many requests had it (``tally``)

# Of a body's "timings" object (llama.cpp's server), its own ms of prompt and of decode.
BODY_TIMINGS = ("prompt_ms", "predicted_ms")


@dataclass(frozen=True)
class ServedBy:
    """Who answered: each distinct value with how many requests gave it."""

    model: Counts
    system_fingerprint: Counts
    headers: Mapping[str, Counts]  # identifying header -> its values

    @classmethod
    def from_dict(cls, d: object) -> ServedBy:
        d = _obj(d)
        headers = {k: _counts(v, k) for k, v in _obj(d.get("headers", {})).items()}
        return cls(
            _counts(d.get("model", {}), "model"),
            _counts(d.get("system_fingerprint", {}), "system_fingerprint"),
            headers,
        )


@dataclass(frozen=True)
class Speculative:
    """From the server's /metrics over the run: acceptance rate = accepted / drafted tokens; mean
    accepted length = tokens per verify step (vLLM's: accepted / steps + 1)."""

    drafted_tokens: float
    accepted_tokens: float
    acceptance_rate: float
    mean_accepted_length: float | None = None  # None when the server counts no steps

    def as_dict(self) -> dict[str, float]:
        return {k: v for k, v in _plain(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: object) -> Speculative:
        d = _obj(d)
        nums = {k: _num(d[k], k) for k in ("drafted_tokens", "accepted_tokens", "acceptance_rate")}
        return cls(**nums, mean_accepted_length=_opt(d.get("mean_accepted_length"), "mean_accepted_length"))


@dataclass(frozen=True)
class ServerMetrics:
    """The server's /metrics over the run: each counter's change, each histogram's mean (its own view of
    its latencies and token counts, e.g. vLLM's time to first token), by the names it exports."""

    counters: Mapping[str, float]
    means: Mapping[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {"counters": dict(self.counters), "means": dict(self.means)}

    @classmethod
    def from_dict(cls, d: object) -> ServerMetrics:
        d = _obj(d)
        nums = {
            part: {k: _num(v, k) for k, v in _obj(d.get(part, {})).items()} for part in ("counters", "means")
        }
        return cls(nums["counters"], nums["means"])


def server_times(
    headers: Iterable[tuple[str, str]], body: Iterable[tuple[str, float]] = ()
) -> dict[str, float]:
    """Server-side timing headers in ms: envoy and OpenAI give ms; server-timing a dur= per metric; and the
    answer's own "timings" object (``body``), as ``timings:NAME``."""
    out: dict[str, float] = {f"timings:{k}": v for k, v in body if k in BODY_TIMINGS}
    for name, value in headers:
        if name in ("x-envoy-upstream-service-time", "openai-processing-ms"):
            try:
                out[name] = float(value)
            except ValueError:
                continue
        elif name == "server-timing":
            for entry in value.split(","):
                metric, _, params = entry.strip().partition(";")
                m = re.search(r"dur=([0-9.]+)", params)
                if metric and m:
                    out[f"server-timing:{metric.strip()}"] = float(m.group(1))
    return out


def spec_stats(before: Mapping[str, float], after: Mapping[str, float]) -> Speculative | None:
    """The draft counters' change over the run (vLLM's, SGLang's, llama.cpp's or ours), or None if none
    moved. The three peers share names (llama.cpp's end in ``_total``, which the reader drops)."""
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    for prefix in ("vllm:spec_decode_", "sglang:spec_decode_", "llamacpp:spec_decode_"):
        drafted, accepted = d.get(prefix + "num_draft_tokens"), d.get(prefix + "num_accepted_tokens")
        steps = d.get(prefix + "num_drafts")
        if drafted:
            return _spec(drafted, accepted or 0.0, steps)
    drafted = d.get("lossless_spec_drafted_tokens_total")
    if drafted:
        steps = d.get("lossless_spec_verify_steps_total") or d.get("lossless_spec_steps_total")
        return _spec(drafted, d.get("lossless_spec_accepted_tokens_total", 0.0), steps)
    return None


def metrics_moved(before: Mapping[str, float], after: Mapping[str, float]) -> ServerMetrics | None:
    """What the server's /metrics say of the run: each counter's change (those that moved), and each
    histogram's mean over the run (its ``_sum`` change over its ``_count`` change): the server's own view
    of its latencies beside ours. None when nothing moved (no /metrics, or no counters on it)."""
    changes = {k: v - before.get(k, 0.0) for k, v in after.items()}
    moved = {k: d for k, d in changes.items() if d > 0}
    means = {}
    for name, count in moved.items():
        if name.endswith("_count") and (total := moved.get(name[: -len("_count")] + "_sum")) is not None:
            means[name[: -len("_count")]] = total / count
    counters = {k: v for k, v in moved.items() if not k.endswith(("_sum", "_count"))}
    return ServerMetrics(counters, means) if counters or means else None


def _spec(drafted: float, accepted: float, steps: float | None) -> Speculative:
    return Speculative(drafted, accepted, accepted / drafted, 1.0 + accepted / steps if steps else None)


def served_by(records: Iterable[RequestRecord]) -> ServedBy:
    """The distinct answers to "who served it", with how many requests gave each: the response's model
    and system_fingerprint, and each identifying header. One value each is one deployment, as far as
    the server lets it show; several say the URL led to more than one."""
    answered = [r for r in records if r.status == 200]
    headers: dict[str, list[str]] = {}
    for r in answered:
        for name, value in r.server_headers:
            if name in IDENTITY_HEADERS:
                headers.setdefault(name, []).append(value)
    return ServedBy(
        model=tally(r.served_model for r in answered if r.served_model is not None),
        system_fingerprint=tally(r.system_fingerprint for r in answered if r.system_fingerprint is not None),
        headers={name: tally(values) for name, values in sorted(headers.items())},
    )


def tally(items: Iterable[str]) -> dict[str, int]:
    """Each distinct item -> how often it came, in the order each first came."""
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out
