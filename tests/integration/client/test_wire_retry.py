"""probe/verify's Wire: a connection reset before any answer is tried once more, on a new connection;
what a stream's error event says comes back without the key."""

from __future__ import annotations

import asyncio
import json
import socket
import struct

import pytest

from lossless.client.endpoints import Endpoint
from lossless.client.wire import Reply, Wire
from lossless.errors import EndpointError

ANSWER = json.dumps({"choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}]}).encode()


async def _serve(resets: int, answer: bytes = ANSWER) -> tuple[asyncio.Server, list[int]]:
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
        writer.write(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(answer) + answer)
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


def test_an_error_event_in_a_stream_is_a_failed_reply_without_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = "sk-wire-0123456789abcdef"
    monkeypatch.setenv("WIRE_TEST_KEY", key)
    error = json.dumps({"error": {"message": f"invalid key {key[:12]}..."}})
    stream = f'data: {{"choices": [{{"index": 0, "delta": {{"content": "x"}}}}]}}\n\ndata: {error}\n\n'
    answer = (stream + "data: [DONE]\n\n").encode()

    async def go() -> Reply:
        server, _ = await _serve(0, answer)
        port = server.sockets[0].getsockname()[1]
        endpoint = Endpoint("e", f"http://127.0.0.1:{port}/v1", "m", api_key_env="WIRE_TEST_KEY")
        async with server, Wire(endpoint) as wire:
            return await wire.post({"stream": True, "messages": []})

    reply = asyncio.run(go())
    assert not reply.ok and reply.error is not None
    assert "invalid key ***" in reply.error and key[:8] not in reply.error
