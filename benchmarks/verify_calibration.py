"""How often `lossless verify` gives the answer it should, on pairs whose answer is known, each verified
many times with fresh seeds on the embedded SmolLM2 over real HTTP:

- the same model: one server as both baseline and candidate (ours, llama.cpp's llama-server); and the same
  weights served faithfully by other kernels and servers (ours against llama-server, either side as
  baseline, completions and chat; our int4 against our bfloat16; eager against compiled; ours against
  vLLM's bfloat16 on the weights dequantized);
- another model: a sampler changed behind a proxy (temperature x0.8, top_p 0.9), and requantizations of the
  file by llama.cpp's quantizer (Q2_K, Q3_K_M), also with verify's log-probabilities off (--no-logprobs:
  what the sampled texts detect alone, as against a server that returns none), at each budget.

Not a test (too slow for CI: about 1-2 minutes a run on 2 cores): run it on a quiet machine. Per cell
(pair x API mode x budget) it reports the share of each verdict with a 95% Wilson interval, the median
wall time and samples, and the log-probability distances measured (distance.py's SCALE comes from them).
Targets: the same model equivalent >= 95% and different <= 1% of the time; another model different >=
95% (the sampled texts alone: >= 80% at the large budget). Each finished run is appended to --out at once
and a rerun skips the (cell, budget, seed) runs already there, so a killed run loses only the run in
flight.

    .venv/bin/python benchmarks/verify_calibration.py --out calibration.jsonl [--runs 20] [--only NAME]
    .venv/bin/python benchmarks/verify_calibration.py --out calibration.jsonl --summary > table.md
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from lossless import models
from lossless.client.endpoints import Endpoint
from lossless.verify.budget import BUDGETS
from lossless.verify.result import VerifyConfig
from lossless.verify.run import verify
from support import LlamaServer, LosslessServer as OursServer, VllmServer, hf_folder, requantize

MODEL = models.SMOLLM2.name  # what our server answers to; llama.cpp answers to any name, vLLM to its own
VERDICTS = ("equivalent", "inconclusive", "different")
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
Urls = dict[str, str]  # a group's servers by role -> base URL (http://127.0.0.1:PORT/v1)
Rewrite = Callable[[dict[str, Any]], dict[str, Any]]


# ---- the servers ----------------------------------------------------------------------------------------


def requantized_gguf(kind: str) -> Path:
    """The embedded GGUF re-quantized to ``kind`` by llama.cpp's quantizer, made once and kept."""
    path = models.home() / "benchmarks" / f"SmolLM2-135M-Instruct.{kind}.gguf"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        requantize(models.resolve(), path, kind)
    return path


# A proxy strips these (they describe one connection, or a body whose length the rewrite changed).
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade", "te", "trailer"}


@contextmanager
def rewriting_proxy(upstream: str, rewrite: Rewrite) -> Iterator[str]:
    """Yield the base URL of a proxy on 127.0.0.1 (a thread with its own event loop) in front of
    ``upstream`` (a base URL): every JSON object body is sent on as ``rewrite`` returns it, everything
    else as it came, and each answer streams back byte for byte (SSE included)."""
    parts = urlsplit(upstream)
    sock = socket.create_server(("127.0.0.1", 0))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="rewriting-proxy", daemon=True)
    thread.start()

    def call(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    try:
        runner, session = call(_serve_proxy(f"{parts.scheme}://{parts.netloc}", rewrite, sock))
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}{parts.path}"
        finally:
            call(runner.cleanup())
            call(session.close())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        sock.close()


async def _serve_proxy(
    root: str, rewrite: Rewrite, sock: socket.socket
) -> tuple[web.AppRunner, aiohttp.ClientSession]:
    # auto_decompress off: the bytes go back as they came, with the Content-Encoding that describes them.
    # No total time-out: verify's client keeps its own, and a long generation is not the proxy's to cut.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    session = aiohttp.ClientSession(auto_decompress=False, timeout=timeout)

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if body and request.content_type == "application/json":
            try:
                sent = json.loads(body)
            except ValueError:
                sent = None  # not ours to judge: the upstream answers it as it would
            if isinstance(sent, dict):
                body = json.dumps(rewrite(sent)).encode()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with session.request(request.method, root + request.path_qs, data=body, headers=headers) as up:
            answer = web.StreamResponse(status=up.status, reason=up.reason)
            answer.headers.update({k: v for k, v in up.headers.items() if k.lower() not in HOP})
            if "Content-Length" in up.headers:  # the same bytes: keep it, so a plain answer is not chunked
                answer.content_length = int(up.headers["Content-Length"])
            await answer.prepare(request)
            async for chunk in up.content.iter_any():  # each SSE event as soon as it arrives
                await answer.write(chunk)
            await answer.write_eof()
            return answer

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner, session


def colder(body: dict[str, Any]) -> dict[str, Any]:
    """A provider serving temperature x 0.8 (no temperature sent: the API's default, 1)."""
    t = body.get("temperature")
    return body | {"temperature": (1.0 if t is None else t) * 0.8}


def hidden_top_p(body: dict[str, Any]) -> dict[str, Any]:
    """A provider applying top_p 0.9 whatever the request says."""
    return body | {"top_p": 0.9}


# ---- the cells ------------------------------------------------------------------------------------------


@contextmanager
def ours() -> Iterator[Urls]:
    with OursServer() as server:
        yield {"ours": server.url}


@contextmanager
def llama_server() -> Iterator[Urls]:
    """llama.cpp's own server on the file, 1 thread (2 on two shared cores spin-wait against the client)
    and 4 slots, so verify's 4 requests in flight are decoded together."""
    with LlamaServer(models.resolve(), parallel=4) as server:
        yield {"q4_1": server.url}


@contextmanager
def cross() -> Iterator[Urls]:
    with OursServer() as ours, LlamaServer(models.resolve(), parallel=4) as llama:
        yield {"ours": ours.url, "llama-server": llama.url}


@contextmanager
def dtypes() -> Iterator[Urls]:
    with OursServer("--dtype", "bfloat16") as bf16, OursServer("--dtype", "int4") as int4:
        yield {"bfloat16": bf16.url, "int4": int4.url}


@contextmanager
def compiled() -> Iterator[Urls]:
    with OursServer() as eager, OursServer("--compile", "wait") as graphs:
        yield {"eager": eager.url, "compiled": graphs.url}


@contextmanager
def vllm() -> Iterator[Urls]:
    folder = hf_folder(models.resolve(), models.home() / "benchmarks" / "smollm2-hf")
    with OursServer() as ours, VllmServer(folder, served_name=MODEL, threads=1) as peer:
        yield {"ours": ours.url, "vllm": peer.url}


# Servers shared by the cells of a group, started once for them and stopped before the next group starts
# (only what a cell needs runs beside it: the machine has 2 cores).
GROUPS: dict[str, Callable[[], AbstractContextManager[Urls]]] = {
    "ours": ours,
    "llama-server": llama_server,
    "cross": cross,
    "dtypes": dtypes,
    "compiled": compiled,
    "vllm": vllm,
}
Pair = Callable[[Urls], AbstractContextManager[tuple[str, str]]]  # a group's URLs -> (baseline, candidate)


def between(baseline: str, candidate: str) -> Pair:
    return lambda urls: nullcontext((urls[baseline], urls[candidate]))


def proxied(rewrite: Rewrite) -> Pair:
    @contextmanager
    def pair(urls: Urls) -> Iterator[tuple[str, str]]:
        with rewriting_proxy(urls["ours"], rewrite) as url:
            yield urls["ours"], url

    return pair


def requantized(kind: str) -> Pair:
    @contextmanager
    def pair(urls: Urls) -> Iterator[tuple[str, str]]:
        with LlamaServer(requantized_gguf(kind), parallel=4) as server:
            yield urls["q4_1"], server.url

    return pair


@dataclass(frozen=True)
class Cell:
    name: str
    group: str  # in GROUPS
    api: str  # what verify asks in: completions or chat
    lossy: bool  # the answer it should get: different (True) or equivalent
    pair: Pair  # the endpoints, from the group's servers (with any of the cell's own)
    logprobs: bool = True  # False: verify --no-logprobs


CELLS = (
    Cell("ours-completions", "ours", "completions", False, between("ours", "ours")),
    Cell("ours-chat", "ours", "chat", False, between("ours", "ours")),
    Cell("temperature-0.8", "ours", "completions", True, proxied(colder)),
    Cell("hidden-top-p-0.9", "ours", "completions", True, proxied(hidden_top_p)),
    Cell("llama-server-completions", "llama-server", "completions", False, between("q4_1", "q4_1")),
    Cell("llama-server-chat", "llama-server", "chat", False, between("q4_1", "q4_1")),
    Cell("requantized-q2_k", "llama-server", "completions", True, requantized("Q2_K")),
    Cell("requantized-q3_k_m", "llama-server", "completions", True, requantized("Q3_K_M")),
    Cell("requantized-q2_k-no-logprobs", "llama-server", "completions", True, requantized("Q2_K"), False),
    Cell("ours-vs-llama-server-completions", "cross", "completions", False, between("ours", "llama-server")),
    Cell("llama-server-vs-ours-completions", "cross", "completions", False, between("llama-server", "ours")),
    Cell("ours-vs-llama-server-chat", "cross", "chat", False, between("ours", "llama-server")),
    Cell("llama-server-vs-ours-chat", "cross", "chat", False, between("llama-server", "ours")),
    Cell("int4-vs-bfloat16", "dtypes", "completions", False, between("bfloat16", "int4")),
    Cell("eager-vs-compiled", "compiled", "completions", False, between("eager", "compiled")),
    Cell("ours-vs-vllm-completions", "vllm", "completions", False, between("ours", "vllm")),
)


# ---- one run --------------------------------------------------------------------------------------------


def rejected(verdict: str, reasons: list[str]) -> list[str]:
    """The tests a verdict's reasons say rejected, by each reason's leading word (as verify_power.py
    reads them); an inconclusive run's are those it lists as "found anyway"."""
    if verdict != "different":
        reasons = [r.removeprefix("found anyway: ") for r in reasons if r.startswith("found anyway: ")]
    return [r.split(":")[0].split(" ")[0] for r in reasons]


def run_one(cell: Cell, urls: tuple[str, str], seed: int, budget: str, commit: str) -> dict[str, Any]:
    config = VerifyConfig(BUDGETS[budget], api=cell.api, seed=seed, logprobs=cell.logprobs)
    baseline, candidate = Endpoint("baseline", urls[0], MODEL), Endpoint("candidate", urls[1], MODEL)
    start = time.perf_counter()
    result = asyncio.run(verify(baseline, candidate, config))
    seconds = time.perf_counter() - start
    d = result.as_dict()
    # a sequential procedure says where it stopped; a fixed one always spends the whole budget
    procedure = d.get("procedure") or {}
    return {
        "cell": cell.name,
        "api": cell.api,
        "lossy": cell.lossy,
        "budget": budget,
        "seed": seed,
        "verdict": result.verdict,
        "seconds": round(seconds, 2),
        "samples": procedure.get("samples", d["budget"]["samples"]),
        "look": procedure.get("look"),
        "looks": procedure.get("looks"),
        "requests": procedure.get("requests"),
        "rejected": rejected(result.verdict, d["reasons"]),
        "reasons": d["reasons"],
        "notes": d["notes"],
        "distance": d["logprob_distance"],
        "load_average": round(os.getloadavg()[0], 2),
        "commit": commit,
    }


def read_runs(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    runs = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            runs.append(json.loads(line))
        except ValueError:  # the last line of a run killed mid-write
            print(f"{path}:{n}: not JSON, skipped", file=sys.stderr)
    return runs


def append_run(path: Path, run: dict[str, Any]) -> None:
    with path.open("a+b") as out:
        out.seek(0, os.SEEK_END)
        if out.tell():  # after a line cut short by a kill, start a fresh one
            out.seek(-1, os.SEEK_END)
            if out.read(1) != b"\n":
                out.write(b"\n")
        out.write(json.dumps(run).encode() + b"\n")
        out.flush()
        os.fsync(out.fileno())


def commit_of_this_tree() -> str:
    """The commit, and for a dirty tree a hash of src/'s changes: results from code in flux stay traceable."""

    def git(*argv: str) -> str:
        root = Path(__file__).resolve().parents[1]
        return subprocess.run(["git", *argv], cwd=root, capture_output=True, text=True).stdout.strip()

    commit = git("describe", "--always", "--dirty") or "unknown"
    if commit.endswith("-dirty"):
        commit += "+" + hashlib.sha256(git("diff", "HEAD", "--", "src").encode()).hexdigest()[:12]
    return commit


def calibrate(out: Path, cells: list[Cell], seeds: range, budget: str) -> None:
    done = {(r["cell"], r["budget"], r["seed"]) for r in read_runs(out)}
    todo = {c.name: [s for s in seeds if (c.name, budget, s) not in done] for c in cells}
    total, n = sum(map(len, todo.values())), 0
    commit = commit_of_this_tree()
    print(f"{total} runs to do at commit {commit}, load average {os.getloadavg()}", file=sys.stderr)
    for group, start_servers in GROUPS.items():
        mine = [c for c in cells if c.group == group and todo[c.name]]
        if not mine:
            continue
        with start_servers() as urls:
            for cell in mine:
                with cell.pair(urls) as pair:
                    for seed in todo[cell.name]:
                        run = run_one(cell, pair, seed, budget, commit)
                        append_run(out, run)
                        n += 1
                        said = f"{run['verdict']} in {run['seconds']:.1f} s, {run['samples']} samples"
                        print(f"[{n}/{total}] {cell.name} seed {seed}: {said}", file=sys.stderr, flush=True)
    print(f"load average {os.getloadavg()} after", file=sys.stderr)


# ---- the summary ----------------------------------------------------------------------------------------


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for a share of k in n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def share(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k / n:.0%} [{lo:.0%}, {hi:.0%}]"


def target_met(run: dict[str, Any], counts: dict[str, int], n: int) -> str:
    """On the observed shares; the intervals beside them say how far that can be trusted. The sampled
    texts alone have a target at the large budget only; elsewhere their power is measured, not aimed at."""
    if run["lossy"] and run["cell"].endswith("no-logprobs"):
        return ("yes" if counts["different"] >= 0.80 * n else "no") if run["budget"] == "large" else "-"
    if run["lossy"]:
        return "yes" if counts["different"] >= 0.95 * n else "no"
    ok = counts["equivalent"] >= 0.95 * n and counts["different"] <= 0.01 * n
    return "yes" if ok else "no"


def distances(rs: list[dict[str, Any]]) -> str:
    """The log-probability distances the runs measured: median [min, max], nats a token."""
    values = [r["distance"]["value"] for r in rs if r.get("distance")]
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def summary(runs: list[dict[str, Any]]) -> str:
    order = {c.name: i for i, c in enumerate(CELLS)}
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by[r["cell"], r["budget"]].append(r)
    budgets = {budget for _, budget in by}
    lines = [
        "| cell | runs | equivalent (95% CI) | inconclusive (95% CI) | different (95% CI) "
        "| median s | median samples | distance, nats a token | target met? |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for (cell, budget), rs in sorted(by.items(), key=lambda kv: (order.get(kv[0][0], len(order)), kv[0])):
        n = len(rs)
        counts = {v: sum(r["verdict"] == v for r in rs) for v in VERDICTS}
        label = cell if len(budgets) == 1 else f"{cell} ({budget})"
        cells = [label, str(n), *(share(counts[v], n) for v in VERDICTS)]
        cells += [f"{statistics.median(r['seconds'] for r in rs):.1f}"]
        cells += [f"{statistics.median(r['samples'] for r in rs):g}", distances(rs)]
        cells += [target_met(rs[0], counts, n)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "Targets: the same model (identical pairs, and the same weights served faithfully) equivalent >= 95% "
        "and different <= 1%; another model (a changed sampler, a requantization) different >= 95%, and "
        "the sampled texts alone (no-logprobs) >= 80% at the large budget; judged on the observed shares. "
        "Intervals: 95% Wilson."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSONL: one line per finished run")
    parser.add_argument("--runs", type=int, default=20, help="runs per cell, seeds S..S+N-1")
    parser.add_argument("--first-seed", type=int, default=0, help="S")
    parser.add_argument("--budget", choices=list(BUDGETS), default="default")
    parser.add_argument(
        "--only", action="append", default=[], help="cells whose name contains this (repeatable, or a,b)"
    )
    parser.add_argument("--summary", action="store_true", help="print --out's markdown table and stop")
    args = parser.parse_args()
    if args.summary:
        print(summary(read_runs(args.out)))
        return
    only = [o for arg in args.only for o in arg.split(",") if o]
    exact = [c for c in CELLS if c.name in only]  # a whole name selects that cell alone
    cells = exact or [c for c in CELLS if not only or any(o in c.name for o in only)]
    if not cells:
        parser.error(f"--only {','.join(only)}: no such cell among {', '.join(c.name for c in CELLS)}")
    calibrate(args.out, cells, range(args.first_seed, args.first_seed + args.runs), args.budget)


if __name__ == "__main__":
    main()
