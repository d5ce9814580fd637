"""Completed requests per second and answer lengths from this folder's raw records (the page's figures beside
total tokens/s): per run, each endpoint's successful non-warm-up requests over the window from the first
sent to the last ended; the median of the 3 runs' ratios with their range; mean output tokens a request.

    python docs/results/2026-12-07-serve-load-prefix/requests_per_s.py
"""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
RUNS = ("run1", "run2", "run3")


def records(run: str, endpoint: str, cell: str) -> list[dict]:
    lines = (HERE / run / endpoint / cell / "records.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if not r["warmup"] and r["status"] == 200]


def per_second(run: str, endpoint: str, cell: str) -> float:
    done = records(run, endpoint, cell)
    return len(done) / ((max(r["end_ns"] for r in done) - min(r["sent_ns"] for r in done)) / 1e9)


for cell in ("short-c4", "short-c16", "grounded-c4", "grounded-c16"):
    for ours in ("ours-batch16", "ours-batch16-plain"):
        for peer in ("llama-server", "vllm"):
            ratios = [per_second(run, ours, cell) / per_second(run, peer, cell) for run in RUNS]
            print(f"{cell} {ours} / {peer}: {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
    for endpoint in ("ours-batch16", "llama-server", "vllm"):
        outs = [r["n_out"] for run in RUNS for r in records(run, endpoint, cell)]
        print(f"{cell} {endpoint}: {statistics.mean(outs):.1f} output tokens a request")
