"""probe/verify's Wire: a connection reset before any answer is tried once more, on a new connection."""

from __future__ import annotations

import asyncio
import json
import socket
import struct

from lossless.endpoints import Endpoint
from lossless.errors import EndpointError
from lossless.probe.wire import Wire

ANSWER = json.dumps({"choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}]}).encode()


async def _serve(resets: int) -> tuple[asyncio.Server, list[int]]:
    """A server on 127.0.0.1 that resets its first ``resets`` connections once a request arrives."""
    seen = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(v)
            for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
            if k.lower() == b"content-length"
        )
        await reader.readexactly(length)
        seen[0] += 1
        if seen[0] <= resets:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
            writer.transport.abort()
            return
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
        writer.write(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(ANSWER) + ANSWER)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), seen


def _post(resets: int) -> tuple[object, int]:
    async def go() -> tuple[object, int]:
        server, seen = await _serve(resets)
        port = server.sockets[0].getsockname()[1]
        async with server, Wire(Endpoint("e", f"http://127.0.0.1:{port}/v1", "m")) as wire:
            try:
                reply: object = await wire.post({"prompt": "x"}, "/completions")
            except EndpointError as exc:
                reply = exc
        return reply, seen[0]

    return asyncio.run(go())


def test_one_reset_is_retried_on_a_new_connection() -> None:
    reply, requests = _post(resets=1)
    assert requests == 2 and not isinstance(reply, EndpointError)
    assert reply.ok and reply.text == "ok"  # type: ignore[attr-defined]


def test_a_second_reset_is_an_endpoint_error() -> None:
    reply, requests = _post(resets=2)
    assert requests == 2 and isinstance(reply, EndpointError)
    assert "endpoint 'e'" in str(reply)


def test_no_reset_no_retry() -> None:
    reply, requests = _post(resets=0)
    assert requests == 1 and reply.ok  # type: ignore[attr-defined]
