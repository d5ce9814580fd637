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
from dataclasses import dataclass
from typing import Any

from lossless.client.answer import ToolCall
from lossless.client.apis import native_body
from lossless.client.endpoints import Endpoint
from lossless.client.http import Session
from lossless.client.turn import Turn, chat_turn
from lossless.records import retryable
from lossless.tasks.checkers import CheckResult, PythonTests, ToolCalls, check
from lossless.tasks.result import TaskRun
from lossless.tasks.spent import Counter, Prices, Spent, model_call
from lossless.tasks.task import Task
from lossless.tasks.tools import ToolResult, arguments_valid

REPAIR = "That answer did not pass the check: {reason}{details}\nFix it and reply again, in the same form."
MAX_RETRY_WAIT_S = 60.0
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}  # a streamed call's fields


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
    spent = Spent(prices, counter)
    rng = random.Random(f"{config.seed}:{endpoint.name}:{task.id}:{sample}")  # retry jitter
    start = time.perf_counter()
    end, verdict = "time_limit", None
    try:
        async with asyncio.timeout(task.limits.max_seconds):
            end, verdict = await _attempts(session, endpoint, task, config, spent, rng)
    except TimeoutError:
        end, verdict = "time_limit", None
    return spent.run(endpoint.name, task, sample, time.perf_counter() - start, end, verdict)


async def _attempts(
    session: Session, endpoint: Endpoint, task: Task, config: RunnerConfig, spent: Spent, rng: random.Random
) -> tuple[str, CheckResult | None]:
    messages: list[Mapping[str, Any]] = [dict(m) for m in task.messages]
    # a tool_calls answer cannot be followed by a user message (its calls would want results): no repair
    repairs = 0 if isinstance(task.checker, ToolCalls) else config.repairs
    for attempt in range(repairs + 1):
        spent.attempts, spent.step_in_attempt, spent.tokens_in_attempt = attempt + 1, 0, 0
        end, turn = await _episode(session, endpoint, task, messages, config, spent, rng)
        if turn is None:
            return end, None
        started = time.perf_counter()
        calls = [c.as_message() for c in turn.tool_calls]
        if isinstance(task.checker, PythonTests):  # a child process, for up to its time limit
            verdict = await asyncio.to_thread(check, task.checker, turn.text or None, calls)
        else:  # microseconds: a thread would cost more than the check
            verdict = check(task.checker, turn.text or None, calls)
        spent.parts["check"] += time.perf_counter() - started
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
    spent: Spent,
    rng: random.Random,
) -> tuple[str, Turn | None]:
    """Model calls and tool calls until an answer (end "answer" and its turn) or a limit (turn None)."""
    while True:
        if spent.step_in_attempt >= task.limits.max_steps:
            return "step_limit", None
        budget = task.limits.max_tokens - spent.tokens_in_attempt
        if budget <= 0:
            return "token_budget", None
        first = spent.step_in_attempt == 0
        body = _body(endpoint, task, messages, min(budget, config.max_tokens or budget), config, first)
        turn = await _call(session, body, config, spent, rng)
        if turn is None:
            return "error", None
        _count_calls(task, turn, spent)
        if not turn.tool_calls or isinstance(task.checker, ToolCalls):
            return "answer", turn
        messages.append(_assistant(turn))
        messages.extend(await _run_tools(task, turn.tool_calls, spent))


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
    session: Session, body: dict[str, Any], config: RunnerConfig, spent: Spent, rng: random.Random
) -> Turn | None:
    """One model call, sent again after retryable failures; the answered Turn, or None."""
    for retry in range(config.retries + 1):
        turn = await chat_turn(session, body, config.call_timeout, api=config.api)
        call = model_call(turn, spent.step_in_attempt + 1, retry, spent.prices, spent.counter)
        spent.add(call)
        if turn.ok:
            spent.steps += 1
            spent.step_in_attempt += 1
            spent.tokens_in_attempt += call.n_out or 0
            return turn
        if retry == config.retries or not retryable(turn.error_kind):
            return None
        wait = backoff(turn, retry, config.retry_wait, rng)
        spent.retries += 1
        spent.parts["retry"] += wait
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


async def _run_tools(task: Task, calls: tuple[ToolCall, ...], spent: Spent) -> list[dict[str, Any]]:
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
    spent.parts["tool"] += time.perf_counter() - started
    spent.tool_errors += sum(r.error for r in results)
    return [
        {"role": "tool", "tool_call_id": c.id, "content": r.content}
        for c, r in zip(calls, results, strict=True)
    ]


def _count_calls(task: Task, turn: Turn, spent: Spent) -> None:
    """Every call an answered turn makes, run or not (a tool_calls answer's are the answer): arguments
    that are no JSON object, and arguments the function's schema rejects."""
    spent.tool_calls += len(turn.tool_calls)
    spent.invalid_arguments += sum(not _json_object(c.arguments) for c in turn.tool_calls)
    spent.schema_invalid += sum(not arguments_valid(task.tool(c.name), c.arguments) for c in turn.tool_calls)


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
