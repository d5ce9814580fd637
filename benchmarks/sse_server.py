"""A fast OpenAI-style SSE server for benchmarks/client_speed.py: raw asyncio, HTTP/1.1 keep-alive, chunked.

The request body's ``max_tokens`` is the number of events; ``x_interval_us`` spaces them (0: as fast as
possible, ``x_batch`` events per write). Every content delta is the server's ``time.perf_counter_ns()``
at the moment of writing, so a client can compare its own arrival times with the send times.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from multiprocessing.connection import Connection

_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    b"x-request-id: bench\r\n\r\n"
)


def _event(content: str) -> bytes:
    obj = {
        "id": "b",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": content}}],
    }
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


_USAGE_DONE = (
    b'data: {"id":"b","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,'
    b'"completion_tokens":%d}}\n\ndata: [DONE]\n\n'
)


async def _respond(writer: asyncio.StreamWriter, body: dict) -> None:
    n, interval, batch = (
        int(body["max_tokens"]),
        int(body.get("x_interval_us", 0)),
        int(body.get("x_batch", 64)),
    )
    writer.write(_HEAD)
    if interval == 0:
        event = _event("tok ")
        sent = 0
        while sent < n:
            k = min(batch, n - sent)
            writer.write(_chunk(event * k))
            sent += k
            await writer.drain()
    else:
        start = time.perf_counter_ns()
        for i in range(n):
            delay = (start + i * interval * 1000 - time.perf_counter_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(_chunk(_event(f"{time.perf_counter_ns()} ")))
    writer.write(_chunk(_USAGE_DONE % n) + b"0\r\n\r\n")
    await writer.drain()


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if not length:  # bench's GET /metrics, between levels: none here
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                continue
            body = json.loads(await reader.readexactly(length))
            await _respond(writer, body)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve(conn: Connection) -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", 0, backlog=1024)
    conn.send(server.sockets[0].getsockname()[1])
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, conn.recv)  # any message: stop
    server.close()


def serve(conn: Connection, cpu: int | None = None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    asyncio.run(_serve(conn))
