"""The only module that knows the HTTP library: aiohttp, chosen by benchmarks/client_speed.py.

Library exceptions become ``TransportError`` with an error kind here, so nothing above depends on them.
The API key lives in the headers of the library's session object and nowhere else; ``redact`` removes it
from any text a server sends back before that text becomes an error message.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from lossless.records import IDENTITY_HEADERS, Failure

# Headers kept raw in records: server-side timing, request ids, and Retry-After for the retry loop.
TIMING_HEADERS = frozenset(
    {"x-envoy-upstream-service-time", "openai-processing-ms", "server-timing", "x-request-id", "retry-after"}
)
KEPT_HEADERS = TIMING_HEADERS | IDENTITY_HEADERS


@dataclass(frozen=True)
class Connection:
    """How a request got its connection: a new one, with its phases in ns (DNS None when the lookup was
    cached, TLS None over plain HTTP), or one reused from the pool (no phases)."""

    kind: str | None = None  # "new", "reused"; None: the request never got one
    dns_ns: int | None = None
    connect_ns: int | None = None  # the TCP handshake
    tls_ns: int | None = None


# The phases of the request being sent in this task: aiohttp's trace hooks and the TLS context write the
# times they see here (both run in the task that asked for the connection)
_MARKS: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar("lossless_marks", default=None)


def _mark(name: str) -> Callable[..., Any]:
    async def hook(*_: object) -> None:
        marks = _MARKS.get()
        if marks is not None:
            marks[name] = time.perf_counter_ns()

    return hook


def _tracing() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_dns_resolvehost_start.append(_mark("dns_start"))
    trace.on_dns_resolvehost_end.append(_mark("dns_end"))
    trace.on_connection_create_start.append(_mark("create_start"))
    trace.on_connection_create_end.append(_mark("create_end"))
    trace.on_connection_reuseconn.append(_mark("reused"))
    return trace


class _TimedTLS(ssl.SSLContext):
    """The default verified context, noting when the TLS handshake begins: asyncio (and uvloop) wrap the
    connected socket's bytes with ``wrap_bio`` right before the handshake, so TCP ends there. aiohttp's
    hooks see only the connection's start and end, TCP and TLS together."""

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        marks = _MARKS.get()
        if marks is not None:
            marks["tls_start"] = time.perf_counter_ns()
        return super().wrap_bio(*args, **kwargs)


def _tls_context() -> ssl.SSLContext:
    context = _TimedTLS(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and host names, as aiohttp's own
    context.load_default_certs()  # the system's store (or SSL_CERT_FILE), as ssl.create_default_context
    return context


def connection_of(marks: dict[str, int]) -> Connection:
    """The marks one request's connection left -> its kind and phases."""
    if "reused" in marks:
        return Connection("reused")
    start, end = marks.get("create_start"), marks.get("create_end")
    if start is None or end is None:
        return Connection()
    dns = marks["dns_end"] - marks["dns_start"] if {"dns_start", "dns_end"} <= marks.keys() else None
    tcp_from = marks.get("dns_end", start)
    tls_start = marks.get("tls_start")
    if tls_start is None:
        return Connection("new", dns, end - tcp_from)
    return Connection("new", dns, tls_start - tcp_from, end - tls_start)


class TransportError(Exception):
    def __init__(self, kind: str, message: str, connection: Connection | None = None) -> None:
        super().__init__(message)
        self.kind = kind  # Failure.CONNECTION or Failure.TIMEOUT_CONNECT
        self.connection = connection or Connection()  # the one the (last) attempt failed on, where known


class Response:
    __slots__ = ("_redact", "_resp", "connection", "headers", "status")

    def __init__(
        self,
        resp: aiohttp.ClientResponse,
        redact: Callable[[str], str],
        connection: Connection = Connection(),
    ) -> None:
        self._resp = resp
        self.connection = connection
        self._redact = redact  # the session's: a transport error's text may quote the URL's password
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
            raise TransportError(Failure.CONNECTION, self._redact(f"{type(exc).__name__}: {exc}")) from exc

    async def whole(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

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
        self,
        base_url: str,
        headers: dict[str, str],
        key: str | None,
        connect_timeout: float,
        key_header: str = "authorization",  # or "x-api-key" (Anthropic's Messages API): the key bare
    ) -> None:
        self._headers = {"content-type": "application/json", "accept-encoding": "identity", **headers}
        if key:
            self._headers[key_header] = f"Bearer {key}" if key_header == "authorization" else key
        # a password in the URL (http://user:key@host/v1) is a key too: aiohttp sends it as basic auth
        self._secrets = tuple(s for s in (key, urlsplit(base_url).password) if s)
        self._base = base_url.rstrip("/")
        self._connect_timeout = connect_timeout
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None  # a new connection for every request: retries

    def _client(self, fresh: bool = False) -> aiohttp.ClientSession:
        """The pooled session (created lazily: aiohttp wants a running event loop); ``fresh``: one that
        opens a new connection for each request and closes it after."""
        found = self._fresh if fresh else self._session
        if found is None:
            found = aiohttp.ClientSession(
                headers=self._headers,
                # Read/total limits are enforced by the caller per phase (first token, total).
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
                connector=aiohttp.TCPConnector(
                    limit=0, ttl_dns_cache=300, ssl=_tls_context(), force_close=fresh
                ),
                trust_env=False,
                trace_configs=[_tracing()],
                auto_decompress=False,
            )
            if fresh:
                self._fresh = found
            else:
                self._session = found
        return found

    def redact(self, text: str) -> str:
        return redact(text, self._secrets)

    @asynccontextmanager
    async def post(self, path: str, body: bytes) -> AsyncIterator[Response]:
        marks: dict[str, int] = {}
        token = _MARKS.set(marks)
        try:
            resp = await self._send(path, body, marks)
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise TransportError(Failure.TIMEOUT_CONNECT, "connect timed out", connection_of(marks)) from exc
        except aiohttp.ClientError as exc:
            message = self.redact(f"{type(exc).__name__}: {exc}")
            raise TransportError(Failure.CONNECTION, message, connection_of(marks)) from exc
        finally:
            _MARKS.reset(token)
        try:
            yield Response(resp, self.redact, connection_of(marks))
        finally:
            # A response abandoned midway must not go back to the pool: its rest would be read as the
            # next response's head.
            if resp.content.at_eof():
                resp.release()
            else:
                resp.close()

    async def _send(self, path: str, body: bytes, marks: dict[str, int]) -> aiohttp.ClientResponse:
        """POST; once more on a new connection when a pooled one turns out closed by the server before
        any answer came back on it. llama.cpp's server closes a connection just after each streamed
        answer while its headers say keep-alive, and the next request, sent before the close arrived,
        failed (unwritten, or the server gone at once) though the server never read it. Clients users
        run do the same (httpx checks a pooled connection before reuse; the openai client retries). The
        second try opens a new connection: another pooled one may be closed too (llama-server -np 16 at
        16 clients: the second pooled try failed as the first, 2 requests in 48). A failure on a new
        connection, or on a reused one of any other kind, is recorded as it is. ``marks`` are the last
        attempt's (see ``connection_of``)."""
        for attempt in range(2):
            marks.clear()
            try:
                # Redirects are not followed: aiohttp would carry custom key headers (api-key, x-api-key)
                # to another origin (it drops only Authorization). A 3xx is an answer, recorded as such.
                client = self._client(fresh=attempt > 0)
                return await client.post(self._base + path, data=body, allow_redirects=False)
            except aiohttp.ClientConnectionError as exc:
                if attempt or "reused" not in marks or not _closed_before_answer(exc):
                    raise
        raise AssertionError("unreachable")  # the loop returns or raises

    async def get_text(self, url: str, timeout: float, limit: int = 8 << 20) -> str | None:
        """A plain GET (Prometheus /metrics, /v1/models); None when unreachable, not 200 or not text.
        At most ``limit`` bytes are read: a side request must never hold the run up."""
        try:
            timeout_ = aiohttp.ClientTimeout(total=timeout)
            async with self._client().get(url, timeout=timeout_, allow_redirects=False) as resp:
                if resp.status != 200:
                    return None
                return (await resp.content.read(limit)).decode("utf-8")
        except (TimeoutError, aiohttp.ClientError, UnicodeDecodeError):
            return None

    async def aclose(self) -> None:
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()


def _closed_before_answer(exc: aiohttp.ClientConnectionError) -> bool:
    """The failures of a connection the server had closed: nothing could be written to it, or it was gone
    before a byte of an answer (raised by ``post``, so before the status line)."""
    unwritten = isinstance(exc.__cause__, aiohttp.ClientConnectionResetError)
    return unwritten or isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientConnectionResetError)


async def unreachable(base_url: str, timeout: float) -> str | None:
    """Why no TCP connection to the URL's host and port opens within ``timeout``; None when one does.
    (Direct, like the sessions: no proxy from the environment.)"""
    parts = urlsplit(base_url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(parts.hostname, port)
    except TimeoutError:
        return f"no connection within {timeout:g} s"
    except (OSError, ValueError) as exc:  # refused, unresolvable, unreachable; a port out of range
        return getattr(exc, "strerror", None) or str(exc)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


FRAGMENT = 8  # a run of this many characters of a key is a key: providers echo a key's start or end


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every secret, and every run of FRAGMENT or more of a secret's characters in order
    (an error body saying "invalid key sk-abcdefgh..." shows part of one), replaced by ``***``."""
    hidden = [False] * len(text)
    for secret in secrets:
        shortest = min(FRAGMENT, len(secret))
        for start in range(len(text)):
            for offset in range(len(secret)):
                run = 0
                while start + run < len(text) and offset + run < len(secret):
                    if text[start + run] != secret[offset + run]:
                        break
                    run += 1
                if run >= shortest:
                    hidden[start : start + run] = [True] * run
    out, i = [], 0
    while i < len(text):
        if hidden[i]:
            while i < len(text) and hidden[i]:
                i += 1
            out.append("***")
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
