"""What the benchmarks share, so that each imports only ``lossless`` and this module.

- The test suite's helpers they start (``tests/support``: third-party servers, tiny checkpoints, the
  lossy engines, llama.cpp's vocabularies), re-exported here. pytest finds that folder on its
  pythonpath; a script run as ``python benchmarks/NAME.py`` does not, so this module adds it, once.
- ``serve_lossless()``: ``lossless serve`` in a process of its own, as a user starts it.
- ``in_turn()`` and ``bench_one()``: servers started alone on the machine one after another, each
  measured by ``lossless bench`` runs as a user types them (serve_peers.py, serve_load.py).
- ``serve_sse()``: a fast OpenAI-style SSE server for the client's benchmarks (client_speed.py,
  workers_speed.py): raw asyncio, HTTP/1.1 keep-alive, chunked. The request body's ``max_tokens`` is the
  number of events; ``x_interval_us`` spaces them (0: as fast as possible, ``x_batch`` events per
  write). Every content delta is the server's ``time.perf_counter_ns()`` at the moment of writing, so a
  client can compare its own arrival times with the send times.
- ``SUITES``: the prompts the decoding benchmarks run (grounded tasks with long outputs; open chat).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

# the one place a benchmark reaches the test suite's helpers
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import third_party  # the module too: verify_calibration.py builds a server of ours on its _Server
from llama_vocab import VERSION as LLAMA_VOCAB_VERSION, vocab_files
from third_party import (
    LlamaCppServer,
    LlamaServer,
    LosslessServer,
    TransformersServer,
    VllmServer,
    hf_folder,
    requantize,
    vllm_python,
)
from tiny_checkpoint import write_tiny_checkpoint

__all__ = [
    "CODE",
    "LLAMA_VOCAB_VERSION",
    "LOSSLESS",
    "MODEL",
    "PARAGRAPH",
    "SUITES",
    "TYPOS",
    "LlamaCppServer",
    "LlamaServer",
    "LosslessServer",
    "TransformersServer",
    "VllmServer",
    "bench_one",
    "hf_folder",
    "in_turn",
    "lossy_engines",
    "requantize",
    "serve_lossless",
    "serve_sse",
    "third_party",
    "vllm_python",
    "vocab_files",
    "write_tiny_checkpoint",
]


def lossy_engines() -> ModuleType:
    """tests/support/lossy_engines.py, imported when asked: it imports torch, which the SSE server's
    process (this module, spawned) should not pay for."""
    import lossy_engines as module

    return module


# --- our server, as a user starts it ------------------------------------------------------------------

LOSSLESS = [sys.executable, "-m", "lossless.cli"]
MODEL = "smollm2-135m-instruct"  # what our server answers to


def serve_lossless(*extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """``lossless serve`` on a free port; its URL once /v1/models answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*LOSSLESS, "serve", "--port", str(port), *extra], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/models", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"lossless serve {' '.join(extra)} did not answer in 300 s")


# --- one server at a time, measured by `lossless bench` --------------------------------------------------


def in_turn(
    table: dict[str, tuple[str, Callable[[], Any]]], runs: int
) -> Iterator[tuple[int, str, str, Any]]:
    """Each run, every server of ``table`` (name -> (the model name to send, a context manager starting it))
    started alone in turn, the order reversed every other run so that a drift in the machine's speed falls
    on all alike: (the run, from 1; the name; the model name; the running server), stopped once the caller
    moves on."""
    for run in range(runs):
        order = list(table) if run % 2 == 0 else list(reversed(table))
        print(f"run {run + 1} of {runs}: {', '.join(order)}; load average {os.getloadavg()}", file=sys.stderr)
        for name in order:
            model, start = table[name]
            began = time.monotonic()
            with start() as server:
                print(f"  {name}: ready in {time.monotonic() - began:.0f} s ({server.name})", file=sys.stderr)
                yield run + 1, name, model, server


def pooled(paths: list[Path]) -> list[dict[str, Any]]:
    """The rows of several results.json (runs of the same command at other times), each run named
    ``FILE_INDEX:RUN`` so that the runs stay apart."""
    rows = []
    for i, path in enumerate(paths):
        rows += [r | {"run": f"{i}:{r['run']}"} for r in json.loads(path.read_text())["rows"]]
    return rows


def bench_one(
    url: str, model: str, suite: str, requests: int, out: Path, concurrency: int = 1
) -> dict[str, Any]:
    """One `lossless bench` run as a user types it: greedy, at most 128 tokens, ``concurrency`` requests
    in flight, the run folder ``out`` (its endpoint named after ``out``'s parent); its summary's one
    endpoint."""
    endpoints = out.with_suffix(".toml")
    endpoints.write_text(
        f'[[endpoint]]\nname = "{out.parent.name}"\nbase_url = "{url}"\nmodel = "{model}"\n'
        "body = { temperature = 0 }\n"
    )
    argv = [*LOSSLESS, "bench", "--endpoints", str(endpoints), "--suite", suite, "--requests", str(requests)]
    argv += ["--concurrency", str(concurrency), "--max-tokens", "128", "--out", str(out), "--overwrite"]
    subprocess.run(argv, check=True, capture_output=True, text=True)
    endpoints.unlink()
    (entry,) = json.loads((out / "summary.json").read_text())["endpoints"]
    return dict(entry)


# --- a fast SSE server ---------------------------------------------------------------------------------

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


def serve_sse(conn: Connection, cpu: int | None = None) -> None:
    """The SSE server in this process (a child the benchmark spawns): its port goes back on ``conn``,
    any message on ``conn`` stops it. ``cpu``: the one CPU it runs on."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    asyncio.run(_serve(conn))


# --- prompts -------------------------------------------------------------------------------------------

PARAGRAPH = (
    "The city library opened its new reading room last spring. It has tall windows facing the park, "
    "long oak tables, and quiet corners with armchairs for anyone who wants to read for an afternoon. "
    "Volunteers run a homework club on Tuesdays and Thursdays, and on Saturday mornings a storyteller "
    "reads to young children. The librarians say that visits have doubled since the room opened, and "
    "they hope to add a small cafe next year if the council approves the budget."
)
TYPOS = (
    "Yesterday we walkd to the harbour to wach the boats come in. The wind was strong and the waves "
    "were hight, but the fishermen seemed calm and confidant. One of them told us that he had been "
    "sailing for fourty years and had never seen the sea so rough in sumer. We bought fresh fish for "
    "diner and walked home along the cliffs as the sun set behind the lighthouse."
)
CODE = """def summarize(values):
    n = len(values)
    if n == 0:
        return None
    s = 0
    for v in values:
        s = s + v
    m = s / n
    sq = 0
    for v in values:
        sq = sq + (v - m) ** 2
    sd = (sq / n) ** 0.5
    lo = min(values)
    hi = max(values)
    return {"n": n, "mean": m, "sd": sd, "min": lo, "max": hi}
"""
SUITES = {
    "grounded": [
        f"Repeat the following text exactly, word for word:\n\n{PARAGRAPH}",
        f"Correct the spelling mistakes in this text and write out the corrected text:\n\n{TYPOS}",
        f"In this Python code, rename the variable `values` to `samples` and `n` to `count`. "
        f"Write out the whole code.\n\n{CODE}",
        f"Rewrite this text, replacing 'library' with 'museum' everywhere:\n\n{PARAGRAPH}",
        f"Add a short comment above each line of this Python code:\n\n{CODE}",
        f"Rewrite this text in the present tense:\n\n{TYPOS}",
    ],
    "chat": [
        "What are some good habits for staying healthy while working from home?",
        "Write a short story about a robot who wants to learn to paint.",
        "Explain how rainbows form, for a ten-year-old.",
        "Give me three ideas for a weekend trip with friends, and why each is fun.",
        "What is the difference between a virus and a bacterium?",
        "Write a polite email asking a neighbour to keep their music down at night.",
    ],
}
