"""The only module that knows the HTTP library: aiohttp, chosen by benchmarks/client_speed.py.

Library exceptions become ``TransportError`` with an error kind here, so nothing above depends on them.
The API key lives in the headers of the library's session object and nowhere else; ``redact`` removes it
from any text a server sends back before that text becomes an error message.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from lossless.records import IDENTITY_HEADERS

# Headers kept raw in records: server-side timing, request ids, and Retry-After for the retry loop.
TIMING_HEADERS = frozenset(
    {"x-envoy-upstream-service-time", "openai-processing-ms", "server-timing", "x-request-id", "retry-after"}
)
KEPT_HEADERS = TIMING_HEADERS | IDENTITY_HEADERS


class TransportError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "connection" or "timeout_connect"


class Response:
    __slots__ = ("_resp", "headers", "status")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status
        self.headers = tuple(
            (k.lower(), v[:200]) for k, v in resp.headers.items() if k.lower() in KEPT_HEADERS
        )

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            # iter_any: whatever one socket read delivered, no line-length limit (readline stops at 64 KB)
            async for chunk in self._resp.content.iter_any():
                yield chunk
        except aiohttp.ClientError as exc:
            raise TransportError("connection", f"{type(exc).__name__}: {exc}") from exc

    async def drain(self, timeout: float = 1.0) -> None:
        """Read what follows [DONE] (the terminating chunk) so the connection can be reused."""
        try:
            async with asyncio.timeout(timeout):
                while await self._resp.content.readany():
                    pass
        except (TimeoutError, aiohttp.ClientError):
            pass

    async def read(self, limit: int) -> bytes:
        out = b""
        async for chunk in self.chunks():
            out += chunk
            if len(out) >= limit:
                break
        return out[:limit]


class Session:
    """One pooled client per endpoint; connections are reused like a real application would."""

    def __init__(
        self, base_url: str, headers: dict[str, str], key: str | None, connect_timeout: float
    ) -> None:
        self._headers = {"content-type": "application/json", "accept-encoding": "identity", **headers}
        if key:
            self._headers["authorization"] = f"Bearer {key}"
        self._secrets = tuple(s for s in (key,) if s)
        self._base = base_url.rstrip("/")
        self._connect_timeout = connect_timeout
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:  # created lazily: aiohttp wants a running event loop
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                # Read/total limits are enforced by the caller per phase (first token, total).
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
                trust_env=False,
                auto_decompress=False,
            )
        return self._session

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    @asynccontextmanager
    async def post(self, path: str, body: bytes) -> AsyncIterator[Response]:
        try:
            resp = await self._client().post(self._base + path, data=body)
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise TransportError("timeout_connect", "connect timed out") from exc
        except aiohttp.ClientError as exc:
            raise TransportError("connection", self.redact(f"{type(exc).__name__}: {exc}")) from exc
        try:
            yield Response(resp)
        finally:
            # A response abandoned midway must not go back to the pool: its rest would be read as the
            # next response's head.
            if resp.content.at_eof():
                resp.release()
            else:
                resp.close()

    async def get_text(self, url: str, timeout: float, limit: int = 8 << 20) -> str | None:
        """A plain GET (Prometheus /metrics, /v1/models); None when unreachable, not 200 or not text.
        At most ``limit`` bytes are read: a side request must never hold the run up."""
        try:
            async with self._client().get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                if resp.status != 200:
                    return None
                return (await resp.content.read(limit)).decode("utf-8")
        except (TimeoutError, aiohttp.ClientError, UnicodeDecodeError):
            return None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
