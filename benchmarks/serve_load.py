"""`lossless serve` under load against llama.cpp's `llama-server` and vLLM's CPU server: c = 1, 4 and 16
clients, each sending its next request when its last one ends, one server at a time on the machine.

Each run starts every server in turn, alone (the order reversed every other run), and measures it with
`lossless bench --concurrency C` on each suite and load, greedy, at most 128 tokens, max(16, 2C) requests
a level:

    ours                  `lossless serve --threads T --compile wait`: its default, one request at a time,
                          the DSpark head drafting (int4 on the file's Q4 blocks)
    ours batch16          `lossless serve --threads T --max-batch 16`: continuous batching (eager), each
                          request drafting with the DSpark head at low load (before 5b7951f: plain)
    ours batch16 plain    the same with `--speculative none`
    llama-server          `-t T -np 16`, plain, and with `--spec-type ngram-simple`: the stronger of the
                          two per suite and load is the peer its ratios are read against
    vllm                  (--vllm) bfloat16 on the file dequantized, T OpenMP threads, prefix caching on
                          (its default; off before 2026-12-07's prefix runs, when ours had none)

Per cell (endpoint, suite, load): the output speed per request (tokens/s after the first token, p50),
the total output tokens/s over the measured window, and TTFT p50 and p99 (p99 of 32 requests is read
from the slowest one: bench marks it thin). The figure quoted is the median over the runs, with their
range. Raw records and summaries go under --out, beside results.json, with each endpoint's greedy answers
under load compared with the same prompts' at c=1 in the same run (`solo_agreement`).

    python benchmarks/serve_load.py --out docs/results/DATE-serve-load [--runs 3] [--vllm]
    python benchmarks/serve_load.py --out DIR --vllm --loads 16 --only "ours batch16" llama-server \
        "llama-server ngram-simple" vllm                        # a rerun of the 16-client cells alone
    python benchmarks/serve_load.py --pool A/results.json B/results.json   # runs of several sessions
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
LOADS = (1, 4, 16)
FIGURES = ("output_tps_p50", "tokens_per_s", "ttft_ms_p50", "ttft_ms_p99")


def servers(threads: int, vllm: bool) -> dict[str, tuple[str, Any]]:
    """Each endpoint's (model name to send, a context manager starting it alone)."""
    gguf = models.resolve()
    t = str(threads)
    slots = max(LOADS)
    found: dict[str, tuple[str, Any]] = {
        "ours": (models.SMOLLM2.name, lambda: LosslessServer("--threads", t, "--compile", "wait")),
        "ours batch16": (
            models.SMOLLM2.name,
            lambda: LosslessServer("--threads", t, "--max-batch", str(slots)),
        ),
        "ours batch16 plain": (
            models.SMOLLM2.name,
            lambda: LosslessServer("--threads", t, "--max-batch", str(slots), "--speculative", "none"),
        ),
        "llama-server": ("smol", lambda: LlamaServer(gguf, threads=threads, parallel=slots, metrics=False)),
        "llama-server ngram-simple": (
            "smol",
            lambda: LlamaServer(
                gguf, threads=threads, parallel=slots, metrics=False, extra=["--spec-type", "ngram-simple"]
            ),
        ),
    }
    if vllm:
        folder = hf_folder(gguf, models.home() / "benchmarks" / "smollm2-hf", sample=False)
        found["vllm"] = ("smollm2", lambda: VllmServer(folder, prefix_caching=True, threads=threads))
    return found


def measure(
    out: Path,
    runs: int,
    threads: int,
    vllm: bool,
    loads: tuple[int, ...] = LOADS,
    only: set[str] | None = None,
) -> list[dict[str, Any]]:
    table = {n: s for n, s in servers(threads, vllm).items() if only is None or n in only}
    rows = []
    for run, name, model, server in in_turn(table, runs):
        for suite in SUITES:
            for c in loads:
                where = out / f"run{run}" / name.replace(" ", "-") / f"{suite}-c{c}"
                where.parent.mkdir(parents=True, exist_ok=True)
                e = bench_one(server.url, model, suite, max(16, 2 * c), where, concurrency=c)
                row = {"run": run, "endpoint": name, "suite": suite, "c": c}
                row |= {
                    "output_tps_p50": e["output_tps"]["p50"],
                    "tokens_per_s": e["throughput"]["output_tokens_per_s"],
                    "ttft_ms_p50": e["ttft_ms"]["p50"],
                    "ttft_ms_p99": e["ttft_ms"]["p99"],
                    "ok": e["requests"]["ok"],
                    "failed": e["requests"]["failed"],
                }
                rows.append(row)
                print(
                    f"    {suite} c={c}: {row['output_tps_p50']:.1f} tok/s a request, "
                    f"{row['tokens_per_s']:.1f} in all, TTFT p50 {row['ttft_ms_p50']:.0f} ms, "
                    f"{row['failed']} failed",
                    file=sys.stderr,
                )
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per suite and load: every endpoint's figures as the median over the runs with their range; the
    stronger llama-server configuration (by total tokens/s); ours (each configuration) over it and over
    vLLM in total tokens/s, as the median of the runs' ratios with their range."""
    out: dict[str, Any] = {}
    for suite in SUITES:
        for c in sorted({r["c"] for r in rows}):
            cell = [r for r in rows if r["suite"] == suite and r["c"] == c]
            by: dict[str, dict[int, dict[str, Any]]] = {}
            for r in cell:
                by.setdefault(r["endpoint"], {})[r["run"]] = r
            figures = {
                name: {
                    f: {"median": statistics.median(v[f] for v in runs.values()), "range": _range(runs, f)}
                    for f in FIGURES
                }
                | {"failed": sum(v["failed"] for v in runs.values())}
                for name, runs in by.items()
            }
            llamas = [n for n in by if n.startswith("llama-server")]
            # --only may leave out every peer: then figures without ratios
            llama = max(llamas, key=lambda n: figures[n]["tokens_per_s"]["median"]) if llamas else None
            peers = [*([llama] if llama else []), *(["vllm"] if "vllm" in by else [])]
            ratios: dict[str, Any] = {}
            for ours in (n for n in by if n.startswith("ours")):
                for peer in peers:
                    each = [
                        by[ours][run]["tokens_per_s"] / by[peer][run]["tokens_per_s"]
                        for run in by[ours]
                        if run in by[peer]
                    ]
                    ratios[f"{ours} / {peer}"] = {
                        "median": statistics.median(each),
                        "range": [min(each), max(each)],
                        "runs": each,
                    }
            out[f"{suite} c={c}"] = {"figures": figures, "strongest_llama_server": llama, "ratios": ratios}
    return out


def solo_agreement(out: Path) -> dict[str, dict[str, int]]:
    """Greedy answers under load against the same prompt's alone (c=1), in the same run: per endpoint and
    load, how many requests answered as alone, of how many compared (a prompt never asked alone is not)."""
    found: dict[str, dict[str, int]] = {}
    for endpoint in sorted(out.glob("run*/*")):  # runN/ENDPOINT
        texts: dict[tuple[str, int], dict[str, str]] = {}
        for records in endpoint.glob("*-c*/records.jsonl"):
            suite, clients = records.parent.name.rsplit("-c", 1)
            for line in records.read_text().splitlines():
                r = json.loads(line)
                if r["status"] == 200 and not r["warmup"]:
                    texts.setdefault((suite, int(clients)), {})[r["prompt_id"]] = r["text"]
        for (suite, c), answers in texts.items():
            alone = texts.get((suite, 1), {})
            if c == 1 or not alone:
                continue
            same = found.setdefault(f"{endpoint.name} c={c}", {"same": 0, "compared": 0})
            compared = [p for p in answers if p in alone]
            same["compared"] += len(compared)
            same["same"] += sum(answers[p] == alone[p] for p in compared)
    return found


def _range(runs: dict[int, dict[str, Any]], figure: str) -> list[float]:
    values = [v[figure] for v in runs.values()]
    return [min(values), max(values)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="a folder for every run's records and results")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vllm", action="store_true", help="vLLM's CPU server as a peer too (make vllm)")
    ap.add_argument("--loads", type=int, nargs="+", default=list(LOADS), help="client counts c")
    ap.add_argument("--only", nargs="+", help="these endpoints only (names as in the table, quoted)")
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
        only = set(opts.only) if opts.only else None
        rows = measure(opts.out, opts.runs, opts.threads, opts.vllm, tuple(opts.loads), only)
        print(f"load average {os.getloadavg()} after", file=sys.stderr)
        found = {"rows": rows, "summary": summarize(rows), "argv": sys.argv[1:]}
        found["solo_agreement"] = solo_agreement(opts.out)
        (opts.out / "results.json").write_text(json.dumps(found, indent=1) + "\n")
    for cell, s in found["summary"].items():
        print(f"{cell}:")
        for name, f in s["figures"].items():
            print(
                f"  {name}: {f['output_tps_p50']['median']:.1f} tok/s a request, "
                f"{f['tokens_per_s']['median']:.1f} in all, TTFT p50 {f['ttft_ms_p50']['median']:.0f} ms, "
                f"p99 {f['ttft_ms_p99']['median']:.0f} ms, {f['failed']} failed"
            )
        for pair, r in s["ratios"].items():
            lo, hi = r["range"]
            print(f"  {pair} in total tokens/s: {r['median']:.2f}x (runs {lo:.2f}-{hi:.2f})")
    for where, same in found.get("solo_agreement", {}).items():
        print(f"greedy answers as alone (c=1), {where}: {same['same']} of {same['compared']}")


if __name__ == "__main__":
    main()
