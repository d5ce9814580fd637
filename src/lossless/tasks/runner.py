"""The agent loop: model -> tool calls -> tool results -> model, until an answer or a limit; then the check.

One task on one endpoint becomes one ``TaskRun``. Within an attempt the loop stops at an answer (a turn
without tool calls; for a ``tool_calls`` checker, the first turn, calls and all, since those calls are
the answer), at the task's step limit, at its output-token budget, or when a model call fails for good.
The task's time limit covers everything, tool latency and checks included. A failed call (transport
error, time-out, 5xx, 429) is sent again up to ``retries`` times after a back-off (``Retry-After`` when
the server gives one); its time, its wait and any tokens it reported count. With ``repairs``, an answer
that fails its check goes back to the model with the checker's reason (a failing test's output) as a
user message, and the model tries again, as coding agents do: each attempt gets the task's step and token
limits afresh.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lossless.analyze.timing import timing
from lossless.client.answer import ToolCall
from lossless.client.apis import native_body
from lossless.client.endpoints import Endpoint
from lossless.client.http import Session
from lossless.client.openai import cached_tokens
from lossless.client.turn import Turn, chat_turn
from lossless.provision.counting import TokenCounter
from lossless.records import RequestRecord, retryable
from lossless.tasks.checkers import CheckResult, PythonTests, ToolCalls, check
from lossless.tasks.result import ModelCall, TaskRun
from lossless.tasks.task import Task
from lossless.tasks.tools import ToolResult, arguments_valid

Counter = tuple[str, TokenCounter]  # (tokenizer's name, counter) for answers without usage

REPAIR = "That answer did not pass the check: {reason}{details}\nFix it and reply again, in the same form."
MAX_RETRY_WAIT_S = 60.0
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}  # a streamed call's fields
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


@dataclass(frozen=True)
class RunnerConfig:
    api: str = "chat"  # chat, responses or messages: the API the model calls are made in
    stream: bool = True
    max_tokens: int | None = None  # per model call at most; the task's budget bounds all of an attempt's
    temperature: float | None = None  # None: the endpoint's default
    # "auto", "required" or "none" with a task's tools; None: not sent. "required-first": "required" on
    # an attempt's first model call and "auto" after it (an agent that must look something up first)
    tool_choice: str | None = None
    retries: int = 3  # further attempts at a failed model call
    retry_wait: float = 0.5  # seconds before the first retry (doubling, jittered) without Retry-After
    repairs: int = 0  # attempts after a failed check, with the checker's reason fed back
    call_timeout: float = 120.0  # seconds for one model call
    seed: int = 0


@dataclass
class _Tally:
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
            endpoint=endpoint, task=task.id, sample=sample, success=bool(verdict and verdict.passed), end=end,
            reason=reason, attempts=self.attempts, steps=self.steps, retries=self.retries,
            tool_calls=self.tool_calls, tool_errors=self.tool_errors,
            invalid_arguments=self.invalid_arguments, schema_invalid=self.schema_invalid,
            prompt_tokens=sum(c.n_in or 0 for c in self.calls),
            completion_tokens=sum(c.n_out or 0 for c in self.calls),
            cached_tokens=sum(cached) if cached else None,
            usage_missing=sum(1 for c in answered if c.n_in is None and c.n_out_source != "usage"),
            task_s=task_s, model_s=self.parts["model"], ttft_s=self.parts["ttft"],
            generation_s=self.parts["generation"], tool_s=self.parts["tool"], retry_s=self.parts["retry"],
            check_s=self.parts["check"], cost_usd=inference + tool_cost if priced else None,
            retry_cost_usd=self.retry_cost if priced else None, tool_cost_usd=tool_cost if priced else None,
            calls=tuple(self.calls),
        )  # fmt: skip


_END_WORDS = {
    "answer": "answered",
    "step_limit": "step limit reached without an answer",
    "token_budget": "output-token budget spent without an answer",
    "time_limit": "time limit reached",
    "error": "a model call failed",
}


async def run_task(
    session: Session,
    endpoint: Endpoint,
    task: Task,
    sample: int,
    config: RunnerConfig,
    prices: Prices,
    counter: Counter | None = None,
) -> TaskRun:
    """One task, start to verdict; never raises for the endpoint's or the model's failures. ``counter``
    counts the output tokens of answers that come without usage."""
    tally = _Tally(prices, counter)
    rng = random.Random(f"{config.seed}:{endpoint.name}:{task.id}:{sample}")  # retry jitter
    start = time.perf_counter()
    end, verdict = "time_limit", None
    try:
        async with asyncio.timeout(task.limits.max_seconds):
            end, verdict = await _attempts(session, endpoint, task, config, tally, rng)
    except TimeoutError:
        end, verdict = "time_limit", None
    return tally.run(endpoint.name, task, sample, time.perf_counter() - start, end, verdict)


async def _attempts(
    session: Session, endpoint: Endpoint, task: Task, config: RunnerConfig, tally: _Tally, rng: random.Random
) -> tuple[str, CheckResult | None]:
    messages: list[Mapping[str, Any]] = [dict(m) for m in task.messages]
    # a tool_calls answer cannot be followed by a user message (its calls would want results): no repair
    repairs = 0 if isinstance(task.checker, ToolCalls) else config.repairs
    for attempt in range(repairs + 1):
        tally.attempts, tally.step_in_attempt, tally.tokens_in_attempt = attempt + 1, 0, 0
        end, turn = await _episode(session, endpoint, task, messages, config, tally, rng)
        if turn is None:
            return end, None
        started = time.perf_counter()
        calls = [c.as_message() for c in turn.tool_calls]
        if isinstance(task.checker, PythonTests):  # a child process, for up to its time limit
            verdict = await asyncio.to_thread(check, task.checker, turn.text or None, calls)
        else:  # microseconds: a thread would cost more than the check
            verdict = check(task.checker, turn.text or None, calls)
        tally.parts["check"] += time.perf_counter() - started
        if verdict.passed or attempt == repairs:
            return "answer", verdict
        messages += [_assistant(turn), {"role": "user", "content": _repair_prompt(verdict)}]
    raise AssertionError("unreachable: the last attempt always returns")


async def _episode(
    session: Session,
    endpoint: Endpoint,
    task: Task,
    messages: list[Mapping[str, Any]],
    config: RunnerConfig,
    tally: _Tally,
    rng: random.Random,
) -> tuple[str, Turn | None]:
    """Model calls and tool calls until an answer (end "answer" and its turn) or a limit (turn None)."""
    while True:
        if tally.step_in_attempt >= task.limits.max_steps:
            return "step_limit", None
        budget = task.limits.max_tokens - tally.tokens_in_attempt
        if budget <= 0:
            return "token_budget", None
        first = tally.step_in_attempt == 0
        body = _body(endpoint, task, messages, min(budget, config.max_tokens or budget), config, first)
        turn = await _call(session, body, config, tally, rng)
        if turn is None:
            return "error", None
        _count_calls(task, turn, tally)
        if not turn.tool_calls or isinstance(task.checker, ToolCalls):
            return "answer", turn
        messages.append(_assistant(turn))
        messages.extend(await _run_tools(task, turn.tool_calls, tally))


def _body(
    endpoint: Endpoint,
    task: Task,
    messages: list[Mapping[str, Any]],
    max_tokens: int,
    config: RunnerConfig,
    first: bool = True,
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": endpoint.model, "messages": list(messages), "max_tokens": max_tokens}
    if task.tools:
        body["tools"] = task.tool_specs()
        choice = config.tool_choice
        if choice == "required-first":
            choice = "required" if first else "auto"
        if choice is not None:
            body["tool_choice"] = choice
    if config.temperature is not None:
        body["temperature"] = config.temperature
    if config.stream:
        body |= STREAMED
    # in the API's own words; the endpoint's own fields last, as written, as bench merges them
    return native_body(config.api, body) | dict(endpoint.body)


async def _call(
    session: Session, body: dict[str, Any], config: RunnerConfig, tally: _Tally, rng: random.Random
) -> Turn | None:
    """One model call, sent again after retryable failures; the answered Turn, or None."""
    for retry in range(config.retries + 1):
        turn = await chat_turn(session, body, config.call_timeout, api=config.api)
        call = _model_call(turn, tally.step_in_attempt + 1, retry, tally.prices, tally.counter)
        tally.add(call)
        if turn.ok:
            tally.steps += 1
            tally.step_in_attempt += 1
            tally.tokens_in_attempt += call.n_out or 0
            return turn
        if retry == config.retries or not retryable(turn.error_kind):
            return None
        wait = backoff(turn, retry, config.retry_wait, rng)
        tally.retries += 1
        tally.parts["retry"] += wait
        await asyncio.sleep(wait)
    return None


def backoff(turn: Turn, retry: int, base: float, rng: random.Random) -> float:
    """Seconds before sending again: the server's Retry-After (in seconds) when it gives one, else
    ``base`` doubling per retry, jittered by +-50% (so that many tasks do not retry in step)."""
    for name, value in turn.server_headers:
        if name == "retry-after":
            try:
                return min(MAX_RETRY_WAIT_S, max(0.0, float(value)))
            except ValueError:
                break  # an HTTP date: back off as without one
    return min(MAX_RETRY_WAIT_S, base * 2**retry) * (0.5 + rng.random())


def _model_call(turn: Turn, step: int, retry: int, prices: Prices, counter: Counter | None) -> ModelCall:
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
        step, retry, turn.error_kind, e2e, ttft, generation, speed, n_in, n_out, n_cached,
        len(turn.tool_calls), turn.finish_reason, cost, source,
    )  # fmt: skip


def _record(turn: Turn, n_out: int | None) -> RequestRecord:
    """The turn as bench's record, so that ``analyze.timing`` derives its TTFT and speed as bench's."""
    return RequestRecord(
        endpoint="", request_index=0, attempt=0, prompt_id="", prompt_class="", api="chat", stream=True,
        warmup=False, load="", scheduled_ns=turn.sent_ns, sent_ns=turn.sent_ns, headers_ns=turn.headers_ns,
        event_ns=turn.event_ns, event_kinds=turn.event_kinds, event_tokens=turn.event_tokens,
        end_ns=turn.end_ns, status=turn.status, error_kind=None, error=None, retried=False, n_in=None,
        n_out=n_out, n_out_source="usage" if n_out is not None else "none", n_reasoning=None,
        finish_reason=turn.finish_reason, text="", reasoning_text="", tool_call_chars=0, server_headers=(),
    )  # fmt: skip


def usage_count(usage: Mapping[str, Any] | None, name: str) -> int | None:
    """A count the server's usage reports (None: not reported, or not an integer)."""
    value = (usage or {}).get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def _run_tools(task: Task, calls: tuple[ToolCall, ...], tally: _Tally) -> list[dict[str, Any]]:
    """The turn's calls answered, concurrently (an agent runs parallel calls at once): each waits out
    its tool's latency, so the turn's tool time is its slowest call's."""

    async def one(call: ToolCall) -> ToolResult:
        tool = task.tool(call.name)
        if tool is None:
            return ToolResult(f"error: no tool named {call.name!r}", error=True)
        result = tool.call(call.arguments)
        await asyncio.sleep(tool.latency_s)
        return result

    started = time.perf_counter()
    results = await asyncio.gather(*(one(c) for c in calls))
    tally.parts["tool"] += time.perf_counter() - started
    tally.tool_errors += sum(r.error for r in results)
    return [
        {"role": "tool", "tool_call_id": c.id, "content": r.content}
        for c, r in zip(calls, results, strict=True)
    ]


def _count_calls(task: Task, turn: Turn, tally: _Tally) -> None:
    """Every call an answered turn makes, run or not (a tool_calls answer's are the answer): arguments
    that are no JSON object, and arguments the function's schema rejects."""
    tally.tool_calls += len(turn.tool_calls)
    tally.invalid_arguments += sum(not _json_object(c.arguments) for c in turn.tool_calls)
    tally.schema_invalid += sum(not arguments_valid(task.tool(c.name), c.arguments) for c in turn.tool_calls)


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def _assistant(turn: Turn) -> dict[str, Any]:
    # "" rather than null beside tool calls: OpenAI and vLLM take both, llama-cpp-python (0.3.36) only a
    # string (null is a validation error it answers with a 500)
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.tool_calls:
        message["tool_calls"] = [c.as_message() for c in turn.tool_calls]
    return message


def _repair_prompt(verdict: CheckResult) -> str:
    tail = verdict.details.get("stderr_tail") if verdict.details else None
    details = f"\n\n{tail}" if tail else ""
    return REPAIR.format(reason=verdict.reason, details=details)
