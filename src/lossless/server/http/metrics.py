"""What the server exposes on ``/metrics``, in the Prometheus text format (version 0.0.4).

A few hand-written metric types instead of ``prometheus_client``: the server needs counters, one gauge
and histograms, and keeping them here keeps the server's dependencies to starlette and uvicorn. The
worker thread and the event loop both update them, so every metric takes a lock.

Speculative decoding figures come from the ``stats`` of a request's last ``Delta`` and are summed over
requests: ``drafted`` and ``accepted`` token counts, and ``accept_counts`` where ``accept_counts[i]`` is
the number of verify steps that accepted exactly ``i`` drafted tokens.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Time to first token spans queueing and prefill: milliseconds on a quiet server, seconds under load.
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# One decode step of a 135M model on a CPU takes ~30 ms; speculative steps split a step over its tokens.
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # sequences in one batched step


@dataclass(frozen=True)
class ServingLoad:
    """What the engine holds now, as the worker last saw it (read by /metrics from another thread)."""

    running: int = 0  # requests generating (in the batch, or the one job of the one-at-a-time worker)
    slots: int = 1  # KV cache slots: sequences that may run at once (--max-batch)
    slots_used: int = 0
    kv_positions: int | None = None  # positions held in the slots' KV caches; None: not tracked


def _reading(value: float) -> Callable[[], Mapping[tuple[str, ...], float]]:
    return lambda: {(): float(value)}


def _labels(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    return "{" + ",".join(parts) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x)) if not float(x).is_integer() else str(int(x))


class Counter:
    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        self.name, self.help, self.labelnames = name, help_text, tuple(labelnames)
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0, *labels: str) -> None:
        with self._lock:
            self._values[labels] = self._values.get(labels, 0.0) + amount

    def value(self, *labels: str) -> float:
        with self._lock:
            return self._values.get(labels, 0.0)

    def values(self) -> dict[tuple[str, ...], float]:
        with self._lock:
            return dict(self._values)

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} counter"
        values = self.values()
        if not values and not self.labelnames:
            values = {(): 0.0}
        for labels, v in sorted(values.items()):
            yield f"{self.name}{_labels(self.labelnames, labels)} {_num(v)}"


class Gauge:
    """A value read when scraped (queue length, ratios derived from counters)."""

    def __init__(
        self,
        name: str,
        help_text: str,
        read: Callable[[], Mapping[tuple[str, ...], float]],
        labelnames: Sequence[str] = (),
    ) -> None:
        self.name, self.help, self.read, self.labelnames = name, help_text, read, tuple(labelnames)

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} gauge"
        for labels, v in sorted(self.read().items()):
            yield f"{self.name}{_labels(self.labelnames, labels)} {_num(v)}"


class Histogram:
    def __init__(self, name: str, help_text: str, buckets: Sequence[float]) -> None:
        self.name, self.help = name, help_text
        self.bounds = (*sorted(buckets), math.inf)
        self._counts = [0] * len(self.bounds)  # per bucket, not cumulative; summed when rendered
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float, count: int = 1) -> None:
        """Record ``value`` ``count`` times (a speculative step's tokens share one gap)."""
        i = next(i for i, bound in enumerate(self.bounds) if value <= bound)
        with self._lock:
            self._counts[i] += count
            self._sum += value * count

    @property
    def count(self) -> int:
        with self._lock:
            return sum(self._counts)

    def render(self) -> Iterable[str]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        cumulative = 0
        for bound, c in zip(self.bounds, counts, strict=True):
            cumulative += c
            yield f'{self.name}_bucket{{le="{_num(bound)}"}} {cumulative}'
        yield f"{self.name}_sum {_num(total)}"
        yield f"{self.name}_count {cumulative}"


class ExportedMetrics:
    """Every metric the server exports; ``queue_length`` is read from the worker when scraped."""

    def __init__(self) -> None:
        self.requests = Counter(
            "lossless_requests_total", "HTTP requests by endpoint and status code.", ("endpoint", "status")
        )
        self.prompt_tokens = Counter("lossless_prompt_tokens_total", "Prompt tokens of admitted requests.")
        self.generation_tokens = Counter("lossless_generation_tokens_total", "Tokens generated.")
        self.cancelled = Counter(
            "lossless_requests_cancelled_total", "Generations stopped because the client went away."
        )
        self.queue_wait = Histogram(
            "lossless_queue_wait_seconds", "Time from admission to the worker picking up.", QUEUE_BUCKETS
        )
        self.ttft = Histogram(
            "lossless_time_to_first_token_seconds", "Admission to first generated token.", TTFT_BUCKETS
        )
        self.itl = Histogram(
            "lossless_time_per_output_token_seconds",
            "Inter-token latency after the first token, one observation per token.",
            ITL_BUCKETS,
        )
        self.drafted = Counter("lossless_spec_drafted_tokens_total", "Speculative tokens drafted.")
        self.accepted = Counter("lossless_spec_accepted_tokens_total", "Drafted tokens the target accepted.")
        self.steps = Counter(
            "lossless_spec_verify_steps_total",
            "Verify steps by how many drafted tokens they accepted.",
            ("accepted",),
        )
        self.batch_size = Histogram(
            "lossless_batch_size", "Sequences in each step of the continuous batch.", BATCH_BUCKETS
        )
        self.queue_length: Callable[[], int] = lambda: 0  # the worker plugs its queue in here
        self.load: Callable[[], ServingLoad] = ServingLoad  # and what it holds

    def record_spec_stats(self, stats: Mapping[str, Any]) -> None:
        """Add one request's speculative figures; keys that are absent (plain decoding) are skipped."""
        if "drafted" in stats:
            self.drafted.inc(float(stats["drafted"]))
        if "accepted" in stats:
            self.accepted.inc(float(stats["accepted"]))
        for accepted, steps in enumerate(stats.get("accept_counts") or ()):
            if steps:
                self.steps.inc(float(steps), str(accepted))

    def _step_histogram(self) -> dict[int, float]:
        return {int(labels[0]): v for labels, v in self.steps.values().items()}

    def _acceptance_by_position(self) -> dict[tuple[str, ...], float]:
        # P(a step accepts at least k drafted tokens), over all steps: with an adaptive draft length
        # some steps drafted fewer than k tokens, so this is a lower bound on the conditional rate.
        hist = self._step_histogram()
        steps = sum(hist.values())
        if not steps:
            return {}
        top = max(hist)
        return {(str(k),): sum(c for i, c in hist.items() if i >= k) / steps for k in range(1, top + 1)}

    def _mean_accepted_length(self) -> dict[tuple[str, ...], float]:
        hist = self._step_histogram()
        steps = sum(hist.values())
        return {(): sum(i * c for i, c in hist.items()) / steps} if steps else {}

    def _acceptance_rate(self) -> dict[tuple[str, ...], float]:
        drafted = self.drafted.value()
        return {(): self.accepted.value() / drafted} if drafted else {}

    def _load_gauges(self) -> tuple[Gauge, ...]:
        load = self.load()
        figures = (
            ("lossless_requests_running", "Requests generating now.", load.running),
            ("lossless_kv_slots", "KV cache slots: requests that may generate at once.", load.slots),
            ("lossless_kv_slots_used", "KV cache slots holding a request.", load.slots_used),
            ("lossless_kv_positions_used", "Token positions held in the KV cache slots.", load.kv_positions),
        )
        return tuple(Gauge(name, text, _reading(value)) for name, text, value in figures if value is not None)

    def render(self) -> str:
        gauges = (
            Gauge(
                "lossless_queue_length",
                "Requests waiting for the worker.",
                lambda: {(): float(self.queue_length())},
            ),
            *self._load_gauges(),
            Gauge("lossless_spec_acceptance_rate", "Accepted / drafted tokens.", self._acceptance_rate),
            Gauge(
                "lossless_spec_mean_accepted_length",
                "Drafted tokens accepted per verify step (tokens emitted per step: this + 1 bonus).",
                self._mean_accepted_length,
            ),
            Gauge(
                "lossless_spec_acceptance_by_position",
                "Share of verify steps that accepted at least `position` drafted tokens.",
                self._acceptance_by_position,
                ("position",),
            ),
        )
        metrics: tuple[Counter | Histogram | Gauge, ...] = (
            self.requests,
            self.prompt_tokens,
            self.generation_tokens,
            self.cancelled,
            self.queue_wait,
            self.ttft,
            self.itl,
            self.drafted,
            self.accepted,
            self.steps,
            self.batch_size,
            *gauges,
        )
        return "\n".join(line for m in metrics for line in m.render()) + "\n"
