"""Arbitrary OpenAI request bodies -> whole ``Reply`` objects: the client edge of probe and verify.

``call.py`` turns a workload prompt into a timing record for bench; probing and verifying need the
opposite trade: any body (unknown fields, ``n``, ``echo``), and the whole response (every choice, the
logprobs, the usage), with timing reduced to one elapsed figure. Both sit on ``http.Session`` (aiohttp
stays behind it, the API key in its headers), read streams with ``sse.read_events`` and fold them into
one ``answer.Answer``, so a cut stream or a malformed answer means the same to every command.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lossless.client.answer import MAX_ERROR_CHARS, Answer, ToolCall
from lossless.client.apis import native_body, path_of, session
from lossless.client.endpoints import Endpoint, public_url
from lossless.client.http import Response, Session, TransportError
from lossless.client.openai import error_of, reasoning_tokens
from lossless.client.sse import read_events
from lossless.errors import EndpointError
from lossless.records import Failure


@dataclass(frozen=True)
class Choice:
    text: str  # answer content (chat message content, or the completion's text)
    reasoning: str  # reasoning_content / reasoning fields, plus any <think>...</think> span in the text
    finish_reason: str | None
    logprobs: Any  # the choice's logprobs object as sent (None when absent)


@dataclass(frozen=True)
class Reply:
    status: int  # HTTP status (0: the transport failed)
    elapsed_s: float  # sent -> body (or stream) complete
    choices: tuple[Choice, ...] = ()
    usage: dict[str, Any] | None = None  # the response's usage, or the stream's last usage object
    error: str | None = None  # the error body's message (redacted), for a non-200 answer
    chunks: int = 0  # SSE events with a JSON payload (streams only)
    body: dict[str, Any] = field(default_factory=dict)  # the whole JSON body (non-streamed only)
    tool_calls: tuple[ToolCall, ...] = ()  # the first choice's, whole (a stream's assembled from deltas)

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None

    @property
    def text(self) -> str:
        return self.choices[0].text if self.choices else ""

    @property
    def reasoning(self) -> str:
        return self.choices[0].reasoning if self.choices else ""

    def usage_int(self, key: str) -> int | None:
        value = (self.usage or {}).get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def reasoning_tokens(self) -> int | None:
        return reasoning_tokens(self.usage)


class Wire:
    """One endpoint's session; ``async with Wire(endpoint) as w: await w.post(body)``.

    Bodies are chat's (or completions'); with ``api`` "responses" or "messages" a chat body goes to that
    API's path in its own words (``apis.native_body``) and its answer is read back as chat's."""

    def __init__(
        self, endpoint: Endpoint, timeout_s: float = 120.0, connect_timeout_s: float = 10.0, api: str = "chat"
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.api = api
        self.reached = False  # it has answered at least once (headers came back)
        self._session: Session = session(endpoint, api, connect_timeout_s)

    async def __aenter__(self) -> Wire:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._session.aclose()

    async def post(self, body: dict[str, Any], path: str = "/chat/completions") -> Reply:
        """One request; ``model`` and the endpoint's extra fields are added (the endpoint's win). A
        transport failure or a time-out is an ``EndpointError`` naming the endpoint.

        A connection that fails before any answer is tried once more: a server closes idle keep-alive
        connections, and a request sent just as it does meets a reset (seen once in ~150 verify runs)."""
        try:
            try:
                return await self._post(body, path)
            except EndpointError as exc:
                if not isinstance(exc.__cause__, TransportError) or exc.__cause__.kind != Failure.CONNECTION:
                    raise
            return await self._post(body, path)
        except EndpointError as exc:
            if not self.reached:
                raise  # never reached: nothing can be concluded, the command stops here
            # it has answered before: this one request failed (a reset mid-stream, a time-out), and that
            # is what the check it belongs to judges, not the end of the run
            timeout = isinstance(exc.__cause__, TimeoutError)
            return Reply(0, self.timeout_s if timeout else 0.0, error=str(exc))

    async def _post(self, body: dict[str, Any], path: str) -> Reply:
        # the endpoint's own fields last, as bench merges them: what its file asks for is what it gets
        native = path_of(self.api, path) != path  # a chat body, to be asked in the Responses or Messages API
        if native:
            body, path = native_body(self.api, body), path_of(self.api, path)
        full = {"model": self.endpoint.model, **body, **self.endpoint.body}
        data = json.dumps(full).encode()
        start = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_s), self._session.post(path, data) as resp:
                self.reached = True
                if resp.status != 200:
                    raw = await resp.read(4000)
                    return Reply(resp.status, time.perf_counter() - start, error=self._message(raw))
                if full.get("stream"):
                    return await self._stream(resp, start, native)
                raw = await resp.whole()
        except TransportError as exc:
            raise EndpointError(
                f"endpoint {self.endpoint.name!r} ({public_url(self.endpoint.base_url)}): {exc}"
            ) from exc
        except TimeoutError as exc:
            raise EndpointError(
                f"endpoint {self.endpoint.name!r} ({public_url(self.endpoint.base_url)}): "
                f"no complete answer to {path} within {self.timeout_s:g} s"
            ) from exc
        return self._whole(raw, time.perf_counter() - start, native)

    def _message(self, raw: bytes) -> str:
        said = error_of(raw.decode("utf-8", "replace"))[1]
        return self._session.redact(said)[:MAX_ERROR_CHARS] or "(empty body)"

    def _whole(self, raw: bytes, elapsed: float, native: bool) -> Reply:
        answer = Answer(self.api if native else None)
        try:
            body = json.loads(raw)
            answer.fold(body, 0, raw)
        except (ValueError, RecursionError):  # not JSON, or not a completion object
            return Reply(200, elapsed, error=f"not a completion object: {self._message(raw[:200])}")
        return Reply(
            200,
            elapsed,
            _choices(answer, stream=False),
            answer.usage,
            body=body,
            tool_calls=answer.tool_calls(),
        )

    async def _stream(self, resp: Response, start: float, native: bool) -> Reply:
        answer = Answer(self.api if native else None, lenient=True)
        await read_events(resp, answer.read, time.perf_counter_ns)
        problem = answer.problem
        if problem is None and not answer.finished():
            # the connection closed before the stream said it was done: a cut answer, not a short one
            problem = "stream ended without [DONE] or a finish_reason"
        # an error event's text is the server's: it may quote the key, as an error body may
        error = None if problem is None else self._session.redact(problem)[:MAX_ERROR_CHARS]
        return Reply(
            200,
            time.perf_counter() - start,
            _choices(answer, stream=True),
            answer.usage,
            error,
            answer.events,
            tool_calls=answer.tool_calls(),
        )


def chat(content: str, **fields: Any) -> dict[str, Any]:
    """A chat body of one user message, with ``fields`` beside it."""
    return {"messages": [{"role": "user", "content": content}], **fields}


async def post_all(w: Wire, bodies: Sequence[dict[str, Any]], concurrency: int) -> list[Reply]:
    """Every body posted, at most ``concurrency`` at a time; the replies in the bodies' order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(body: dict[str, Any]) -> Reply:
        async with gate:
            return await w.post(body)

    return list(await asyncio.gather(*(one(b) for b in bodies)))


def _choices(answer: Answer, stream: bool) -> tuple[Choice, ...]:
    """Every choice, by index. A stream's <think> markers may span chunks: each choice's text is split
    once, whole. Log-probabilities: a whole answer's object as sent, a stream's one per chunk."""
    choices = []
    for i in answer.indices:
        text, think = split_think(answer.text(i))
        found = answer.logprobs.get(i)
        logprobs = found if stream or found is None else found[0]
        choices.append(Choice(text, answer.reasoning(i) + think, answer.finish_reason(i), logprobs))
    return tuple(choices)


def split_think(text: str) -> tuple[str, str]:
    """Content -> (answer, reasoning): models served without a reasoning parser put their thinking
    inline between <think> markers (an unclosed one runs to the end)."""
    start = text.find("<think>")
    if start < 0:
        return text, ""
    end = text.find("</think>", start)
    if end < 0:
        return text[:start], text[start + 7 :]
    return text[:start] + text[end + 8 :], text[start + 7 : end]
