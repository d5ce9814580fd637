"""`lossless serve` under hostile bodies: does refusing a huge request hurt everyone else?

A real server runs in a subprocess (the embedded SmolLM2 by default, ``--model`` for another checkpoint).
Two phases of the same length, quiet then under attack; in both, one thread polls ``/health`` every
20 ms and another keeps a greedy stream open, recording when each chunk arrives. In the attack phase a
third thread sends ``--bodies`` request bodies of ``--body-mb`` MB, one after another. Reported per
phase: /health p50/p99/max latency and the stream's largest inter-chunk gap; and the server's RSS
(/proc/PID/status VmRSS) at the start and after the attack.

Body kinds: ``ids`` a completions prompt of token ids, ``text`` one long string, ``fields`` many
unknown fields, ``dense`` an array of empty arrays (the most JSON values a byte: the dearest to parse).
``--chunked`` sends without Content-Length, so the server must stop reading at its limit rather than
refuse up front. Bodies under the server's limit (``--body-mb 3.9``) measure what parsing costs.

    python benchmarks/server_hostile.py --body-mb 10 --bodies 20
    python benchmarks/server_hostile.py --kind dense --body-mb 0.196   # the most values a body may hold

Measured on a shared 2-core machine (SmolLM2, ~60 ms a token, 20 bodies; before: 5 bodies):
  10 MB text, before: /health max 9.0 s, stream gap 34 s (quiet: 128 ms), RSS +735 MB
  10 MB text, after:  413 in 3 ms; /health p99 12 ms (quiet 11); largest gap 131 ms (quiet 119); RSS +0
  10 MB text chunked: 413 in 9 ms; /health p99 10.5 ms; largest gap 160 ms (quiet 117); RSS +0
  under the limit, the largest gap still grows (0.2 MB dense: 448 ms, 3.9 MB text: 308 ms): parsing
  holds the GIL, and the engine thread, which takes the GIL back after every torch op, waits for it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Phase:
    health_ms: list[float] = field(default_factory=list)
    gaps_ms: list[float] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    attack_s: list[float] = field(default_factory=list)


def start_server(model: str | None) -> tuple[subprocess.Popen[bytes], str, int]:
    cmd = [sys.executable, "-c", "from lossless.cli import main; main()", "serve", "--port", "0"]
    if model:
        cmd += ["--model", model]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    for raw in proc.stderr:
        line = raw.decode(errors="replace")
        if m := re.search(r"http://127\.0\.0\.1:(\d+)", line):
            return proc, "127.0.0.1", int(m.group(1))
        sys.stderr.write(line)
    raise SystemExit("the server did not start")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


def poll_health(host: str, port: int, stop: threading.Event, out: list[float]) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=60)
    while not stop.is_set():
        start = time.perf_counter()
        conn.request("GET", "/health")
        conn.getresponse().read()
        out.append((time.perf_counter() - start) * 1e3)
        time.sleep(0.02)
    conn.close()


def keep_streaming(host: str, port: int, stop: threading.Event, out: list[float]) -> None:
    """Back-to-back greedy streams; gaps are counted within a stream, never across two."""
    ask = "Write a very long story about a lighthouse keeper, in ten chapters."
    # greedy SmolLM2 writes the whole 4096 tokens for this (~2 min): one stream spans a phase
    body = {"messages": [{"role": "user", "content": ask}], "max_tokens": 4096, "temperature": 0}
    while not stop.is_set():
        conn = http.client.HTTPConnection(host, port, timeout=120)
        conn.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}))
        response, last = conn.getresponse(), None
        while not stop.is_set() and (line := response.readline()):
            if line.startswith(b"data: "):
                now = time.perf_counter()
                if last is not None:
                    out.append((now - last) * 1e3)
                last = now
        conn.close()


def hostile_body(kind: str, size: int) -> bytes:
    if kind == "ids":
        n = size // len("12345,")
        return b'{"prompt": [' + b"12345," * (n - 1) + b"12345]}"
    if kind == "text":
        return b'{"prompt": "' + b"word " * (size // 5) + b'"}'
    if kind == "dense":
        return b'{"prompt": [' + b"[]," * (size // 3 - 1) + b"[]]}"
    n = size // len('"field_0000000": 1, ')
    return json.dumps({"prompt": "hi", **{f"field_{i:07d}": 1 for i in range(n)}}).encode()


def pieces(body: bytes, size: int = 1 << 16) -> Iterator[bytes]:
    for i in range(0, len(body), size):
        yield body[i : i + size]


def send_one(host: str, port: int, body: bytes, chunked: bool) -> str:
    conn = http.client.HTTPConnection(host, port, timeout=120)
    try:
        headers = {"content-type": "application/json"}
        if chunked:
            conn.request("POST", "/v1/completions", pieces(body), headers, encode_chunked=True)
        else:
            conn.request("POST", "/v1/completions", body, headers)
    except OSError as exc:  # the server may refuse and close before the whole body is written
        try:
            return str(conn.getresponse().status)
        except (OSError, http.client.HTTPException):
            return f"closed while sending ({type(exc).__name__})"
    try:
        response = conn.getresponse()
        response.read()
        return str(response.status)
    except (OSError, http.client.HTTPException) as exc:
        return f"no response ({type(exc).__name__})"
    finally:
        conn.close()


def run_phase(host: str, port: int, seconds: float, attack: list[bytes] | None, chunked: bool) -> Phase:
    phase, stop = Phase(), threading.Event()
    threads = [
        threading.Thread(target=poll_health, args=(host, port, stop, phase.health_ms)),
        threading.Thread(target=keep_streaming, args=(host, port, stop, phase.gaps_ms)),
    ]
    for t in threads:
        t.start()
    time.sleep(1.0)  # the stream is on the engine before anything is measured
    phase.health_ms.clear()
    phase.gaps_ms.clear()
    deadline = time.perf_counter() + seconds
    for body in attack or ():
        start = time.perf_counter()
        phase.statuses.append(send_one(host, port, body, chunked))
        phase.attack_s.append(time.perf_counter() - start)
    time.sleep(max(0.0, deadline - time.perf_counter()))
    stop.set()
    for t in threads:
        t.join(150)
    return phase


def describe(name: str, phase: Phase) -> str:
    health = sorted(phase.health_ms)
    p99 = health[min(len(health) - 1, int(0.99 * len(health)))] if health else float("nan")
    gaps = sorted(phase.gaps_ms)
    gap_p99 = gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] if gaps else float("nan")
    line = (
        f"{name:>6}: /health n={len(health)} p50={statistics.median(health):.1f} ms p99={p99:.1f} ms "
        f"max={max(health, default=0):.1f} ms; stream gaps n={len(gaps)} p99={gap_p99:.1f} ms "
        f"largest={max(gaps, default=float('nan')):.1f} ms"
    )
    if phase.statuses:
        counts = {s: phase.statuses.count(s) for s in sorted(set(phase.statuses))}
        line += f"; bodies {counts}, each {statistics.median(phase.attack_s) * 1e3:.0f} ms (median)"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--model", default=None, help="checkpoint path [the embedded SmolLM2]")
    parser.add_argument("--body-mb", type=float, default=10.0)
    parser.add_argument("--bodies", type=int, default=20)
    parser.add_argument("--kind", choices=["ids", "text", "fields", "dense"], default="ids")
    parser.add_argument("--chunked", action="store_true", help="no Content-Length: stream the body")
    parser.add_argument("--seconds", type=float, default=10.0, help="each phase lasts at least this long")
    args = parser.parse_args()

    proc, host, port = start_server(args.model)
    try:
        body = hostile_body(args.kind, int(args.body_mb * 1e6))
        start_rss = rss_mb(proc.pid)
        quiet = run_phase(host, port, args.seconds, None, args.chunked)
        after_quiet = rss_mb(proc.pid)
        attacked = run_phase(host, port, args.seconds, [body] * args.bodies, args.chunked)
        end_rss = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"{args.bodies} x {len(body) / 1e6:.1f} MB {args.kind} bodies, chunked={args.chunked}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(describe("quiet", quiet))
    print(describe("attack", attacked))
    print(f"   RSS: start {start_rss:.0f} MB, after quiet {after_quiet:.0f}, after attack {end_rss:.0f}")


if __name__ == "__main__":
    main()
