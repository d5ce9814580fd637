"""One incremental Server-Sent Events parser for both OpenAI APIs (chat and completions).

It follows the WHATWG event-stream rules that real servers exercise: lines end in CRLF, LF or a lone CR
(a CR at the end of one network read may be the first half of a CRLF, so it is held back), ``:`` starts a
comment, several ``data:`` lines join with ``\\n``, a blank line dispatches. There is no size limit per
event (aiohttp's ``readline`` stops at 64 KB, which long tool-call arguments exceed). Only ``data`` is
kept: ``event``, ``id`` and ``retry`` carry nothing the OpenAI stream uses.

``read_events`` is the one loop over a response's reads that bench's calls and probe/verify's replies share.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Protocol


class SSEParser:
    """Feed bytes as they arrive; get back the data payload of every event completed by them."""

    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            # Hold back a trailing CR: the LF that completes it may come in the next read.
            held = buf.endswith(b"\r")
            if held:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if held:
                buf += b"\r"
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        return self._lines(lines)

    def close(self) -> list[bytes]:
        """End of stream: a final event without its blank line still counts (servers forget it)."""
        tail = self._buf.rstrip(b"\r")
        self._buf = b""
        return self._lines([tail, b""] if tail else [b""])

    def _lines(self, lines: list[bytes]) -> list[bytes]:
        out: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data = self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
            elif line == b"data":
                data.append(b"")
            # comments (":...") and the event/id/retry fields are ignored on purpose
        return out


class Body(Protocol):
    """What ``read_events`` needs of a response (``http.Response``, or a test's scripted one)."""

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def drain(self) -> None: ...


async def read_events(
    body: Body, on_read: Callable[[int, list[bytes]], bool], clock: Callable[[], int]
) -> int:
    """Read ``body`` one network read at a time: ``on_read(t, data)`` gets the time that read returned and
    the data of every event it completed, and says True once the stream is done ([DONE]); the rest is
    then drained, so the connection can be reused. When the connection ends first, a last call gets the
    event left without its blank line. Returns the time of the last read."""
    parser = SSEParser()
    async for chunk in body.chunks():
        t = clock()
        if on_read(t, parser.feed(chunk)):
            await body.drain()
            return t
    t = clock()
    on_read(t, parser.close())
    return t
