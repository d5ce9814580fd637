"""How exact is bench when many streams run, on 1 and 2 worker processes, against a raw-socket floor?
(A benchmark, not a test.)

    python benchmarks/workers_speed.py [--streams 64,256,1024] [--events 100] [--interval-us 5000]

A fast SSE server (``support.serve_sse``, its own process, pinned to the last CPU) writes into every event the
perf_counter_ns at which it wrote it: one system-wide monotonic clock, so for every event the client's
arrival time minus the server's send time is the client's own lateness. For each stream count, in one
run: a minimal raw-socket client (asyncio protocol on uvloop: one regex over each read, no HTTP library,
no JSON) as the floor, then ``lossless bench`` with 1 and with 2 workers (one request per stream, all
streams at once). Reported: p50/p99 of the TTFT error (first event's arrival minus its send) and of the
inter-token gap error (measured gap minus sent gap), events/s received, and the workers' CPU.
Clients run on the CPUs the server does not use (``--no-pin``: all share every CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import support
from lossless.bench.runtime import loop_factory
from lossless.rundir import read_jsonl

_EVENT = re.compile(rb'"content":"(\d+) "')


class _Stream(asyncio.Protocol):
    """One raw HTTP/1.1 request; (arrival, send) for every event, the arrival taken once per read."""

    def __init__(self, request: bytes, done: asyncio.Future[None]) -> None:
        self.request, self.done, self.buf = request, done, b""
        self.sent_ns = 0
        self.events: list[tuple[int, int]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.sent_ns = time.perf_counter_ns()
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()
        self.buf += data
        end = 0
        for m in _EVENT.finditer(self.buf):
            self.events.append((t, int(m.group(1))))
            end = m.end()
        self.buf = self.buf[end:]
        if b"[DONE]" in self.buf and not self.done.done():
            self.done.set_result(None)


async def _floor(port: int, streams: int, events: int, interval_us: int) -> list[list[tuple[int, int]]]:
    body = json.dumps(
        {"model": "m", "messages": [], "stream": True, "max_tokens": events, "x_interval_us": interval_us}
    ).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    loop = asyncio.get_running_loop()

    async def one() -> _Stream:
        done = loop.create_future()
        _, proto = await loop.create_connection(lambda: _Stream(request, done), "127.0.0.1", port)
        await done
        return proto

    protocols = await asyncio.gather(*(one() for _ in range(streams)))
    return [p.events for p in protocols]


def _floor_process(port: int, streams: int, events: int, interval_us: int, out: str) -> None:
    _, factory = loop_factory()
    with asyncio.Runner(loop_factory=factory) as runner:
        found = runner.run(_floor(port, streams, events, interval_us))
    Path(out).write_text(json.dumps(found))


def _errors(streams: list[list[tuple[int, int]]]) -> dict[str, float]:
    ttft = np.array([s[0][0] - s[0][1] for s in streams if s]) / 1e6
    gaps = (
        np.concatenate(
            [np.diff([a for a, _ in s]) - np.diff([b for _, b in s]) for s in streams if len(s) > 1]
        )
        / 1e6
    )
    first = min(s[0][1] for s in streams if s)
    last = max(s[-1][0] for s in streams if s)
    n = sum(len(s) for s in streams)
    return {
        "ttft_err_p50_ms": float(np.percentile(ttft, 50)),
        "ttft_err_p99_ms": float(np.percentile(ttft, 99)),
        "gap_err_p50_ms": float(np.percentile(gaps, 50)),
        "gap_err_p99_ms": float(np.percentile(gaps, 99)),
        "events_per_s": n / ((last - first) / 1e9),
        "events": n,
    }


def _lossless(port: int, streams: int, events: int, interval_us: int, workers: int, tmp: Path) -> dict:
    endpoints = tmp / "endpoints.toml"
    endpoints.write_text(
        f'[[endpoint]]\nname = "sse"\nbase_url = "http://127.0.0.1:{port}/v1"\nmodel = "m"\n'
        f"body = {{ x_interval_us = {interval_us} }}\n"
    )
    out = tmp / f"w{workers}-s{streams}"
    cmd = [
        sys.executable,
        "-m",
        "lossless.cli",
        "bench",
        "--endpoints",
        str(endpoints),
        "--max-tokens",
        str(events),
        "--concurrency",
        str(streams),
        "--requests",
        str(streams),
        "--workers",
        str(workers),
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, preexec_fn=_client_cpus)
    found = []
    for r in read_jsonl(out / "records.jsonl"):
        sends = [int(t) for t in r.text.split()]
        arrivals = [t for t, k in zip(r.event_ns, r.event_kinds, strict=True) if k == "c"]
        assert r.ok and len(sends) == len(arrivals), (r.error, len(sends), len(arrivals))
        found.append(list(zip(arrivals, sends, strict=True)))
    summary = json.loads((out / "summary.json").read_text())
    busy = [c["busy"] for c in summary["clients"]]
    return _errors(found) | {"worker_busy": busy, "warnings": summary["warnings"]}


_CLIENT_CPUS: set[int] | None = None


def _client_cpus() -> None:
    if _CLIENT_CPUS:
        os.sched_setaffinity(0, _CLIENT_CPUS)


def main() -> None:
    global _CLIENT_CPUS
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="64,256,1024")
    ap.add_argument("--events", type=int, default=100)
    ap.add_argument("--interval-us", type=int, default=5000)
    ap.add_argument("--no-pin", action="store_true")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = None if args.no_pin or len(cpus) < 2 else cpus[-1]
    _CLIENT_CPUS = None if server_cpu is None else set(cpus[:-1])
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=support.serve_sse, args=(child, server_cpu), daemon=True)
    proc.start()
    port = parent.recv()
    where = f"cpus {len(cpus)}, server on {server_cpu}, clients on {_CLIENT_CPUS or 'all'}"
    print(f"{where}; load {os.getloadavg()}")
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for streams in (int(s) for s in args.streams.split(",")):
                out = Path(tmp) / "floor.json"
                floor = mp.get_context("spawn").Process(
                    target=_floor_process, args=(port, streams, args.events, args.interval_us, str(out))
                )
                floor.start()
                if _CLIENT_CPUS:
                    os.sched_setaffinity(floor.pid, _CLIENT_CPUS)  # type: ignore[arg-type]
                floor.join()
                rows = {"floor": _errors(json.loads(out.read_text()))}
                for workers in (1, 2):
                    rows[f"{workers} worker{'s' * (workers > 1)}"] = _lossless(
                        port, streams, args.events, args.interval_us, workers, Path(tmp)
                    )
                for name, row in rows.items():
                    print(
                        f"{streams:5d} streams  {name:9s}  TTFT err p50 {row['ttft_err_p50_ms']:7.2f} ms "
                        f"p99 {row['ttft_err_p99_ms']:7.2f} ms  gap err p50 {row['gap_err_p50_ms']:6.2f} "
                        f"p99 {row['gap_err_p99_ms']:6.2f} ms  {row['events_per_s']:9.0f} events/s  "
                        f"{row.get('worker_busy', '')}",
                        flush=True,
                    )
                results.append({"streams": streams, **rows})
    finally:
        parent.send("stop")
        proc.join(5)
    print(json.dumps({"args": vars(args), "results": results}))


if __name__ == "__main__":
    main()
