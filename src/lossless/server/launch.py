"""Run the server inside another command: ``with start_embedded(config) as base_url: ...``.

bench, probe, verify and demo call this when no endpoint URL is given. The server runs in a background
thread on a free port of ``config.host`` (``config.port`` is the public port of ``lossless serve`` and
is not used here: two embedded servers must never collide), and is shut down on exit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from lossless.errors import EndpointError
from lossless.server.http.limits import DEFAULT_LIMITS, RequestLimits
from lossless.server.main import (
    LoadedModel,
    batched,
    bind,
    build_app,
    decoding_as,
    load_model,
    url_of,
    uvicorn_server,
)
from lossless.server.options import ServeOptions

START_TIMEOUT_S = 60.0


@contextmanager
def start_embedded(
    config: ServeOptions,
    *,
    loaded: LoadedModel | None = None,
    port: int = 0,
    limits: RequestLimits = DEFAULT_LIMITS,
) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:PORT/v1``) once ``/health`` answers.

    ``loaded`` reuses a model already in memory (tests, or a command serving twice), decoding as
    ``config.speculative`` says (see ``decoding_as``: the two servers share one engine, which lets one
    generation run at a time); otherwise the model of ``config`` is loaded here, in the calling thread,
    so a loading error surfaces as itself (``load_model`` resolves a ``config.dtype`` of "auto").
    ``limits`` bound what one request may cost (tests pass short time limits).
    """
    config = batched(config)  # a batch runs eager (`main.batched`)
    # a model loaded for another server decodes as *this* config says (plain or speculative)
    loaded = decoding_as(loaded, config) if loaded else load_model(config)
    sock = bind(config.host, port)
    server = uvicorn_server(build_app(loaded, config, limits), limits)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="lossless-embedded-server", daemon=True
    )
    thread.start()
    root = url_of(sock, config.host)
    try:
        _wait_healthy(root, thread)
        yield root + "/v1"
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        sock.close()


def _wait_healthy(root: str, thread: threading.Thread) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + START_TIMEOUT_S
    # No proxy: one from the environment must not sit between us and our own loopback server.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.monotonic() < deadline:
        if not thread.is_alive():
            raise EndpointError(f"the embedded server at {root} stopped while starting")
        try:
            with opener.open(root + "/health", timeout=2.0) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.02)
    raise EndpointError(f"the embedded server at {root} did not answer /health within {START_TIMEOUT_S:g} s")
