"""One call to an endpoint -> one RequestRecord, with a timestamp for every SSE event.

Every event of a network read gets the time that read returned: that is when the bytes reached us.
A failure of any kind ends as a record with ``error_kind`` set; only cancellation escapes, as
``CallCancelled`` carrying the record of what had arrived.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from lossless.client.endpoints import Endpoint
from lossless.client.http import Response, Session, TransportError
from lossless.client.openai import PATHS, Chunk, cached_tokens, reasoning_tokens, request_body
from lossless.client.prompt import Prompt
from lossless.client.sse import read_events
from lossless.records import TOKEN_KINDS, RequestRecord


@dataclass(frozen=True)
class CallOptions:
    api: str  # "chat" or "completions"
    stream: bool
    max_tokens: int
    first_token_timeout: float | None  # seconds from sending to the first token event
    total_timeout: float | None  # seconds from sending to the end of the stream


@dataclass(frozen=True)
class Job:
    endpoint: Endpoint
    prompt: Prompt
    request_index: int
    load: str  # load level label
    warmup: bool
    scheduled_ns: int
    session: str | None = None  # a conversation's turn: which conversation
    turn: int | None = None  # ... and which turn, from 1


class CallCancelled(asyncio.CancelledError):
    def __init__(self, record: RequestRecord) -> None:
        super().__init__("cancelled")
        self.record = record


class _MalformedStream(Exception):
    pass


class _StreamError(Exception):
    pass


class _Acc:
    """What has arrived so far; becomes the record."""

    def __init__(self, first_token: asyncio.Event | None = None) -> None:
        self.on_first_token = first_token  # set when the first token arrives (bench --failover-after)
        self.headers_ns: int | None = None
        self.status: int | None = None
        self.server_headers: tuple[tuple[str, str], ...] = ()
        self.event_ns: list[int] = []
        self.kinds: list[str] = []
        self.tokens: list[int] = []
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.tool_chars = 0
        self.usage: dict | None = None
        self.finish_reason: str | None = None
        self.model: str | None = None  # the first the answer names
        self.fingerprint: str | None = None
        self.done = False
        self.first_token = False
        self.end_ns: int | None = None  # when the stream's end arrived

    def add(self, chunk: Chunk, t: int) -> None:
        self.event_ns.append(t)
        self.kinds.append(chunk.kind)
        self.tokens.append(chunk.completion_tokens if chunk.completion_tokens is not None else -1)
        if chunk.content:
            self.text.append(chunk.content)
        if chunk.reasoning:
            self.reasoning.append(chunk.reasoning)
        self.tool_chars += chunk.tool_chars
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        self.model = self.model or chunk.model
        self.fingerprint = self.fingerprint or chunk.fingerprint
        if chunk.kind in TOKEN_KINDS:
            self.first_token = True
            if self.on_first_token is not None:
                self.on_first_token.set()


async def call(
    session: Session,
    job: Job,
    attempt: int,
    opts: CallOptions,
    clock: Callable[[], int] = time.perf_counter_ns,
    first_token: asyncio.Event | None = None,
) -> RequestRecord:
    acc = _Acc(first_token)
    body = json.dumps(request_body(job.endpoint, job.prompt, opts.api, opts.stream, opts.max_tokens)).encode()
    kind: str | None = None
    message: str | None = None
    sent, start = clock(), asyncio.get_running_loop().time()
    first, total = opts.first_token_timeout, opts.total_timeout
    limit = min((t for t in (first, total) if t is not None), default=None)
    try:
        async with asyncio.timeout_at(None if limit is None else start + limit) as deadline:
            await _exchange(session, PATHS[opts.api], body, acc, opts, clock, deadline, start)
    except TimeoutError:
        kind = "timeout_total" if acc.first_token or first is None else "timeout_first_token"
        message = (
            f"no token within {first} s" if kind == "timeout_first_token" else f"not done within {total} s"
        )
    except TransportError as exc:
        kind, message = exc.kind, str(exc)
    except _MalformedStream as exc:
        kind, message = "malformed_stream", session.redact(str(exc))
    except _StreamError as exc:
        kind, message = "stream_error", session.redact(str(exc))
    except asyncio.CancelledError as exc:
        record = _record(job, attempt, opts, sent, clock(), acc, "cancelled", "run interrupted")
        raise CallCancelled(record) from exc
    except Exception as exc:  # whatever one answer does, the run and the other records go on
        kind, message = "client_error", session.redact(f"{type(exc).__name__}: {exc}")[:300]
    if kind is None and acc.status is not None and acc.status != 200:
        kind = f"http_{acc.status}"
        message = session.redact(" ".join(acc.text)[:300]) or f"HTTP {acc.status}"
        if 300 <= acc.status < 400:  # see Session.post
            message = f"HTTP {acc.status}: a redirect, not followed (it would take the key's headers along)"
    end = acc.end_ns if kind is None and acc.end_ns is not None else clock()
    return _record(job, attempt, opts, sent, end, acc, kind, message)


async def _exchange(
    session: Session,
    path: str,
    body: bytes,
    acc: _Acc,
    opts: CallOptions,
    clock: Callable[[], int],
    deadline: asyncio.Timeout,
    start: float,
) -> None:
    async with session.post(path, body) as resp:
        acc.headers_ns = clock()
        acc.status = resp.status
        acc.server_headers = resp.headers
        if resp.status != 200:
            acc.text = [(await resp.read(2000)).decode("utf-8", "replace").replace("\n", " ")]
            return
        if not opts.stream:
            await _whole(resp, acc, opts, clock)
            return
        api = opts.api
        # After the first token only the total limit applies.
        relax = opts.first_token_timeout is not None

        def on_read(t: int, payloads: list[bytes]) -> bool:
            nonlocal relax
            for payload in payloads:
                _event(payload, acc, api, t)
            if relax and acc.first_token:
                relax = False
                total = opts.total_timeout
                deadline.reschedule(None if total is None else start + total)
            return acc.done

        acc.end_ns = await read_events(resp, on_read, clock)
        if not acc.done and acc.finish_reason is None:
            raise _MalformedStream("stream ended without [DONE] or a finish_reason")


def _event(payload: bytes, acc: _Acc, api: str, t: int) -> None:
    if acc.done:
        return
    if payload == b"[DONE]":
        acc.done = True
        return
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise _MalformedStream(f"event is not JSON: {payload[:80]!r}") from exc
    if isinstance(obj, dict) and "error" in obj:
        raise _StreamError(f"error event: {json.dumps(obj['error'])[:300]}")
    try:
        acc.add(Chunk(obj, api, stream=True), t)
    except ValueError as exc:
        raise _MalformedStream(f"unexpected chunk shape ({exc}): {payload[:80]!r}") from exc


async def _whole(resp: Response, acc: _Acc, opts: CallOptions, clock: Callable[[], int]) -> None:
    raw = await resp.whole()
    t = clock()  # the first byte of a non-streamed answer is its last
    try:
        acc.add(Chunk(json.loads(raw), opts.api, stream=False), t)
    except (ValueError, RecursionError) as exc:
        raise _MalformedStream(f"response is not a completion object ({exc}): {raw[:80]!r}") from exc
    acc.done = True
    acc.end_ns = t


def unfinished(
    job: Job, attempt: int, opts: CallOptions, sent: int, kind: str, message: str
) -> RequestRecord:
    """The record an attempt sent at ``sent`` leaves when nothing of it comes back (its process was lost):
    no answer, ended when it was sent; whoever learns of the loss sets the end."""
    return _record(job, attempt, opts, sent, sent, _Acc(), kind, message)


def _record(
    job: Job,
    attempt: int,
    opts: CallOptions,
    sent: int,
    end: int,
    acc: _Acc,
    kind: str | None,
    message: str | None,
) -> RequestRecord:
    usage = acc.usage
    n_out = usage.get("completion_tokens") if usage else None
    n_in = usage.get("prompt_tokens") if usage else None
    return RequestRecord(
        endpoint=job.endpoint.name,
        request_index=job.request_index,
        attempt=attempt,
        prompt_id=job.prompt.id,
        prompt_class=job.prompt.cls,
        api=opts.api,
        stream=opts.stream,
        warmup=job.warmup,
        load=job.load,
        scheduled_ns=job.scheduled_ns,
        sent_ns=sent,
        headers_ns=acc.headers_ns,
        event_ns=tuple(acc.event_ns),
        event_kinds="".join(acc.kinds),
        event_tokens=tuple(acc.tokens),
        end_ns=end,
        status=acc.status,
        error_kind=kind,
        error=message,
        retried=False,
        n_in=n_in if isinstance(n_in, int) else None,
        n_out=n_out if isinstance(n_out, int) else None,
        n_out_source="usage" if isinstance(n_out, int) else "none",
        n_reasoning=reasoning_tokens(usage),
        n_cached=cached_tokens(usage),
        asked_in=job.prompt.input_tokens,
        asked_out=job.prompt.output_tokens,
        session=job.session,
        turn=job.turn,
        finish_reason=acc.finish_reason,
        text="" if acc.status != 200 else "".join(acc.text),
        reasoning_text="".join(acc.reasoning),
        tool_call_chars=acc.tool_chars,
        server_headers=acc.server_headers,
        served_model=acc.model,
        system_fingerprint=acc.fingerprint,
    )
