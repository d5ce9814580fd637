"""What one request may cost the server, and the ASGI guard that reads bodies within it.

uvicorn bounds a request head's size (h11 refuses one still incomplete past 16 KiB; one that arrives in a
single read, up to 256 KiB with uvloop, passes) but not its time, and bounds neither a body's size nor
its time: a client could hold a connection forever or make the server buffer and parse any amount.
``RequestLimits`` names every bound (the defaults are what ``lossless serve`` uses; tests pass small ones);
``connection.py`` enforces the head's deadline, ``BodyGuard`` here the body's size and deadline.
Refusals are OpenAI error bodies (Anthropic's on /v1/messages): 413 ``request_too_large``, 408
``request_timeout``, 503 ``server_shutting_down``, each with ``connection: close`` (the rest of the body
is never read).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lossless.server.dialects.dialect import error_for

# 4 MiB: the largest request any model we serve can use is far smaller (a 128k-token prompt as text or as
# token ids is ~1 MB of JSON), while every byte admitted is buffered and parsed holding the GIL.
MAX_BODY_BYTES = 4 * 2**20
# Bodies above this are parsed in a thread: json.loads costs up to ~50 ms a MiB (dense arrays) here.
PARSE_IN_THREAD_BYTES = 256 * 2**10


@dataclass(frozen=True)
class RequestLimits:
    max_body_bytes: int = MAX_BODY_BYTES  # larger bodies: 413, decided from Content-Length when sent
    head_timeout_s: float = 30.0  # a request head must be complete this long after the connection opens
    # (or after the previous response); then 408 if part of one came, else a silent close
    body_timeout_s: float = 30.0  # the whole body must arrive this long after its head; then 408
    shutdown_grace_s: float = 3.0  # on shutdown a running generation may finish within this, then it is cut
    parse_in_thread_bytes: int = PARSE_IN_THREAD_BYTES  # bodies above this are parsed off the event loop


DEFAULT_LIMITS = RequestLimits()  # what `lossless serve` and the embedded server use


class BodyGuard:
    """Pure ASGI: reads the whole body within ``RequestLimits`` before the app sees the request, then hands it
    over in one message. Later ``receive`` calls reach the server, so the app still hears a disconnect.

    Reading here, not in each handler, gives every route the same limits, and the 413 for a declared
    Content-Length leaves before a byte of the body is read (a client sending ``expect: 100-continue``
    never sends it)."""

    def __init__(self, app: ASGIApp, limits: RequestLimits) -> None:
        self.app, self.limits = app, limits
        self.closing = asyncio.Event()  # set on shutdown: a body still arriving gets a 503

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        # h11 has checked that Content-Length is digits; a chunked body has none and is counted as read
        if declared is not None and int(declared) > self.limits.max_body_bytes:
            await self._refuse(413, scope, receive, send)
            return
        body = await self._read(receive)
        if isinstance(body, int):
            if body:  # 0: the client left; nobody to answer
                await self._refuse(body, scope, receive, send)
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> bytes | int:
        """The body, or the status to refuse it with (0: the client disconnected)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.body_timeout_s
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self._next(receive, deadline - loop.time())
            if message is None:
                return 503 if self.closing.is_set() else 408
            if message["type"] == "http.disconnect":
                return 0
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limits.max_body_bytes:
                return 413  # stop reading: the connection closes with the answer
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _next(self, receive: Receive, timeout: float) -> Message | None:
        """The next message, or None at the deadline or on shutdown, whichever comes first."""
        if timeout <= 0:
            return None
        get = asyncio.ensure_future(receive())
        closing = asyncio.ensure_future(self.closing.wait())
        try:
            await asyncio.wait((get, closing), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            if not get.done():
                get.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await get
        return get.result() if get.done() and not get.cancelled() else None

    async def _refuse(self, status: int, scope: Scope, receive: Receive, send: Send) -> None:
        limits = self.limits
        message, code = {
            413: (f"the request body is larger than {limits.max_body_bytes} bytes", "request_too_large"),
            408: (f"the request body did not arrive within {limits.body_timeout_s:g} s", "request_timeout"),
            503: ("the server is shutting down", "server_shutting_down"),
        }[status]
        kind = "server_error" if status >= 500 else "invalid_request_error"
        # close: the unread rest of the body must not be taken for the next request on this connection
        headers = {"connection": "close"}
        response = error_for(scope["path"], status, message, kind=kind, code=code, headers=headers)
        await response(scope, receive, send)
