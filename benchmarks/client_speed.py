"""How fast and how exact is lossless's own client? (A benchmark, not a test.)

    python benchmarks/client_speed.py [--events 200000] [--streams 1,64,256]

(a) the most SSE events per second one client process ingests through the real path
    (HTTP library -> SSE parser -> chunk parsing -> RequestRecord), plus the bare read+parse loop of
    httpx and aiohttp for the library choice; (b) the error of client event timestamps against the
    server's send times (the server writes its perf_counter_ns into every event; one system-wide
    monotonic clock) at several concurrent streams. The server runs in its own process so that it does
    not share the client's core. Targets: >= 100,000 events/s; timing error p99 <= 1 ms at 256 streams.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import time

import numpy as np
import sse_server

from lossless.client.call import CallOptions, Job, call
from lossless.client.http import Session
from lossless.client.sse import SSEParser
from lossless.endpoints import Endpoint
from lossless.workload.prompts import Prompt


def _job(url: str, i: int = 0) -> Job:
    return Job(Endpoint("bench", url, "m"), Prompt(f"p{i}", "bench", (("user", "x"),)), i, "bench", False, 0)


async def _lossless_ingest(url: str, n: int) -> float:
    session = Session(url, {}, None, 5.0)
    opts = CallOptions("chat", True, n, None, None)
    t = time.perf_counter()
    record = await call(session, _job(url), 0, opts)
    dt = time.perf_counter() - t
    await session.aclose()
    assert record.ok and len(record.event_ns) >= n, record.error
    return n / dt


async def _bare_ingest(lib: str, url: str, n: int) -> float:
    body = {"model": "m", "max_tokens": n, "stream": True}
    parser, count = SSEParser(), 0
    t = time.perf_counter()
    if lib == "httpx":
        import httpx

        async with (
            httpx.AsyncClient(trust_env=False) as c,
            c.stream("POST", url + "/chat/completions", json=body) as r,
        ):
            async for b in r.aiter_raw():
                for d in parser.feed(b):
                    count += d != b"[DONE]" and bool(json.loads(d) or 1)
    else:
        import aiohttp

        async with aiohttp.ClientSession() as s, s.post(url + "/chat/completions", json=body) as r:
            async for b in r.content.iter_any():
                for d in parser.feed(b):
                    count += d != b"[DONE]" and bool(json.loads(d) or 1)
    return count / (time.perf_counter() - t)


async def _timing_errors(url: str, streams: int, events: int, interval_us: int) -> np.ndarray:
    session = Session(url, {}, None, 5.0)
    opts = CallOptions("chat", True, events, None, None)
    body_extra = {"x_interval_us": interval_us}

    async def one(i: int) -> list[float]:
        job = _job(url, i)
        job = Job(Endpoint("bench", url, "m", body=body_extra), job.prompt, i, "bench", False, 0)
        await asyncio.sleep(i * interval_us / 1e6 / max(streams, 1))  # spread the streams' phases
        r = await call(session, job, 0, opts)
        assert r.ok, r.error
        sent = [int(x) for x in r.text.split()]
        got = [t for t, k in zip(r.event_ns, r.event_kinds, strict=True) if k == "c"]
        return [(g - s) / 1e6 for g, s in zip(got, sent, strict=True)]

    results = await asyncio.gather(*(one(i) for i in range(streams)))
    await session.aclose()
    return np.array([e for r in results for e in r])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--streams", default="1,64,256")
    ap.add_argument("--interval-ms", type=float, default=20.0, help="gap between a stream's events")
    ap.add_argument("--stream-events", type=int, default=50)
    args = ap.parse_args()
    parent, child = mp.Pipe()
    server = mp.get_context("spawn").Process(target=sse_server.serve, args=(child,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{parent.recv()}/v1"
    try:
        out: dict[str, object] = {}
        for name, coro in (
            ("lossless_events_per_s", lambda: _lossless_ingest(url, args.events)),
            ("bare_httpx_events_per_s", lambda: _bare_ingest("httpx", url, args.events)),
            ("bare_aiohttp_events_per_s", lambda: _bare_ingest("aiohttp", url, args.events)),
        ):
            out[name] = round(max(asyncio.run(coro()) for _ in range(3)))
        for streams in (int(s) for s in args.streams.split(",")):
            errors = asyncio.run(
                _timing_errors(url, streams, args.stream_events, int(args.interval_ms * 1000))
            )
            out[f"timing_error_ms_{streams}_streams"] = {
                "n": int(errors.size),
                "p50": round(float(np.percentile(errors, 50)), 3),
                "p99": round(float(np.percentile(errors, 99)), 3),
                "max": round(float(errors.max()), 3),
            }
        print(json.dumps(out, indent=2))
    finally:
        parent.send("stop")
        server.join(5)


if __name__ == "__main__":
    main()
