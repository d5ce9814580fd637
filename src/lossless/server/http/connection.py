"""uvicorn's h11 protocol with what it leaves out: a deadline on the request head, Nagle off, and its own
refusals in the OpenAI error shape.

uvicorn (0.54) arms a timer only after a response (``timeout_keep_alive``, 5 s) and disarms it on the
first byte that arrives: a connection that never sends anything, or trickles a head a byte at a time
(slowloris), is held forever. Here a head must be complete within ``head_timeout_s`` of the connection
opening or of the previous response; then the connection is closed, after a 408 if part of a head came.
Deadlines on the body are ``BodyGuard``'s (limits.py): by then the app runs and can answer itself.

h11 is named explicitly, not "auto": the deadline is written against its state machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def _raw_response(status: int, reason: str, message: str, code: str) -> bytes:
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def guarded_h11(head_timeout_s: float, count: Callable[[int], None]) -> type[asyncio.Protocol]:
    """An ``H11Protocol`` class with a head deadline; ``count(status)`` is told of every refusal made
    here, which never reaches the app's request counter."""
    timeout_response = _raw_response(
        408,
        "Request Timeout",
        f"the request head did not arrive within {head_timeout_s:g} s",
        "request_timeout",
    )

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            _no_delay(transport)
            self._arm_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # a whole head arrived: the app's turn
                self._disarm_head()

        def on_response_complete(self) -> None:
            super().on_response_complete()  # may start on a pipelined request already buffered
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm_head()

        def send_400_response(self, msg: str) -> None:
            # h11 refused the bytes (malformed, or a head incomplete past 16 KiB): answer in the API's shape,
            # unless a response is already under way (then bytes of ours would corrupt it)
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(_raw_response(400, "Bad Request", msg, "invalid_http"))
                count(400)
            self.transport.close()

        def _arm_head(self) -> None:
            self._disarm_head()
            self._head_timer = self.loop.call_later(head_timeout_s, self._head_timed_out)

        def _disarm_head(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            if self.conn.trailing_data[0]:  # part of a head came: say why we hang up
                self.transport.write(timeout_response)
                count(408)
            self.transport.close()

    return GuardedH11Protocol


def _no_delay(transport: Any) -> None:
    """Small writes (an SSE event, a JSON body after its head) leave at once. asyncio sets TCP_NODELAY
    only on sockets made with proto IPPROTO_TCP, and ``socket.create_server`` (main.bind) makes them
    with proto 0, so without this every keep-alive response waited ~40 ms for the client's delayed ACK."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        # the peer may have left already; uvloop's socket stand-in may not take options
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
