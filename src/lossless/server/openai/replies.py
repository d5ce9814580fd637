"""A job's events -> one OpenAI response: a JSON body, or an SSE stream. The translated APIs
(``dialects/``) read the same events through ``JobOutput`` and answer with the same helpers.

Headers: ``server-timing`` carries ``queue``, ``prefill`` and ``decode`` durations (ms) on JSON
responses. A stream's headers leave before generation starts, so they carry only ``queue`` (the
handler waits for the worker to pick the job up before answering, which makes the queue wait known).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from lossless.engine.engine import Delta
from lossless.server.jobs import EngineJob, Event, Failed, Finished, Scored, Started
from lossless.server.openai import bodies, tool_calls, tool_stream
from lossless.server.openai.bodies import Head, LegacyLogprobs, Usage
from lossless.server.openai.protocol import ApiRequest


def server_timing(queue_s: float | None, finished: Finished | None = None) -> str:
    parts = [] if queue_s is None else [f"queue;dur={queue_s * 1e3:.3f}"]
    if finished is not None:
        if finished.prefill_s is not None:
            parts.append(f"prefill;dur={finished.prefill_s * 1e3:.3f}")
        parts.append(f"decode;dur={finished.decode_s * 1e3:.3f}")
    return ", ".join(parts)


def openai_error(
    status: int,
    message: str,
    *,
    kind: str,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


async def watch_disconnect(receive: Receive, cancel: Callable[[], None]) -> None:
    """Call ``cancel`` when the client goes away. Only while no response is being sent: a
    ``StreamingResponse`` listens for the disconnect itself."""
    while (await receive())["type"] != "http.disconnect":
        pass
    cancel()


async def until_started(
    job: EngineJob, receive: Receive, withdraw: Callable[[], None]
) -> Started | Failed | None:
    """Wait for the worker to pick ``job`` up; None if the client left meanwhile (``withdraw`` has freed
    its place in the queue), ``Failed`` if the server is shutting down."""
    watcher = asyncio.ensure_future(watch_disconnect(receive, withdraw))
    try:
        event = await job.events.get()
    finally:
        watcher.cancel()
    if isinstance(event, Failed):
        return event
    if isinstance(event, Started) and not job.cancel.is_set():
        return event
    return None  # a job withdrawn while queued ends with Finished("cancelled") and nothing else


@dataclass
class JobOutput:
    """What a whole job amounts to, for a JSON body (and, piece by piece, for stream chunks)."""

    req: ApiRequest
    prompt_text: str  # for echo and the first prompt token's text
    text: list[str] = field(default_factory=list)
    deltas: list[Delta] = field(default_factory=list)
    chat_logprobs: list[dict[str, Any]] = field(default_factory=list)
    legacy: LegacyLogprobs = field(default_factory=LegacyLogprobs)
    started: Started | None = None
    finished: Finished | None = None
    failed: Failed | None = None
    calls: tool_stream.CallStream | None = None  # a chat stream read for tool calls
    tokens: int = 0  # completion tokens so far

    def add(self, event: Event) -> None:
        if isinstance(event, Started):
            self.started = event
        elif isinstance(event, Scored):
            first = bodies.first_token_text(self.prompt_text, event.logprobs)
            self.legacy.add_prompt(first, event.logprobs)
        elif isinstance(event, Delta):
            self.deltas.append(event)
            self.tokens += len(event.token_ids)
            self.text.append(event.text)
            if self.req.logprobs is not None:
                if self.req.api == "chat":
                    self.chat_logprobs.extend(bodies.chat_logprobs(event.logprobs))
                else:
                    self.legacy.add_generated(event.logprobs)
        elif isinstance(event, Finished):
            self.finished = event
        else:
            self.failed = event

    def timing(self) -> str:
        return server_timing(self.started.queue_s if self.started else None, self.finished)


async def job_output(
    req: ApiRequest, job: EngineJob, prompt_text: str, receive: Receive, withdraw: Callable[[], None]
) -> JobOutput:
    """A job's events until it finishes or fails (``withdraw`` if the client leaves meanwhile)."""
    got = JobOutput(req, prompt_text)
    if req.echo:
        got.text.append(prompt_text)
    watcher = asyncio.ensure_future(watch_disconnect(receive, withdraw))
    try:
        while got.finished is None and got.failed is None:
            got.add(await job.events.get())
    finally:
        watcher.cancel()
    return got


def failure_response(failed: Failed, headers: dict[str, str]) -> JSONResponse:
    code = "server_shutting_down" if failed.status == 503 else None
    return openai_error(failed.status, failed.message, kind="server_error", code=code, headers=headers)


def failure_event(failed: Failed) -> bytes:
    code = "server_shutting_down" if failed.status == 503 else None
    return bodies.sse(
        {"error": {"message": failed.message, "type": "server_error", "param": None, "code": code}}
    )


async def complete(
    req: ApiRequest,
    job: EngineJob,
    head: Head,
    prompt_text: str,
    receive: Receive,
    withdraw: Callable[[], None],
    headers: dict[str, str],
) -> Response:
    got = await job_output(req, job, prompt_text, receive, withdraw)
    headers = {**headers, "server-timing": got.timing()}
    if got.finished is None:  # so got.failed is set: the engine raised, or shutdown cut the generation
        return failure_response(got.failed or Failed("generation failed"), headers)
    finish = reported_finish(got.finished)
    usage = finished_usage(job, got.finished)
    if req.api == "chat":
        logprobs = got.chat_logprobs if req.logprobs is not None else None
        body = bodies.chat_completion(head, "".join(got.text), finish, usage, logprobs)
        if req.structured is not None and req.structured.calls:
            body = tool_calls.with_calls(body, req.structured)
    else:
        legacy = got.legacy if req.logprobs is not None else None
        body = bodies.completion(head, "".join(got.text), finish, usage, legacy)
    return JSONResponse(body, headers=headers)


def finished_usage(job: EngineJob, finished: Finished) -> Usage:
    """The counts a finished job reports: its prompt's tokens (how many were found cached), its answer's."""
    cached = int(finished.stats.get("cached_prompt_tokens", 0))
    return Usage(len(job.prompt_ids), finished.completion_tokens, cached)


def reported_finish(finished: Finished) -> str:
    # "cancelled" only happens once the client is gone; nobody reads it, but keep the body OpenAI-shaped.
    return "stop" if finished.finish_reason == "cancelled" else finished.finish_reason


async def stream(req: ApiRequest, job: EngineJob, head: Head, prompt_text: str) -> AsyncIterator[bytes]:
    """SSE chunks after ``Started``: role (chat) or echo (completions) first, a chunk per delta, then
    the usage-only chunk when asked (with continuous usage, every chunk carries the counts so far), then
    ``[DONE]``. A generation that fails (an engine error, or cut by shutdown) ends with an error event
    and then ``[DONE]``: a client's parser sees an end, not a cut."""
    got = JobOutput(req, prompt_text)
    chat, usage_field = req.api == "chat", req.include_usage

    def sse(chunk: dict[str, Any]) -> bytes:
        if req.continuous_usage:  # vLLM's extension: the counts so far in every chunk
            chunk["usage"] = Usage(len(job.prompt_ids), got.tokens).body()
        return bodies.sse(chunk)

    if req.structured is not None and req.structured.calls:
        got.calls = tool_stream.CallStream(req.structured.parallel)
    if chat:
        yield sse(bodies.chat_chunk(head, {"role": "assistant", "content": ""}, with_usage=usage_field))
    elif req.echo and job.score_top is None:
        yield sse(bodies.completion_chunk(head, prompt_text, with_usage=usage_field))
    while True:
        event = await job.events.get()
        got.add(event)
        if isinstance(event, Scored):  # echo with logprobs: the prompt and its scores come first
            logprobs = got.legacy.since(0)
            yield sse(bodies.completion_chunk(head, prompt_text, logprobs=logprobs, with_usage=usage_field))
        elif isinstance(event, Delta) and _worth_a_chunk(req, event):
            if (chunk := _delta_chunk(got, event, head)) is not None:
                yield sse(chunk)
        elif isinstance(event, Failed):
            yield failure_event(event)
            yield bodies.DONE
            return
        elif isinstance(event, Finished):
            if not any(d.finish_reason for d in got.deltas[-1:]):  # e.g. max_tokens 0: no delta at all
                yield sse(_delta_chunk(got, Delta("", finish_reason="length"), head) or {})
            break
    if usage_field and got.finished is not None:
        usage = finished_usage(job, got.finished)
        yield bodies.sse(bodies.usage_chunk(head, usage, chat=chat))
    yield bodies.DONE


def _worth_a_chunk(req: ApiRequest, delta: Delta) -> bool:
    # A delta whose text is held back (an incomplete UTF-8 character) would be an empty chunk, which
    # clients may take for their first token; send it only when it carries logprobs or the end.
    return (
        bool(delta.text)
        or delta.finish_reason is not None
        or (req.logprobs is not None and bool(delta.logprobs))
    )


def _delta_chunk(got: JobOutput, delta: Delta, head: Head) -> dict[str, Any] | None:
    """The chunk for a delta; None when it has nothing to show (text held back as a possible call)."""
    req, finish = got.req, delta.finish_reason
    if finish == "cancelled":  # its client is gone, or shutdown cut it and an error event follows
        finish = None
    if got.calls is not None:
        return _call_chunk(got, got.calls, delta, head)
    if req.api == "chat":
        logprobs = bodies.chat_logprobs(delta.logprobs) if req.logprobs is not None else None
        content = {"content": delta.text} if delta.text or finish is None else {}
        return bodies.chat_chunk(
            head, content, finish_reason=finish, logprobs=logprobs, with_usage=req.include_usage
        )
    start = len(got.legacy.tokens) - len(delta.logprobs)
    legacy = got.legacy.since(start) if req.logprobs is not None else None
    return bodies.completion_chunk(
        head, delta.text, finish_reason=finish, logprobs=legacy, with_usage=req.include_usage
    )


def _call_chunk(
    got: JobOutput, calls: tool_stream.CallStream, delta: Delta, head: Head
) -> dict[str, Any] | None:
    req = got.req
    finish: str | None = delta.finish_reason if delta.finish_reason != "cancelled" else None
    text, found = calls.feed(delta.text)
    if finish is not None:
        text += calls.flush()
    logprobs = bodies.chat_logprobs(delta.logprobs) if req.logprobs is not None else None
    if not text and not found and finish is None and not logprobs:
        return None
    content: dict[str, Any] = {"content": text} if text or (finish is None and not found) else {}
    if found:
        content["tool_calls"] = found
    if finish == "stop" and calls.calls:
        finish = "tool_calls"
    return bodies.chat_chunk(
        head, content, finish_reason=finish, logprobs=logprobs, with_usage=req.include_usage
    )


class SSEResponse(StreamingResponse):
    """Sets the job's cancel event however the response ends: finished, failed or the client gone.

    Starlette ends a stream whose client disconnected by cancelling it, which may happen outside our
    generator (while awaiting ``send``), so a ``finally`` in the generator is not enough.
    """

    def __init__(
        self, content: AsyncIterator[bytes], cancel: Callable[[], None], headers: dict[str, str]
    ) -> None:
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self._cancel = cancel

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._cancel()
