"""One chat turn of an agent: any chat body (messages, tools) -> one ``Turn``, timed as bench times a call.

``call.py`` sends a workload prompt and keeps no tool-call contents; an agent loop needs the opposite
half: the whole conversation and its tools go in, and the tool calls come back whole (names, ids,
arguments assembled from their stream deltas). The timing is bench's: every event gets the time its
network read returned and its kind, folded by ``answer.Answer`` as bench's are (a tool-call delta is a
token event, so it can be the first token), so ``analyze.timing`` reads a Turn's times exactly as it
reads a RequestRecord's.
A failure of any kind ends as a Turn with ``error_kind`` set (the kinds of ``records.retryable``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lossless.client.answer import Answer, MalformedStream, StreamError, ToolCall
from lossless.client.api_names import PATHS
from lossless.client.http import Session, TransportError
from lossless.client.openai import error_of
from lossless.client.sse import read_events
from lossless.records import Failure, http_failure


@dataclass(frozen=True)
class Turn:
    sent_ns: int
    end_ns: int
    headers_ns: int | None = None
    status: int | None = None
    error_kind: str | None = None  # None: an answer came; a ``records.Failure``, or "http_<status>"
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


async def chat_turn(
    session: Session,
    body: dict[str, Any],
    timeout_s: float,
    clock: Callable[[], int] = time.perf_counter_ns,
    api: str = "chat",
) -> Turn:
    """Send ``body`` (whole: model, messages, tools, stream; in ``api``'s own words, ``apis.native_body``)
    to ``api``'s path and read the answer in its events; never raises but for cancellation."""
    answer = Answer(api)
    status: int | None = None
    headers: tuple[tuple[str, str], ...] = ()
    headers_ns: int | None = None
    kind: str | None = None
    message: str | None = None
    sent = clock()
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post(PATHS[api], json.dumps(body).encode()) as resp,
        ):
            headers_ns, status, headers = clock(), resp.status, resp.headers
            if resp.status != 200:
                error = (await resp.read(2000)).decode("utf-8", "replace")
                kind, message = http_failure(resp.status), session.redact(error_of(error)[1])[:300]
            elif body.get("stream"):
                answer.end_ns = await read_events(resp, answer.read, clock)
            else:
                raw = await resp.whole()
                answer.whole(raw, clock())
    except TimeoutError:
        kind, message = Failure.TIMEOUT, f"no complete answer within {timeout_s:g} s"
    except TransportError as exc:
        kind, message = exc.kind, str(exc)
    except MalformedStream as exc:
        kind, message = Failure.MALFORMED_STREAM, session.redact(str(exc))[:300]
    except StreamError as exc:
        kind, message = Failure.STREAM_ERROR, session.redact(str(exc))[:300]
    if kind is None and not answer.finished():
        kind, message = Failure.MALFORMED_STREAM, "stream ended without [DONE] or a finish_reason"
    return Turn(
        sent_ns=sent,
        end_ns=answer.end_ns if kind is None and answer.end_ns is not None else clock(),
        headers_ns=headers_ns,
        status=status,
        error_kind=kind,
        error=message,
        event_ns=tuple(answer.event_ns),
        event_kinds="".join(answer.kinds),
        event_tokens=tuple(answer.tokens),
        text=answer.text(),
        reasoning=answer.reasoning(),
        tool_calls=answer.tool_calls(),
        finish_reason=answer.finish_reason(),
        usage=answer.usage,
        server_headers=headers,
    )
