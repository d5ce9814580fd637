"""Speculative-decoding counters from a server's Prometheus ``/metrics``, read before and after a run.

A server without ``/metrics`` or without these counters is normal: the result is then ``None`` or a
partial dict, and the summary says nothing about acceptance.
"""

from __future__ import annotations

from lossless.client.http import Session

# vLLM (colons) and SGLang-style names, and our own server's.
COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "sglang:spec_decode_num_drafts",
    "sglang:spec_decode_num_draft_tokens",
    "sglang:spec_decode_num_accepted_tokens",
    "lossless_spec_drafted_tokens_total",
    "lossless_spec_accepted_tokens_total",
    "lossless_spec_steps_total",
)


def metrics_url(base_url: str) -> str:
    root = base_url.rstrip("/")
    return (root[:-3] if root.endswith("/v1") else root) + "/metrics"


def parse_counters(text: str) -> dict[str, float]:
    """Sum each known counter over its label sets; ``_total`` suffixes of counters are accepted."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        # name{labels} value [timestamp]
        name = line.split("{", 1)[0].split()[0]
        rest = (line.rsplit("}", 1)[1] if "{" in line else line[len(name) :]).split()
        if not rest:
            continue
        value = rest[0]
        if name.endswith("_total") and name not in COUNTERS:
            name = name[: -len("_total")]
        if name in COUNTERS:
            try:
                out[name] = out.get(name, 0.0) + float(value)
            except ValueError:
                continue
    return out


async def scrape(session: Session, base_url: str, timeout: float = 2.0) -> dict[str, float] | None:
    text = await session.get_text(metrics_url(base_url), timeout)
    return None if text is None else parse_counters(text)
