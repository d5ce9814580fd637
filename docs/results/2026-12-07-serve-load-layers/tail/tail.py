"""The slowest first token over the median at 16 clients (TTFT p99 / p50) in these 3 extra runs, read from
each cell's bench summary (serve_load stopped before its own summary: with no peer among --only it had no
ratio to take, fixed after): per run, and the median p99 over the median p50.

    python docs/results/2026-12-07-serve-load-layers/tail/tail.py
"""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent

for endpoint in ("ours-batch16", "ours-batch16-plain"):
    for suite in ("short", "grounded"):
        runs = []
        for run in (1, 2, 3):
            summary = json.loads((HERE / f"run{run}" / endpoint / f"{suite}-c16" / "summary.json").read_text())
            ttft = summary["endpoints"][0]["ttft_ms"]
            runs.append((ttft["p50"], ttft["p99"]))
        each = ", ".join(f"{p99:.0f} / {p50:.0f} = {p99 / p50:.2f}x" for p50, p99 in runs)
        medians = statistics.median(p99 for _, p99 in runs) / statistics.median(p50 for p50, _ in runs)
        print(f"{endpoint} {suite}: {each}; medians {medians:.2f}x")
