"""A pooled connection the server has closed: the request is sent again once, on a new connection; any
other connection failure is recorded as it is. A real TCP server on 127.0.0.1 plays the part of
llama.cpp's server (which closes a connection just after a streamed answer while its headers say
keep-alive), deterministically: it answers one request per connection and drops the connection, unread,
when a second request arrives on it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from lossless.client.http import Session, TransportError

ANSWER = b'{"ok": true}'


@asynccontextmanager
async def one_per_connection(*, answer_first: bool = True) -> AsyncIterator[tuple[str, dict[str, int]]]:
    """A server answering the first request of each connection (keep-alive said) and closing the
    connection, unanswered, at its second; ``answer_first`` False: it answers none at all."""
    seen = {"connections": 0, "answered": 0, "dropped": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["connections"] += 1
        served = 0
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                await reader.readexactly(length)
                if served or not answer_first:
                    seen["dropped"] += 1
                    break
                served += 1
                seen["answered"] += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nKeep-Alive: timeout=5, max=100\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1", seen
    finally:
        server.close()
        await server.wait_closed()


async def post(session: Session) -> bytes:
    async with session.post("/chat/completions", b"{}") as resp:
        assert resp.status == 200
        return await resp.whole()


def test_a_closed_pooled_connection_is_replaced_and_the_request_answered() -> None:
    async def main() -> dict[str, int]:
        async with one_per_connection() as (url, seen):
            session = Session(url, {}, None, connect_timeout=5)
            try:
                for _ in range(3):
                    assert await post(session) == ANSWER
            finally:
                await session.aclose()
            return seen

    seen = asyncio.run(main())
    # the second request found its pooled connection dropped and went out again on a new one, closed
    # after its answer; the third found no pooled connection and opened one
    assert seen == {"connections": 3, "answered": 3, "dropped": 1}


def test_the_second_try_opens_a_new_connection_though_others_are_pooled() -> None:
    async def main() -> dict[str, int]:
        async with one_per_connection() as (url, seen):
            session = Session(url, {}, None, connect_timeout=5)
            try:
                # three at once: three connections, each answered once and pooled, each dropped at its next
                assert await asyncio.gather(*(post(session) for _ in range(3))) == [ANSWER] * 3
                assert await post(session) == ANSWER  # not sent again on another of the stale ones
            finally:
                await session.aclose()
            return seen

    assert asyncio.run(main()) == {"connections": 4, "answered": 4, "dropped": 1}


def test_a_failure_on_a_new_connection_is_not_sent_again() -> None:
    async def main() -> dict[str, int]:
        async with one_per_connection(answer_first=False) as (url, seen):
            session = Session(url, {}, None, connect_timeout=5)
            try:
                with pytest.raises(TransportError) as failed:
                    await post(session)
                assert failed.value.kind == "connection"
                assert failed.value.connection.kind == "new"  # the record says which kind failed
            finally:
                await session.aclose()
            return seen

    assert asyncio.run(main()) == {"connections": 1, "answered": 0, "dropped": 1}
