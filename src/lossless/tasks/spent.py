"""What one task has spent on one endpoint (model calls, tokens, time by part, USD), and what one model
call took and cost: the agent loop (``runner.py``) adds each call here, and the whole becomes the task's
``TaskRun``.

A call's time to first token and speed are derived as bench derives them (``analyze.timing`` over the
call as a ``RequestRecord``); its output tokens are the usage's, or the answer's whole text through the
endpoint's tokenizer when the server reports none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lossless.analyze.timing import timing
from lossless.client.endpoints import Endpoint
from lossless.client.openai import cached_tokens
from lossless.client.turn import Turn
from lossless.provision.counting import TokenCounter
from lossless.records import RequestRecord
from lossless.tasks.checkers import CheckResult
from lossless.tasks.result import ModelCall, TaskRun
from lossless.tasks.task import Task

Counter = tuple[str, TokenCounter]  # (tokenizer's name, counter) for answers without usage

_PARTS = ("model", "ttft", "generation", "tool", "retry", "check")  # where a task's time went


@dataclass(frozen=True)
class Prices:
    """USD: per million tokens (as endpoints files give them), and per tool call."""

    input: float | None = None
    output: float | None = None
    cached_input: float | None = None  # None: at the input price
    tool: float | None = None

    @property
    def any(self) -> bool:
        return any(p is not None for p in (self.input, self.output, self.cached_input, self.tool))

    def call(self, n_in: int | None, n_out: int | None, n_cached: int | None) -> float:
        cached = min(n_cached or 0, n_in or 0)
        cached_price = self.cached_input if self.cached_input is not None else self.input
        total = ((n_in or 0) - cached) * (self.input or 0.0) + cached * (cached_price or 0.0)
        return (total + (n_out or 0) * (self.output or 0.0)) / 1e6


def prices_of(endpoint: Endpoint, tool: float | None) -> Prices:
    return Prices(endpoint.price_in, endpoint.price_out, endpoint.price_cached_in, tool)


@dataclass
class Spent:
    """What one task has spent so far; becomes its TaskRun."""

    prices: Prices
    counter: Counter | None = None
    calls: list[ModelCall] = field(default_factory=list)
    attempts: int = 0
    steps: int = 0  # answered model calls, all attempts
    step_in_attempt: int = 0
    tokens_in_attempt: int = 0
    retries: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    invalid_arguments: int = 0
    schema_invalid: int = 0
    parts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_PARTS, 0.0))
    retry_cost: float = 0.0

    def add(self, call: ModelCall) -> None:
        self.calls.append(call)
        if call.error_kind is None:
            self.parts["model"] += call.e2e_s
            self.parts["ttft"] += call.ttft_s or 0.0
            self.parts["generation"] += call.generation_s or 0.0
        else:
            self.parts["retry"] += call.e2e_s
            self.retry_cost += call.cost_usd or 0.0

    def run(
        self, endpoint: str, task: Task, sample: int, task_s: float, end: str, verdict: CheckResult | None
    ) -> TaskRun:
        answered = [c for c in self.calls if c.error_kind is None]
        cached = [c.n_cached for c in self.calls if c.n_cached is not None]
        tool_cost = self.tool_calls * (self.prices.tool or 0.0)
        inference = sum(c.cost_usd or 0.0 for c in self.calls)
        priced = self.prices.any
        reason = verdict.reason if verdict is not None else _END_WORDS[end]
        return TaskRun(
            endpoint=endpoint,
            task=task.id,
            sample=sample,
            success=bool(verdict and verdict.passed),
            end=end,
            reason=reason,
            attempts=self.attempts,
            steps=self.steps,
            retries=self.retries,
            tool_calls=self.tool_calls,
            tool_errors=self.tool_errors,
            invalid_arguments=self.invalid_arguments,
            schema_invalid=self.schema_invalid,
            prompt_tokens=sum(c.n_in or 0 for c in self.calls),
            completion_tokens=sum(c.n_out or 0 for c in self.calls),
            cached_tokens=sum(cached) if cached else None,
            usage_missing=sum(1 for c in answered if c.n_in is None and c.n_out_source != "usage"),
            task_s=task_s,
            model_s=self.parts["model"],
            ttft_s=self.parts["ttft"],
            generation_s=self.parts["generation"],
            tool_s=self.parts["tool"],
            retry_s=self.parts["retry"],
            check_s=self.parts["check"],
            cost_usd=inference + tool_cost if priced else None,
            retry_cost_usd=self.retry_cost if priced else None,
            tool_cost_usd=tool_cost if priced else None,
            calls=tuple(self.calls),
        )


_END_WORDS = {
    "answer": "answered",
    "step_limit": "step limit reached without an answer",
    "token_budget": "output-token budget spent without an answer",
    "time_limit": "time limit reached",
    "error": "a model call failed",
}


def model_call(turn: Turn, step: int, retry: int, prices: Prices, counter: Counter | None) -> ModelCall:
    n_in, n_out = usage_count(turn.usage, "prompt_tokens"), usage_count(turn.usage, "completion_tokens")
    n_cached = cached_tokens(turn.usage)
    cost = prices.call(n_in, n_out, n_cached) if prices.any else None
    source = "usage" if n_out is not None else None
    if n_out is None and turn.ok and counter is not None and not turn.tool_calls:
        # the whole text at once, as bench counts it (a call's argument text is not counted: left None)
        n_out, source = counter[1](turn.reasoning) + counter[1](turn.text), f"tokenizer:{counter[0]}"
    e2e = (turn.end_ns - turn.sent_ns) / 1e9
    ttft = generation = speed = None
    if turn.ok:
        t = timing(_record(turn, n_out))
        ttft = None if t.ttft is None else t.ttft / 1000
        generation = None if ttft is None else max(0.0, e2e - ttft)
        speed = t.speed
    return ModelCall(
        step,
        retry,
        turn.error_kind,
        e2e,
        ttft,
        generation,
        speed,
        n_in,
        n_out,
        n_cached,
        len(turn.tool_calls),
        turn.finish_reason,
        cost,
        source,
    )


def _record(turn: Turn, n_out: int | None) -> RequestRecord:
    """The turn as bench's record, so that ``analyze.timing`` derives its TTFT and speed as bench's."""
    return RequestRecord(
        endpoint="",
        request_index=0,
        attempt=0,
        prompt_id="",
        prompt_class="",
        api="chat",
        stream=True,
        warmup=False,
        load="",
        scheduled_ns=turn.sent_ns,
        sent_ns=turn.sent_ns,
        headers_ns=turn.headers_ns,
        event_ns=turn.event_ns,
        event_kinds=turn.event_kinds,
        event_tokens=turn.event_tokens,
        end_ns=turn.end_ns,
        status=turn.status,
        error_kind=None,
        error=None,
        retried=False,
        n_in=None,
        n_out=n_out,
        n_out_source="usage" if n_out is not None else "none",
        n_reasoning=None,
        finish_reason=turn.finish_reason,
        text="",
        reasoning_text="",
        tool_call_chars=0,
        server_headers=(),
    )


def usage_count(usage: Mapping[str, Any] | None, name: str) -> int | None:
    """A count the server's usage reports (None: not reported, or not an integer)."""
    value = (usage or {}).get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
