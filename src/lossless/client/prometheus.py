"""A server's Prometheus ``/metrics``, read before and after a run: its speculative-decoding counters, and
(``scrape_all``, for bench's summary) every counter and histogram it exports, whatever their names.

A server without ``/metrics`` or without these counters is normal: the result is then ``None`` or a
partial dict, and the summary says nothing about acceptance. So is a ``/metrics`` that answers 200 with
something else (a gateway's catch-all JSON route, an HTML page): lines that are not samples are skipped,
and so are values that are not finite numbers (a NaN counter says nothing).
"""

from __future__ import annotations

import math
import re

from lossless.client.http import Session

# vLLM (colons), SGLang- and llama.cpp-style names (llama.cpp's with _total), and our own server's.
COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "sglang:spec_decode_num_drafts",
    "sglang:spec_decode_num_draft_tokens",
    "sglang:spec_decode_num_accepted_tokens",
    "llamacpp:spec_decode_num_drafts",
    "llamacpp:spec_decode_num_draft_tokens",
    "llamacpp:spec_decode_num_accepted_tokens",
    "lossless_spec_drafted_tokens_total",
    "lossless_spec_accepted_tokens_total",
    "lossless_spec_steps_total",
    "lossless_spec_verify_steps_total",  # what our server exports (by accepted count: summed here)
)
# name{labels} value [timestamp], in the text exposition format
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)(?:\s+\S+)?")


def metrics_url(base_url: str) -> str:
    root = base_url.rstrip("/")
    return (root[:-3] if root.endswith("/v1") else root) + "/metrics"


def _samples(text: str) -> tuple[list[tuple[str, float]], dict[str, str]]:
    """Every sample with a finite value, as (name, value), and each family's declared type (``# TYPE``).
    Lines that are not samples (blank, comments, a gateway's HTML) are skipped."""
    samples: list[tuple[str, float]] = []
    kinds: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE ") and len(parts := line.split()) == 4:
            kinds[parts[2]] = parts[3]
        m = _SAMPLE.fullmatch(line.strip())
        if m is None:
            continue
        try:
            value = float(m.group(2))
        except ValueError:
            continue
        if math.isfinite(value):
            samples.append((m.group(1), value))
    return samples, kinds


def parse_counters(text: str) -> dict[str, float]:
    """Sum each known counter over its label sets; ``_total`` suffixes of counters are accepted."""
    out: dict[str, float] = {}
    for name, value in _samples(text)[0]:
        if name.endswith("_total") and name not in COUNTERS:
            name = name[: -len("_total")]
        if name in COUNTERS:
            out[name] = out.get(name, 0.0) + value
    return out


def parse_all(text: str) -> dict[str, float]:
    """Every sample of a metric declared a counter (``# TYPE x counter``), and the ``_sum`` and ``_count``
    of each histogram and summary, each summed over its label sets, by its exposed name."""
    samples, kinds = _samples(text)
    out: dict[str, float] = {}
    for name, value in samples:
        kept = kinds.get(name) == "counter" or kinds.get(name.removesuffix("_total")) == "counter"
        for suffix in ("_sum", "_count"):
            if name.endswith(suffix) and kinds.get(name[: -len(suffix)]) in ("histogram", "summary"):
                kept = True
        if kept:
            out[name] = out.get(name, 0.0) + value
    return out


async def scrape(session: Session, base_url: str, timeout: float = 2.0) -> dict[str, float] | None:
    text = await session.get_text(metrics_url(base_url), timeout)
    return None if text is None else parse_counters(text)


async def scrape_all(session: Session, base_url: str, timeout: float = 2.0) -> dict[str, float] | None:
    """The speculative counters (``parse_counters``' names) and every other counter and histogram."""
    text = await session.get_text(metrics_url(base_url), timeout)
    return None if text is None else parse_all(text) | parse_counters(text)
