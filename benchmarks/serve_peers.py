"""`lossless serve` against the servers its users would run instead, through servers on both sides, one
server at a time: the ratios the README quotes.

Each run starts every server in turn, alone on the machine (the order reversed every other run, so that a
drift in the machine's speed falls on both sides alike), measures it with `lossless bench` on each suite,
and stops it:

    ours          `lossless serve --threads T --compile wait`: with no other flag, its default (int4 on the
                  file's Q4 blocks, the DSpark head drafting, greedy exact), once its compiled graphs are in
    llama-server  llama.cpp's own server on the same GGUF (`make llama-cpp`'s build: this CPU's instruction
                  sets, AMX off), `-t T -np 1`, plain and with each of its n-gram drafters (--spec-type):
                  the strongest of them per suite is the peer its ratio is read against
    vllm          (--vllm) vLLM's CPU server in bfloat16 on the file dequantized, T OpenMP threads, prefix
                  caching off

bench sends `--requests` prompts of the suite one at a time, greedy (temperature 0), at most 128 tokens,
and reports each endpoint's output speed per request (tokens/s after the first token); a run's ratio is
ours over the peer's median. The ratio quoted is the median over the runs, with their range. Raw records
and summaries of every bench run go under --out, beside a results.json of the figures.

    python benchmarks/serve_peers.py --out docs/results/DATE-serve-peers [--runs 3] [--vllm]
    python benchmarks/serve_peers.py --pool A/results.json B/results.json   # runs of several sessions
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from lossless import models
from support import LlamaServer, LosslessServer, VllmServer, bench_one, hf_folder, in_turn, pooled

SUITES = ("short", "grounded")  # open chat, and answers that quote a passage the prompt holds
LLAMA_SPEC = ("ngram-simple", "ngram-mod", "ngram-map-k")  # its model-free drafters (no draft GGUF exists)


def servers(threads: int, vllm: bool) -> dict[str, tuple[str, Any]]:
    """Each endpoint's (model name to send, a context manager starting it alone)."""
    gguf = models.resolve()
    t = str(threads)
    found: dict[str, tuple[str, Any]] = {
        "ours": (models.SMOLLM2.name, lambda: LosslessServer("--threads", t, "--compile", "wait")),
        "llama-server": ("smol", lambda: LlamaServer(gguf, threads=threads, metrics=False)),
    }
    for kind in LLAMA_SPEC:
        extra = ["--spec-type", kind]
        found[f"llama-server {kind}"] = (
            "smol",
            lambda extra=extra: LlamaServer(gguf, threads=threads, metrics=False, extra=extra),
        )
    if vllm:
        folder = hf_folder(gguf, models.home() / "benchmarks" / "smollm2-hf", sample=False)
        found["vllm"] = ("smollm2", lambda: VllmServer(folder, prefix_caching=False, threads=threads))
    return found


def measure(out: Path, runs: int, requests: int, threads: int, vllm: bool) -> list[dict[str, Any]]:
    rows = []
    for run, name, model, server in in_turn(servers(threads, vllm), runs):
        for suite in SUITES:
            where = out / f"run{run}" / name.replace(" ", "-") / suite
            where.parent.mkdir(parents=True, exist_ok=True)
            entry = bench_one(server.url, model, suite, requests, where)
            speed = entry["output_tps"]["p50"]
            row = {"run": run, "endpoint": name, "suite": suite, "output_tps_p50": speed}
            rows.append(row | {"ttft_ms_p50": entry["ttft_ms"]["p50"], "ok": entry["requests"]["ok"]})
            print(f"    {suite}: {speed:.1f} tok/s", file=sys.stderr)
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per suite: every endpoint's median speed over the runs, the strongest llama-server configuration,
    and ours over it (and over vLLM), each as the median of the runs' ratios with their range."""
    out: dict[str, Any] = {}
    for suite in SUITES:
        speeds: dict[str, dict[int, float]] = {}
        for r in rows:
            if r["suite"] == suite:
                speeds.setdefault(r["endpoint"], {})[r["run"]] = r["output_tps_p50"]
        medians = {name: statistics.median(v.values()) for name, v in speeds.items()}
        llama = max((n for n in medians if n.startswith("llama-server")), key=medians.__getitem__)
        ratios = {}
        for peer in [llama, *(["vllm"] if "vllm" in speeds else [])]:
            each = [speeds["ours"][run] / speeds[peer][run] for run in speeds["ours"] if run in speeds[peer]]
            ratios[peer] = {"median": statistics.median(each), "range": [min(each), max(each)], "runs": each}
        out[suite] = {"speeds": medians, "strongest_llama_server": llama, "ratios": ratios}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="a folder for every run's records and results")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20, help="per suite and run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vllm", action="store_true", help="vLLM's CPU server as a peer too (make vllm)")
    ap.add_argument(
        "--pool", type=Path, nargs="+", help="measure nothing: the summary of these results.json files' runs"
    )
    opts = ap.parse_args()
    if opts.pool:
        found: dict[str, Any] = {"summary": summarize(pooled(opts.pool))}
    elif opts.out is None:
        ap.error("--out or --pool is needed")
    else:
        opts.out.mkdir(parents=True, exist_ok=True)
        print(f"load average {os.getloadavg()} before", file=sys.stderr)
        rows = measure(opts.out, opts.runs, opts.requests, opts.threads, opts.vllm)
        print(f"load average {os.getloadavg()} after", file=sys.stderr)
        found = {"rows": rows, "summary": summarize(rows), "argv": sys.argv[1:]}
        (opts.out / "results.json").write_text(json.dumps(found, indent=1) + "\n")
    for suite, s in found["summary"].items():
        speeds = ", ".join(f"{n} {v:.1f}" for n, v in s["speeds"].items())
        print(f"{suite}: {speeds} tok/s")
        for peer, r in s["ratios"].items():
            lo, hi = r["range"]
            print(f"  ours / {peer}: {r['median']:.2f}x (runs {lo:.2f}-{hi:.2f})")


if __name__ == "__main__":
    main()
