"""DNS, TCP connect and TLS handshake per new connection, against a real TLS endpoint on 127.0.0.1 (a
TLS-terminating proxy in front of the scripted server, its certificate made here by openssl and trusted
through SSL_CERT_FILE), and a new connection's cost set apart from a reused one's."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from scripted_server import ScriptedServer

from lossless.cli import main
from lossless.rundir import read_jsonl


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@pytest.fixture
def tls_proxy(server: ScriptedServer, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """(port, CA file): https://localhost:PORT/v1 is the scripted server behind TLS."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    loop = asyncio.new_event_loop()
    ready: list[asyncio.Server] = []
    open_: set[asyncio.StreamWriter] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", server.port)
        open_.update((writer, up_writer))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def start() -> None:
        ready.append(await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context))

    async def stop() -> None:
        for w in open_:
            w.close()
        ready[0].close()
        await ready[0].wait_closed()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    yield ready[0].sockets[0].getsockname()[1], cert
    asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_new_connections_are_timed_phase_by_phase(
    server: ScriptedServer, tls_proxy: tuple[int, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.script({"steps": [[0.005, "content", 1]] * 3})
    port, ca = tls_proxy
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    args = [
        "bench",
        f"https://localhost:{port}/v1",
        "--model",
        "m",
        "--concurrency",
        "2",
        "--requests",
        "10",
        "--out",
        str(tmp_path / "run"),
        "--json",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    records = list(read_jsonl(tmp_path / "run" / "records.jsonl"))
    new = [r for r in records if r.connection == "new"]
    reused = [r for r in records if r.connection == "reused"]
    assert 1 <= len(new) <= 2 and len(reused) == len(records) - len(new)  # the pool keeps them
    assert all(r.connect_ns and r.connect_ns > 0 and r.tls_ns and r.tls_ns > 0 for r in new)
    assert any(r.dns_ns is not None and r.dns_ns > 0 for r in new)  # "localhost" looked up once
    assert all(r.dns_ns is None and r.connect_ns is None and r.tls_ns is None for r in reused)
    (entry,) = json.loads(result.stdout)["endpoints"]
    assert entry["tls_ms"]["n"] == len(new) and entry["ttfb_reused_ms"]["n"] == len(reused)
    assert entry["ttfb_new_ms"]["n"] == len(new)


def test_plain_http_has_no_handshake(server: ScriptedServer, tmp_path: Path) -> None:
    server.script({"steps": [[0.0, "content", 1]] * 2})
    url = f"http://localhost:{server.port}/v1"
    result = CliRunner().invoke(
        main, ["bench", url, "--model", "m", "--requests", "3", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    records = list(read_jsonl(tmp_path / "records.jsonl"))
    (first, *rest) = records
    assert first.connection == "new" and first.connect_ns and first.tls_ns is None
    assert [r.connection for r in rest] == ["reused", "reused"]
