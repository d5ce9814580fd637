"""How fast and how exact is lossless's own client? (A benchmark, not a test.)

    python benchmarks/client_speed.py [--events 200000] [--streams 1,64,256]

(a) the most SSE events per second one client process ingests through the real path
    (HTTP library -> SSE parser -> chunk parsing -> RequestRecord), plus the bare read+parse loop of
    httpx and aiohttp for the library choice; (b) the error of client event timestamps against the
    server's send times (the server writes its perf_counter_ns into every event; one system-wide
    monotonic clock) at several concurrent streams. The server runs in its own process, pinned to its
    own core and the client to the others (as a remote server would be; `--no-pin` lets them share, and
    then the server's work delays the client's reads). Targets: >= 100,000 events/s; timing error p99
    <= 1 ms at 256 streams.

Streams start 0.5 ms apart (or closer, spread over one interval): sending a request costs the client
~0.15 ms, so 256 requests sent at once would delay the first events by tens of ms - the load generator's
ramp-up, reported apart as "ramp" from the steady state that the target is about.
Note the machine's load (uptime) beside the figures: on a shared machine they move with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np

import support
from lossless.bench.runtime import frozen_heap, loop_factory
from lossless.client.call import CallOptions, Job, call
from lossless.client.endpoints import Endpoint
from lossless.client.http import Session
from lossless.client.prompt import Prompt
from lossless.client.sse import SSEParser


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


async def _timing_errors(url: str, streams: int, events: int, interval_us: int) -> tuple[np.ndarray, ...]:
    """(steady-state errors, ramp-up errors) in ms: arrival time - the server's send time."""
    session = Session(url, {}, None, 5.0)
    opts = CallOptions("chat", True, events, None, None)
    endpoint = Endpoint("bench", url, "m", body={"x_interval_us": interval_us})
    step_s = max(interval_us / 1e6 / max(streams, 1), 0.0005)

    async def one(i: int, opts: CallOptions) -> list[tuple[int, float]]:
        job = Job(endpoint, _job(url, i).prompt, i, "bench", False, 0)
        await asyncio.sleep(i * step_s)
        r = await call(session, job, 0, opts)
        assert r.ok, r.error
        sent = [int(x) for x in r.text.split()]
        got = [t for t, k in zip(r.event_ns, r.event_kinds, strict=True) if k == "c"]
        return [(s, (g - s) / 1e6) for g, s in zip(got, sent, strict=True)]

    # Warm-up, as `lossless bench --warmup` does: open the streams' connections first, so that the measured
    # events do not share the event loop with 256 TCP handshakes.
    await asyncio.gather(*(one(i, CallOptions("chat", True, 1, None, None)) for i in range(streams)))
    with frozen_heap():  # as run_bench does
        results = await asyncio.gather(*(one(i, opts) for i in range(streams)))
    await session.aclose()
    pairs = np.array([e for r in results for e in r])
    ramp_end = pairs[:, 0].min() + (streams * step_s + interval_us / 1e6) * 1e9
    return pairs[pairs[:, 0] >= ramp_end, 1], pairs[pairs[:, 0] < ramp_end, 1]


def _stats(errors: np.ndarray) -> dict[str, float]:
    if errors.size == 0:
        return {"n": 0}
    return {
        "n": int(errors.size),
        "p50": round(float(np.percentile(errors, 50)), 3),
        "p99": round(float(np.percentile(errors, 99)), 3),
        "max": round(float(errors.max()), 3),
    }


def _run(coro: Any, factory: Any) -> Any:
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--streams", default="1,64,256")
    ap.add_argument("--interval-ms", type=float, default=20.0, help="gap between a stream's events")
    ap.add_argument("--stream-events", type=int, default=50)
    ap.add_argument("--loop", default="auto", choices=["auto", "uvloop", "asyncio"], help="event loop")
    ap.add_argument("--no-pin", dest="pin", action="store_false", help="let client and server share cores")
    args = ap.parse_args()
    loop_name, factory = loop_factory(args.loop)
    parent, child = mp.Pipe()
    # One core each, when there are two: the client's timestamps then do not wait for the server's turn.
    cpus = sorted(os.sched_getaffinity(0))
    pin = args.pin and len(cpus) >= 2
    server_cpu = cpus[-1] if pin else None
    server = mp.get_context("spawn").Process(target=support.serve_sse, args=(child, server_cpu), daemon=True)
    server.start()
    if pin:
        os.sched_setaffinity(0, set(cpus[:-1]))
    url = f"http://127.0.0.1:{parent.recv()}/v1"
    try:
        out: dict[str, object] = {}
        for name, coro in (
            ("lossless_events_per_s", lambda: _lossless_ingest(url, args.events)),
            ("bare_httpx_events_per_s", lambda: _bare_ingest("httpx", url, args.events)),
            ("bare_aiohttp_events_per_s", lambda: _bare_ingest("aiohttp", url, args.events)),
        ):
            out[name] = round(max(_run(coro(), factory) for _ in range(3)))
        for streams in (int(s) for s in args.streams.split(",")):
            measure = _timing_errors(url, streams, args.stream_events, int(args.interval_ms * 1000))
            steady, ramp = _run(measure, factory)
            out[f"timing_error_ms_{streams}_streams"] = {**_stats(steady), "ramp": _stats(ramp)}
        out["event_loop"] = loop_name
        out["load_average"] = os.getloadavg()
        out["pinned"] = pin
        print(json.dumps(out, indent=2))
    finally:
        parent.send("stop")
        server.join(5)


if __name__ == "__main__":
    main()
