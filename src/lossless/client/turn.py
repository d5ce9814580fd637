"""One chat turn of an agent: any chat body (messages, tools) -> one ``Turn``, timed as bench times a call.

``call.py`` sends a workload prompt and keeps no tool-call contents; an agent loop needs the opposite
half: the whole conversation and its tools go in, and the tool calls come back whole (names, ids,
arguments assembled from their stream deltas). The timing is bench's: every event gets the time its
network read returned and its kind from ``openai.Chunk`` (a tool-call delta is a token event, so it can
be the first token), so ``analyze.timing`` reads a Turn's times exactly as it reads a RequestRecord's.
A failure of any kind ends as a Turn with ``error_kind`` set (the kinds of ``records.retryable``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lossless.client.http import Response, Session, TransportError
from lossless.client.openai import Chunk
from lossless.client.sse import read_events


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # as the server sent it: JSON text, valid or not

    def as_message(self) -> dict[str, Any]:
        """The item of an assistant message's ``tool_calls``."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Turn:
    sent_ns: int
    end_ns: int
    headers_ns: int | None = None
    status: int | None = None
    error_kind: str | None = None  # None: an answer came; "http_503", "timeout", "connection", ...
    error: str | None = None  # one line, redacted
    event_ns: tuple[int, ...] = ()
    event_kinds: str = ""  # one character per event (records.CONTENT ... EMPTY)
    event_tokens: tuple[int, ...] = ()  # cumulative completion_tokens per event when the server says, else -1
    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    server_headers: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return self.error_kind is None


@dataclass
class _Acc:
    """What has arrived so far; becomes the Turn."""

    event_ns: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)  # index -> id, name, arguments
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    done: bool = False
    end_ns: int | None = None  # when the answer's last read returned

    def add(self, obj: Any, t: int, stream: bool) -> None:
        chunk = Chunk(obj, "chat", stream)  # checks the shape; a bad field raises ValueError
        self.event_ns.append(t)
        self.kinds.append(chunk.kind)
        self.tokens.append(chunk.completion_tokens if chunk.completion_tokens is not None else -1)
        self.text.append(chunk.content)
        self.reasoning.append(chunk.reasoning)
        self.usage = chunk.usage if chunk.usage is not None else self.usage
        self.finish_reason = chunk.finish_reason or self.finish_reason
        choices = obj["choices"]
        message = choices[0].get("delta" if stream else "message") if choices else None
        for position, item in enumerate((message or {}).get("tool_calls") or ()):
            self._fold_call(item, position)

    def _fold_call(self, item: Any, position: int) -> None:
        if not isinstance(item, dict):
            raise ValueError("a tool_calls item is not an object")
        index = item.get("index", position)
        if not isinstance(index, int):
            raise ValueError("a tool call's index is not an integer")
        call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        call["id"] = call["id"] or str(item.get("id") or "")
        fn = item.get("function") or {}
        call["name"] += fn.get("name") or ""
        call["arguments"] += fn.get("arguments") or ""

    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(c["id"] or f"call_{i}", c["name"], c["arguments"]) for i, c in sorted(self.calls.items())
        )


async def chat_turn(
    session: Session, body: dict[str, Any], timeout_s: float, clock: Callable[[], int] = time.perf_counter_ns
) -> Turn:
    """Send ``body`` (whole: model, messages, tools, stream) to /chat/completions; never raises but for
    cancellation."""
    acc = _Acc()
    stream = bool(body.get("stream"))
    status: int | None = None
    headers: tuple[tuple[str, str], ...] = ()
    headers_ns: int | None = None
    kind: str | None = None
    message: str | None = None
    sent = clock()
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post("/chat/completions", json.dumps(body).encode()) as resp,
        ):
            headers_ns, status, headers = clock(), resp.status, resp.headers
            if resp.status != 200:
                error = (await resp.read(2000)).decode("utf-8", "replace")
                kind, message = f"http_{resp.status}", session.redact(" ".join(error.split()))[:300]
            elif stream:
                await _stream(resp, acc, clock)
            else:
                raw = await resp.whole()
                acc.end_ns = clock()  # the first byte of a non-streamed answer is its last
                acc.add(json.loads(raw), acc.end_ns, stream=False)
                acc.done = True
    except TimeoutError:
        kind, message = "timeout", f"no complete answer within {timeout_s:g} s"
    except TransportError as exc:
        kind, message = exc.kind, str(exc)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        kind, message = "malformed_stream", session.redact(f"{type(exc).__name__}: {exc}")[:300]
    if kind is None and not acc.done and acc.finish_reason is None:
        kind, message = "malformed_stream", "stream ended without [DONE] or a finish_reason"
    return Turn(
        sent_ns=sent, end_ns=acc.end_ns if kind is None and acc.end_ns is not None else clock(),
        headers_ns=headers_ns, status=status, error_kind=kind, error=message,
        event_ns=tuple(acc.event_ns), event_kinds="".join(acc.kinds), event_tokens=tuple(acc.tokens),
        text="".join(acc.text), reasoning="".join(acc.reasoning), tool_calls=acc.tool_calls(),
        finish_reason=acc.finish_reason, usage=acc.usage, server_headers=headers,
    )  # fmt: skip


async def _stream(resp: Response, acc: _Acc, clock: Callable[[], int]) -> None:
    def on_read(t: int, payloads: list[bytes]) -> bool:
        for payload in payloads:
            if payload == b"[DONE]":
                acc.done = True
                return True
            obj = json.loads(payload)
            if isinstance(obj, dict) and "error" in obj:
                raise ValueError(f"error event: {json.dumps(obj['error'])[:200]}")
            acc.add(obj, t, stream=True)
        return acc.done

    acc.end_ns = await read_events(resp, on_read, clock)
