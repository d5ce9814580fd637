"""A scripted agent model behind a real OpenAI-compatible HTTP server on 127.0.0.1, for testing `tasks`.

Its tasks are the ones ``task_specs`` writes: the user message says ``TASK <id>``, a ``lookup`` tool
answers ``key`` ``k-<id>``, and the right final answer is ``answer-<id>``. Per task (by id, else the
default), a ``Behaviour`` says what the model does: it calls ``lookup`` ``tool_calls`` times, one call
a turn (its arguments invalid JSON with chance ``invalid_args``), then answers: right with chance
``success`` when every tool result it got was not an error, else ``wrong``. Each answer or call takes
``tokens`` chunks of one token: the first after TTFT (drawn uniformly from 0.5x to 1.5x ``ttft_s``), the
others ``tpot_s`` apart, timed against absolute deadlines so that sleeps do not add up. A share
``fail_5xx`` of requests get an immediate 503 (with ``Retry-After`` when ``retry_after`` is set). The
state keeps the time each answered request was set to take (``intended_s``), so that a test can tell
how much later than that its answers arrived.
Usage: ``prompt_tokens`` = 20 per message sent, ``completion_tokens`` = ``tokens``.

Draws are seeded per (seed, request body, how many times that body came): a run's outcome does not
depend on the order concurrent requests arrive in. Each response closes its connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

TOKENS_PER_MESSAGE = 20


@dataclass(frozen=True)
class Behaviour:
    success: float = 1.0
    ttft_s: float = 0.02
    tpot_s: float = 0.002
    tokens: int = 6
    fail_5xx: float = 0.0
    retry_after: str | None = None
    tool_calls: int = 1
    invalid_args: float = 0.0


@dataclass
class _State:
    default: Behaviour
    per_task: Mapping[str, Behaviour]
    seed: int
    seen: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    intended_s: list[float] = field(default_factory=list)  # per answered request: the wait it was set
    lock: threading.Lock = field(default_factory=threading.Lock)

    def rng(self, raw: bytes) -> random.Random:
        digest = hashlib.sha256(raw).hexdigest()
        with self.lock:
            n = self.seen.get(digest, 0)
            self.seen[digest] = n + 1
            self.requests += 1
        return random.Random(f"{self.seed}:{digest}:{n}")


def task_specs(n: int, tool_latency_s: float = 0.05, max_steps: int = 6) -> list[dict[str, Any]]:
    """n task-file objects the scripted model knows."""
    return [
        {
            "id": f"t{i}",
            "messages": [{"role": "user", "content": f"TASK t{i}"}],
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "lookup", "parameters": {"type": "object"}},
                    "latency_s": tool_latency_s,
                    "results": [{"arguments": {"key": f"k-t{i}"}, "result": f"v-t{i}"}],
                }
            ],
            "checker": {"kind": "exact", "answer": f"answer-t{i}"},
            "limits": {"max_steps": max_steps, "max_tokens": 1000, "max_seconds": 30},
        }
        for i in range(n)
    ]


def _task_id(messages: list[dict[str, Any]]) -> str:
    first = next(m for m in messages if m.get("role") == "user")
    return str(first["content"]).removeprefix("TASK ")


def _plan(body: dict[str, Any], b: Behaviour, rng: random.Random) -> tuple[list[dict[str, Any]], str]:
    """The chunk deltas of this turn, and its finish_reason."""
    messages = body["messages"]
    task = _task_id(messages)
    calls_made = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
    if calls_made < b.tool_calls:
        args = json.dumps({"key": f"k-{task}"})
        if rng.random() < b.invalid_args:
            args = args[:-1]  # the closing brace missing: not JSON
        pieces = [args[i * len(args) // b.tokens : (i + 1) * len(args) // b.tokens] for i in range(b.tokens)]
        deltas = [
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": f"call-{calls_made}",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": pieces[0]},
                    }
                ]
            }
        ]
        deltas += [{"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces[1:]]
        return deltas, "tool_calls"
    results_ok = all(
        not str(m.get("content", "")).startswith("error") for m in messages if m.get("role") == "tool"
    )
    right = results_ok and rng.random() < b.success
    text = f"answer-{task}" if right else "wrong"
    return [{"content": text}] + [{"content": " "}] * (b.tokens - 1), "stop"


def _usage(body: dict[str, Any], b: Behaviour) -> dict[str, int]:
    n_in = TOKENS_PER_MESSAGE * len(body["messages"])
    return {"prompt_tokens": n_in, "completion_tokens": b.tokens, "total_tokens": n_in + b.tokens}


def _chunk(delta: dict[str, Any], finish: str | None) -> bytes:
    obj = {
        "id": "x",
        "object": "chat.completion.chunk",
        "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _answer(writer: asyncio.StreamWriter, raw: bytes, state: _State) -> None:
    body = json.loads(raw)
    rng = state.rng(raw)
    b = state.per_task.get(_task_id(body["messages"]), state.default)
    if rng.random() < b.fail_5xx:
        extra = f"Retry-After: {b.retry_after}\r\n" if b.retry_after is not None else ""
        msg = b'{"error": {"message": "overloaded"}}'
        head = f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n{extra}"
        writer.write(f"{head}Content-Length: {len(msg)}\r\nConnection: close\r\n\r\n".encode() + msg)
        return
    start = time.monotonic()
    ttft = b.ttft_s * (0.5 + rng.random())
    deltas, finish = _plan(body, b, rng)
    state.intended_s.append(ttft + (len(deltas) - 1) * b.tpot_s)
    if not body.get("stream"):
        await asyncio.sleep(max(0.0, start + ttft + (b.tokens - 1) * b.tpot_s - time.monotonic()))
        message = _whole_message(deltas)
        obj = {
            "id": "x",
            "object": "chat.completion",
            "model": "scripted",
            "usage": _usage(body, b),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        data = json.dumps(obj).encode()
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        writer.write(f"{head}Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        return
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
    for i, delta in enumerate(deltas):
        await asyncio.sleep(max(0.0, start + ttft + i * b.tpot_s - time.monotonic()))
        writer.write(_chunk(delta, finish if i == len(deltas) - 1 else None))
        await writer.drain()
    usage = {"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": _usage(body, b)}
    writer.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")


def _whole_message(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    if "tool_calls" not in deltas[0]:
        return {"role": "assistant", "content": "".join(d["content"] for d in deltas)}
    call = deltas[0]["tool_calls"][0]
    arguments = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas)
    function = {"name": call["function"]["name"], "arguments": arguments}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call["id"], "type": "function", "function": function}],
    }


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, state: _State) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next(
            (int(v) for k, _, v in (h.partition(":") for h in lines[1:]) if k.lower() == "content-length"), 0
        )
        raw = await reader.readexactly(length)
        if lines[0].startswith("POST ") and lines[0].split()[1].endswith("/chat/completions"):
            await _answer(writer, raw, state)
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


@contextmanager
def task_server(
    default: Behaviour = Behaviour(), per_task: Mapping[str, Behaviour] | None = None, seed: int = 0
) -> Iterator[tuple[str, _State]]:
    """(base URL ``http://127.0.0.1:PORT/v1``, its state) while the block runs; the server in a thread."""
    state = _State(default, per_task or {}, seed)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    async def start() -> None:
        server = await asyncio.start_server(lambda r, w: _handle(r, w, state), "127.0.0.1", 0, backlog=512)
        holder["server"], holder["port"] = server, server.sockets[0].getsockname()[1]
        ready.set()

    thread = threading.Thread(target=loop.run_forever, name="task-server", daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop)
    if not ready.wait(10):
        raise RuntimeError("the task server did not start")
    try:
        yield f"http://127.0.0.1:{holder['port']}/v1", state
    finally:

        async def stop() -> None:
            holder["server"].close()
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in pending:  # answers the client gave up on (a task's time limit) still sleeping
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await holder["server"].wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
