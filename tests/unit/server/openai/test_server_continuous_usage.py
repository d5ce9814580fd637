"""vLLM's continuous usage stats: with ``stream_options: {include_usage, continuous_usage_stats}`` every
chunk of a stream carries the running counts; without the second, chunks carry ``usage: null`` as before."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from lossless.engine.engine import Delta
from lossless.server.jobs import EngineJob, Event, Finished
from lossless.server.openai import replies
from lossless.server.openai.bodies import Head
from lossless.server.openai.protocol import ApiRequest, parse

MODEL = "m"
HEAD = Head("chatcmpl-1", MODEL, 0, "fp")
EVENTS: list[Event] = [
    Delta("Hel", (5,)),
    Delta("", (6,)),  # held back (half a character): no chunk, but a token
    Delta("lo", (7,)),
    Delta("!", (8, 9), finish_reason="stop"),
    Finished("stop", 5, 0.1, 0.2),
]


def chunks(req: ApiRequest, events: list[Event]) -> list[dict[str, Any]]:
    async def main() -> list[bytes]:
        job = EngineJob([1, 2, 3], req.params, asyncio.get_running_loop())
        for event in events:
            job.events.put_nowait(event)
        return [chunk async for chunk in replies.stream(req, job, HEAD, "")]

    out = b"".join(asyncio.run(main())).decode()
    return [json.loads(line[6:]) for line in out.splitlines() if line.startswith("data: {")]


def request(api: str, options: dict[str, Any]) -> ApiRequest:
    body = {"messages": [{"role": "user", "content": "hi"}]} if api == "chat" else {"prompt": "hi"}
    return parse(api, {**body, "stream": True, "stream_options": options}, MODEL, frozenset())  # type: ignore[arg-type]


def test_every_chunk_carries_the_running_counts() -> None:
    for api in ("chat", "completions"):
        got = chunks(request(api, {"include_usage": True, "continuous_usage_stats": True}), EVENTS)
        running = [c["usage"]["completion_tokens"] for c in got]
        first = [0] if api == "chat" else []  # the role chunk, before any token
        assert running == [*first, 1, 3, 5, 5]  # ... and the usage-only chunk at the end
        assert all(c["usage"]["prompt_tokens"] == 3 for c in got)
        assert all(c["usage"]["total_tokens"] == 3 + c["usage"]["completion_tokens"] for c in got)
        assert got[-1]["choices"] == []


def test_without_it_chunks_are_unchanged() -> None:
    got = chunks(request("chat", {"include_usage": True}), EVENTS)
    assert [c["usage"] for c in got[:-1]] == [None] * (len(got) - 1)
    assert got[-1]["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 5,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    plain = chunks(request("chat", {"continuous_usage_stats": True}), EVENTS)  # needs include_usage (vLLM)
    assert all("usage" not in c for c in plain)
