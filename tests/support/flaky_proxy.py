"""A proxy on 127.0.0.1 (a thread) in front of a real OpenAI-compatible server that fails some requests:
after the first ``healthy`` requests, it answers ``fail_every`` - 1 of every ``fail_every`` with a 500
instead of forwarding them. For "a failed request is data, not the end of the run"."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from provider_server import plain_server
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lossless.server.main import bind, url_of


@contextmanager
def flaky_proxy(upstream: str, *, healthy: int, fail_every: int) -> Iterator[str]:
    """Yield the proxy's base URL (``http://127.0.0.1:PORT/v1``); ``upstream`` is one too."""
    seen = {"n": 0}

    async def forward(request: Request) -> Response:
        seen["n"] += 1
        n = seen["n"] - healthy
        if n > 0 and n % fail_every:
            return JSONResponse({"error": {"message": "scripted failure", "type": "server_error"}}, 500)
        path = request.url.path.removeprefix("/v1")
        body, headers = await request.body(), {"content-type": "application/json"}
        async with httpx.AsyncClient(base_url=upstream, trust_env=False, timeout=120) as client:
            answer = await client.post(path, content=body, headers=headers)
        return Response(answer.content, answer.status_code, media_type="application/json")

    app = Starlette(routes=[Route("/v1/{rest:path}", forward, methods=["POST"])])
    sock = bind("127.0.0.1", 0)
    server = plain_server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        yield url_of(sock, "127.0.0.1") + "/v1"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
