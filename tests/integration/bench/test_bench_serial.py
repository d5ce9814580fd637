"""``BenchConfig(serial=True)``: one request at a time over all endpoints, taking turns to go first (the
demo's two servers share one CPU, so neither may slow the other down)."""

from __future__ import annotations

import asyncio
import itertools

from scripted_server import ScriptedServer

from lossless.bench.config import BenchConfig, LoadLevel
from lossless.bench.loop import run_bench
from lossless.bench.phases import Window
from lossless.client.call import CallOptions
from lossless.client.endpoints import Endpoint


def test_serial_runs_one_request_at_a_time_and_alternates_who_goes_first() -> None:
    with ScriptedServer() as a, ScriptedServer() as b:
        for s in (a, b):
            s.script({"steps": [[0.01, "content", 1]] * 4})
        cfg = BenchConfig(
            endpoints=(Endpoint("a", a.url, "m"), Endpoint("b", b.url, "m")),
            call=CallOptions("chat", True, 16, 10.0, 20.0),
            suite="short+grounded",
            loads=(LoadLevel(concurrency=1),),
            requests=4,
            warmup=Window(1),
            serial=True,
        )
        records = asyncio.run(run_bench(cfg)).records
    assert [(r.endpoint, r.request_index) for r in records] == [
        ("a", 0),
        ("b", 0),
        ("b", 1),
        ("a", 1),
        ("a", 2),
        ("b", 2),
        ("b", 3),
        ("a", 3),
        ("a", 4),
        ("b", 4),
    ]
    for before, after in itertools.pairwise(records):
        assert before.end_ns is not None and before.end_ns <= after.sent_ns  # never two in flight
    assert [r.prompt_class for r in records if r.endpoint == "a"] == ["short", "grounded"] * 2 + ["short"]
    assert records[0].warmup and not records[2].warmup
