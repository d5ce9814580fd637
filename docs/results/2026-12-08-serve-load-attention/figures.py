"""The page's figures beside serve_load's own summary, from this folder's records: per-request output speed
at one client as ratios paired by run (ours / the stronger llama-server that run, and / vLLM), completed
requests per second at 4 and 16 clients (successful non-warm-up requests over the window from the first
sent to the last ended), mean answer lengths, and the slowest first token over the median at 16 clients;
each the median of the 3 runs with its range. Then the 16-client cells apart: the closed loop's first
burst (the 16 requests sent in its first 100 ms) against the requests after it - the burst's slowest
first token and the later ones' median and slowest - per run, here and in tail/ (3 more runs of ours
alone at 16 clients, at f257108: the same kernels; the row-wise line moved at 512 does not touch these
prompts of under 110 tokens).

    python docs/results/2026-12-08-serve-load-attention/figures.py
"""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
RUNS = ("run1", "run2", "run3")
OURS = ("ours batch16", "ours batch16 plain")
ROWS = json.loads((HERE / "results.json").read_text())["rows"]


def row(run: int, endpoint: str, suite: str, c: int) -> dict:
    (found,) = [r for r in ROWS if (r["run"], r["endpoint"], r["suite"], r["c"]) == (run, endpoint, suite, c)]
    return found


def spread(values: list[float], unit: str = "x") -> str:
    return f"{statistics.median(values):.2f}{unit} ({min(values):.2f}-{max(values):.2f})"


def records(run: str, endpoint: str, cell: str) -> list[dict]:
    lines = (HERE / run / endpoint.replace(" ", "-") / cell / "records.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if not r["warmup"] and r["status"] == 200]


def per_second(run: str, endpoint: str, cell: str) -> float:
    done = records(run, endpoint, cell)
    return len(done) / ((max(r["end_ns"] for r in done) - min(r["sent_ns"] for r in done)) / 1e9)


print("## one client: output speed a request (p50), paired by run")
for suite in ("short", "grounded"):
    for ours in OURS:
        peer, vllm = [], []
        for run in (1, 2, 3):
            mine = row(run, ours, suite, 1)["output_tps_p50"]
            best = max(row(run, e, suite, 1)["output_tps_p50"] for e in ("llama-server", "llama-server ngram-simple"))
            peer.append(mine / best)
            vllm.append(mine / row(run, "vllm", suite, 1)["output_tps_p50"])
        print(f"{suite} {ours}: / the faster llama-server {spread(peer)}, / vLLM {spread(vllm)}")

print("## completed requests per second, and answer lengths")
for cell in ("short-c4", "short-c16", "grounded-c4", "grounded-c16"):
    for ours in OURS:
        for peer in ("llama-server", "vllm"):
            ratios = [per_second(run, ours, cell) / per_second(run, peer, cell) for run in RUNS]
            print(f"{cell} {ours} / {peer}: {spread(ratios)}")
    for endpoint in ("ours batch16", "llama-server", "vllm"):
        outs = [r["n_out"] for run in RUNS for r in records(run, endpoint, cell)]
        print(f"{cell} {endpoint}: {statistics.mean(outs):.1f} output tokens a request")

print("## 16 clients: the slowest first token over the median (TTFT p99 / p50)")
for suite in ("short", "grounded"):
    for ours in OURS:
        tails = [row(run, ours, suite, 16)["ttft_ms_p99"] / row(run, ours, suite, 16)["ttft_ms_p50"] for run in (1, 2, 3)]
        print(f"{suite} {ours}: {spread(tails)}")


def burst_and_after(folder: Path, run: str, endpoint: str, cell: str) -> tuple[float, float, float]:
    lines = (folder / run / endpoint.replace(" ", "-") / cell / "records.jsonl").read_text().splitlines()
    done = [r for r in map(json.loads, lines) if not r["warmup"] and r["status"] == 200]
    start = min(r["sent_ns"] for r in done)
    ttft = {id(r): (r["event_ns"][r["event_kinds"].index("c")] - r["sent_ns"]) / 1e6 for r in done}
    burst = [ttft[id(r)] for r in done if r["sent_ns"] - start < 100e6]
    after = [ttft[id(r)] for r in done if r["sent_ns"] - start >= 100e6]
    return max(burst), statistics.median(after), max(after)


print("## 16 clients: the first burst's slowest first token; the later requests' median and slowest (ms)")
for folder in (HERE, HERE / "tail"):
    for suite in ("short", "grounded"):
        for ours in OURS:
            each = [burst_and_after(folder, run, ours, f"{suite}-c16") for run in RUNS]
            shown = ", ".join(f"{b:.0f} | {m:.0f} / {a:.0f}" for b, m, a in each)
            print(f"{folder.name} {suite} {ours}: {shown}")
