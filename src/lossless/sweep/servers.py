"""One configuration's server: started on a free port of 127.0.0.1, waited for until ``/models``
answers, and stopped (SIGTERM, then SIGKILL) when its measurement is done, whatever happened."""

from __future__ import annotations

import asyncio
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lossless.client.http import Session
from lossless.errors import EndpointError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def argv(command: str | None, flags: str, port: int) -> list[str]:
    """The command that serves one configuration: ``lossless serve`` with the flags, or the template
    with {port} and {flags} filled in (the flags at its end when it has no {flags})."""
    if command is None:
        serve = [sys.executable, "-m", "lossless.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
        return serve + shlex.split(flags)
    text = command.replace("{port}", str(port))
    text = text.replace("{flags}", flags) if "{flags}" in command else f"{text} {flags}"
    return shlex.split(text)


def _ready(url: str) -> bool:
    async def ask() -> bool:
        session = Session(url, {}, None, 2.0)
        try:
            return await session.get_text(url.rstrip("/") + "/models", timeout=5.0) is not None
        finally:
            await session.aclose()

    return asyncio.run(ask())


@contextmanager
def served(words: list[str], port: int, log: Path, timeout: float) -> Iterator[str]:
    """The base URL of the server ``words`` starts, once it answers; its output goes to ``log``."""
    url = f"http://127.0.0.1:{port}/v1"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        try:
            proc = subprocess.Popen(words, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise EndpointError(f"cannot start {shlex.join(words)}: {exc.strerror or exc}") from exc
        try:
            _wait(proc, url, log, time.monotonic() + timeout)
            yield url
        finally:
            _stop(proc)


def _wait(proc: subprocess.Popen[bytes], url: str, log: Path, deadline: float) -> None:
    while not _ready(url):
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            raise EndpointError(f"the server exited ({proc.returncode}) before it answered: {tail[0][:300]}")
        if time.monotonic() > deadline:
            raise EndpointError(f"the server did not answer {url}/models in time (see {log})")
        time.sleep(0.5)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
