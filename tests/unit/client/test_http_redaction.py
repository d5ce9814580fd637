"""One redaction for every text a session lets out: a transport error raised while a body is read (the
library's text may quote the URL, and a URL may carry a password) is masked as an error body is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import MappingProxyType

import aiohttp
import pytest

from lossless.client.http import Session, TransportError

PASSWORD = "hunter2-very-secret"


class _Cut:
    """aiohttp's response at the seam: its body breaks off with an error that quotes the URL."""

    status = 200
    headers = MappingProxyType({})

    class content:
        @staticmethod
        async def iter_any() -> AsyncIterator[bytes]:
            yield b"data: {}\n\n"
            raise aiohttp.ClientPayloadError(f"cut reading http://user:{PASSWORD}@127.0.0.1:1/v1")


def test_a_transport_error_while_reading_is_redacted() -> None:
    from lossless.client.http import Response

    session = Session(f"http://user:{PASSWORD}@127.0.0.1:1/v1", {}, None, 1.0)
    response = Response(_Cut(), session.redact)  # type: ignore[arg-type]

    async def read() -> None:
        async for _ in response.chunks():
            pass

    with pytest.raises(TransportError) as raised:
        asyncio.run(read())
    assert PASSWORD not in str(raised.value) and PASSWORD[:8] not in str(raised.value)
    assert "***" in str(raised.value)
